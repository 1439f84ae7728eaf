"""train.log on a disk that refuses writes: the run hears of it once, as a disk error."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import pytest

from grpo.console import _RunLog
from grpo.errors import DiskError

FULL = Path("/dev/full")  # every write: ENOSPC


@pytest.mark.skipif(not FULL.exists(), reason="no /dev/full")
def test_a_full_disk_under_train_log_is_raised_once_as_a_disk_error_naming_the_file():
    handler = _RunLog(FULL)
    logger = logging.getLogger("test.console.full")
    logger.handlers, logger.propagate = [handler], False
    try:
        with pytest.raises(DiskError, match="No space left on device while writing /dev/full"):
            logger.warning("a line the disk refuses")
        logger.warning("later lines are dropped, not raised again")  # the run is already stopping
    finally:
        handler.close()


@pytest.mark.skipif(not FULL.exists(), reason="no /dev/full")
def test_a_failure_seen_in_another_thread_is_raised_in_the_main_thread():
    handler = _RunLog(FULL)
    logger = logging.getLogger("test.console.thread")
    logger.handlers, logger.propagate = [handler], False
    try:
        worker = threading.Thread(target=logger.warning, args=("from a server watcher",))
        worker.start()
        worker.join()
        assert isinstance(handler.error, DiskError)
        with pytest.raises(DiskError):
            logger.warning("the next line of the main thread")
    finally:
        handler.close()

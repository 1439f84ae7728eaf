"""Where a run's words go: everything the console shows (the step table, evaluations, warnings,
progress when not on a terminal) is also written to RUN_DIR/train.log.

The step table and results go to stdout through the `grpo.console` logger; log records (warnings,
events) go to stderr; the file gets both. The libraries' own progress bars and deprecation noise
are turned off: grpo's progress says where a run is.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import warnings
from pathlib import Path

from grpo.errors import DiskError, is_disk_error

CONSOLE = logging.getLogger("grpo.console")  # results, to stdout
ALERT = logging.getLogger("grpo.alert")  # why a run ended badly, to stderr
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class _Stream(logging.StreamHandler):
    """Writes to whatever sys.stdout / sys.stderr is at the time (tests replace them)."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self._name = name

    @property
    def stream(self):  # type: ignore[override]
        return getattr(sys, self._name)

    @stream.setter
    def stream(self, _value) -> None:
        pass


class _RunLog(logging.FileHandler):
    """train.log, on the run's disk. A disk that refuses a line of it refuses the run: the write's
    error is raised (once, in the main thread, where the loop turns it into a saved stop with exit
    status 5) instead of logging's own "Logging error" and a run that goes on without its log."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.error: DiskError | None = None
        self._raised = False

    def emit(self, record: logging.LogRecord) -> None:
        if self.error is None:
            super().emit(record)
        if self.error is not None and not self._raised and threading.current_thread() is threading.main_thread():
            self._raised = True
            raise self.error

    def handleError(self, record: logging.LogRecord) -> None:
        failure = sys.exc_info()[1]
        if failure is None or not is_disk_error(failure):
            super().handleError(record)
            return
        self.error = DiskError(self.baseFilename, failure)
        stream, self.stream = self.stream, None
        try:  # what is still buffered cannot be written: the disk is full
            stream.close()
        except OSError:
            pass


def setup(run_dir: Path | None = None, quiet: bool = False) -> None:
    """quiet: only warnings and errors (ranks other than 0 under torchrun; rank 0 speaks for the run)."""
    handlers: list[logging.Handler] = [_Stream("stderr")]
    file_handler = None
    if run_dir is not None:
        run_dir.mkdir(parents=True, exist_ok=True)
        file_handler = _RunLog(run_dir / "train.log")
        handlers.append(file_handler)
    logging.basicConfig(level=logging.WARNING if quiet else logging.INFO, format=LOG_FORMAT, handlers=handlers,
                        force=True)
    for logger, stream in ((CONSOLE, "stdout"), (ALERT, "stderr")):
        plain = _Stream(stream)
        plain.setFormatter(logging.Formatter("%(message)s"))
        logger.handlers = [plain] + ([file_handler] if file_handler else [])
        logger.propagate = False
        logger.setLevel(logging.ERROR if quiet and logger is CONSOLE else logging.INFO)
    quiet_libraries()


def quiet_libraries() -> None:
    for noisy in ("httpx", "urllib3", "huggingface_hub"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_warning()
    hf_logging.disable_progress_bar()
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=DeprecationWarning)


def say(text: str) -> None:
    """A line for the user: stdout and train.log (plain stdout when no run is set up)."""
    if CONSOLE.handlers:
        CONSOLE.info(text)
    else:
        print(text, flush=True)


def alert(text: str) -> None:
    """Why a run stopped, crashed or was interrupted: stderr and train.log."""
    if ALERT.handlers:
        ALERT.error(text)
    else:
        print(text, file=sys.stderr, flush=True)

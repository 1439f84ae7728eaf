"""One writer per run directory, and a lock that a dead holder never leaves behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from grpo.errors import RunDirLocked
from grpo.rundir.lock import RunLock, current_holder


def test_a_second_lock_is_refused_naming_the_holder(tmp_path):
    with RunLock(tmp_path):
        assert current_holder(tmp_path)["pid"] == os.getpid()
        with pytest.raises(RunDirLocked, match=rf"in use by another grpo process \(pid {os.getpid()} on "):
            RunLock(tmp_path).acquire()
    assert current_holder(tmp_path) is None
    RunLock(tmp_path).acquire().release()  # free again once released


def test_a_killed_holder_leaves_no_lock(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys; from grpo.rundir.lock import RunLock; RunLock(sys.argv[1]).acquire(); "
         "print('locked', flush=True); sys.stdin.read()", str(tmp_path)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        assert current_holder(tmp_path)["pid"] == holder.pid
        with pytest.raises(RunDirLocked, match=f"pid {holder.pid}"):
            RunLock(tmp_path).acquire()
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    finally:
        holder.kill()
    assert current_holder(tmp_path) is None
    RunLock(tmp_path).acquire().release()

"""One writer per run directory: an exclusive `flock` on `RUN_DIR/.lock`.

The kernel drops the lock when its holder dies however it dies (SIGKILL included), so a crash never
leaves a run directory locked. The holder writes who it is into the file, so a refused second
trainer can say which process holds the directory.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

from grpo.errors import DISK_ERRNOS, DiskError, RunDirLocked

LOCK_FILE = ".lock"


class RunLock:
    def __init__(self, run_dir: Path) -> None:
        self.path = Path(run_dir) / LOCK_FILE
        self.fd: int | None = None

    def acquire(self) -> "RunLock":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise RunDirLocked(
                f"{self.path.parent} is in use by another grpo process ({describe_holder(read_holder(self.path))}): "
                "wait for it to finish, stop it, or set run_dir to another directory"
            ) from None
        holder = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.time(), "argv": sys.argv}
        try:
            os.ftruncate(fd, 0)
            os.write(fd, json.dumps(holder).encode())
        except OSError as exc:  # a full disk at the very start: the one-line disk error, not a traceback
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
            raise DiskError(self.path, exc) if exc.errno in DISK_ERRNOS else exc
        self.fd = fd
        return self

    def release(self) -> None:
        if self.fd is not None:
            fd, self.fd = self.fd, None
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def __enter__(self) -> "RunLock":
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def read_holder(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(Path(path).read_text() or "null")
    except (OSError, ValueError, RecursionError):
        return None


def describe_holder(holder: dict[str, Any] | None) -> str:
    if not holder:
        return "holder unknown"
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(holder.get("started", 0)))
    return f"pid {holder.get('pid')} on {holder.get('host')}, since {since}"


def current_holder(run_dir: Path) -> dict[str, Any] | None:
    """Who holds the run directory now, or None when no process does (checked without taking it)."""
    path = Path(run_dir) / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return read_holder(path) or {}
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)

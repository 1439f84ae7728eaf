"""The project's errors, each with the exit status a scheduler or script sees, so that every outcome of a
run can be told apart without reading its log:

    0  finished                      3  stopped by the guard (RunStopped: STOPPED.json says why)
    1  crashed (any other error)     4  interrupted by SIGTERM/SIGINT after saving, or while starting
                                        (RunInterrupted)
    2  refused before any work       5  the disk refused a write (DiskError: full, quota, read-only)
       (ConfigError, RunDirLocked)  130  SIGINT twice: exited at once, without saving

This module imports nothing from grpo: every role may raise these.
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path
from typing import Any

EXIT_OK = 0
EXIT_CRASH = 1  # an unexpected error (Python's own status for an uncaught exception)
EXIT_BAD_INPUT = 2  # config, data, model path or run directory refused before any work
EXIT_STOPPED = 3  # the guard stopped the run: STOPPED.json says why and how to resume
EXIT_INTERRUPTED = 4  # SIGTERM/SIGINT: state saved; the same command resumes
EXIT_DISK = 5  # the disk refused a write (full, read-only): free space, then the same command resumes
EXIT_SIGINT = 130  # a second Ctrl-C: exited without saving; the newest checkpoint resumes (the shell's convention)


class ConfigError(ValueError):
    """A configuration problem the user must fix; the message says what and how."""


class RunDirLocked(RuntimeError):
    """Another process is writing this run directory."""


class RunStopped(Exception):
    """The run stopped itself on purpose; STOPPED.json says why and how to resume."""

    def __init__(self, message: str, report: dict[str, Any]) -> None:
        super().__init__(message)
        self.report = report


class RunInterrupted(Exception):
    """A signal stopped the run after its state was saved, or while it started; the message says how to
    resume."""


# Ctrl-C before the loop watches for signals (Python's imports, the model's load): nothing of this start is kept.
START_INTERRUPTED = "interrupted while starting: nothing was trained or saved; run the same command again"


DISK_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO, errno.EFBIG}


class DiskError(OSError):
    """The disk refused a write (full, quota, read-only, I/O error). The message names the path,
    the filesystem and its free space, so the user knows what to free."""

    def __init__(self, path: Path | str, cause: BaseException) -> None:
        self.path = Path(path)
        self.cause = cause
        code = getattr(cause, "errno", None) or _errno_in_text(str(cause))
        if code == errno.EIO and _free_bytes(self.path) < NEARLY_FULL:
            code = errno.ENOSPC  # a write cut short on a full disk, by a library that dropped the errno
        reason = os.strerror(code)
        self.message = f"{reason} while writing {self.path} ({describe_filesystem(self.path)})"
        super().__init__(code, self.message)

    def __str__(self) -> str:
        return self.message


# torch.save reports a failed write as "file write failed", as the zip writer's "unexpected pos"
# when a write came up short, or as "basic_ios::clear: iostream error" when the last one fails;
# safetensors passes the OS text through.
_TEXT_ERRNOS = {"no space left": errno.ENOSPC, "os error 28": errno.ENOSPC, "disk quota": errno.EDQUOT,
                "read-only file system": errno.EROFS, "file write failed": errno.EIO, "unexpected pos": errno.EIO,
                "iostream error": errno.EIO}
NEARLY_FULL = 16 << 20


def _errno_in_text(text: str) -> int:
    """torch.save and safetensors report a failed write as RuntimeError/SafetensorError with text only."""
    lowered = text.lower()
    return next((code for phrase, code in _TEXT_ERRNOS.items() if phrase in lowered), errno.EIO)


def is_disk_error(exc: BaseException) -> bool:
    if isinstance(exc, DiskError):
        return True
    if isinstance(exc, OSError) and exc.errno in DISK_ERRNOS:
        return True
    return any(phrase in str(exc).lower() for phrase in _TEXT_ERRNOS)


def _existing_parent(path: Path) -> Path:
    probe = Path(path)
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return probe


def _free_bytes(path: Path) -> int:
    try:
        return shutil.disk_usage(_existing_parent(path)).free
    except OSError:
        return 0


def describe_filesystem(path: Path) -> str:
    """`filesystem of /x: 12.0 MiB free of 1.0 GiB` for the nearest existing parent of `path`."""
    probe = _existing_parent(path)
    try:
        usage = shutil.disk_usage(probe)
    except OSError:
        return f"filesystem of {probe}: free space unknown"
    return f"filesystem of {probe}: {_size(usage.free)} free of {_size(usage.total)}"


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} TiB"


def exit_status(exc: BaseException) -> int:
    """The exit status of a run that ended with `exc`."""
    if isinstance(exc, (ConfigError, RunDirLocked, FileNotFoundError, PermissionError)):
        return EXIT_BAD_INPUT
    if isinstance(exc, RunStopped):
        return EXIT_STOPPED
    if isinstance(exc, RunInterrupted):
        return EXIT_INTERRUPTED
    if is_disk_error(exc):
        return EXIT_DISK
    return EXIT_CRASH


def one_line(exc: BaseException) -> str:
    """What the user reads of an error that refuses or ends a run; for a crash, the caller adds where the
    traceback went."""
    if isinstance(exc, ConfigError):
        return f"config error: {exc}"
    if isinstance(exc, (RunDirLocked, FileNotFoundError)):
        return f"error: {exc}"
    if isinstance(exc, PermissionError):  # nothing was changed: the same command works once access is given
        where = str(exc.filename or ".")
        parent = os.path.dirname(where) or "."
        if not os.access(parent, os.R_OK | os.W_OK | os.X_OK):  # the folder is what shuts the user out
            where = parent
        return (f"error: permission denied: {where}; give this user read and write access to it "
                f"(e.g. chmod -R u+rwX {where}), then run the same command again")
    if isinstance(exc, RunStopped):
        return f"\nSTOPPED: {exc}"
    if isinstance(exc, RunInterrupted):
        return f"\n{exc}"
    if is_disk_error(exc):
        return (f"disk error: {exc}. Checkpoints already saved are intact: free space, then run the same "
                "command again to resume.")
    return f"\ncrashed: {type(exc).__name__}: {exc}"

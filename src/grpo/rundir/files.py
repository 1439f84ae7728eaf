"""The two ways a run writes a file it reads back: whole and atomically, or appended a line at a time.

An atomic write goes to a temporary name, is flushed to disk and renamed over the target, so a reader
sees the old file or the new one, never a torn one. An append-only JSONL log writes each record as
one line in one `write`; a line cut short by a kill or a full disk is found and cut off when the log
is opened, so the next line never lands on a torn one.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
from pathlib import Path
from typing import Any

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


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: str | bytes) -> None:
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    payload = data.encode() if isinstance(data, str) else data
    try:
        with open(tmp, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fsync_dir(path.parent)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise DiskError(path, exc) if exc.errno in DISK_ERRNOS else exc
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write(path, json.dumps(obj, indent=2, default=str) + "\n")


def read_json(path: Path) -> tuple[Any, str | None]:
    """-> (the parsed file, None), or (None, why it could not be read)."""
    try:
        return json.loads(Path(path).read_text()), None
    except FileNotFoundError:
        return None, "missing"
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        return None, f"unreadable ({type(exc).__name__}: {exc})"


class JsonlLog:
    """An append-only log of JSON records, one per line. With writes=False (a rank other than 0)
    appends, repairs and rewinds do nothing: one process writes a run's logs."""

    def __init__(self, path: Path, writes: bool = True) -> None:
        self.path = Path(path)
        self.writes = writes

    def repair(self) -> int:
        """Cut off a torn last line (no trailing newline): -> the number of bytes removed."""
        if not self.writes:
            return 0
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            return 0
        if size == 0:
            return 0
        with open(self.path, "rb+") as f:
            f.seek(size - 1)
            if f.read(1) == b"\n":
                return 0
            keep = _end_of_last_line(f, size)
            f.truncate(keep)
            f.flush()
            os.fsync(f.fileno())
        return size - keep

    def append(self, record: dict[str, Any]) -> None:
        if not self.writes:
            return
        line = (json.dumps(record, default=str) + "\n").encode()
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as exc:
            raise DiskError(self.path, exc) if exc.errno in DISK_ERRNOS else exc
        try:
            before = os.fstat(fd).st_size
            written = os.write(fd, line)
            if written != len(line):  # a short write is a torn line
                raise OSError(errno.ENOSPC, "No space left on device (short write)")
        except OSError as exc:
            try:
                os.ftruncate(fd, before)  # take the torn line back
            except OSError:
                pass  # then it is cut when the log is next opened
            raise DiskError(self.path, exc) if exc.errno in DISK_ERRNOS else exc
        finally:
            os.close(fd)

    def size(self) -> int:
        try:
            return self.path.stat().st_size
        except FileNotFoundError:
            return 0

    def rewind(self, offset: int, keep_in: Path) -> int:
        """Truncate the log to `offset` bytes, moving the lines after it to the end of `keep_in`
        (nothing is thrown away): -> the number of lines moved."""
        if not self.writes:
            return 0
        size = self.size()
        if offset >= size:
            return 0
        with open(self.path, "rb+") as f:
            f.seek(offset)
            tail = f.read()
            with open(keep_in, "ab") as kept:
                kept.write(tail if tail.endswith(b"\n") else tail + b"\n")
                kept.flush()
                os.fsync(kept.fileno())
            f.truncate(offset)
            f.flush()
            os.fsync(f.fileno())
        return tail.count(b"\n") + (0 if tail.endswith(b"\n") else 1)

    def read(self) -> tuple[list[dict[str, Any]], int]:
        """-> (every record that parses, the number of lines that did not)."""
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return [], 0
        records, bad = [], 0
        for line in raw.split(b"\n"):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except (json.JSONDecodeError, UnicodeDecodeError):
                bad += 1
                continue
            if isinstance(record, dict):
                records.append(record)
            else:
                bad += 1
        return records, bad


def _end_of_last_line(f, size: int) -> int:
    """Offset just past the last newline before `size` (0 when there is none)."""
    block = 1 << 16
    end = size
    while end > 0:
        start = max(0, end - block)
        f.seek(start)
        chunk = f.read(end - start)
        cut = chunk.rfind(b"\n")
        if cut >= 0:
            return start + cut + 1
        end = start
    return 0

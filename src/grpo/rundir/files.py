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
from pathlib import Path
from typing import Any

from grpo.errors import DISK_ERRNOS, DiskError


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
    except (OSError, ValueError, RecursionError) as exc:  # ValueError: bad JSON, a 5,000-digit integer
        return None, f"unreadable ({type(exc).__name__}: {str(exc)[:200]})"


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

    def past_steps(self, offset: int, step: int) -> int:
        """The offset past the lines from `offset` on that belong to steps up to `step` (their "step")."""
        try:
            with open(self.path, "rb") as f:
                f.seek(offset)
                for line in f:
                    try:
                        record = json.loads(line)
                    except (ValueError, RecursionError):
                        break
                    at = record.get("step") if isinstance(record, dict) else None
                    if not (isinstance(at, int) and at <= step):
                        break
                    offset += len(line)
        except FileNotFoundError:
            pass
        return offset

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
            except (ValueError, RecursionError):  # torn, not JSON, nested past reason, a 5,000-digit integer
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

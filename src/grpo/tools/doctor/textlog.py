"""Reading other programs' files tolerantly: any bytes, any torn line, never a crash.

A file the doctor cannot open at all (permission denied, a directory where a file should be) is an
`UnreadableRun`: the caller says so in one line. Everything inside a file that opens is taken as it
is: undecodable bytes are replaced, a torn last line is just a shorter line.
"""

from __future__ import annotations

import math
import re
from datetime import datetime
from pathlib import Path

from grpo.tools.doctor.record import UnreadableRun

MAX_BYTES = 512 << 20  # a log larger than this is read from its last 512 MiB


def read_lines(path: Path) -> list[str]:
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - MAX_BYTES))
            data = f.read()
    except OSError as exc:
        raise UnreadableRun(f"{path} cannot be read ({exc.strerror or exc}): check its permissions") from None
    return data.decode("utf-8", errors="replace").splitlines()


def read_head(path: Path, size: int) -> str:
    """The first `size` bytes of a log, as text: enough to tell its format."""
    try:
        with open(path, "rb") as f:
            return f.read(size).decode("utf-8", errors="replace")
    except OSError as exc:
        raise UnreadableRun(f"{path} cannot be read ({exc.strerror or exc}): check its permissions") from None


_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|nan|inf(?:inity)?)", re.IGNORECASE)


def number(text: str) -> float | None:
    """The first number in a printed value: `0.49`, `np.float64(0.49)`, `tensor(1.5e-3)`, `nan`, `-inf`."""
    match = _NUMBER.search(text.replace("np.float64", "").replace("np.float32", "").replace("np.int64", ""))
    if match is None:
        return None
    try:
        return float(match.group(0))
    except ValueError:
        return None


def finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


_STAMPS = (
    (re.compile(r"(\d{8}-\d{2}:\d{2}:\d{2}(?:\.\d+)?)"), "%Y%m%d-%H:%M:%S.%f", "%Y%m%d-%H:%M:%S"),  # AReaL
    (re.compile(r"(\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?)"), "%Y-%m-%d %H:%M:%S.%f", "%Y-%m-%d %H:%M:%S"),
)


def timestamp(line: str) -> float | None:
    """Seconds since the epoch of a line's leading time stamp (AReaL's `20251111-11:37:11.251`, or
    ISO `2025-11-12 05:09:13[.123]` as SGLang, Ray and Python's logging print them), else None."""
    head = line[:40]
    for pattern, *formats in _STAMPS:
        match = pattern.search(head)
        if not match:
            continue
        text = match.group(1).replace("T", " ").replace(",", ".")
        for fmt in formats:
            try:
                return datetime.strptime(text, fmt).timestamp()
            except ValueError:
                continue
    return None

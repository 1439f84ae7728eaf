"""Reading other programs' logs as they come: any bytes, any size, any line prefix, never a crash.

A file the doctor cannot open at all (permission denied, a directory where a file should be, a FIFO
or a device) is an `UnreadableRun`: the caller says so in one line. Everything inside a regular file is
taken as it is: undecodable bytes are replaced, NUL bytes (copytruncate under `> train.log` leaves
runs of them) are dropped, a torn last line is just a shorter line.

A compressed log (`.gz`, `.bz2`, `.xz`, a `.zip` of one file) is read as its content (`compressed`), so every
reader reads `train.log.gz` as it reads `train.log`.

Lines are counted as editors count them: a line ends at `\\n` only (a `\\r` inside is a progress bar
redrawn, not a new line). Files are streamed, so memory stays bounded however large the log; a line
longer than `MAX_LINE` keeps its head (a 10 MB config dump on one line is not worth a regex's time).

`clean` takes off what launchers put before each line (`docker logs -t` and Kubernetes time stamps,
`kubectl logs --prefix`, docker compose's `service-1  | `, Ray's `(TaskRunner pid=N)`, torchrun's
`[rank0]:`) and ANSI
colours, so each reader sees the line its framework printed. `listed_lines` gives back the lines of a log that
was printed as a Python list of its lines (a test's assertion message, `print(lines)`): one physical line that
holds many.
"""

from __future__ import annotations

import functools
import math
import os
import re
import stat
from datetime import datetime
from pathlib import Path
from typing import Iterator

from grpo.tools.doctor import compressed
from grpo.tools.doctor.record import UnreadableRun

CHUNK = 1 << 20
MAX_LINE = 64 << 10  # characters of a line that are read; the rest of a longer line is skipped
HEAD = 4 << 20  # what is read to tell a log's format from its start ...
TAIL = 1 << 20  # ... and from its end


def open_regular(path: Path):
    """Open a regular file for reading bytes, or say in one line why not: a FIFO would block forever,
    /dev/zero would never end."""
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode):
            raise UnreadableRun(f"{path} is not a regular file (a {_kind(info.st_mode)}): give the log file itself")
        return open(path, "rb")
    except FileNotFoundError:
        raise UnreadableRun(f"{path} does not exist") from None
    except PermissionError as exc:
        raise UnreadableRun(f"{exc.filename or path} cannot be read (Permission denied): check its permissions") from None
    except OSError as exc:
        raise UnreadableRun(f"{path} cannot be read ({exc.strerror or exc}): check its permissions") from None


def open_log(path: Path):
    """A log opened for reading its bytes (its content, when it is compressed), or one line saying why not."""
    raw = open_regular(path)
    return compressed.content(raw, path) if compressed.is_compressed(path) else raw


def log_suffix(path: Path) -> str:
    """The suffix of what the file holds: `.log` for `train.log` and for `train.log.gz`."""
    return Path(compressed.inner_name(path)).suffix if compressed.is_compressed(path) else Path(path).suffix


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "FIFO"), (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device"),
                       (stat.S_ISSOCK, "socket"), (stat.S_ISDIR, "directory")):
        if test(mode):
            return name
    return "special file"


class LineSplitter:
    """Bytes in, complete lines out (decoded, NULs dropped, each at most MAX_LINE characters); a torn
    last line is held until its newline arrives, or `flush`ed."""

    def __init__(self) -> None:
        self._partial = bytearray()
        self._skipping = False  # inside an over-long line, after its head was given out

    def feed(self, data: bytes) -> list[str]:
        out = []
        start = 0
        while True:
            end = data.find(b"\n", start)
            if end < 0:
                break
            self._add(data[start:end])
            if self._skipping:
                self._skipping = False
            else:
                out.append(_decode(self._partial))
            self._partial.clear()
            start = end + 1
        self._add(data[start:])
        if len(self._partial) >= MAX_LINE and not self._skipping:
            out.append(_decode(self._partial[:MAX_LINE]))  # the head of an over-long line, now
            self._partial.clear()
            self._skipping = True
        return out

    def _add(self, piece: bytes) -> None:
        if self._skipping:
            return
        room = MAX_LINE - len(self._partial)
        if room > 0:
            self._partial += piece[:room]

    def flush(self) -> list[str]:
        """The torn last line, as it was left (nothing when the data ended with a newline)."""
        if self._skipping or not self._partial:
            self._partial.clear()
            self._skipping = False
            return []
        line = _decode(self._partial)
        self._partial.clear()
        return [line]


def _decode(data: bytes | bytearray) -> str:
    text = bytes(data).decode("utf-8", errors="replace")
    return text.replace("\x00", "") if "\x00" in text else text


def iter_lines(path: Path) -> Iterator[str]:
    """Every line of the file, streamed (the torn last one included)."""
    with open_log(path) as f:
        splitter = LineSplitter()
        while True:
            try:
                data = f.read(CHUNK)
            except OSError as exc:
                raise UnreadableRun(f"{path} cannot be read ({exc.strerror or exc})") from None
            if not data:
                break
            yield from splitter.feed(data)
        yield from splitter.flush()


def read_lines(path: Path) -> list[str]:
    """A small file's lines (a JSON file, a server log's part): use `iter_lines` for logs."""
    return list(iter_lines(path))


def read_ends(path: Path) -> str:
    """The file's first HEAD bytes and its last TAIL bytes, as text: where a log says what wrote it
    (launch lines, config dumps) and how it ended (a traceback)."""
    if compressed.is_compressed(path):
        info = os.stat(path)
        return _compressed_ends(str(path), info.st_mtime_ns, info.st_size)
    with open_regular(path) as f:
        head = f.read(HEAD)
        size = os.fstat(f.fileno()).st_size
        if size <= HEAD:
            return _decode(head)
        f.seek(max(HEAD, size - TAIL))
        return _decode(head) + "\n" + _decode(f.read(TAIL))


@functools.lru_cache(maxsize=8)
def _compressed_ends(path: str, mtime_ns: int, size: int) -> str:
    """read_ends of a compressed file: its content streamed once to its end (no seeking back into compressed
    data), kept for the readers that each ask which format it is (the file's time and size key it)."""
    with open_log(Path(path)) as f:
        head = f.read(HEAD)
        tail = bytearray()
        while data := f.read(CHUNK):
            tail += data
            del tail[:-TAIL]
    return _decode(head) + ("\n" + _decode(tail) if tail else "")


_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")
_PREFIXES = re.compile(
    r"(?:\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?\s"  # docker logs -t, kubectl --timestamps
    r"|\[pod/[^\]\s]+(?:/[^\]\s]+)?\]\s"  # kubectl logs --prefix
    r"|[\w.-]+-\d+\s+\|\s"  # docker compose: trainer-1  | ...
    r"|\((?:[\w.:-]+ )?pid=\d+(?:, ip=[\d.:a-f]+)?\)\s?"  # Ray: (TaskRunner pid=2231) (pid=1, ip=10.0.0.1)
    r"|\[(?:rank|default)\d+\]:\s?"  # torchrun's per-rank prefix
    r"|\(AReaL\)\s"  # AReaL's launcher, on every line of its children
    r")")


_PREFIX_STARTS = frozenset("0123456789[(")
_LISTED = "', '"  # between two strings of a list's repr
LISTED_MIN = 3  # strings a list of log lines holds at least
LISTED_LENGTH = 20  # their median length at least


def listed_lines(line: str) -> list[str]:
    """The log lines a cleaned line holds: several where it is a list of them printed by Python
    (`['12:00 SUCCESS Step 5 | Reward: 0.3', '', '12:01 SUCCESS Step 6 | ...']`), else the line itself. Most of
    a list of log lines are long and hold spaces; a list of names, arguments or paths (`['python', '-u', '-m',
    'openrlhf.cli.train_ppo']` in a launcher's line, a config's `['q_proj', 'v_proj']`) does not, and a dict's
    pairs (`'loss': '0.3', 'kl': ...`, as TRL prints them) are one line."""
    if line.count(_LISTED) < LISTED_MIN - 1 or "': " in line:
        return [line]
    pieces = line.strip().strip("[]").strip("'").split(_LISTED)
    if sorted(map(len, pieces))[len(pieces) // 2] < LISTED_LENGTH or 2 * sum(" " in p for p in pieces) <= len(pieces):
        return [line]
    return [clean(piece) for piece in pieces]


def clean(line: str) -> str:
    """The line as its framework printed it: launchers' prefixes and ANSI colours taken off, \\r-drawn
    progress bars kept."""
    if "\x1b" in line:
        line = _ANSI.sub("", line)
    if not line or (line[0] not in _PREFIX_STARTS and " | " not in line[:80]):
        return line  # most lines: no prefix could start here
    for _ in range(4):  # prefixes stack: a time stamp, then a pod, then a Ray actor
        match = _PREFIXES.match(line)
        if match is None:
            break
        line = line[match.end():]
    return line


_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|nan|inf(?:inity)?)", re.IGNORECASE)
MAX_DIGITS = 40  # a printed metric is never longer; a 400-digit integer is not a metric


def number(text: str) -> float | None:
    """The first number in a printed value: `0.49`, `np.float64(0.49)`, `tensor(1.5e-3)`, `nan`, `-inf`;
    None for none, or for one no float can hold (400 digits)."""
    match = _NUMBER.search(text[:200].replace("np.float64", "").replace("np.float32", "").replace("np.int64", ""))
    if match is None or len(match.group(0)) > MAX_DIGITS:
        return None
    try:
        return float(match.group(0))
    except (ValueError, OverflowError):
        return None


def as_step(value: float | int | None) -> int | None:
    """A step counter, or None for what cannot be one (inf, NaN, negative, past any real run)."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    try:
        step = int(value)
    except (ValueError, OverflowError):
        return None
    return step if 0 <= step < 10**12 else None


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
        if "." in text:
            whole, _, frac = text.partition(".")
            text = f"{whole}.{frac[:6]}"  # strptime's %f takes microseconds at most
        for fmt in formats:
            try:
                return datetime.strptime(text, fmt).timestamp()
            except (ValueError, OverflowError):
                continue
    return None

"""Compressed logs and metric files (`train.log.gz`, `metrics.jsonl.xz`, `run.log.bz2`, a `.zip` holding one log),
read as their content: streamed through the decompressor a chunk at a time, so memory stays bounded however
large the log, and stopped with a one-line error past `MAX_BYTES` of content (a zip bomb, or a log no one
should wait for the doctor to read whole).

A compressed file cut short (copied while it was still being written) ends where its data ends, as a torn last
line does in a plain log; one whose data does not decompress is an `UnreadableRun` naming the file.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import zipfile
import zlib
from pathlib import Path
from typing import BinaryIO

from grpo.tools.doctor.record import UnreadableRun

MAX_BYTES = 16 << 30  # content read from one compressed file, at most
_STREAMS = {".gz": lambda raw: gzip.GzipFile(fileobj=raw, mode="rb"), ".bz2": bz2.BZ2File, ".xz": lzma.LZMAFile}
SUFFIXES = (*_STREAMS, ".zip")
_DAMAGED = (OSError, zlib.error, lzma.LZMAError, zipfile.BadZipFile, ValueError)
# A zip the standard library cannot open: damaged, encrypted (RuntimeError), or of a method it lacks.
_ZIP_ERRORS = (OSError, EOFError, ValueError, zipfile.BadZipFile, RuntimeError, NotImplementedError)


def is_compressed(path: Path) -> bool:
    return Path(path).suffix.lower() in SUFFIXES


def inner_name(path: Path) -> str:
    """The name of what the file holds: `train.log` for `train.log.gz`, the member's name for a zip of one file
    (the name itself for a file that is not compressed, or a zip that cannot be read)."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix in _STREAMS:
        return path.name[:-len(suffix)]
    if suffix == ".zip":
        try:
            with zipfile.ZipFile(path) as archive:
                members = _files(archive)
        except _ZIP_ERRORS:  # not a zip after all: `content` says so when it is read
            return path.name
        return Path(members[0].filename).name if len(members) == 1 else path.name
    return path.name


def content(raw: BinaryIO, path: Path) -> "_Content":
    """The decompressed content of `raw` (the compressed file, opened), as a stream of bytes."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".zip":
        try:
            archive = zipfile.ZipFile(raw)
            members = _files(archive)
            member = archive.open(members[0]) if len(members) == 1 else None
        except _ZIP_ERRORS as exc:
            raw.close()
            raise UnreadableRun(f"{path} is not a zip archive the doctor can open ({exc}): unzip it and give the "
                                "doctor the log itself") from None
        if member is None:
            names = ", ".join(m.filename for m in members[:4]) + (" ..." if len(members) > 4 else "")
            raw.close()
            raise UnreadableRun(f"{path} holds {len(members)} files ({names or 'none'}), not one log: unzip it and "
                                "give the doctor the run's log or its folder")
        return _Content(member, path, raw)
    return _Content(_STREAMS[suffix](raw), path, raw)


def _files(archive: zipfile.ZipFile) -> list[zipfile.ZipInfo]:
    return [m for m in archive.infolist() if not m.is_dir()]


class _Content:
    """A decompressor's stream, read with `read(n)`: past MAX_BYTES, or on damaged data, one line says why; a
    stream cut short ends there."""

    def __init__(self, stream: BinaryIO, path: Path, raw: BinaryIO) -> None:
        self._stream, self._path, self._raw = stream, path, raw
        self._read = 0
        self._ended = False

    def read(self, size: int) -> bytes:
        """Up to `size` bytes, fewer only at the end; read a decompressed block at a time (`read1`), so that a
        stream cut short still gives every block before the cut."""
        pieces, got = [], 0
        while got < size and not self._ended:
            try:
                piece = self._stream.read1(size - got)
            except EOFError:  # the data ends before its end marker: a copy of a file still being written
                piece = b""
            except _DAMAGED as exc:
                raise UnreadableRun(f"{self._path} is damaged {self._read + got} bytes into its content ({exc}): "
                                    "decompress what you can and give the doctor that") from None
            self._ended = not piece
            pieces.append(piece)
            got += len(piece)
        self._read += got
        if self._read > MAX_BYTES:
            raise UnreadableRun(f"{self._path} holds more than {MAX_BYTES >> 30} GiB once decompressed: give the "
                                "doctor the log's tail, decompressed (e.g. zcat LOG | tail -c 1G > tail.log)")
        return b"".join(pieces)

    def close(self) -> None:
        self._stream.close()
        self._raw.close()

    def __enter__(self) -> "_Content":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

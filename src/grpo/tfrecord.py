"""TFRecord framing, the container of TensorBoard's event files: each record is its length (uint64, little-endian),
the length's masked CRC32C, the bytes, their masked CRC32C. grpo writes event files (`grpo.train.tensorboard`) and
the doctor reads other programs' (`grpo.tools.doctor.tensorboard`), both through this module.

A writer killed mid-record leaves a torn last record: reading stops there, as TensorBoard's reader does. A record
whose CRC does not match anywhere else is corruption, said with its offset."""

from __future__ import annotations

import os
import struct
from typing import BinaryIO, Iterator

_HEADER = 12  # the length (8 bytes) and its masked CRC (4)


def _crc32c_table() -> tuple[int, ...]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)  # Castagnoli's polynomial, reflected
        table.append(crc)
    return tuple(table)


_CRC32C_TABLE = _crc32c_table()


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    table = _CRC32C_TABLE
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc32c(data: bytes) -> int:
    """TFRecord's masking: a CRC over data that holds CRCs stays a good check."""
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def frame(data: bytes) -> bytes:
    """One TFRecord: length, its masked CRC32C, data, its masked CRC32C."""
    length = struct.pack("<Q", len(data))
    return length + struct.pack("<I", masked_crc32c(length)) + data + struct.pack("<I", masked_crc32c(data))


class CorruptRecord(ValueError):
    """A whole record whose CRC does not match: `offset` is where its frame starts."""

    def __init__(self, offset: int, what: str) -> None:
        super().__init__(f"the record at byte {offset} is corrupt ({what})")
        self.offset = offset


def records(stream: BinaryIO) -> Iterator[tuple[int, bytes]]:
    """(offset, data) of each whole record, in order; stops at a torn last record. Raises CorruptRecord."""
    offset = 0
    size = os.fstat(stream.fileno()).st_size  # what has been written so far: a record past it is torn
    while True:
        header = stream.read(_HEADER)
        if len(header) < _HEADER:
            return
        length_bytes, length_crc = header[:8], struct.unpack("<I", header[8:])[0]
        if masked_crc32c(length_bytes) != length_crc:
            raise CorruptRecord(offset, "its length's CRC does not match")
        length = struct.unpack("<Q", length_bytes)[0]
        if offset + _HEADER + length + 4 > size:
            return
        data = stream.read(length)
        tail = stream.read(4)
        if len(data) < length or len(tail) < 4:
            return
        if masked_crc32c(data) != struct.unpack("<I", tail)[0]:
            raise CorruptRecord(offset, "its data's CRC does not match")
        yield offset, data
        offset += _HEADER + length + 4

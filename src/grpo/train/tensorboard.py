"""TensorBoard event files written by hand: scalars and texts as `torch.utils.tensorboard.SummaryWriter` writes
them, without the `tensorboard` package (grpcio, protobuf, werkzeug...: seconds of every install and run start).

An event file is TFRecord framing (`grpo.tfrecord`) around protobuf-encoded `Event`s (tensorboard/compat/proto/
event.proto). Only the fields grpo writes are encoded; proto3 leaves zero scalars out, as protobuf would (`step` 0),
while a oneof member (`simple_value`) is written even when 0."""

from __future__ import annotations

import errno
import itertools
import math
import os
import socket
import struct
import time
from pathlib import Path

from grpo.errors import DISK_ERRNOS, DiskError
from grpo.tfrecord import frame

FILE_VERSION = "brain.Event:2"
WRITER = "grpo.train.tensorboard"
_SESSION_LOG_START = 1  # SessionLog.SessionStatus.START
_DT_STRING = 7  # tensorflow.DataType.DT_STRING
# SummaryWriter's file names end in a per-process counter, so two writers started in one second never collide.
_writer_ids = itertools.count()


def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # a negative int64 as protobuf writes it: ten bytes of two's complement
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _varint_field(number: int, value: int) -> bytes:
    return _varint(number << 3) + _varint(value)


def _bytes_field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _double_field(number: int, value: float) -> bytes:
    return _varint(number << 3 | 1) + struct.pack("<d", value)


def _float_field(number: int, value: float) -> bytes:
    try:
        packed = struct.pack("<f", value)
    except OverflowError:  # past float32's range: protobuf stores it as infinity, so do we
        packed = struct.pack("<f", math.copysign(math.inf, value))
    return _varint(number << 3 | 5) + packed


def event(wall_time: float, step: int = 0, file_version: str = "", summary_value: bytes = b"",
          session_start: bool = False, writer: str = "") -> bytes:
    """An Event (fields 1 wall_time, 2 step, 3 file_version, 5 summary, 7 session_log, 10 source_metadata) whose
    summary holds one Summary.Value (field 1), already encoded."""
    out = _double_field(1, wall_time)
    if step:
        out += _varint_field(2, step)
    if file_version:
        out += _bytes_field(3, file_version.encode())
    if summary_value:
        out += _bytes_field(5, _bytes_field(1, summary_value))
    if session_start:
        out += _bytes_field(7, _varint_field(1, _SESSION_LOG_START))
    if writer:
        out += _bytes_field(10, _bytes_field(1, writer.encode()))
    return out


def scalar_value(tag: str, value: float) -> bytes:
    """Summary.Value{tag: 1, simple_value: 2 (float32)}: SummaryWriter.add_scalar's old style, the default."""
    return _bytes_field(1, tag.encode()) + _float_field(2, value)


def text_value(tag: str, text: str) -> bytes:
    """Summary.Value as SummaryWriter.add_text writes it (torch/utils/tensorboard/summary.py text()): tag
    `<tag>/text_summary`, a DT_STRING TensorProto of shape [1] (fields 1 dtype, 2 tensor_shape, 8 string_val),
    metadata naming the "text" plugin (TextPluginData(version=0) encodes to nothing, so no content)."""
    shape = _bytes_field(2, _varint_field(1, 1))  # TensorShapeProto{dim: [Dim{size: 1}]}
    tensor = _varint_field(1, _DT_STRING) + _bytes_field(2, shape) + _bytes_field(8, text.encode("utf-8"))
    metadata = _bytes_field(1, _bytes_field(1, b"text"))  # SummaryMetadata{plugin_data: {plugin_name: "text"}}
    return _bytes_field(1, f"{tag}/text_summary".encode()) + _bytes_field(8, tensor) + _bytes_field(9, metadata)


class TensorBoardWriter:
    """A new event file in log_dir, named as SummaryWriter names its: events.out.tfevents.<time>.<host>.<pid>.<n>.

    Records wait in memory until flush(), which writes them in one call: a kill leaves whole steps and at
    most one torn record at the end, which TensorBoard's reader stops at."""

    def __init__(self, log_dir: Path, purge_step: int | None = None) -> None:
        """purge_step: TensorBoard drops the points at and after it that earlier files hold (a resumed run's)."""
        log_dir.mkdir(parents=True, exist_ok=True)
        self.path = log_dir / (f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}."
                               f"{os.getpid()}.{next(_writer_ids)}")
        try:
            self._file = open(self.path, "xb", buffering=0)
        except OSError as exc:
            raise DiskError(self.path, exc) if exc.errno in DISK_ERRNOS else exc
        self._pending = bytearray()
        self._add(event(time.time(), file_version=FILE_VERSION, writer=WRITER))
        if purge_step is not None:
            # SummaryWriter's two events, in its order: the restart is seen on the file_version one, the purge
            # of every step >= purge_step on the START one.
            self._add(event(time.time(), step=purge_step, file_version=FILE_VERSION))
            self._add(event(time.time(), step=purge_step, session_start=True))
        self.flush()

    def add_scalar(self, tag: str, value: float, step: int) -> None:
        self._add(event(time.time(), step=step, summary_value=scalar_value(tag, value)))

    def add_text(self, tag: str, text: str, step: int) -> None:
        self._add(event(time.time(), step=step, summary_value=text_value(tag, text)))

    def flush(self) -> None:
        """Writes the pending records; a full disk raises DiskError, as every file of the run directory does
        (a torn last record is what TensorBoard's reader already stops at)."""
        data = bytes(self._pending)
        self._pending.clear()
        try:
            if data and self._file.write(data) != len(data):  # a regular file takes it all unless the disk is full
                raise OSError(errno.ENOSPC, "No space left on device (short write)")
        except OSError as exc:
            raise DiskError(self.path, exc) if exc.errno in DISK_ERRNOS else exc

    def close(self) -> None:
        if not self._file.closed:
            self.flush()
            self._file.close()

    def _add(self, data: bytes) -> None:
        if self._file.closed:
            raise ValueError(f"{self.path} is closed: nothing more can be written to it")
        self._pending += frame(data)

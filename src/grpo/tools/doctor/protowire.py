"""Protocol Buffers' wire format, decoded by hand: the doctor reads TensorBoard's `Event`s and wandb's `Record`s
without either package (or protobuf) installed.

A message is a sequence of fields, each a key (field number << 3 | wire type, a varint) and a value: a varint
(type 0), 8 bytes (1: double, fixed64), a length-prefixed run of bytes (2: strings, nested messages, packed
repeated numbers) or 4 bytes (5: float, fixed32). `fields` groups a message's values by field number; what a
field means is the caller's (its .proto). Unknown fields are kept and ignored, as protobuf does."""

from __future__ import annotations

import struct

Value = int | bytes  # a varint's number, or the bytes of a fixed or length-delimited field
Message = dict[int, list[Value]]  # field number -> its values in the order they came


class WireError(ValueError):
    """Bytes that are not a protobuf message (torn, or not what the file's format says)."""


def varint(data: bytes, pos: int) -> tuple[int, int]:
    """(the varint at `pos`, the position after it)."""
    value = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise WireError("a varint runs past the end of its message")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def fields(data: bytes) -> Message:
    found: Message = {}
    pos = 0
    while pos < len(data):
        key, pos = varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = varint(data, pos)
        elif wire in (1, 5):
            end = pos + (8 if wire == 1 else 4)
            value, pos = data[pos:end], end
        elif wire == 2:
            length, pos = varint(data, pos)
            value, pos = data[pos:pos + length], pos + length
        else:
            raise WireError(f"field {number} has wire type {wire}, which no message read here uses")
        if pos > len(data):
            raise WireError(f"field {number} runs past the end of its message")
        found.setdefault(number, []).append(value)
    return found


def first(message: Message, number: int, default: Value | None = None) -> Value | None:
    """The field's last value (protobuf's rule for a repeated scalar field read as a single one)."""
    values = message.get(number)
    return values[-1] if values else default


def text(message: Message, number: int) -> str:
    value = first(message, number, b"")
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else ""


def double(raw: Value) -> float:
    if not isinstance(raw, bytes) or len(raw) != 8:
        raise WireError("a double field holds no 8 bytes")
    return struct.unpack("<d", raw)[0]


def float32(raw: Value) -> float:
    if not isinstance(raw, bytes) or len(raw) != 4:
        raise WireError("a float field holds no 4 bytes")
    return struct.unpack("<f", raw)[0]


def int64(raw: Value) -> int:
    """A varint read as int64 / int32: negative numbers are written as ten bytes of two's complement."""
    if not isinstance(raw, int):
        raise WireError("an integer field holds bytes")
    return raw - (1 << 64) if raw >= 1 << 63 else raw


def sint64(raw: Value) -> int:
    """A zigzag-encoded varint (sint64)."""
    if not isinstance(raw, int):
        raise WireError("an integer field holds bytes")
    return (raw >> 1) ^ -(raw & 1)


def varints(values: list[Value]) -> list[int]:
    """A repeated varint field's numbers, packed (one run of bytes) or not."""
    out = []
    for value in values:
        if isinstance(value, int):
            out.append(value)
            continue
        pos = 0
        while pos < len(value):
            number, pos = varint(value, pos)
            out.append(number)
    return out

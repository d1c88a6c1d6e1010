"""Protobuf wire format, just enough to keep a message's large `bytes` fields out of the message object.

Parsing copies every `bytes` field into the message, reading one copies it again, and setting one and
serializing copy twice more: four copies of a 4 MB tensor for one OIP gRPC request. Instead, the request's
`raw_input_contents` are cut out of the received bytes (zero-copy views) before the rest is parsed, and
the reply's `raw_output_contents` are appended to its serialization (the wire format allows a message's
fields in any order): one copy out, none in.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from google.protobuf.message import DecodeError

BytesLike = bytes | bytearray | memoryview
_LENGTH_DELIMITED = 2


def _varint(data: memoryview, pos: int) -> tuple[int, int]:
    """The varint at `pos` and the position after it."""
    value, shift = 0, 0
    while True:
        if pos >= len(data) or shift > 63:
            raise DecodeError("truncated or overlong varint")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def encode_varint(value: int) -> bytes:
    if value < 0x80:  # one or two bytes (tags, and lengths below 16 KiB) without a loop: the usual case
        return bytes((value,))
    if value < 0x4000:
        return bytes(((value & 0x7F) | 0x80, value >> 7))
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


@functools.cache
def _length_delimited_tag(number: int) -> bytes:
    """The key of field `number` as a length-delimited field (cached: a reply writes it per request)."""
    return encode_varint((number << 3) | _LENGTH_DELIMITED)


def split_field(raw: bytes, number: int) -> tuple[bytes, list[memoryview]]:
    """`raw` without the top-level length-delimited field `number`, and that field's values (views into
    `raw`, in order). DecodeError on a malformed message."""
    data = memoryview(raw)
    values: list[memoryview] = []
    kept: list[memoryview] = []
    pos = start = 0
    while pos < len(data):
        field_start = pos
        key, pos = _varint(data, pos)
        wire_type = key & 7
        if wire_type == 0:
            _, pos = _varint(data, pos)
        elif wire_type == 1:
            pos += 8
        elif wire_type == 5:
            pos += 4
        elif wire_type == _LENGTH_DELIMITED:
            length, pos = _varint(data, pos)
            if (key >> 3) == number:
                if pos + length > len(data):
                    raise DecodeError("truncated message")
                kept.append(data[start:field_start])
                values.append(data[pos : pos + length])
                pos += length
                start = pos
                continue
            pos += length
        else:
            raise DecodeError(f"unsupported wire type {wire_type}")
    if pos > len(data):
        raise DecodeError("truncated message")
    if not values:
        return raw, values
    kept.append(data[start:])
    return b"".join(kept), values


class WithRawField:
    """A parsed message whose large repeated `bytes` field was kept apart (see `split_field`): reads as the
    message, except for that field, which is the list of views."""

    __slots__ = ("_field", "_message", "_values")

    def __init__(self, message: Any, field: str, values: list[memoryview]) -> None:
        self._message, self._field, self._values = message, field, values

    def __getattr__(self, name: str) -> Any:
        if name == self._field:
            return self._values
        return getattr(self._message, name)


class SerializedWithRaw:
    """A message to serialize with a repeated `bytes` field (`number`) appended to it as it is, rather than
    copied into the message first. Anything with `SerializeToString` will do for the gRPC boundary."""

    __slots__ = ("_buffers", "_message", "_tag")

    def __init__(self, message: Any, number: int, buffers: Sequence[BytesLike]) -> None:
        self._message = message
        self._tag = _length_delimited_tag(number)
        self._buffers = buffers

    def SerializeToString(self) -> bytes:  # protobuf's name: the boundary calls it
        parts: list[BytesLike] = [self._message.SerializeToString()]
        for buffer in self._buffers:
            parts += (self._tag, encode_varint(memoryview(buffer).nbytes), buffer)
        return b"".join(parts)

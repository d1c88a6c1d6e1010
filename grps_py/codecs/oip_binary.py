"""Triton's binary tensor extension for the OIP HTTP API: raw tensor bytes after a JSON header.

A request or response body is `JSON header + binary part`; the header's byte count travels in the HTTP
header `Inference-Header-Content-Length`. Each tensor marked with `parameters.binary_data_size` owns
the next that many bytes of the binary part: fixed-size datatypes as their little-endian, row-major
elements; BYTES as one `<uint32 length><bytes>` record per element (tritonclient's
`serialize_byte_tensor`).

Reading is zero-copy for fixed-size datatypes (`np.frombuffer` over the body: the array is a read-only
view when the body is `bytes`), and every size a client claims is checked by arithmetic before
anything is allocated. BOOL bytes are not checked to be 0 or 1 (as in Triton).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from typing import Any

import numpy as np

from grps_py.codecs.limits import DEFAULT_LIMITS, check_length
from grps_py.core.datatypes import BYTES, numpy_dtype
from grps_py.core.errors import InvalidInput, ModelError
from grps_py.core.protection import LimitsSettings

__all__ = [
    "HEADER_LENGTH",
    "BytesLike",
    "deserialize_bytes",
    "reshape",
    "serialize_bytes",
    "split_body",
    "tensor_from_bytes",
    "tensor_to_bytes",
    "wire_dtype",
]

Array = np.ndarray[Any, Any]
BytesLike = bytes | bytearray | memoryview
HEADER_LENGTH = "Inference-Header-Content-Length"
_LENGTH = struct.Struct("<I")
_MAX_ELEMENT_BYTES = 2**32 - 1
_MAX_HEADER_DIGITS = 20  # more digits than any body length; keeps int() away from huge strings


_WIRE_DTYPES: dict[str, np.dtype[Any]] = {}  # filled as datatypes are met (numpy_dtype refuses others)


def wire_dtype(datatype: str) -> np.dtype[Any]:
    """The numpy dtype of a fixed-size datatype's wire form: little-endian whatever the host."""
    dtype = _WIRE_DTYPES.get(datatype)
    if dtype is None:
        dtype = _WIRE_DTYPES[datatype] = numpy_dtype(datatype).newbyteorder("<")
    return dtype


# --- BYTES -------------------------------------------------------------------------------------


def serialize_bytes(array: Array) -> bytes:
    """A BYTES tensor as length-prefixed elements in row-major order.

    Elements may be `bytes`, `str` (written as UTF-8) or anything else (written as `str(value)`, as
    tritonclient does); numpy `U` and `S` arrays are accepted too. An element that cannot be written
    is the model's fault, so it raises `ModelError`.
    """
    elements = [_element_bytes(value) for value in np.asarray(array).ravel(order="C").tolist()]
    pieces: list[bytes] = [b""] * (2 * len(elements))
    try:
        pieces[0::2] = map(_LENGTH.pack, map(len, elements))
    except struct.error:
        raise ModelError(f"a BYTES element is longer than {_MAX_ELEMENT_BYTES} bytes") from None
    pieces[1::2] = elements
    return b"".join(pieces)


def _element_bytes(value: Any) -> bytes:
    if type(value) is bytes:
        return value
    if isinstance(value, bytes):  # np.bytes_ and other subclasses
        return bytes(value)
    try:
        return str(value).encode("utf-8")
    except UnicodeEncodeError:
        raise ModelError("a BYTES element is a string that cannot be encoded as UTF-8") from None


def deserialize_bytes(
    buffer: BytesLike, count: int, label: str, limits: LimitsSettings = DEFAULT_LIMITS
) -> Array:
    """`count` length-prefixed elements that fill `buffer` exactly, as a 1-D object array of `bytes`.

    Each element's length is held to `limits.string_bytes` before it is copied."""
    view = memoryview(buffer).cast("B")
    size = len(view)
    if count * _LENGTH.size > size:  # every element needs at least its length: refuse before allocating
        raise InvalidInput(f"{label}: {size} bytes of BYTES data cannot hold {count} elements")
    elements: list[bytes] = []
    append, unpack, pos = elements.append, _LENGTH.unpack_from, 0
    for index in range(count):
        if pos + _LENGTH.size > size:
            raise InvalidInput(f"{label}: BYTES data ends before element {index} of {count}")
        (length,) = unpack(view, pos)
        pos += _LENGTH.size
        if pos + length > size:
            raise InvalidInput(f"{label}: BYTES element {index} (length {length}) runs past the end")
        if length > limits.string_bytes:
            check_length(length, f"{label}: BYTES element {index}", limits)
        append(view[pos : pos + length].tobytes())
        pos += length
    if pos != size:
        raise InvalidInput(f"{label}: {size - pos} bytes left over after {count} BYTES elements")
    out = np.empty(count, dtype=object)
    out[:] = elements
    return out


# --- fixed-size tensors ------------------------------------------------------------------------


def tensor_to_bytes(array: Array, datatype: str) -> bytes | memoryview:
    """A tensor's wire bytes: little-endian and row-major (copied only when it is not already so).

    The array is converted to `datatype`'s dtype when it differs (the caller picked the datatype).
    """
    if datatype == BYTES:
        return serialize_bytes(array)
    contiguous = np.ascontiguousarray(array, dtype=wire_dtype(datatype))
    return contiguous.reshape(-1).view(np.uint8).data


def tensor_from_bytes(
    buffer: BytesLike,
    datatype: str,
    shape: Sequence[int],
    label: str,
    limits: LimitsSettings = DEFAULT_LIMITS,
) -> Array:
    """A tensor read from its wire bytes: a zero-copy view for fixed-size datatypes.

    The byte count is checked against `shape` by arithmetic first, so a huge claimed shape allocates
    nothing (the caller holds the element count to `limits.elements`).
    """
    count = math.prod(shape)
    if datatype == BYTES:
        return reshape(deserialize_bytes(buffer, count, label, limits), shape, label)
    dtype = wire_dtype(datatype)
    view = memoryview(buffer).cast("B")
    expected = count * dtype.itemsize
    if len(view) != expected:
        raise InvalidInput(
            f"{label}: shape {list(shape)} of {datatype} needs {expected} bytes, got {len(view)}"
        )
    return reshape(np.frombuffer(view, dtype=dtype), shape, label)


def reshape(array: Array, shape: Sequence[int], label: str) -> Array:
    """`array.reshape(shape)`; shapes numpy cannot hold (too many dims, a huge empty shape, a dim
    beyond what a C integer holds) are refused."""
    try:
        return array.reshape(tuple(shape))
    except (ValueError, OverflowError):
        raise InvalidInput(f"{label}: shape {list(shape)} cannot be used") from None


# --- the body ----------------------------------------------------------------------------------


def split_body(body: bytes, header_length: str | None) -> tuple[memoryview, memoryview]:
    """The JSON header and the binary part of a body (no copy).

    `header_length` is the `Inference-Header-Content-Length` value; None means the body is all JSON.
    """
    whole = memoryview(body).cast("B")
    if header_length is None:
        return whole, whole[len(whole) :]
    text = header_length.strip()
    if not (text.isascii() and text.isdigit() and len(text) <= _MAX_HEADER_DIGITS):
        raise InvalidInput(f"{HEADER_LENGTH} must be a non-negative integer, got {header_length[:40]!r}")
    length = int(text)
    if length > len(whole):
        raise InvalidInput(f"{HEADER_LENGTH} is {length} but the body has only {len(whole)} bytes")
    return whole[:length], whole[length:]

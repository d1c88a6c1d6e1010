"""How large an HTTP answer can get, judged from its tensors before anything is encoded.

Every HTTP answer that carries model outputs is held to `limits.http_answer_bytes` (by default the
gRPC message limit) with these estimates, so that no encoder (orjson, numpy, base64) is asked to build
a body the limit forbids: a model that answers a broadcast view of 4 bytes claiming 4 GiB gets a clear
error (`AnswerTooLarge`, 500) instead of taking the process down inside a failed allocation.

Each estimate is an upper bound on the encoded size of one answer in one format:

- numbers: the most bytes one element takes in any of the JSON answers, its comma included (26 for a
  float64, 18 for a float32 or narrower float, 23 for an int64, which grps JSON quotes), or its
  byte size in the binary extension;
- strings and bytes: their UTF-8 bytes, plus what JSON's escapes add (1 byte for `"`, `\\`, `\\n`,
  `\\t`, `\\r`, `\\b`, `\\f`; 5 for the other control characters) and their quotes; 4 bytes of length
  each in binary; base64 for grps `bin_data` and `gmap` bytes; a raw `bin_data` answer is its length;
- names, ids, parameters, shapes and brackets: their own bound, per tensor or per dimension.

Numeric tensors cost O(1) each (their shape and dtype: nothing is read or copied, a torch tensor stays
on its device); string tensors cost one pass over their elements, and only when their count alone (at
least 3 bytes each) leaves them under the limit. The estimators stop counting once past the limit.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from grps_py.core.errors import ModelError
from grps_py.core.oip import OipResponse
from grps_py.core.types import Payload, PayloadKind, Tensor

__all__ = [
    "SETTING",
    "AnswerTooLarge",
    "check_answer",
    "grps_answer",
    "grps_json_bytes",
    "oip_generate_bytes",
    "oip_infer_bytes",
    "plain_payload",
]

SETTING = "limits.http_answer_bytes"
_HEAD = 256  # an answer's fixed part: the status envelope, or the model name and version keys; braces
_ENTRY = 128  # one tensor's keys around its data: name, datatype, shape, data, binary_data_size
_DIM = 21  # one shape entry: up to 20 digits and a comma
_NUMBER = 26  # any JSON number (a float64's digits are the longest), "-Infinity" quoted, and a comma
_STRING = 3  # a string's quotes and comma, beside its characters
_BINARY_LENGTH = 4  # a BYTES element's length prefix in the binary extension
# The most bytes one element of each numpy dtype (kind and size) takes in any JSON answer (OIP infer or
# generate, grps gtensors or ndarray), its comma included: "false," (OIP BOOL), "-128,",
# "\"4294967295\"," (UINT32, which grps widens to a quoted INT64), "\"-9223372036854775808\"," (INT64,
# quoted by grps), float32 digits (FP16 and BF16 are written as float32 or shorter), float64 digits.
_JSON_ELEMENT: dict[str, int] = {
    "b1": 6,
    "i1": 5,
    "u1": 4,
    "i2": 7,
    "u2": 6,
    "i4": 12,
    "u4": 13,
    "i8": 23,
    "u8": 23,
    "f2": 18,
    "V2": 18,  # ml_dtypes.bfloat16
    "f4": 18,
    "f8": _NUMBER,
}
# For bytes.translate(None, delete): deleting these leaves the bytes JSON escapes (all of them), the
# control characters written as \u00XX (6 bytes), and the bytes that are not ASCII.
_UNESCAPED = bytes(b for b in range(256) if b >= 0x20 and b not in (0x22, 0x5C))
_NOT_LONG_ESCAPED = bytes(b for b in range(256) if b >= 0x20 or b in b"\b\t\n\f\r")
_ASCII = bytes(range(0x80))


class AnswerTooLarge(ModelError):
    """The model's answer could encode to more than an HTTP answer may take (`limits.http_answer_bytes`):
    500, as any answer the server cannot send (over gRPC the same answer is RESOURCE_EXHAUSTED)."""

    default_message = "the answer is too large"


def check_answer(estimate: int, limit: int) -> None:
    """Raise AnswerTooLarge when an answer's estimated size is over `limit`."""
    if estimate > limit:
        raise AnswerTooLarge(
            f"the answer could take {estimate} bytes (estimated from its tensors before encoding), "
            f"over {SETTING} ({limit} bytes)"
        )


# --- the formats ----------------------------------------------------------------------------------


def oip_infer_bytes(response: OipResponse, binary_outputs: set[str], limit: int) -> int:
    """`oip_json.encode_response`'s body: outputs in JSON, or binary for the names in `binary_outputs`
    (an output meant for JSON may still go binary, which is never larger)."""
    total = _HEAD + _oip_head(response) + _parameters(response.parameters)
    placed = response.placed
    for tensor in response.outputs:
        if total > limit:
            break
        shape, count, dtype, data = _shape_dtype(tensor)
        total += _ENTRY + _text(tensor.name) + _DIM * len(shape)
        if placed and tensor.name in placed:  # in shared memory: only its parameters are answered
            total += _parameters(placed[tensor.name])
            continue
        binary = tensor.name in binary_outputs
        if dtype.kind in "OUS":
            if count * _STRING > limit - total:
                return total + count * _STRING
            raw, escapes, _, elements = _strings(data)
            in_binary = raw + _BINARY_LENGTH * elements
            total += in_binary if binary else max(in_binary, raw + escapes + _STRING * elements)
        else:
            total += count * (dtype.itemsize if binary else max(dtype.itemsize, _json_element(dtype)))
    return total


def oip_generate_bytes(response: OipResponse, limit: int) -> int:
    """`oip_generate.encode_generate`'s body: each output by name as a JSON scalar or nested list (bytes
    that are not UTF-8 become U+FFFD: up to 3 bytes for each)."""
    total = _HEAD + _oip_head(response)
    for tensor in response.outputs:
        if total > limit:
            break
        shape, count, dtype, data = _shape_dtype(tensor)
        total += _text(tensor.name) + _nesting(shape)
        if dtype.kind in "OUS":
            if count * _STRING > limit - total:
                return total + count * _STRING
            raw, escapes, high, elements = _strings(data)
            total += raw + escapes + 2 * high + _STRING * elements
        else:
            total += count * _json_element(dtype)
    return total


def grps_json_bytes(payload: Payload, return_ndarray: bool, limit: int) -> int:
    """`grps_json.encode_response`'s body for a payload that holds no message (see `plain_payload`)."""
    kind, value = payload.kind, payload.value
    if kind is PayloadKind.TENSORS:
        return _HEAD + _grps_tensors(value, return_ndarray, limit)
    if kind is PayloadKind.TEXT:
        return _HEAD + _text(value)
    if kind is PayloadKind.BYTES:
        return _HEAD + _base64(len(value))
    if kind is PayloadKind.MAP:
        return _HEAD + _gmap(value)
    return _HEAD


def grps_answer(payload: Payload, return_ndarray: bool, limit: int) -> Payload:
    """The payload of a grps HTTP answer or streamed message (`plain_payload`), once it is known to fit
    `limit`: `bin_data` goes out raw (its length counts), anything else as grps JSON."""
    payload = plain_payload(payload)
    if payload.kind is PayloadKind.BYTES:
        check_answer(len(payload.value), limit)
    else:
        check_answer(grps_json_bytes(payload, return_ndarray, limit), limit)
    return payload


def plain_payload(payload: Payload) -> Payload:
    """A payload holding a GrpsMessage (converter `none`), read into tensors, text, bytes or a map, so
    that its size can be judged and the same payload encoded (the encoder would read it anyway)."""
    if payload.kind is not PayloadKind.MESSAGE:
        return payload
    from grps_py.codecs.grps_pb import GrpsMessageBridge  # protobuf: only for messages

    return GrpsMessageBridge().from_message(payload.value)


# --- pieces ---------------------------------------------------------------------------------------


def _grps_tensors(tensors: list[Tensor], return_ndarray: bool, limit: int) -> int:
    total = 0
    nested = return_ndarray and len(tensors) == 1
    for tensor in tensors:
        if total > limit:
            break
        shape, count, dtype, data = _shape_dtype(tensor)
        total += _ENTRY + _text(tensor.name) + _DIM * len(shape)
        if dtype.kind in "OUS":
            if count * _STRING > limit - total:
                return total + count * _STRING
            raw, escapes, _, elements = _strings(data)
            total += raw + escapes + _STRING * elements
        else:
            total += (_nesting(shape) if nested else 2) + count * _json_element(dtype)
    return total


def _gmap(gmap: Mapping[str, Mapping[str, Any]]) -> int:
    total = 0
    for name, entries in gmap.items():
        total += _text(str(name)) + 3
        for key, value in entries.items():
            total += _text(str(key)) + 1
            if isinstance(value, (bytes, bytearray, memoryview)):
                total += _base64(len(value))
            elif isinstance(value, str):
                total += _text(value)
            else:
                total += _NUMBER
    return total


def _oip_head(response: OipResponse) -> int:
    return _text(response.model_name) + _text(response.model_version) + _text(response.id)


def _parameters(parameters: Mapping[str, Any]) -> int:
    total = 2
    for key, value in parameters.items():
        total += _text(str(key)) + 1 + (_text(value) if isinstance(value, str) else _NUMBER)
    return total


def _shape_dtype(tensor: Tensor) -> tuple[tuple[int, ...], int, np.dtype[Any], Any]:
    """A tensor's shape, element count and numpy dtype, read without copying it (a torch tensor stays
    where it is), and its data, to read strings from."""
    data = tensor.data
    if isinstance(data, np.ndarray):
        return data.shape, data.size, data.dtype, data
    if hasattr(data, "numel") and hasattr(data, "shape"):  # a torch tensor: numbers only
        try:
            dtype = np.dtype(str(data.dtype).rpartition(".")[2])
        except TypeError:
            dtype = np.dtype(np.float64)  # a dtype numpy does not know: bounded as the widest number
        shape = tuple(int(size) for size in data.shape)
        return shape, math.prod(shape), dtype, data
    array = tensor.array  # anything else: as the encoder will see it
    return array.shape, array.size, array.dtype, array


def _json_element(dtype: np.dtype[Any]) -> int:
    bound = _JSON_ELEMENT_BY_DTYPE.get(dtype)
    if bound is None:
        bound = _JSON_ELEMENT_BY_DTYPE[dtype] = _JSON_ELEMENT.get(f"{dtype.kind}{dtype.itemsize}", _NUMBER)
    return bound


_JSON_ELEMENT_BY_DTYPE: dict[np.dtype[Any], int] = {}  # filled as dtypes are met


def _nesting(shape: tuple[int, ...]) -> int:
    """The brackets and commas of a nested JSON array of `shape`, beyond its elements' own commas."""
    total, rows = 2, 1
    for size in shape[:-1]:
        rows *= size
        total += 3 * rows
    return total


def _text(text: str) -> int:
    """A JSON string: a short one bounded by its length (6 bytes a character at most), a long one
    counted."""
    if len(text) <= 64:
        return 6 * len(text) + _STRING
    raw, escapes, _ = _utf8_counts(text.encode("utf-8", "surrogatepass"))
    return raw + escapes + _STRING


def _base64(size: int) -> int:
    return 4 * ((size + 2) // 3) + _STRING


def _utf8_counts(data: bytes) -> tuple[int, int, int]:
    """UTF-8 bytes: their count, the bytes JSON's escapes add to them, and the bytes that are not ASCII."""
    escaped = len(data.translate(None, _UNESCAPED))
    long_escaped = len(data.translate(None, _NOT_LONG_ESCAPED))
    return len(data), escaped + 4 * long_escaped, len(data.translate(None, _ASCII))


def _strings(data: Any) -> tuple[int, int, int, int]:
    """A string tensor's UTF-8 bytes in all, what JSON's escapes add, the bytes that are not ASCII, and
    its element count: one pass over its elements (bytes, str, or anything else as `str(value)`)."""
    items = np.asarray(data).ravel().tolist()
    kinds = set(map(type, items))
    if kinds <= {bytes}:
        joined = b"".join(items)
    elif kinds <= {str}:
        joined = "".join(items).encode("utf-8", "surrogatepass")
    else:
        joined = b"".join(map(_element_bytes, items))
    raw, escapes, high = _utf8_counts(joined)
    return raw, escapes, high, len(items)


def _element_bytes(value: Any) -> bytes:
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    return str(value).encode("utf-8", "surrogatepass")

"""HTTP JSON for the grps API: proto3 JSON (snake_case names) without a protobuf round trip.

Requests are read with `orjson.loads` and tensors become numpy arrays in bulk; answers are written
with one `orjson.dumps` in which numpy arrays serialize natively. The output is what
`json_format.MessageToJson(msg, preserving_proto_field_name=True)` gives for the same message (tested
value by value), including its quirks: int64 as strings, NaN/Infinity as strings, and float32 digits
by json_format's rule (the fewest digits, 6 at least, that read back to the same float32), which
differs from orjson's for subnormals and a few powers of two; those values are patched into orjson's
text. A decoded `gmap` holds all six maps, empty ones included, as `grps_pb` gives it.

Not through json_format: it finds float32 digits in Python, one value at a time.

Unknown fields are ignored anywhere in the message, as grps parses (`ignore_unknown_fields`): grps's own
template client sends a `gmap` with an `s_t` map that the proto does not have. Each ignored name is
logged once, at DEBUG (`UnknownFieldLog`). Malformed JSON and wrong types are still refused.

Where this parser is stricter than proto3 JSON, on purpose: integers other than int64 must be JSON
numbers (not strings), floats accept only the strings "NaN", "Infinity" and "-Infinity", and shape
entries must be integers.
"""

from __future__ import annotations

import base64
import functools
import logging
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import orjson

from grps_py.codecs.grps_pb import (
    GrpsMessageBridge,
    check_flat_fields,
    dtype_info,
    fit_shape,
    narrow_floats,
    narrow_ints,
    string_values,
    tensor_label,
)
from grps_py.codecs.json_values import expect_list, expect_object, expect_str, flatten, load
from grps_py.codecs.limits import (
    DEFAULT_LIMITS,
    ElementBudget,
    check_length,
    check_strings,
    check_tensors,
    for_body,
)
from grps_py.codecs.oip_binary import reshape
from grps_py.core.errors import InvalidInput
from grps_py.core.protection import LimitsSettings
from grps_py.core.types import (
    DTYPE_BY_FLAT_FIELD,
    DTYPE_BY_NAME,
    GMAP_FIELDS,
    DTypeInfo,
    GenericMap,
    Payload,
    PayloadKind,
    Tensor,
    dtype_for_array,
)
from grps_py.core.untrusted import shown

__all__ = ["decode_request", "encode_response", "encode_status", "shortest_float32"]

log = logging.getLogger("grps_py.codecs")

Array = np.ndarray[Any, Any]
_NUMPY = orjson.OPT_SERIALIZE_NUMPY
_STRING = DTYPE_BY_NAME["DT_STRING"]
_INT32 = DTYPE_BY_NAME["DT_INT32"]
_INT64 = DTYPE_BY_NAME["DT_INT64"]
_FLOAT32 = DTYPE_BY_NAME["DT_FLOAT32"]
_FLOAT64 = DTYPE_BY_NAME["DT_FLOAT64"]
_UINT32_MAX = 2**32 - 1
_SPECIAL_FLOATS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
_URLSAFE_TO_STANDARD = str.maketrans("-_", "+/")
_JSON_KINDS = {
    bool: "true/false",
    type(None): "null",
    int: "a number",
    float: "a number",
    str: "a string",
    list: "an array",
    dict: "an object",
}


def _camel(name: str) -> str:
    """protobuf's json_name: `flat_uint8` -> `flatUint8`, `s_i32` -> `sI32`."""
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _aliases(*names: str) -> dict[str, str]:
    """Every spelling a proto3 JSON parser accepts for these fields, mapped to the proto name."""
    return {alias: name for name in names for alias in (name, _camel(name))}


_MESSAGE_FIELDS = _aliases("status", "model", "bin_data", "str_data", "gtensors", "ndarray", "gmap")
_GTENSORS_FIELDS = _aliases("tensors")
_TENSOR_FIELDS = _aliases("name", "dtype", "shape", *DTYPE_BY_FLAT_FIELD)
_GMAP_NAMES = _aliases(*GMAP_FIELDS)


# --- decoding ----------------------------------------------------------------------------------


def decode_request(body: bytes, limits: LimitsSettings = DEFAULT_LIMITS) -> tuple[Payload, str]:
    """The payload of a JSON request and its `model` field ("" when absent). `status` is ignored.

    Anything malformed, or beyond `limits`, raises `InvalidInput` with a message meant for the client.
    """
    limits = for_body(limits, len(body))
    document = load(body, "request body is not valid JSON", limits)
    fields = _known_fields(document, _MESSAGE_FIELDS, "the request")
    model = expect_str(fields.get("model", ""), "model")
    data_fields = [name for name in fields if name in _DATA_DECODERS]
    if len(data_fields) > 1:
        raise InvalidInput(f"the request sets {' and '.join(data_fields)}; set only one data field")
    if not data_fields:
        return Payload.empty(), model
    return _DATA_DECODERS[data_fields[0]](fields[data_fields[0]], limits), model


class UnknownFieldLog:
    """Unknown fields are ignored, as grps reads JSON (`ignore_unknown_fields`), and each name is logged
    once (DEBUG) so a misspelt field can still be found. At most `limit` names are remembered: a client
    sending a new name with every request cannot grow the set, nor fill the log."""

    def __init__(self, limit: int = 32) -> None:
        self.limit = limit
        self.names: set[str] = set()

    def note(self, key: str, where: str) -> None:
        name = shown(key, 40)
        if name in self.names or len(self.names) >= self.limit:
            return
        self.names.add(name)  # a set's add is atomic: decoders on several threads at worst log twice
        log.debug("ignored unknown field '%s' in %s (logged once per name)", name, where)


UNKNOWN_FIELDS = UnknownFieldLog()


def _known_fields(value: Any, aliases: dict[str, str], where: str) -> dict[str, Any]:
    """An object's fields under their proto names. Unknown fields are ignored (as grps does); a field
    given twice (as `str_data` and `strData`) is refused; null is absent."""
    fields: dict[str, Any] = {}
    seen: set[str] = set()
    for key, field_value in expect_object(value, where).items():
        name = aliases.get(key)
        if name is None:
            UNKNOWN_FIELDS.note(key, where)
            continue
        if name in seen:
            raise InvalidInput(f"field '{name}' appears twice in {where}")
        seen.add(name)
        if field_value is not None:
            fields[name] = field_value
    return fields


def _decode_base64(value: Any, where: str) -> bytes:
    """Standard or URL-safe base64, padding optional (as proto3 JSON parsers accept)."""
    text = expect_str(value, where).translate(_URLSAFE_TO_STANDARD)
    try:
        return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except ValueError as exc:
        raise InvalidInput(f"{where} is not valid base64") from exc


def _decode_bin_data(value: Any, limits: LimitsSettings) -> Payload:
    data = _decode_base64(value, "bin_data")
    check_length(len(data), "bin_data", limits)
    return Payload.of_bytes(data)


def _decode_str_data(value: Any, limits: LimitsSettings) -> Payload:
    text = expect_str(value, "str_data")
    check_strings([text], "str_data", limits)
    return Payload.of_text(text)


def _decode_gtensors(value: Any, limits: LimitsSettings) -> Payload:
    fields = _known_fields(value, _GTENSORS_FIELDS, "gtensors")
    items = expect_list(fields.get("tensors", []), "gtensors.tensors")
    check_tensors(len(items), limits)
    budget = ElementBudget(limits)
    return Payload.of_tensors(
        [_decode_tensor(item, index, budget, limits) for index, item in enumerate(items)]
    )


def _decode_tensor(item: Any, index: int, budget: ElementBudget, limits: LimitsSettings) -> Tensor:
    where = f"gtensors.tensors[{index}]"
    fields = _known_fields(item, _TENSOR_FIELDS, where)
    name = expect_str(fields.get("name", ""), f"{where}.name")
    label = tensor_label(name, index)
    info = dtype_info(_dtype_number(fields.get("dtype", 0), label), label)
    shape = _decode_shape(fields.get("shape", []), label)
    budget.take_shape(shape, label)  # before the values are read: a claimed shape allocates nothing
    return Tensor(name, fit_shape(_decode_flat(fields, info, label, limits), shape, label))


def _dtype_number(value: Any, label: str) -> int:
    """The DataType number for `"DT_FLOAT32"` or `7` (both are proto3 JSON)."""
    if isinstance(value, str):
        if value == "DT_INVALID":
            return 0
        info = DTYPE_BY_NAME.get(value)
        if info is None:
            raise InvalidInput(f"{label}: unknown dtype '{shown(value, 40)}'")
        return info.grps_number
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise InvalidInput(f'{label}: dtype must be a name such as "DT_FLOAT32" or its number')


def _decode_shape(value: Any, label: str) -> list[int]:
    if not isinstance(value, list) or not all(type(dim) is int and 0 <= dim <= _UINT32_MAX for dim in value):
        raise InvalidInput(f"{label}: shape must be a list of non-negative integers")
    return value


def _decode_flat(fields: dict[str, Any], info: DTypeInfo, label: str, limits: LimitsSettings) -> Array:
    """The tensor's values, from the one flat field its dtype uses (others must be absent or empty)."""
    populated = [
        name
        for name in DTYPE_BY_FLAT_FIELD
        if name in fields and expect_list(fields[name], f"{label}: {name}")
    ]
    check_flat_fields(populated, info, label)
    values = fields.get(info.flat_field, [])
    if info is _STRING:
        return _decode_strings(values, label, limits)
    return _decode_numbers(values, info, label)


def _decode_strings(values: list[Any], label: str, limits: LimitsSettings) -> Array:
    odd_types = set(map(type, values)) - {str}
    if odd_types:
        raise InvalidInput(f"{label}: expected a string, found {_json_kind(odd_types)}")
    check_strings(values, label, limits)
    strings = np.empty(len(values), dtype=object)
    strings[:] = values
    return strings


def _decode_numbers(values: list[Any], info: DTypeInfo, label: str) -> Array:
    """JSON numbers -> a numpy array of the dtype, in bulk; per element only where strings need reading."""
    types = set(map(type, values))  # one C-speed pass; picks the conversion and catches wrong types
    if info.numpy_dtype.kind == "f":
        return narrow_floats(_float64_array(values, types, label), info, label)
    return narrow_ints(_int64_array(values, types, info, label), info, label)


def _float64_array(values: list[Any], types: set[type], label: str) -> Array:
    if str in types:  # proto3 JSON writes non-finite floats as "NaN", "Infinity", "-Infinity"
        values = [_special_float(v, label) if type(v) is str else v for v in values]
        types = types - {str} | {float}
    _refuse_types(types - {int, float}, label)
    return np.fromiter(values, np.float64, count=len(values))


def _special_float(text: str, label: str) -> float:
    value = _SPECIAL_FLOATS.get(text)
    if value is None:
        raise InvalidInput(f"{label}: expected a number, found the string '{shown(text, 40)}'")
    return value


def _int64_array(values: list[Any], types: set[type], info: DTypeInfo, label: str) -> Array:
    _refuse_types(types - ({int, float, str} if info is _INT64 else {int, float}), label)
    if float in types:  # integral floats such as 3.0 are integers in proto3 JSON
        values = [_integral(v, label) if type(v) is float else v for v in values]
    try:
        return np.fromiter(values, np.int64, count=len(values))  # int64 strings are read by int() here
    except (ValueError, OverflowError):
        raise InvalidInput(_bad_integer_message(values, info, label)) from None


def _integral(value: float, label: str) -> int:
    if not value.is_integer():
        raise InvalidInput(f"{label}: {value} is not an integer")
    return int(value)


def _bad_integer_message(values: list[Any], info: DTypeInfo, label: str) -> str:
    """Why `np.fromiter` refused the values: a string that is no integer, or one beyond int64."""
    for value in values:
        try:
            number = int(value)
        except ValueError:
            return f"{label}: expected a number, found the string '{shown(value, 40)}'"
        if not -(2**63) <= number < 2**63:
            return f"{label}: {shown(value, 40)} is out of range for {info.grps_name}"
    return f"{label}: values are not integers"


def _refuse_types(odd_types: set[type], label: str) -> None:
    if odd_types:
        raise InvalidInput(f"{label}: expected a number, found {_json_kind(odd_types)}")


def _json_kind(types: set[type]) -> str:
    return _JSON_KINDS.get(min(types, key=lambda t: t.__name__), "a value of the wrong type")


def _decode_ndarray(value: Any, limits: LimitsSettings) -> Payload:
    """A nested array of numbers (or one number) -> one unnamed DT_FLOAT32 tensor of that shape.

    Not `np.array(value)`: on a stray string it would allocate that string's width for every element.
    """
    values: list[Any] = [value]
    shape: list[int] = []
    if isinstance(value, list):
        try:
            values, shape, _ = flatten(value, "ndarray")
        except InvalidInput:
            raise InvalidInput(
                "ndarray is ragged: rows at the same depth must have the same length"
            ) from None
    ElementBudget(limits).take(len(values), "ndarray")
    return Payload.of_tensors(
        [Tensor("", reshape(_decode_numbers(values, _FLOAT32, "ndarray"), shape, "ndarray"))]
    )


def _decode_gmap(value: Any, limits: LimitsSettings) -> Payload:
    """All six maps are present in the result (empty when absent), as grps_pb gives them."""
    gmap: GenericMap = {name: {} for name in GMAP_FIELDS}
    for name, entries in _known_fields(value, _GMAP_NAMES, "gmap").items():
        decode_value = _GMAP_VALUE_DECODERS[name]
        items = expect_object(entries, f"gmap.{name}").items()
        gmap[name] = {key: decode_value(item, f"gmap.{name}['{shown(key, 40)}']") for key, item in items}
        if name in _GMAP_STRING_MAPS:
            check_strings(list(gmap[name].values()), f"gmap.{name}", limits)
    return Payload.of_map(gmap)


def _scalar_decoder(info: DTypeInfo) -> Callable[[Any, str], Any]:
    """Map values go through the tensor checks as one-element arrays (same types, ranges, messages)."""
    return lambda value, where: _decode_numbers([value], info, where).item()


_GMAP_VALUE_DECODERS: dict[str, Callable[[Any, str], Any]] = {
    "s_s": expect_str,
    "s_b": _decode_base64,
    "s_i32": _scalar_decoder(_INT32),
    "s_i64": _scalar_decoder(_INT64),
    "s_f": _scalar_decoder(_FLOAT32),
    "s_d": _scalar_decoder(_FLOAT64),
}
_GMAP_STRING_MAPS = ("s_s", "s_b")
_DATA_DECODERS: dict[str, Callable[[Any, LimitsSettings], Payload]] = {
    "bin_data": _decode_bin_data,
    "str_data": _decode_str_data,
    "gtensors": _decode_gtensors,
    "ndarray": _decode_ndarray,
    "gmap": _decode_gmap,
}


# --- encoding ----------------------------------------------------------------------------------


def encode_response(
    payload: Payload,
    status_code: int = 200,
    status_msg: str = "OK",
    ok: bool = True,
    *,
    return_ndarray: bool = False,
) -> bytes:
    """The JSON answer: the status envelope plus the payload's data field.

    `return_ndarray` answers a single numeric tensor as `"ndarray": nested numbers` (int64 as numbers);
    anything else stays `gtensors`. A MESSAGE payload is read through `GrpsMessageBridge` first.
    """
    document: dict[str, Any] = {"status": _status_object(status_code, status_msg, ok)}
    document.update(_data_fields(payload, return_ndarray))
    return orjson.dumps(document, option=_NUMPY)


def encode_status(code: int, msg: str, ok: bool) -> bytes:
    """An answer with only the status envelope (health checks, errors)."""
    return orjson.dumps({"status": _status_object(code, msg, ok)})


def _status_object(code: int, msg: str, ok: bool) -> dict[str, Any]:
    status: dict[str, Any] = {}
    if code:  # proto3 JSON leaves out default values
        status["code"] = code
    if msg:
        status["msg"] = msg
    status["status"] = "SUCCESS" if ok else "FAILURE"
    return status


def _data_fields(payload: Payload, return_ndarray: bool) -> dict[str, Any]:
    kind = payload.kind
    if kind is PayloadKind.EMPTY:
        return {}
    if kind is PayloadKind.TEXT:
        return {"str_data": payload.value}
    if kind is PayloadKind.BYTES:
        return {"bin_data": base64.b64encode(payload.value).decode("ascii")}
    if kind is PayloadKind.MAP:
        return {"gmap": _gmap_object(payload.value)}
    if kind is PayloadKind.TENSORS:
        return _tensor_fields(payload.value, return_ndarray)
    return _data_fields(_BRIDGE.from_message(payload.value), return_ndarray)


def _tensor_fields(tensors: list[Tensor], return_ndarray: bool) -> dict[str, Any]:
    if return_ndarray and len(tensors) == 1:
        info, array = dtype_for_array(tensors[0].array)
        if info is not _STRING:
            return {"ndarray": _ndarray_value(array)}
    objects = [_tensor_object(tensor) for tensor in tensors]
    return {"gtensors": {"tensors": objects} if objects else {}}


def _tensor_object(tensor: Tensor) -> dict[str, Any]:
    """One GenericTensor as json_format writes it: empty name, shape and data are left out."""
    info, array = dtype_for_array(tensor.array)
    obj: dict[str, Any] = {"name": tensor.name} if tensor.name else {}
    obj["dtype"] = info.grps_name
    if array.ndim:
        obj["shape"] = list(array.shape)
    if array.size:
        obj[info.flat_field] = _FLAT_ENCODERS[info.grps_name](array.ravel())
    return obj


def _int64_strings(flat: Array) -> orjson.Fragment:
    """proto3 JSON writes int64 as strings: quote orjson's digits (they never contain commas)."""
    digits = orjson.dumps(flat, option=_NUMPY)
    return orjson.Fragment(b'["' + digits[1:-1].replace(b",", b'","') + b'"]')


def _float_values(array: Array) -> Array | orjson.Fragment:
    """Floats (C-contiguous, any ndim >= 1) as json_format writes them.

    orjson's numpy output is right for almost every value; the exceptions are NaN/Infinity (strings in
    proto3 JSON) and, for float32, a few values where json_format picks other digits.
    """
    if array.dtype == np.float64:
        exceptions = np.flatnonzero(~np.isfinite(array))
        to_json: Callable[[float], float | str] = _float_json
    else:
        array = array.astype(np.float32, copy=False)  # float16 travels as float32, as in the proto
        exceptions = _float32_exceptions(array.reshape(-1))
        to_json = _float32_json
    return _patched_json(array, exceptions, to_json) if exceptions.size else array


def _patched_json(array: Array, indices: Array, to_json: Callable[[float], float | str]) -> orjson.Fragment:
    """orjson's text of the array with the elements at `indices` (flat, C order) written by `to_json`.

    They are set to NaN first, which orjson writes as `null` (and no number contains "null"), so the
    k-th `null` in the text is the k-th index: a split and a join, no per-element Python work.
    """
    marked = array.copy()
    marked.reshape(-1)[indices] = np.nan
    text = orjson.dumps(marked, option=_NUMPY)
    distinct, inverse = np.unique(array.reshape(-1)[indices], return_inverse=True)
    texts = [orjson.dumps(to_json(value)) for value in distinct.tolist()]
    if len(texts) == 1:  # e.g. only NaN
        return orjson.Fragment(text.replace(b"null", texts[0]))
    pieces = text.split(b"null")
    joined = [b""] * (2 * len(pieces) - 1)
    joined[::2] = pieces
    joined[1::2] = [texts[i] for i in inverse.tolist()]
    return orjson.Fragment(b"".join(joined))


SMALL_ARRAY = 48  # up to this many elements, per-element Python is cheaper than numpy's per-call cost


def _float32_exceptions(flat: Array) -> Array:
    """Indices of float32 values orjson writes unlike json_format: NaN/Infinity, subnormals (json_format
    uses at least 6 digits), and the powers of two in a table computed once.

    Both digit strings read back to the same float32, but as float64 they differ, so clients see it.
    """
    if flat.size <= SMALL_ARRAY:
        return _float32_exceptions_few(flat)
    magnitude = flat.view(np.uint32) & np.uint32(0x7FFFFFFF)
    exponent = magnitude >> np.uint32(23)
    # Cheap first cut: non-finite (exponent 255), zero or subnormal (exponent 0), powers of two.
    candidates = np.flatnonzero(
        (exponent == 0) | (exponent == 255) | ((magnitude & np.uint32(0x7FFFFF)) == 0)
    )
    exp, mag = exponent[candidates], magnitude[candidates]
    odd: Array = (exp == 255) | ((exp == 0) & (mag != 0)) | _power_of_two_mismatch_table()[exp]
    return candidates[odd]


def _float32_exceptions_few(flat: Array) -> Array:
    """`_float32_exceptions` for a few values: a loop over Python ints beats a dozen numpy calls."""
    table = _power_of_two_mismatch_list()
    odd = []
    for index, bits in enumerate(flat.view(np.uint32).tolist()):
        magnitude = bits & 0x7FFFFFFF
        exponent = magnitude >> 23
        if exponent == 255 or (exponent == 0 and magnitude) or (not magnitude & 0x7FFFFF and table[exponent]):
            odd.append(index)
    return np.array(odd, dtype=np.intp)


@functools.cache
def _power_of_two_mismatch_list() -> list[bool]:
    return [bool(flag) for flag in _power_of_two_mismatch_table()]


@functools.cache
def _power_of_two_mismatch_table() -> Array:
    """For each float32 exponent: does orjson write that power of two differently from json_format?"""
    exponents = np.arange(1, 255, dtype=np.uint32)
    powers = (exponents << np.uint32(23)).view(np.float32)
    written = orjson.loads(orjson.dumps(powers, option=_NUMPY))
    table = np.zeros(256, dtype=bool)
    table[1:255] = [shortest_float32(p) != w for p, w in zip(powers.tolist(), written, strict=True)]
    return table


def shortest_float32(value: float) -> float:
    """json_format's float32 digits: the fewest (6 to 9) significant digits that read back the same."""
    target = np.float32(value)
    value = float(target)
    if not math.isfinite(value):
        return value
    for precision in range(6, 9):
        candidate = float(f"{value:.{precision}g}")
        if np.float32(candidate) == target:
            return candidate
    return float(f"{value:.9g}")


def _float_json(value: float) -> float | str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return value


def _ndarray_value(array: Array) -> Any:
    """The `ndarray` answer: nested numbers (int64 too: this is not proto3 JSON); NaN/Infinity as strings."""
    if array.ndim == 0:  # orjson writes no 0-d arrays: write it as [x] and drop the brackets
        return orjson.Fragment(orjson.dumps(_ndarray_value(array.reshape(1)), option=_NUMPY)[1:-1])
    array = np.ascontiguousarray(array)  # orjson serializes C-contiguous arrays only
    return _float_values(array) if array.dtype.kind == "f" else array


def _gmap_object(gmap: GenericMap) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for name, entries in gmap.items():
        encode_value = _GMAP_VALUE_ENCODERS.get(name)
        if encode_value is None:
            raise ValueError(f"gmap has no map '{name}'; expected one of {', '.join(GMAP_FIELDS)}")
        if entries:
            obj[name] = {key: encode_value(value) for key, value in entries.items()}
    return obj


def _checked_int(value: int, bits: int) -> int:
    """Map ints are range-checked as protobuf would when building the message (a server-side error)."""
    if not -(2 ** (bits - 1)) <= value < 2 ** (bits - 1):
        raise ValueError(f"gmap value {value} is out of range for int{bits}")
    return int(value)


def _float32_json(value: float) -> float | str:
    with np.errstate(over="ignore"):  # like protobuf, a too-large float32 becomes Infinity
        return _float_json(shortest_float32(float(np.float32(value))))


_GMAP_VALUE_ENCODERS: dict[str, Callable[[Any], Any]] = {
    "s_s": str,
    "s_b": lambda value: base64.b64encode(value).decode("ascii"),
    "s_i32": lambda value: _checked_int(value, 32),
    "s_i64": lambda value: str(_checked_int(value, 64)),
    "s_f": _float32_json,
    "s_d": lambda value: _float_json(float(value)),
}
_FLAT_ENCODERS: dict[str, Callable[[Array], Any]] = {
    "DT_UINT8": lambda flat: flat,
    "DT_INT8": lambda flat: flat,
    "DT_INT16": lambda flat: flat,
    "DT_INT32": lambda flat: flat,
    "DT_INT64": _int64_strings,
    "DT_FLOAT16": _float_values,
    "DT_FLOAT32": _float_values,
    "DT_FLOAT64": _float_values,
    "DT_STRING": string_values,
}
_BRIDGE = GrpsMessageBridge()

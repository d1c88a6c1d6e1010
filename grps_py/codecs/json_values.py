"""JSON values for the HTTP codecs: shape checks on parsed JSON, and OIP tensor data <-> numpy arrays.

Reading is strict, and every client mistake is an `InvalidInput` whose message names where it is.
JSON tensor data is checked against its datatype without a Python loop per element: one C-level pass
collects the element types (which also catches booleans that `np.array` would quietly turn into 1 and
0), `min`/`max` range-check integers, and numpy converts in bulk. Integers never pass through floats,
so INT64 and UINT64 are exact over their full range. `np.array` is never called on untyped client
data, since a stray long string would make it allocate a `U` array of that width for every element.

Writing gives numbers with the shortest digits that read back to the same value in the tensor's own
precision (orjson does this for FP32 and FP64; FP16 uses a table of numpy's shortest digits), and
64-bit integers as exact JSON integers.
"""

from __future__ import annotations

import functools
from itertools import chain
from typing import Any

import numpy as np
import orjson

from grps_py.codecs.limits import DEFAULT_LIMITS, MAX_DIM, ElementBudget, check_json_depth, check_strings
from grps_py.codecs.oip_binary import reshape
from grps_py.core.datatypes import BF16, BYTES, OIP_DTYPES, datatype_of
from grps_py.core.errors import InvalidInput, ModelError
from grps_py.core.protection import LimitsSettings
from grps_py.core.types import Tensor
from grps_py.core.untrusted import shown

Array = np.ndarray[Any, Any]
_NUMPY = orjson.OPT_SERIALIZE_NUMPY
_PARAMETER_TYPES = (str, int, float, bool)
_INTEGERS = {"UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64"}
_FLOATS = {"FP16", "FP32", "FP64"}


# --- JSON structure ----------------------------------------------------------------------------


def load(
    text: bytes | memoryview, problem: str = "malformed JSON", limits: LimitsSettings = DEFAULT_LIMITS
) -> Any:
    """The parsed document; text that is not JSON, or nests deeper than `limits.json_depth`, is an
    `InvalidInput` (saying `problem: why` for the former)."""
    check_json_depth(text, limits)
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise InvalidInput(f"{problem}: {exc}") from None


def expect_object(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InvalidInput(f"{where} must be a JSON object")
    return value


def expect_list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise InvalidInput(f"{where} must be a JSON array")
    return value


def expect_str(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise InvalidInput(f"{where} must be a string")
    return value


def expect_name(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidInput(f"{where} must be a non-empty string")
    return value


def expect_parameters(value: Any, where: str) -> dict[str, Any]:
    """A `$parameters` object: absent is empty; values are strings, numbers or booleans."""
    if value is None:
        return {}
    params = expect_object(value, where)
    for key, item in params.items():
        if not isinstance(item, _PARAMETER_TYPES):
            raise InvalidInput(f"{where}: '{shown(key, 64)}' must be a string, number or boolean")
    return dict(params)


def show(value: Any) -> str:
    """A client's value, shortened, for an error message."""
    return orjson.dumps(value).decode()[:40]


def input_label(name: str) -> str:
    return f"input '{shown(name, 64)}'"


# --- JSON tensor data -> numpy -----------------------------------------------------------------


def flatten(data: Any, label: str) -> tuple[list[Any], list[int], set[type]]:
    """Nested JSON arrays -> (row-major leaves, nested shape, leaf types), one C-level pass per depth."""
    level = expect_list(data, f"{label}: data")
    shape = [len(level)]
    while level and type(level[0]) is list:
        lengths = set(map(len, level)) if set(map(type, level)) == {list} else set()
        if len(lengths) != 1:
            raise InvalidInput(f"{label}: data is ragged (rows at one depth must have one length)")
        shape.append(lengths.pop())
        level = list(chain.from_iterable(level))
    types = set(map(type, level))
    if list in types:
        raise InvalidInput(f"{label}: data is ragged (rows at one depth must have one length)")
    return level, shape, types


def to_array(
    values: list[Any], types: set[type], datatype: str, label: str, limits: LimitsSettings = DEFAULT_LIMITS
) -> Array:
    """JSON leaves -> a 1-D array of the datatype's exact dtype (bulk conversion; checks first).

    BYTES strings are held to `limits.string_bytes`."""
    if datatype == BF16:
        raise InvalidInput(f"{label}: BF16 is only accepted as binary data")
    if datatype == BYTES:
        refuse(values, types - {str}, f"{label}: BYTES takes strings")
        check_strings(values, label, limits)
        return _strings_to_bytes(values, label)
    if datatype == "BOOL":
        refuse(values, types - {bool}, f"{label}: BOOL takes true/false")
        return np.array(values, dtype=np.bool_)
    if datatype in _INTEGERS:
        refuse(values, types - {int}, f"{label}: {datatype} takes integers")
        return _integers(values, datatype, label)
    refuse(values, types - {int, float}, f"{label}: {datatype} takes numbers")
    return _floats(values, datatype, label)


def refuse(values: list[Any], odd_types: set[type], message: str) -> None:
    """Name the first value of a wrong type (only on the error path does this loop in Python)."""
    if odd_types:
        example = next(value for value in values if type(value) in odd_types)
        hint = ""
        if type(example) is float and example.is_integer() and abs(example) >= 2**63:
            hint = " (integers beyond 64 bits are out of range)"
        raise InvalidInput(f"{message}, found {show(example)}{hint}")


def _strings_to_bytes(values: list[str], label: str) -> Array:
    out = np.empty(len(values), dtype=object)
    try:
        out[:] = list(map(str.encode, values))
    except UnicodeEncodeError:
        raise InvalidInput(f"{label}: a string is not valid Unicode") from None
    return out


def _integers(values: list[int], datatype: str, label: str) -> Array:
    """Python ints -> int64 (exact; numpy refuses any beyond it), then a vectorised range check."""
    try:
        wide = np.array(values, dtype=np.int64)
    except OverflowError:
        return _beyond_int64(values, datatype, label)
    info = np.iinfo(OIP_DTYPES[datatype])
    low, high = (int(wide.min()), int(wide.max())) if wide.size else (0, 0)
    if low < info.min or high > info.max:
        raise InvalidInput(f"{label}: {low if low < info.min else high} is out of range for {datatype}")
    return wide.astype(info.dtype, copy=False)


def _beyond_int64(values: list[int], datatype: str, label: str) -> Array:
    """Values past int64 fit only UINT64, and only when none is negative; checked as Python ints."""
    low, high = min(values), max(values)
    if datatype != "UINT64" or low < 0 or high >= 2**64:
        extreme = low if low < np.iinfo(OIP_DTYPES[datatype]).min else high
        raise InvalidInput(f"{label}: {extreme} is out of range for {datatype}")
    return np.array(values, dtype=np.uint64)


def _floats(values: list[int | float], datatype: str, label: str) -> Array:
    dtype = OIP_DTYPES[datatype]
    largest = _FLOAT_MAX.get(datatype)
    if largest is not None and values and -largest <= min(values) and max(values) <= largest:
        return np.array(values, dtype=dtype)  # every value fits: no overflow to look for
    try:
        wide = np.array(values, dtype=np.float64)
    except OverflowError:
        raise InvalidInput(f"{label}: an integer is out of range for {datatype}") from None
    if dtype == wide.dtype:
        return wide
    with np.errstate(over="ignore"):
        narrow = wide.astype(dtype)
    overflow = ~np.isfinite(narrow)
    if overflow.any():
        raise InvalidInput(f"{label}: {show(float(wide[overflow][0]))} is out of range for {datatype}")
    return narrow


# The largest finite value of each narrow float type. Values within it convert without overflow; a
# value that rounds up to the limit only rounds, since the limit itself is representable.
_FLOAT_MAX = {"FP16": float(np.finfo(np.float16).max), "FP32": float(np.finfo(np.float32).max)}


def json_tensor(
    data: Any, datatype: str, shape: list[int], label: str, budget: ElementBudget, limits: LimitsSettings
) -> Array:
    """A tensor from JSON `data` (nested or flat) whose element count must fit `shape`.

    The shape's element count is taken from the request's `budget` before the data is read."""
    count = budget.take_shape(shape, label)
    values, _, types = flatten(data, label)
    if len(values) != count:
        raise InvalidInput(f"{label}: {len(values)} values do not fit shape {shape}")
    return reshape(to_array(values, types, datatype, label, limits), shape, label)


def expect_shape(value: Any, label: str) -> list[int]:
    """An OIP shape: a list of integers from 0 to 2**63 - 1 (dims are int64 in the protocol)."""
    if not isinstance(value, list) or not all(type(dim) is int and 0 <= dim <= MAX_DIM for dim in value):
        raise InvalidInput(f"{label}: shape must be a list of non-negative integers (below 2**63)")
    return value


# --- numpy -> JSON -----------------------------------------------------------------------------


def output_array(tensor: Tensor) -> tuple[Array, str]:
    """The output as a native-byte-order numpy array, and its OIP datatype."""
    array = tensor.array
    datatype = datatype_of(array.dtype)
    if datatype is None:
        raise ModelError(f"output '{tensor.name}': numpy dtype {array.dtype} has no OIP datatype")
    if not array.dtype.isnative:
        array = array.astype(array.dtype.newbyteorder("="))
    return array, datatype


def json_data(array: Array, datatype: str) -> Any:
    """Flat row-major JSON data, or None where JSON cannot carry the values exactly."""
    flat = np.ascontiguousarray(array).reshape(-1)
    if datatype == BF16:
        return None
    if datatype == BYTES:
        return _utf8_strings(flat)
    if datatype in _FLOATS and not np.isfinite(flat).all():
        return None
    return shortest_float16(flat) if datatype == "FP16" else flat


def _utf8_strings(flat: Array) -> list[str] | None:
    try:
        return [value.decode() if isinstance(value, bytes) else str(value) for value in flat.tolist()]
    except UnicodeDecodeError:
        return None


@functools.cache
def _float16_table() -> Array:
    """For each float16 bit pattern, the float64 of numpy's shortest digits for it (built once)."""
    every = np.arange(2**16, dtype=np.uint16).view(np.float16)
    return np.array([float(str(value)) for value in every])


def shortest_float16(flat: Array) -> Array:
    """float16 values as float64 numbers whose shortest digits are float16's (0.1, not 0.099975586)."""
    return _float16_table()[flat.view(np.uint16)]


def dumps(document: dict[str, Any]) -> bytes:
    """A response document as JSON (numpy arrays natively); what JSON cannot hold is a `ModelError`."""
    try:
        return orjson.dumps(document, option=_NUMPY)
    except orjson.JSONEncodeError as exc:
        raise ModelError(f"the response cannot be written as JSON: {exc}") from None

"""The Open Inference Protocol over HTTP: JSON requests and responses, Triton's binary tensor extension
(`oip_binary`), and Triton's `generate` extension.

Decoding is strict, and every client mistake is an `InvalidInput` whose message names the tensor.
JSON tensor data is checked against its datatype without a Python loop per element: one C-level pass
collects the element types (which also catches booleans that `np.array` would quietly turn into 1 and
0), `min`/`max` range-check integers, and numpy converts in bulk. Integers never pass through floats,
so INT64 and UINT64 are exact over their full range. `np.array` is never called on untyped client
data, since a stray long string would make it allocate a `U` array of that width for every element.

Encoding writes numbers with the shortest digits that read back to the same value in the tensor's own
precision (orjson does this for FP32 and FP64; FP16 uses a table of numpy's shortest digits), and
64-bit integers as exact JSON integers.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Any

import numpy as np
import orjson

from grps_py.codecs.oip_binary import reshape, split_body, tensor_from_bytes, tensor_to_bytes
from grps_py.core.datatypes import BF16, BYTES, DATATYPE_NAMES, OIP_DTYPES, datatype_of
from grps_py.core.errors import InvalidInput, ModelError
from grps_py.core.oip import (
    BINARY_DATA,
    BINARY_DATA_OUTPUT,
    BINARY_DATA_SIZE,
    OipRequest,
    OipResponse,
    RequestedOutput,
)
from grps_py.core.types import Tensor

__all__ = ["decode_generate", "decode_request", "encode_error", "encode_generate", "encode_response"]

Array = np.ndarray[Any, Any]
GenerateSpecs = Mapping[str, tuple[str | None, tuple[int, ...] | None]]
_NUMPY = orjson.OPT_SERIALIZE_NUMPY
_PARAMETER_TYPES = (str, int, float, bool)
_INTEGERS = {"UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64"}
_FLOATS = {"FP16", "FP32", "FP64"}
_GENERATE_KEYS = ("parameters", "id")


# --- JSON structure ----------------------------------------------------------------------------


def _load(text: bytes | memoryview) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise InvalidInput(f"malformed JSON: {exc}") from None


def _object(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InvalidInput(f"{where} must be a JSON object")
    return value


def _list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise InvalidInput(f"{where} must be a JSON array")
    return value


def _string(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise InvalidInput(f"{where} must be a string")
    return value


def _name(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidInput(f"{where} must be a non-empty string")
    return value


def _parameters(value: Any, where: str) -> dict[str, Any]:
    """A `$parameters` object: absent is empty; values are strings, numbers or booleans."""
    if value is None:
        return {}
    params = _object(value, where)
    for key, item in params.items():
        if not isinstance(item, _PARAMETER_TYPES):
            raise InvalidInput(f"{where}: '{key[:64]}' must be a string, number or boolean")
    return dict(params)


def _show(value: Any) -> str:
    """A client's value, shortened, for an error message."""
    return orjson.dumps(value).decode()[:40]


def _label(name: str) -> str:
    return f"input '{name[:64]}'"


# --- JSON tensor data -> numpy -----------------------------------------------------------------


def _flatten(data: Any, label: str) -> tuple[list[Any], list[int], set[type]]:
    """Nested JSON arrays -> (row-major leaves, nested shape, leaf types), one C-level pass per depth."""
    level = _list(data, f"{label}: data")
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


def _to_array(values: list[Any], types: set[type], datatype: str, label: str) -> Array:
    """JSON leaves -> a 1-D array of the datatype's exact dtype (bulk conversion; checks first)."""
    if datatype == BF16:
        raise InvalidInput(f"{label}: BF16 is only accepted as binary data")
    if datatype == BYTES:
        _refuse(values, types - {str}, f"{label}: BYTES takes strings")
        return _strings_to_bytes(values, label)
    if datatype == "BOOL":
        _refuse(values, types - {bool}, f"{label}: BOOL takes true/false")
        return np.array(values, dtype=np.bool_)
    if datatype in _INTEGERS:
        _refuse(values, types - {int}, f"{label}: {datatype} takes integers")
        return _integers(values, datatype, label)
    _refuse(values, types - {int, float}, f"{label}: {datatype} takes numbers")
    return _floats(values, datatype, label)


def _refuse(values: list[Any], odd_types: set[type], message: str) -> None:
    """Name the first value of a wrong type (only on the error path does this loop in Python)."""
    if odd_types:
        example = next(value for value in values if type(value) in odd_types)
        hint = ""
        if type(example) is float and example.is_integer() and abs(example) >= 2**63:
            hint = " (integers beyond 64 bits are out of range)"
        raise InvalidInput(f"{message}, found {_show(example)}{hint}")


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
        raise InvalidInput(f"{label}: {_show(float(wide[overflow][0]))} is out of range for {datatype}")
    return narrow


def _json_tensor(data: Any, datatype: str, shape: list[int], label: str) -> Array:
    values, _, types = _flatten(data, label)
    count = math.prod(shape)
    if len(values) != count:
        raise InvalidInput(f"{label}: {len(values)} values do not fit shape {shape}")
    return reshape(_to_array(values, types, datatype, label), shape, label)


# --- requests ----------------------------------------------------------------------------------


@dataclass
class _InputHeader:
    """One entry of `inputs`, checked; its values are in `data` or (`binary_size`) in the binary part."""

    name: str
    datatype: str
    shape: list[int]
    data: Any
    binary_size: int | None


def decode_request(body: bytes, header_length: str | None = None) -> OipRequest:
    """An inference request; `header_length` is the `Inference-Header-Content-Length` header, if any.

    Binary inputs are `np.frombuffer` views of `body` (read-only when it is `bytes`).
    """
    header, binary = split_body(body, header_length)
    document = _object(_load(header), "the request")
    parameters = _parameters(document.get("parameters"), "parameters")
    if type(parameters.get(BINARY_DATA_OUTPUT, False)) is not bool:
        raise InvalidInput(f"parameter '{BINARY_DATA_OUTPUT}' must be true or false")
    items = document.get("outputs", [])
    outputs = [_requested_output(item, index) for index, item in enumerate(_list(items, "outputs"))]
    if len({output.name for output in outputs}) != len(outputs):
        raise InvalidInput("an output is requested twice")
    headers = [
        _input_header(item, index) for index, item in enumerate(_list(document.get("inputs"), "inputs"))
    ]
    if len({h.name for h in headers}) != len(headers):
        raise InvalidInput("two inputs have the same name")
    request_id = _string(document.get("id", ""), "id")
    return OipRequest(_decode_inputs(headers, binary), outputs, request_id, parameters)


def _requested_output(item: Any, index: int) -> RequestedOutput:
    fields = _object(item, f"outputs[{index}]")
    name = _name(fields.get("name"), f"outputs[{index}].name")
    parameters = _parameters(fields.get("parameters"), f"output '{name[:64]}' parameters")
    binary = parameters.pop(BINARY_DATA, None)
    if binary is not None and type(binary) is not bool:
        raise InvalidInput(f"output '{name[:64]}': '{BINARY_DATA}' must be true or false")
    return RequestedOutput(name, binary, parameters)


def _input_header(item: Any, index: int) -> _InputHeader:
    fields = _object(item, f"inputs[{index}]")
    name = _name(fields.get("name"), f"inputs[{index}].name")
    label = _label(name)
    datatype = fields.get("datatype")
    if not isinstance(datatype, str) or datatype not in OIP_DTYPES:
        raise InvalidInput(
            f"{label}: unknown datatype {_show(datatype)}; use one of {', '.join(DATATYPE_NAMES)}"
        )
    shape = fields.get("shape")
    if not isinstance(shape, list) or not all(type(dim) is int and dim >= 0 for dim in shape):
        raise InvalidInput(f"{label}: shape must be a list of non-negative integers")
    parameters = _parameters(fields.get("parameters"), f"{label} parameters")
    if "shared_memory_region" in parameters:
        raise InvalidInput(f"{label}: shared memory is not supported")
    size = parameters.get(BINARY_DATA_SIZE)
    if size is not None and (type(size) is not int or size < 0):
        raise InvalidInput(f"{label}: '{BINARY_DATA_SIZE}' must be a non-negative integer")
    if (size is None) == ("data" not in fields):
        raise InvalidInput(f"{label}: give either data or parameters.{BINARY_DATA_SIZE}")
    return _InputHeader(name, datatype, shape, fields.get("data"), size)


def _decode_inputs(headers: list[_InputHeader], binary: memoryview) -> list[Tensor]:
    """Tensors in input order; binary inputs take consecutive slices that must use up the binary part."""
    tensors, offset = [], 0
    for header in headers:
        label = _label(header.name)
        if header.binary_size is None:
            array = _json_tensor(header.data, header.datatype, header.shape, label)
        else:
            end = offset + header.binary_size
            if end > len(binary):
                raise InvalidInput(
                    f"{label}: {BINARY_DATA_SIZE} {header.binary_size} runs past the end of the binary "
                    f"data ({len(binary) - offset} bytes left; is Inference-Header-Content-Length set?)"
                )
            array = tensor_from_bytes(binary[offset:end], header.datatype, header.shape, label)
            offset = end
        tensors.append(Tensor(header.name, array))
    if offset != len(binary):
        raise InvalidInput(f"the body has {len(binary) - offset} bytes of binary data that no input claims")
    return tensors


# --- responses ---------------------------------------------------------------------------------


def encode_response(response: OipResponse, binary_outputs: set[str]) -> tuple[bytes, int | None]:
    """The response body, and the JSON header's length when binary data follows it (else None).

    Outputs named in `binary_outputs` are sent binary. So is any output JSON cannot carry exactly,
    even when not asked for: BF16, floats holding NaN or infinity, and BYTES elements that are not
    UTF-8. A client must therefore be ready for binary outputs (tritonclient is). An output whose
    numpy dtype has no OIP datatype is the model's fault: `ModelError`.
    """
    entries: list[dict[str, Any]] = []
    chunks: list[bytes | memoryview] = []
    for tensor in response.outputs:
        array, datatype = _output_array(tensor)
        entry: dict[str, Any] = {"name": tensor.name, "datatype": datatype, "shape": list(array.shape)}
        data = None if tensor.name in binary_outputs else _json_data(array, datatype)
        if data is None:
            chunks.append(tensor_to_bytes(array, datatype))
            entry["parameters"] = {BINARY_DATA_SIZE: len(chunks[-1])}
        else:
            entry["data"] = data
        entries.append(entry)
    document = _response_head(response.model_name, response.model_version, response.id)
    if response.parameters:
        document["parameters"] = response.parameters
    document["outputs"] = entries
    header = _dumps(document)
    if not chunks:
        return header, None
    return b"".join([header, *chunks]), len(header)


def encode_error(message: str) -> bytes:
    """The OIP error body."""
    return orjson.dumps({"error": message})


def _response_head(model_name: str, model_version: str, request_id: str) -> dict[str, Any]:
    head = {"model_name": model_name, "model_version": model_version}
    if request_id:
        head["id"] = request_id
    return head


def _dumps(document: dict[str, Any]) -> bytes:
    try:
        return orjson.dumps(document, option=_NUMPY)
    except orjson.JSONEncodeError as exc:
        raise ModelError(f"the response cannot be written as JSON: {exc}") from None


def _output_array(tensor: Tensor) -> tuple[Array, str]:
    """The output as a native-byte-order numpy array, and its OIP datatype."""
    array = tensor.array
    datatype = datatype_of(array.dtype)
    if datatype is None:
        raise ModelError(f"output '{tensor.name}': numpy dtype {array.dtype} has no OIP datatype")
    if not array.dtype.isnative:
        array = array.astype(array.dtype.newbyteorder("="))
    return array, datatype


def _json_data(array: Array, datatype: str) -> Any:
    """Flat row-major JSON data, or None where JSON cannot carry the values exactly."""
    flat = np.ascontiguousarray(array).reshape(-1)
    if datatype == BF16:
        return None
    if datatype == BYTES:
        return _utf8_strings(flat)
    if datatype in _FLOATS and not np.isfinite(flat).all():
        return None
    return _shortest_float16(flat) if datatype == "FP16" else flat


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


def _shortest_float16(flat: Array) -> Array:
    """float16 values as float64 numbers whose shortest digits are float16's (0.1, not 0.099975586)."""
    return _float16_table()[flat.view(np.uint16)]


# --- the generate extension --------------------------------------------------------------------


def decode_generate(body: bytes, specs: GenerateSpecs) -> tuple[list[Tensor], dict[str, Any], str]:
    """A Triton `generate` request: (input tensors, parameters, id).

    Every key other than `parameters` and `id` is an input. `specs` maps an input name to its
    declared (datatype, shape), either part None when unknown; shapes include any batch dimension and
    use -1 for a variable one. Without a declared datatype it is inferred: str BYTES, bool BOOL, int
    INT64, float (or int and float mixed) FP64; an empty array is FP64.
    """
    document = _object(_load(body), "the request")
    parameters = _parameters(document.get("parameters"), "parameters")
    request_id = _string(document.get("id", ""), "id")
    inputs = [
        _generate_input(name, value, *specs.get(name, (None, None)))
        for name, value in document.items()
        if name not in _GENERATE_KEYS
    ]
    return inputs, parameters, request_id


def _generate_input(name: str, value: Any, datatype: str | None, declared: Sequence[int] | None) -> Tensor:
    label = _label(name)
    if isinstance(value, list):
        values, shape, types = _flatten(value, label)
    else:
        values, shape, types = [value], [1], {type(value)}
    datatype = datatype or _infer_datatype(values, types, label)
    if datatype not in OIP_DTYPES:
        raise InvalidInput(f"{label}: the model declares an unknown datatype {datatype!r}")
    if declared is not None:
        shape = _fit_declared(shape, list(declared), not isinstance(value, list), label)
    return Tensor(name, reshape(_to_array(values, types, datatype, label), shape, label))


def _infer_datatype(values: list[Any], types: set[type], label: str) -> str:
    if types <= {int, float}:  # an empty array too
        return "INT64" if types == {int} else "FP64"
    if types == {str}:
        return BYTES
    if types == {bool}:
        return "BOOL"
    _refuse(values, types - {str, bool, int, float}, f"{label}: values must be strings, booleans or numbers")
    raise InvalidInput(f"{label}: values mix strings, booleans and numbers")


def _fit_declared(shape: list[int], declared: list[int], scalar: bool, label: str) -> list[int]:
    """The value's shape against the model's: missing leading dims become 1; -1 matches any size."""
    if scalar and not declared:
        return []
    if len(declared) > len(shape):
        shape = [1] * (len(declared) - len(shape)) + shape
    if len(declared) != len(shape) or any(
        0 <= want != got for want, got in zip(declared, shape, strict=True)
    ):
        raise InvalidInput(f"{label}: shape {shape} does not match the model's {declared}")
    return shape


def encode_generate(response: OipResponse) -> bytes:
    """A `generate` answer: model name, version, id (when set) and each output by name.

    A one-element output is a scalar, anything else a nested list. BYTES become strings (bytes that
    are not UTF-8 are replaced with U+FFFD); NaN and infinity, which JSON cannot write, become null.
    """
    document = _response_head(response.model_name, response.model_version, response.id)
    for tensor in response.outputs:
        array, datatype = _output_array(tensor)
        document[tensor.name] = _generate_value(np.ascontiguousarray(array), datatype)
    return _dumps(document)


def _generate_value(array: Array, datatype: str) -> Any:
    if datatype == BYTES:
        strings = np.empty(array.shape, dtype=object)
        strings.reshape(-1)[:] = [
            value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
            for value in array.reshape(-1).tolist()
        ]
        return strings.reshape(-1)[0] if array.size == 1 else strings.tolist()
    if datatype == BF16:
        array = array.astype(np.float32)  # exact; orjson has no bfloat16
    elif datatype == "FP16":
        array = _shortest_float16(array.reshape(-1)).reshape(array.shape)
    return array.reshape(-1)[0] if array.size == 1 else array

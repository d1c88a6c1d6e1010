"""Triton's `generate` extension of the OIP HTTP API: named JSON values in, named JSON values out.

Values are read and checked by `json_values`, as the `/v2` infer request's JSON data is; every client
mistake is an `InvalidInput` whose message names the input.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from grps_py.codecs.json_values import (
    dumps,
    expect_object,
    expect_parameters,
    expect_str,
    flatten,
    input_label,
    load,
    output_array,
    refuse,
    shortest_float16,
    to_array,
)
from grps_py.codecs.limits import DEFAULT_LIMITS, ElementBudget, check_tensors, for_body
from grps_py.codecs.oip_binary import reshape
from grps_py.codecs.oip_json import response_head
from grps_py.core.datatypes import BF16, BYTES, OIP_DTYPES
from grps_py.core.errors import InvalidInput
from grps_py.core.oip import OipResponse
from grps_py.core.protection import LimitsSettings
from grps_py.core.types import Tensor

__all__ = ["decode_generate", "encode_generate"]

Array = np.ndarray[Any, Any]
GenerateSpecs = Mapping[str, tuple[str | None, tuple[int, ...] | None]]
_GENERATE_KEYS = ("parameters", "id")


def decode_generate(
    body: bytes, specs: GenerateSpecs, limits: LimitsSettings = DEFAULT_LIMITS
) -> tuple[list[Tensor], dict[str, Any], str]:
    """A Triton `generate` request: (input tensors, parameters, id).

    Every key other than `parameters` and `id` is an input. `specs` maps an input name to its
    declared (datatype, shape), either part None when unknown; shapes include any batch dimension and
    use -1 for a variable one. Without a declared datatype it is inferred: str BYTES, bool BOOL, int
    INT64, float (or int and float mixed) FP64; an empty array is FP64. The request is held to `limits`.
    """
    limits = for_body(limits, len(body))
    document = expect_object(load(body, limits=limits), "the request")
    parameters = expect_parameters(document.get("parameters"), "parameters")
    request_id = expect_str(document.get("id", ""), "id")
    names = [name for name in document if name not in _GENERATE_KEYS]
    check_tensors(len(names), limits, "inputs")
    budget = ElementBudget(limits)
    inputs = [
        _generate_input(name, document[name], *specs.get(name, (None, None)), budget, limits)
        for name in names
    ]
    return inputs, parameters, request_id


def _generate_input(
    name: str,
    value: Any,
    datatype: str | None,
    declared: Sequence[int] | None,
    budget: ElementBudget,
    limits: LimitsSettings,
) -> Tensor:
    label = input_label(name)
    if isinstance(value, list):
        values, shape, types = flatten(value, label)
    else:
        values, shape, types = [value], [1], {type(value)}
    budget.take(len(values), label)
    datatype = datatype or _infer_datatype(values, types, label)
    if datatype not in OIP_DTYPES:
        raise InvalidInput(f"{label}: the model declares an unknown datatype {datatype!r}")
    if declared is not None:
        shape = _fit_declared(shape, list(declared), not isinstance(value, list), label)
    return Tensor(name, reshape(to_array(values, types, datatype, label, limits), shape, label))


def _infer_datatype(values: list[Any], types: set[type], label: str) -> str:
    if types <= {int, float}:  # an empty array too
        return "INT64" if types == {int} else "FP64"
    if types == {str}:
        return BYTES
    if types == {bool}:
        return "BOOL"
    refuse(values, types - {str, bool, int, float}, f"{label}: values must be strings, booleans or numbers")
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
    document = response_head(response.model_name, response.model_version, response.id)
    for tensor in response.outputs:
        array, datatype = output_array(tensor)
        document[tensor.name] = _generate_value(np.ascontiguousarray(array), datatype)
    return dumps(document)


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
        array = shortest_float16(array.reshape(-1)).reshape(array.shape)
    return array.reshape(-1)[0] if array.size == 1 else array

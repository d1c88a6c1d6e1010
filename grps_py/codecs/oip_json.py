"""The Open Inference Protocol over HTTP: JSON requests and responses, with Triton's binary tensor
extension (`oip_binary`). Triton's `generate` extension is `oip_generate`.

Decoding is strict, and every client mistake is an `InvalidInput` whose message names the tensor.
JSON tensor data is read, and written, by `json_values`: checked against its datatype in bulk, and
answered with the shortest digits for the tensor's precision and exact 64-bit integers. An input
whose data is in shared memory (`shared_memory_region`) is decoded as a `SharedInput`, read from its
region by `oip_shared_memory` before the request runs; an output written to shared memory is answered
with its parameters and no data.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from grps_py.codecs.json_values import (
    dumps,
    expect_list,
    expect_name,
    expect_object,
    expect_parameters,
    expect_shape,
    expect_str,
    input_label,
    json_data,
    json_tensor,
    load,
    output_array,
    show,
)
from grps_py.codecs.limits import DEFAULT_LIMITS, ElementBudget, check_tensors, for_body
from grps_py.codecs.oip_binary import split_body, tensor_from_bytes, tensor_to_bytes
from grps_py.core.datatypes import DATATYPE_NAMES, OIP_DTYPES
from grps_py.core.errors import InvalidInput
from grps_py.core.oip import (
    BINARY_DATA,
    BINARY_DATA_OUTPUT,
    BINARY_DATA_SIZE,
    SHARED_MEMORY_REGION,
    OipRequest,
    OipResponse,
    RequestedOutput,
    SharedInput,
    SharedMemoryRef,
    requested_output,
    shared_memory_ref,
)
from grps_py.core.protection import LimitsSettings
from grps_py.core.types import Tensor
from grps_py.core.untrusted import shown

__all__ = [
    "decode_register_request",
    "decode_request",
    "encode_error",
    "encode_response",
    "response_head",
]


# --- requests ----------------------------------------------------------------------------------


@dataclass
class _InputHeader:
    """One entry of `inputs`, checked; its values are in `data`, (`binary_size`) in the binary part, or
    (`shared`) in a shared-memory region."""

    name: str
    datatype: str
    shape: list[int]
    data: Any
    binary_size: int | None
    shared: SharedMemoryRef | None = None


def decode_request(
    body: bytes, header_length: str | None = None, limits: LimitsSettings = DEFAULT_LIMITS
) -> OipRequest:
    """An inference request; `header_length` is the `Inference-Header-Content-Length` header, if any.

    Binary inputs are `np.frombuffer` views of `body` (read-only when it is `bytes`). The request is
    held to `limits` (inputs and requested outputs each count against `limits.tensors`).
    """
    limits = for_body(limits, len(body))
    header, binary = split_body(body, header_length)
    document = expect_object(load(header, limits=limits), "the request")
    parameters = expect_parameters(document.get("parameters"), "parameters")
    if type(parameters.get(BINARY_DATA_OUTPUT, False)) is not bool:
        raise InvalidInput(f"parameter '{BINARY_DATA_OUTPUT}' must be true or false")
    items = expect_list(document.get("outputs", []), "outputs")
    check_tensors(len(items), limits, "requested outputs")
    outputs = [_requested_output(item, index) for index, item in enumerate(items)]
    if len({output.name for output in outputs}) != len(outputs):
        raise InvalidInput("an output is requested twice")
    items = expect_list(document.get("inputs"), "inputs")
    check_tensors(len(items), limits, "inputs")
    headers = [_input_header(item, index) for index, item in enumerate(items)]
    if len({h.name for h in headers}) != len(headers):
        raise InvalidInput("two inputs have the same name")
    request_id = expect_str(document.get("id", ""), "id")
    inputs, shared = _decode_inputs(headers, binary, limits)
    return OipRequest(inputs, outputs, request_id, parameters, shared)


def _requested_output(item: Any, index: int) -> RequestedOutput:
    fields = expect_object(item, f"outputs[{index}]")
    name = expect_name(fields.get("name"), f"outputs[{index}].name")
    parameters = expect_parameters(fields.get("parameters"), f"output '{shown(name, 64)}' parameters")
    binary = parameters.pop(BINARY_DATA, None)
    if binary is not None and type(binary) is not bool:
        raise InvalidInput(f"output '{shown(name, 64)}': '{BINARY_DATA}' must be true or false")
    return requested_output(name, binary, parameters)


def _input_header(item: Any, index: int) -> _InputHeader:
    fields = expect_object(item, f"inputs[{index}]")
    name = expect_name(fields.get("name"), f"inputs[{index}].name")
    label = input_label(name)
    datatype = fields.get("datatype")
    if not isinstance(datatype, str) or datatype not in OIP_DTYPES:
        raise InvalidInput(
            f"{label}: unknown datatype {show(datatype)}; use one of {', '.join(DATATYPE_NAMES)}"
        )
    shape = expect_shape(fields.get("shape"), label)
    parameters = expect_parameters(fields.get("parameters"), f"{label} parameters")
    shared = shared_memory_ref(parameters, label)
    size = parameters.get(BINARY_DATA_SIZE)
    if size is not None and (type(size) is not int or size < 0):
        raise InvalidInput(f"{label}: '{BINARY_DATA_SIZE}' must be a non-negative integer")
    if ("data" in fields) + (size is not None) + (shared is not None) != 1:
        raise InvalidInput(
            f"{label}: give either data or parameters.{BINARY_DATA_SIZE} "
            f"(or parameters.{SHARED_MEMORY_REGION}), exactly one of them"
        )
    return _InputHeader(name, datatype, shape, fields.get("data"), size, shared)


def _decode_inputs(
    headers: list[_InputHeader], binary: memoryview, limits: LimitsSettings
) -> tuple[list[Tensor], list[SharedInput]]:
    """Tensors in input order, but for those in shared memory (their `SharedInput`s say where they go);
    binary inputs take consecutive slices that must use up the binary part."""
    tensors, shared, offset = [], [], 0
    budget = ElementBudget(limits)
    for index, header in enumerate(headers):
        label = input_label(header.name)
        if header.shared is not None:
            budget.take_shape(header.shape, label)
            shared.append(SharedInput(index, header.name, header.datatype, header.shape, header.shared))
            continue
        if header.binary_size is None:
            array = json_tensor(header.data, header.datatype, header.shape, label, budget, limits)
        else:
            budget.take_shape(header.shape, label)
            end = offset + header.binary_size
            if end > len(binary):
                raise InvalidInput(
                    f"{label}: {BINARY_DATA_SIZE} {header.binary_size} runs past the end of the binary "
                    f"data ({len(binary) - offset} bytes left; is Inference-Header-Content-Length set?)"
                )
            array = tensor_from_bytes(binary[offset:end], header.datatype, header.shape, label, limits)
            offset = end
        tensors.append(Tensor(header.name, array))
    if offset != len(binary):
        raise InvalidInput(f"the body has {len(binary) - offset} bytes of binary data that no input claims")
    return tensors, shared


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
    placed = response.placed
    for tensor in response.outputs:
        array, datatype = output_array(tensor)
        entry: dict[str, Any] = {"name": tensor.name, "datatype": datatype, "shape": list(array.shape)}
        if placed and tensor.name in placed:  # written to shared memory: its parameters say where
            entry["parameters"] = placed[tensor.name]
            entries.append(entry)
            continue
        data = None if tensor.name in binary_outputs else json_data(array, datatype)
        if data is None:
            chunks.append(tensor_to_bytes(array, datatype))
            entry["parameters"] = {BINARY_DATA_SIZE: len(chunks[-1])}
        else:
            entry["data"] = data
        entries.append(entry)
    document = response_head(response.model_name, response.model_version, response.id)
    if response.parameters:
        document["parameters"] = response.parameters
    document["outputs"] = entries
    header = dumps(document)
    if not chunks:
        return header, None
    return b"".join([header, *chunks]), len(header)


def decode_register_request(body: bytes, limits: LimitsSettings = DEFAULT_LIMITS) -> tuple[str, int, int]:
    """A system shared-memory register request, `{"key": str, "offset": int, "byte_size": int}`: the key,
    offset (default 0) and byte size, each checked (sizes 0 to 2**64-1)."""
    document = expect_object(load(body, limits=limits), "the register request")
    if "key" not in document:
        raise InvalidInput("Shared memory register request has no 'key' field")
    key = expect_str(document["key"], "key")
    if "byte_size" not in document:
        raise InvalidInput("Shared memory register request has no 'byte_size' field")
    return key, _uint64(document.get("offset", 0), "offset"), _uint64(document["byte_size"], "byte_size")


def _uint64(value: Any, name: str) -> int:
    if type(value) is not int or not 0 <= value < 2**64:
        raise InvalidInput(f"'{name}' must be a non-negative integer, not {show(value)}")
    return value


def encode_error(message: str) -> bytes:
    """The OIP error body."""
    return orjson.dumps({"error": message})


def response_head(model_name: str, model_version: str, request_id: str) -> dict[str, Any]:
    """What every OIP answer starts with (infer and generate): model name, version, and id when set."""
    head = {"model_name": model_name, "model_version": model_version}
    if request_id:
        head["id"] = request_id
    return head

"""Open Inference Protocol protobuf messages (`inference.*`) <-> the core's `OipRequest` / `OipResponse`.

Pure conversion, no server state. Raw tensor contents (what tritonclient sends and the only form it
reads back) are read as a `numpy.frombuffer` view of the message's bytes, with no per-element work;
every answer is written raw. Typed `contents` (what KServe's client sends) are accepted too: FP32 and
FP64 are cut out of the serialized packed field in one piece (a memcpy in upb, not one Python float
per value), the integer fields go element by element.

Raw contents use the HTTP binary extension's layout, so their reading and writing is shared with
`oip_binary` (the same checks and messages on both transports). Every client mistake is an
`InvalidInput` naming the tensor; sizes are checked by arithmetic before anything is allocated, so a
huge claimed shape costs nothing. An input in shared memory (Triton's `shared_memory_region`
parameter) is decoded as a `SharedInput` (read from its region by `oip_shared_memory`) and takes no
entry of `raw_input_contents`, as in Triton; an output written to shared memory is answered with its
parameters and an empty raw entry.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from typing import Any

import numpy as np
from google.protobuf import json_format

from grps_py.codecs.json_values import input_label
from grps_py.codecs.limits import DEFAULT_LIMITS, ElementBudget, check_strings, check_tensors
from grps_py.codecs.oip_binary import reshape, tensor_from_bytes, tensor_to_bytes
from grps_py.codecs.pb_wire import SerializedWithRaw, encode_varint
from grps_py.core.catalog import ModelEntry
from grps_py.core.datatypes import BYTES, DATATYPE_NAMES, OIP_DTYPES, datatype_of
from grps_py.core.errors import InvalidInput, ModelError
from grps_py.core.oip import (
    OipRequest,
    OipResponse,
    RequestedOutput,
    SharedInput,
    requested_output,
    shared_memory_ref,
)
from grps_py.core.protection import LimitsSettings
from grps_py.core.signature import TensorSpec
from grps_py.core.types import Tensor
from grps_py.core.untrusted import shown
from grps_py.protos import open_inference_pb2 as pb

__all__ = [
    "decode_infer_request",
    "encode_infer_reply",
    "encode_infer_response",
    "encode_model_config",
    "encode_model_metadata",
    "parameters_to_dict",
    "repository_parameters",
    "set_parameters",
]

Array = np.ndarray[Any, Any]
_INT64_LIMIT = 2**63
_UINT64_LIMIT = 2**64
_RAW_OUTPUT_CONTENTS = pb.ModelInferResponse.DESCRIPTOR.fields_by_name["raw_output_contents"].number
_DATATYPES = ", ".join(DATATYPE_NAMES)
# The typed contents field of each datatype; FP16 and BF16 have none and travel only raw.
_CONTENTS_FIELD: dict[str, str] = {
    **{name: "int_contents" for name in ("INT8", "INT16", "INT32")},
    **{name: "uint_contents" for name in ("UINT8", "UINT16", "UINT32")},
    **{name: f"{name.lower()}_contents" for name in ("BOOL", "INT64", "UINT64", "FP32", "FP64", BYTES)},
}
# The dtype each typed field is read into before narrowing to the tensor's dtype.
_WIRE_DTYPE: dict[str, np.dtype[Any]] = {
    **dict.fromkeys(("int_contents", "int64_contents", "uint_contents"), np.dtype(np.int64)),
    "bool_contents": np.dtype(np.bool_),
    "uint64_contents": np.dtype(np.uint64),
    "fp32_contents": np.dtype("<f4"),
    "fp64_contents": np.dtype("<f8"),
}
_PACKED_FLOATS = ("fp32_contents", "fp64_contents")


# --- parameters --------------------------------------------------------------------------------


def parameters_to_dict(params: Mapping[str, pb.InferParameter]) -> dict[str, Any]:
    """A parameters map as Python values (bool, int, str or float); a parameter with no value is refused."""
    values: dict[str, Any] = {}
    if not params:  # the usual request: skips the map's Python-level items view
        return values
    for key, param in params.items():
        which = param.WhichOneof("parameter_choice")
        if which is None:
            raise InvalidInput(f"parameter '{shown(key, 64)}' has no value")
        values[key] = getattr(param, which)
    return values


def repository_parameters(params: Mapping[str, pb.ModelRepositoryParameter]) -> dict[str, Any]:
    """A repository load's or unload's parameters as Python values (bool, int, str or bytes): the same
    `parameter_choice` oneof as an inference request's."""
    return parameters_to_dict(params)


def set_parameters(params: MutableMapping[str, pb.InferParameter], values: Mapping[str, Any]) -> None:
    """Write Python values into a parameters map. Ints from 2**63 up go in uint64_param (Triton's field).

    Raises TypeError for a value no parameter can carry and ValueError for an int beyond 64 bits,
    before touching the map entry.
    """
    for key, value in values.items():
        field, converted = _parameter_field(key, value)
        setattr(params[key], field, converted)


def _parameter_field(key: str, value: Any) -> tuple[str, Any]:
    if isinstance(value, bool | np.bool_):
        return "bool_param", bool(value)
    if isinstance(value, int | np.integer):
        number = int(value)
        if -_INT64_LIMIT <= number < _INT64_LIMIT:
            return "int64_param", number
        if _INT64_LIMIT <= number < _UINT64_LIMIT:
            return "uint64_param", number
        raise ValueError(f"parameter '{key}': {number} does not fit in 64 bits")
    if isinstance(value, float | np.floating):
        return "double_param", float(value)
    if isinstance(value, str):
        return "string_param", value
    raise TypeError(f"parameter '{key}': a {type(value).__name__} is not a bool, int, float or str")


# --- ModelInferRequest -> OipRequest -----------------------------------------------------------


def decode_infer_request(msg: pb.ModelInferRequest, limits: LimitsSettings = DEFAULT_LIMITS) -> OipRequest:
    """The request's tensors, requested outputs, id and parameters (model name and version stay in `msg`).

    Per-input parameters have no place in `OipRequest` and are dropped, except shared memory's. Input
    arrays decoded from raw contents are read-only views of the message's bytes. The request is held to
    `limits` (inputs and requested outputs each count against `limits.tensors`).
    """
    count = len(msg.inputs)
    check_tensors(count, limits, "inputs")
    check_tensors(len(msg.outputs), limits, "requested outputs")
    budget = ElementBudget(limits)
    raw = msg.raw_input_contents
    if _any_parameters(msg):  # maybe in shared memory: rare, so the common path below stays short
        shared = _shared_inputs(msg, budget)
        elsewhere = {item.index for item in shared}
        in_message = [tensor for i, tensor in enumerate(msg.inputs) if i not in elsewhere]
    else:
        shared, in_message = [], msg.inputs
    if raw and len(raw) != len(in_message):
        raise InvalidInput(f"raw_input_contents has {len(raw)} entries for {len(in_message)} inputs")
    inputs = [
        _decode_input(tensor, raw[i] if raw else None, budget, limits) for i, tensor in enumerate(in_message)
    ]
    outputs = [_decode_requested_output(output) for output in msg.outputs] if msg.outputs else []
    return OipRequest(inputs, outputs, msg.id, parameters_to_dict(msg.parameters), shared)


def _any_parameters(msg: pb.ModelInferRequest) -> bool:
    """Whether an input has parameters (tritonclient sends none unless its data is in shared memory)."""
    return any(tensor.parameters for tensor in msg.inputs)


def _shared_inputs(msg: pb.ModelInferRequest, budget: ElementBudget) -> list[SharedInput]:
    """The inputs whose data is in shared memory (they carry none in the message)."""
    shared = []
    for index, tensor in enumerate(msg.inputs):
        label = input_label(tensor.name)
        ref = shared_memory_ref(parameters_to_dict(tensor.parameters), label) if tensor.parameters else None
        if ref is None:
            continue
        datatype = tensor.datatype
        if datatype not in OIP_DTYPES:
            raise InvalidInput(
                f"{label}: unknown datatype '{shown(datatype, 40)}'; expected one of {_DATATYPES}"
            )
        if tensor.HasField("contents"):
            raise InvalidInput(f"{label}: sets contents while its data is in shared memory; use one")
        shape = list(tensor.shape)
        if shape and min(shape) < 0:
            raise InvalidInput(f"{label}: shape {shape} has a negative dimension")
        budget.take_shape(shape, label)
        shared.append(SharedInput(index, tensor.name, datatype, shape, ref))
    return shared


def _decode_requested_output(output: pb.ModelInferRequest.InferRequestedOutputTensor) -> RequestedOutput:
    if not output.parameters:
        return RequestedOutput(output.name)
    return requested_output(output.name, None, parameters_to_dict(output.parameters))


def _decode_input(
    tensor: pb.ModelInferRequest.InferInputTensor,
    raw: bytes | None,
    budget: ElementBudget,
    limits: LimitsSettings,
) -> Tensor:
    label = input_label(tensor.name)
    datatype = tensor.datatype
    if datatype not in OIP_DTYPES:
        raise InvalidInput(f"{label}: unknown datatype '{shown(datatype, 40)}'; expected one of {_DATATYPES}")
    shape = list(tensor.shape)
    if shape and min(shape) < 0:
        raise InvalidInput(f"{label}: shape {shape} has a negative dimension")
    count = budget.take_shape(shape, label)  # a Python int: no overflow, nothing allocated yet
    has_contents = tensor.HasField("contents")
    if raw is not None:
        if has_contents:
            raise InvalidInput(f"{label}: sets contents while the request uses raw_input_contents; use one")
        return Tensor(tensor.name, tensor_from_bytes(raw, datatype, shape, label, limits))  # a view: no copy
    if has_contents:
        flat = _from_contents(tensor.contents, datatype, shape, count, label, limits)
    elif count == 0:
        flat = np.empty(0, OIP_DTYPES[datatype])
    else:
        raise InvalidInput(f"{label}: no data; send it in raw_input_contents or contents")
    return Tensor(tensor.name, reshape(flat, shape, label))


def _from_contents(
    contents: pb.InferTensorContents,
    datatype: str,
    shape: list[int],
    count: int,
    label: str,
    limits: LimitsSettings,
) -> Array:
    field = _CONTENTS_FIELD.get(datatype)
    if field is None:
        raise InvalidInput(f"{label}: {datatype} has no typed contents field; send it in raw_input_contents")
    for populated, _ in contents.ListFields():
        if populated.name != field:
            raise InvalidInput(f"{label}: {datatype} takes contents.{field}, not {populated.name}")
    values = getattr(contents, field)
    if len(values) != count:
        raise InvalidInput(f"{label}: {len(values)} values do not fit shape {shape} ({count} values)")
    dtype = OIP_DTYPES[datatype]
    if count == 0:
        return np.empty(0, dtype)
    if datatype == BYTES:
        check_strings(values, label, limits)
        elements = np.empty(count, dtype=object)
        elements[:] = list(values)
        return elements
    if field in _PACKED_FLOATS:
        return _packed_run(contents, field, count, values).astype(dtype, copy=False)
    return _narrow(np.fromiter(values, _WIRE_DTYPE[field], count=count), dtype, datatype, label)


def _packed_run(contents: pb.InferTensorContents, field: str, count: int, values: Any) -> Array:
    """The one populated fixed-width field, cut out of the serialized message (one packed run in upb)."""
    wire = _WIRE_DTYPE[field]
    data = contents.SerializeToString()
    size = count * wire.itemsize
    number = pb.InferTensorContents.DESCRIPTOR.fields_by_name[field].number
    header = encode_varint(number << 3 | 2) + encode_varint(size)  # wire type 2: length-delimited
    if len(data) == len(header) + size and data.startswith(header):
        return np.frombuffer(data, wire, count=count, offset=len(header))
    return np.fromiter(values, wire, count=count)  # not one packed run: read it the slow, sure way


def _narrow(wide: Array, dtype: np.dtype[Any], datatype: str, label: str) -> Array:
    """Wire integers -> the tensor's dtype, refusing values it cannot hold (300 in an INT8)."""
    if wide.dtype == dtype:
        return wide
    if dtype.kind in "iu":
        bounds = np.iinfo(dtype)
        outside = (wide < bounds.min) | (wide > bounds.max)
        if outside.any():
            raise InvalidInput(f"{label}: {wide[outside][0]} is out of range for {datatype}")
    return wide.astype(dtype)


# --- OipResponse -> ModelInferResponse ---------------------------------------------------------


def encode_infer_response(
    resp: OipResponse, reply: pb.ModelInferResponse | None = None
) -> pb.ModelInferResponse:
    """The answer with every output raw (tritonclient reads only `raw_output_contents`).

    With `reply` (an empty message, e.g. a stream message's `infer_response`) it is filled in place.
    An output or parameter the protocol cannot carry is the model's fault: `ModelError`.
    """
    reply = pb.ModelInferResponse() if reply is None else reply
    for buffer in _encode_head(resp, reply):
        reply.raw_output_contents.append(bytes(buffer))  # protobuf takes bytes only
    return reply


def encode_infer_reply(resp: OipResponse) -> SerializedWithRaw:
    """`encode_infer_response`, serialized with the output bytes written once, straight from the arrays."""
    reply = pb.ModelInferResponse()
    return SerializedWithRaw(reply, _RAW_OUTPUT_CONTENTS, _encode_head(resp, reply))


def _encode_head(resp: OipResponse, reply: pb.ModelInferResponse) -> list[bytes | memoryview]:
    """Everything but the output bytes into `reply`; the output bytes, in order."""
    reply.model_name = resp.model_name
    reply.model_version = resp.model_version
    reply.id = resp.id
    if resp.parameters:
        try:
            set_parameters(reply.parameters, resp.parameters)
        except (TypeError, ValueError) as exc:
            raise ModelError(f"the model returned an invalid response parameter: {exc}") from exc
    buffers: list[bytes | memoryview] = []
    placed = resp.placed
    for tensor in resp.outputs:
        array = tensor.array
        datatype = datatype_of(array.dtype)
        if datatype is None:
            raise ModelError(f"output '{tensor.name}' has numpy dtype {array.dtype}, which OIP cannot carry")
        output = reply.outputs.add(name=tensor.name, datatype=datatype, shape=array.shape)
        if placed and tensor.name in placed:  # written to shared memory: an empty entry keeps the order
            set_parameters(output.parameters, placed[tensor.name])
            buffers.append(b"")
            continue
        buffers.append(tensor_to_bytes(array, datatype))
    return buffers


# --- metadata and config -----------------------------------------------------------------------


def encode_model_metadata(entry: ModelEntry, versions: list[str]) -> pb.ModelMetadataResponse:
    """Model metadata; a tensor's datatype is "" and its shape empty where the model does not tell."""
    return pb.ModelMetadataResponse(
        name=entry.name,
        versions=versions,
        platform=entry.platform,
        inputs=[_tensor_metadata(spec) for spec in entry.inputs],
        outputs=[_tensor_metadata(spec) for spec in entry.outputs],
    )


def _tensor_metadata(spec: TensorSpec) -> pb.ModelMetadataResponse.TensorMetadata:
    shape = list(spec.shape or ())
    return pb.ModelMetadataResponse.TensorMetadata(name=spec.name, datatype=spec.datatype or "", shape=shape)


def encode_model_config(config: Mapping[str, Any]) -> pb.ModelConfigResponse:
    """Triton's model configuration from its JSON form (`core.catalog.model_config`).

    `ParseDict` refuses keys our ModelConfig subset lacks (json_format.ParseError) instead of dropping
    them, so a key added to `model_config` without adding the field to the proto fails loudly.
    """
    reply = pb.ModelConfigResponse()
    json_format.ParseDict(dict(config), reply.config)
    return reply

"""An Open Inference Protocol request and response, as the OIP codecs decode and encode them.

Tensors are `Tensor`s holding numpy arrays of the exact OIP datatype (`core.datatypes`); the wire
forms (JSON, the HTTP binary extension, protobuf) are built and read only in `grps_py.codecs`. The
parameters of a tensor that mean something to the server (Triton's classification and shared-memory
extensions) are read here, once for both transports.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from grps_py.core.errors import InvalidInput
from grps_py.core.types import Tensor
from grps_py.core.untrusted import shown

# Request parameters with a meaning to the server; the rest reach the model through its context.
BINARY_DATA_OUTPUT = "binary_data_output"  # HTTP: send every output in binary
BINARY_DATA = "binary_data"  # HTTP, per requested output: send it in binary (or not)
BINARY_DATA_SIZE = "binary_data_size"  # HTTP: a tensor's byte count in the binary part of the body
FINAL_RESPONSE = "triton_final_response"  # ModelStreamInfer: the last response of a request
EMPTY_FINAL_RESPONSE = "triton_enable_empty_final_response"  # ModelStreamInfer: end with an empty one
TRITON_PREFIX = "triton_"  # request parameters Triton reserves; only EMPTY_FINAL_RESPONSE is a client's
# A sequence's requests (Triton's sequence batcher): refused by a model that takes no sequences.
SEQUENCE_PARAMETERS = ("sequence_id", "sequence_start", "sequence_end")
CLASSIFICATION = "classification"  # per requested output: answer its top K classes
# Per input or requested output: its data is in a registered shared-memory region.
SHARED_MEMORY_REGION = "shared_memory_region"
SHARED_MEMORY_BYTE_SIZE = "shared_memory_byte_size"
SHARED_MEMORY_OFFSET = "shared_memory_offset"
MAX_REGION_NAME = 256  # characters of a region's name
_MAX_UINT64 = 2**64 - 1


@dataclass(frozen=True)
class SharedMemoryRef:
    """Where a tensor's data is: `byte_size` bytes from `offset` in the registered region `region`."""

    region: str
    byte_size: int
    offset: int = 0


def shared_memory_ref(parameters: Mapping[str, Any], label: str) -> SharedMemoryRef | None:
    """The tensor's shared-memory parameters (None: it names no region). The region is a string and the
    byte size is required; both sizes are integers 0 to 2**64-1 (Triton's uint64)."""
    region = parameters.get(SHARED_MEMORY_REGION)
    if region is None:
        for key in (SHARED_MEMORY_BYTE_SIZE, SHARED_MEMORY_OFFSET):
            if key in parameters:
                raise InvalidInput(f"{label}: '{key}' is given without '{SHARED_MEMORY_REGION}'")
        return None
    if type(region) is not str or not region or len(region) > MAX_REGION_NAME:
        raise InvalidInput(
            f"{label}: '{SHARED_MEMORY_REGION}' must be a region's name (1 to {MAX_REGION_NAME} characters)"
        )
    if SHARED_MEMORY_BYTE_SIZE not in parameters:
        raise InvalidInput(f"{label}: '{SHARED_MEMORY_REGION}' needs '{SHARED_MEMORY_BYTE_SIZE}'")
    byte_size = _size(parameters, SHARED_MEMORY_BYTE_SIZE, label)
    return SharedMemoryRef(region, byte_size, _size(parameters, SHARED_MEMORY_OFFSET, label))


def _size(parameters: Mapping[str, Any], key: str, label: str) -> int:
    value = parameters.get(key, 0)
    if type(value) is not int or not 0 <= value <= _MAX_UINT64:
        raise InvalidInput(f"{label}: '{key}' must be a non-negative integer, not {_shown_value(value)}")
    return value


def _shown_value(value: object) -> str:
    return f"'{shown(value, 40)}'" if isinstance(value, str) else shown(repr(value), 40)


@dataclass
class RequestedOutput:
    """An output the client asked for. `binary` is the HTTP `binary_data` parameter when given;
    `classification` the number of classes to answer instead of the tensor (0: the tensor);
    `shared_memory` where to write it instead of answering it."""

    name: str
    binary: bool | None = None
    parameters: dict[str, Any] = field(default_factory=dict)
    # Read from `parameters` (which equality compares): not compared again.
    classification: int = field(default=0, compare=False)
    shared_memory: SharedMemoryRef | None = field(default=None, compare=False)


def requested_output(name: str, binary: bool | None, parameters: dict[str, Any]) -> RequestedOutput:
    """A requested output with its parameters read (as Triton reads them): `classification` is an
    integer of at least 1; an output goes to shared memory, or is classified, or is sent in binary."""
    if not parameters:
        return RequestedOutput(name, binary)
    label = f"output '{shown(name, 64)}'"
    count = parameters.get(CLASSIFICATION)
    if count is not None and (type(count) is not int or not 1 <= count <= _MAX_UINT64):
        raise InvalidInput(
            f"{label}: '{CLASSIFICATION}' must be the number of classes to answer, an integer of at "
            f"least 1, not {_shown_value(count)}"
        )
    ref = shared_memory_ref(parameters, label)
    if ref is not None and count is not None:
        raise InvalidInput(f"{label}: can't set both '{SHARED_MEMORY_REGION}' and '{CLASSIFICATION}'")
    if ref is not None and binary:
        raise InvalidInput(f"{label}: can't set both '{SHARED_MEMORY_REGION}' and '{BINARY_DATA}'")
    return RequestedOutput(name, binary, parameters, count or 0, ref)


@dataclass
class SharedInput:
    """An input whose data is in shared memory: read into `OipRequest.inputs[index]` before it runs."""

    index: int
    name: str
    datatype: str
    shape: list[int]
    ref: SharedMemoryRef


@dataclass
class OipRequest:
    """A decoded inference request (the model name and version come from the URL or the message)."""

    inputs: list[Tensor]
    outputs: list[RequestedOutput] = field(default_factory=list)
    id: str = ""
    parameters: dict[str, Any] = field(default_factory=dict)
    shared_inputs: list[SharedInput] = field(default_factory=list)  # not in `inputs` until read

    @property
    def binary_output(self) -> bool:
        return self.parameters.get(BINARY_DATA_OUTPUT) is True

    @property
    def uses_shared_memory(self) -> bool:
        return bool(self.shared_inputs) or any(o.shared_memory is not None for o in self.outputs)


@dataclass
class OipResponse:
    """An inference answer: output tensors (numpy arrays; BYTES as object arrays of bytes). An output
    written to shared memory is named in `placed` with the parameters its answer carries instead of
    its data."""

    model_name: str
    model_version: str
    outputs: list[Tensor]
    id: str = ""
    parameters: dict[str, Any] = field(default_factory=dict)
    placed: dict[str, dict[str, Any]] = field(default_factory=dict)

"""An Open Inference Protocol request and response, as the OIP codecs decode and encode them.

Tensors are `Tensor`s holding numpy arrays of the exact OIP datatype (`core.datatypes`); the wire
forms (JSON, the HTTP binary extension, protobuf) are built and read only in `grps_py.codecs`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from grps_py.core.types import Tensor

# Request parameters with a meaning to the server; the rest reach the model through its context.
BINARY_DATA_OUTPUT = "binary_data_output"  # HTTP: send every output in binary
BINARY_DATA = "binary_data"  # HTTP, per requested output: send it in binary (or not)
BINARY_DATA_SIZE = "binary_data_size"  # HTTP: a tensor's byte count in the binary part of the body
FINAL_RESPONSE = "triton_final_response"  # ModelStreamInfer: the last response of a request
EMPTY_FINAL_RESPONSE = "triton_enable_empty_final_response"  # ModelStreamInfer: end with an empty one


@dataclass
class RequestedOutput:
    """An output the client asked for. `binary` is the HTTP `binary_data` parameter when given."""

    name: str
    binary: bool | None = None
    parameters: dict[str, Any] = field(default_factory=dict)


@dataclass
class OipRequest:
    """A decoded inference request (the model name and version come from the URL or the message)."""

    inputs: list[Tensor]
    outputs: list[RequestedOutput] = field(default_factory=list)
    id: str = ""
    parameters: dict[str, Any] = field(default_factory=dict)

    @property
    def binary_output(self) -> bool:
        return self.parameters.get(BINARY_DATA_OUTPUT) is True


@dataclass
class OipResponse:
    """An inference answer: output tensors (numpy arrays; BYTES as object arrays of bytes)."""

    model_name: str
    model_version: str
    outputs: list[Tensor]
    id: str = ""
    parameters: dict[str, Any] = field(default_factory=dict)

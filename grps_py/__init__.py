"""grps-py: a model-serving gateway for the grps API and the Open Inference Protocol.

Model code imports its API from here:

    from grps_py import ModelInferer, Converter, GrpsContext, GrpsMessage, inferer_register

The names are imported on first use, so importing a submodule (`grps_py.core.executor`) loads
neither protobuf nor anything else the core does not need.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from grps_py.core.context import GrpsContext, HttpRequest, HttpResponse
    from grps_py.core.errors import (
        ConfigError,
        GrpsError,
        InvalidInput,
        ModelError,
        ModelLoadError,
        ModelNotFound,
    )
    from grps_py.core.model import (
        Converter,
        ModelInferer,
        NumpyConverter,
        converter_register,
        inferer_register,
    )
    from grps_py.core.types import Payload, Tensor
    from grps_py.generation.api import GenerativeModel, Tokenizer, generative_register
    from grps_py.protos.grps_pb2 import (
        DataType,
        EmptyGrpsMessage,
        GenericMapData,
        GenericTensor,
        GenericTensorData,
        GrpsMessage,
        NDArrayData,
        Status,
    )

__version__ = "0.1.0"

# Each public name -> the module it comes from.
_EXPORTS: dict[str, str] = {
    "GrpsContext": "grps_py.core.context",
    "HttpRequest": "grps_py.core.context",
    "HttpResponse": "grps_py.core.context",
    "ConfigError": "grps_py.core.errors",
    "GrpsError": "grps_py.core.errors",
    "InvalidInput": "grps_py.core.errors",
    "ModelError": "grps_py.core.errors",
    "ModelLoadError": "grps_py.core.errors",
    "ModelNotFound": "grps_py.core.errors",
    "Converter": "grps_py.core.model",
    "ModelInferer": "grps_py.core.model",
    "NumpyConverter": "grps_py.core.model",
    "converter_register": "grps_py.core.model",
    "inferer_register": "grps_py.core.model",
    "Payload": "grps_py.core.types",
    "Tensor": "grps_py.core.types",
    "GenerativeModel": "grps_py.generation.api",
    "Tokenizer": "grps_py.generation.api",
    "generative_register": "grps_py.generation.api",
    "DataType": "grps_py.protos.grps_pb2",
    "EmptyGrpsMessage": "grps_py.protos.grps_pb2",
    "GenericMapData": "grps_py.protos.grps_pb2",
    "GenericTensor": "grps_py.protos.grps_pb2",
    "GenericTensorData": "grps_py.protos.grps_pb2",
    "GrpsMessage": "grps_py.protos.grps_pb2",
    "NDArrayData": "grps_py.protos.grps_pb2",
    "Status": "grps_py.protos.grps_pb2",
}

__all__ = [
    "ConfigError",
    "Converter",
    "DataType",
    "EmptyGrpsMessage",
    "GenerativeModel",
    "GenericMapData",
    "GenericTensor",
    "GenericTensorData",
    "GrpsContext",
    "GrpsError",
    "GrpsMessage",
    "HttpRequest",
    "HttpResponse",
    "InvalidInput",
    "ModelError",
    "ModelInferer",
    "ModelLoadError",
    "ModelNotFound",
    "NDArrayData",
    "NumpyConverter",
    "Payload",
    "Status",
    "Tensor",
    "Tokenizer",
    "__version__",
    "converter_register",
    "generative_register",
    "inferer_register",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # found here from now on, without this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))

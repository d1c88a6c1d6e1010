"""grps-py: a model-serving gateway for the grps API and the Open Inference Protocol.

Model code imports its API from here:

    from grps_py import ModelInferer, Converter, GrpsContext, GrpsMessage, inferer_register
"""

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

__all__ = [
    "ConfigError",
    "Converter",
    "DataType",
    "EmptyGrpsMessage",
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
    "__version__",
    "converter_register",
    "inferer_register",
]

"""The inferer and converter types a model may name in inference.yml: one spec each.

Config validation, model loading (`node.py`) and the OIP catalog all read these rows, so a backend is
added here, with its module under `grps_py/backends/`. A loader is a "module:callable" imported only
when a configured model needs it: the core never imports torch, onnxruntime, TensorFlow or TensorRT
itself. TensorFlow and TensorRT are optional extras of the package (`EXTRAS`): a model that needs one
that is not installed stops start-up with one line saying what to install.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from grps_py.core.errors import ModelLoadError

CUSTOMIZED = "customized"  # the user's own inferer or converter, registered by name from src/


@dataclass(frozen=True)
class BackendSpec:
    """An `inferer_type`: what loads it, the converter it gets by default, and how OIP names it."""

    inferer_type: str
    platform: str  # OIP model metadata `platform` (Triton's names)
    backend: str  # OIP model config `backend`
    default_converter: str = "none"  # the converter_type of a model whose config names none
    loader: str | None = None  # "module:callable" making the inferer; None: registered by user code
    generative: bool = False  # a GenerativeModel (grps_py/generation) run by a continuous batcher
    # An inferer arg that runs the model as that many instances per device (grps's TensorRT `streams`:
    # execution contexts on one engine, each with its own CUDA stream).
    instances_arg: str | None = None
    # The model file states its tensors' names, datatypes and shapes: declared ones are checked against it.
    states_signature: bool = False

    @property
    def user_code(self) -> bool:
        """The inferer is user code registered by name (`inferer_name`), with no model file of its own."""
        return self.loader is None


@dataclass(frozen=True)
class ConverterSpec:
    """A `converter_type`: what loads it, and whether it hands the inferer tensors only."""

    converter_type: str
    loader: str | None = None  # "module:callable" making the converter; None: registered by user code
    tensors_only: bool = False  # a request must carry tensors (not a string, bytes or a map)


BACKENDS: tuple[BackendSpec, ...] = (
    BackendSpec(
        "torch",
        platform="pytorch_libtorch",
        backend="pytorch",
        default_converter="torch",
        loader="grps_py.backends.torch:TorchInferer",
    ),
    BackendSpec(
        "onnx",
        platform="onnxruntime_onnx",
        backend="onnxruntime",
        default_converter="numpy",
        loader="grps_py.backends.onnxruntime:OnnxInferer",
        states_signature=True,
    ),
    BackendSpec(CUSTOMIZED, platform="python", backend="python", default_converter="none"),
    # Registered by name as customized inferers are; its node wraps it (generation/inferer.py).
    BackendSpec(
        "generative", platform="python", backend="python", default_converter="numpy", generative=True
    ),
    BackendSpec(
        "tensorflow",
        platform="tensorflow_savedmodel",
        backend="tensorflow",
        default_converter="numpy",
        loader="grps_py.backends.tensorflow:TensorFlowInferer",
        states_signature=True,
    ),
    BackendSpec(
        "tensorrt",
        platform="tensorrt_plan",
        backend="tensorrt",
        default_converter="torch",  # outputs stay torch tensors on the GPU until the converter's copy
        loader="grps_py.backends.tensorrt:TensorRTInferer",
        instances_arg="streams",
        states_signature=True,
    ),
)
CONVERTERS: tuple[ConverterSpec, ...] = (
    ConverterSpec("none", "grps_py.core.model:NoneConverter"),
    ConverterSpec("numpy", "grps_py.core.model:NumpyConverter", tensors_only=True),
    ConverterSpec("torch", "grps_py.backends.torch:TorchConverter", tensors_only=True),
    ConverterSpec("tensorflow", "grps_py.backends.tensorflow:TensorFlowConverter", tensors_only=True),
    ConverterSpec(CUSTOMIZED),
)

_BACKEND_BY_TYPE = {spec.inferer_type: spec for spec in BACKENDS}
_CONVERTER_BY_TYPE = {spec.converter_type: spec for spec in CONVERTERS}
# What inference.yml accepts, in the order error messages list them.
INFERER_TYPES: tuple[str, ...] = tuple(spec.inferer_type for spec in BACKENDS)
CONVERTER_TYPES: tuple[str, ...] = tuple(spec.converter_type for spec in CONVERTERS)
# Frameworks that are optional extras of grps-py: the top-level module, and the extra that installs it.
EXTRAS = {"tensorflow": "tensorflow", "tensorrt": "tensorrt"}


def backend(inferer_type: str) -> BackendSpec:
    """The spec of a validated `inferer_type` (KeyError for one config would have refused)."""
    return _BACKEND_BY_TYPE[inferer_type]


def converter(inferer_type: str, converter_type: str | None) -> ConverterSpec:
    """The converter a model runs: the one its config names, else its inferer type's default."""
    return _CONVERTER_BY_TYPE[converter_type or backend(inferer_type).default_converter]


def load(ref: str) -> Any:
    """Call `module:callable` (a class: an instance of it), importing the module now."""
    return resolve(ref)()


def resolve(ref: str) -> Any:
    """The object `module:name` names, importing the module now. A framework that is an optional extra
    and is not installed is a ModelLoadError naming the extra."""
    module_name, _, name = ref.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = (exc.name or "").partition(".")[0]
        if missing not in EXTRAS:
            raise
        raise ModelLoadError(
            f"{missing} is not installed (pip install 'grps-py[{EXTRAS[missing]}]')"
        ) from None
    return getattr(module, name)

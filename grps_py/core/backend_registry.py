"""The inferer and converter types a model may name in inference.yml: one spec each.

Config validation, model loading (`node.py`) and the OIP catalog all read these rows, so a backend is
added here, with its module under `grps_py/backends/`. A loader is a "module:callable" imported only
when a configured model needs it: the core never imports torch or onnxruntime itself.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

CUSTOMIZED = "customized"  # the user's own inferer or converter, registered by name from src/


@dataclass(frozen=True)
class BackendSpec:
    """An `inferer_type`: what loads it, the converter it gets by default, and how OIP names it."""

    inferer_type: str
    platform: str  # OIP model metadata `platform` (Triton's names)
    backend: str  # OIP model config `backend`
    default_converter: str = "none"  # the converter_type of a model whose config names none
    loader: str | None = None  # "module:callable" making the inferer; None: registered by user code
    refusal: str | None = None  # a grps inferer_type grps-py does not run: why, after the type's name
    generative: bool = False  # a GenerativeModel (grps_py/generation) run by a continuous batcher

    @property
    def supported(self) -> bool:
        return self.refusal is None

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


_NOT_SUPPORTED = "is not supported by grps-py"

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
    ),
    BackendSpec(CUSTOMIZED, platform="python", backend="python", default_converter="none"),
    # Registered by name as customized inferers are; its node wraps it (generation/inferer.py).
    BackendSpec(
        "generative", platform="python", backend="python", default_converter="numpy", generative=True
    ),
    BackendSpec("tensorrt", platform="tensorrt_plan", backend="tensorrt", refusal=_NOT_SUPPORTED),
    BackendSpec("tensorflow", platform="tensorflow_savedmodel", backend="tensorflow", refusal=_NOT_SUPPORTED),
)
CONVERTERS: tuple[ConverterSpec, ...] = (
    ConverterSpec("none", "grps_py.core.model:NoneConverter"),
    ConverterSpec("numpy", "grps_py.core.model:NumpyConverter", tensors_only=True),
    ConverterSpec("torch", "grps_py.backends.torch:TorchConverter", tensors_only=True),
    ConverterSpec(CUSTOMIZED),
)

_BACKEND_BY_TYPE = {spec.inferer_type: spec for spec in BACKENDS}
_CONVERTER_BY_TYPE = {spec.converter_type: spec for spec in CONVERTERS}
# What inference.yml accepts, in the order error messages list them.
INFERER_TYPES: tuple[str, ...] = tuple(spec.inferer_type for spec in BACKENDS if spec.supported)
CONVERTER_TYPES: tuple[str, ...] = tuple(spec.converter_type for spec in CONVERTERS)


def backend(inferer_type: str) -> BackendSpec:
    """The spec of a validated `inferer_type` (KeyError for one config would have refused)."""
    return _BACKEND_BY_TYPE[inferer_type]


def refused(inferer_type: object) -> BackendSpec | None:
    """The spec of a known backend grps-py does not run, whatever its case ("TensorRT"); else None."""
    if not isinstance(inferer_type, str):
        return None
    spec = _BACKEND_BY_TYPE.get(inferer_type.lower())
    return None if spec is None or spec.supported else spec


def converter(inferer_type: str, converter_type: str | None) -> ConverterSpec:
    """The converter a model runs: the one its config names, else its inferer type's default."""
    return _CONVERTER_BY_TYPE[converter_type or backend(inferer_type).default_converter]


def load(ref: str) -> Any:
    """Call `module:callable` (a class: an instance of it), importing the module now."""
    module_name, _, name = ref.partition(":")
    return getattr(importlib.import_module(module_name), name)()

"""Which ONNX Runtime execution providers an `onnx` model asks for, in what order, with what options.

inference.yml names them in `inferer_args.providers`, most preferred first, each a name or a one-key
map of a name to its options (ONNX Runtime's provider options, as its documentation lists them):

    inferer_args:
      providers:
        - tensorrt: {trt_fp16_enable: true, trt_engine_cache_enable: true, trt_engine_cache_path: /tmp/trt}
        - cuda
        - cpu

Short names (`tensorrt`, `cuda`, `cpu`, `openvino`, ...) or ONNX Runtime's own (`TensorrtExecutionProvider`)
both work. GPU providers get the model's `device` index as `device_id` unless their options set one; on
a CPU device they are left out with a warning. CPU always comes last, so every node has a provider.
Pure: the caller passes the provider names its ONNX Runtime knows.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from grps_py.backends.devices import cuda_index, is_cuda
from grps_py.core.errors import ModelLoadError

logger = logging.getLogger(__name__)

CPU_EP = "CPUExecutionProvider"
CUDA_EP = "CUDAExecutionProvider"
TENSORRT_EP = "TensorrtExecutionProvider"
OPENVINO_EP = "OpenVINOExecutionProvider"
ALIASES = {
    "cpu": CPU_EP,
    "cuda": CUDA_EP,
    "tensorrt": TENSORRT_EP,
    "trt": TENSORRT_EP,
    "openvino": OPENVINO_EP,
    "dnnl": "DnnlExecutionProvider",
    "xnnpack": "XnnpackExecutionProvider",
}
# Providers that run on an NVIDIA GPU and take a `device_id` option.
GPU_EPS = frozenset({CUDA_EP, TENSORRT_EP, "NvTensorRTRTXExecutionProvider"})
# Triton's names for the accelerators its model config lists (`optimization.execution_accelerators`).
_TRITON_ACCELERATORS = {
    TENSORRT_EP: ("gpu_execution_accelerator", "tensorrt"),
    OPENVINO_EP: ("cpu_execution_accelerator", "openvino"),
}
_MAX_PROVIDERS = 8
_OPTION_TYPES = (str, int, float, bool)


@dataclass(frozen=True)
class ProviderPlan:
    """The providers to ask ONNX Runtime for, in order, with their options."""

    providers: tuple[tuple[str, dict[str, Any]], ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.providers)


def plan(args: Mapping[str, Any], device: str, known: Sequence[str]) -> ProviderPlan:
    """The providers for a model on `device` (`cpu` or `cuda:N`), from its inferer args."""
    requested = _requested(args, device, known)
    legacy = args.get("cuda_provider_options")  # the one knob before `providers` existed
    chosen: list[tuple[str, dict[str, Any]]] = []
    for name, options in requested:
        if name in GPU_EPS and not is_cuda(device):
            logger.warning(
                "ONNX execution provider %s needs a GPU; the model runs on %s without it", name, device
            )
            continue
        if name == CUDA_EP and isinstance(legacy, Mapping):
            options = {**legacy, **options}
        if name in GPU_EPS:
            options = {"device_id": cuda_index(device), **options}
        if name not in (n for n, _ in chosen):
            chosen.append((name, options))
    if CPU_EP not in (n for n, _ in chosen):
        chosen.append((CPU_EP, {}))
    return ProviderPlan(tuple(chosen))


def _requested(
    args: Mapping[str, Any], device: str, known: Sequence[str]
) -> list[tuple[str, dict[str, Any]]]:
    value = args.get("providers")
    if value is None:  # CUDA on a GPU, as before `providers` existed
        return [(CUDA_EP, {})] if is_cuda(device) else []
    if not isinstance(value, list) or not value or len(value) > _MAX_PROVIDERS:
        raise ModelLoadError(
            f"onnx inferer arg providers must be a list of 1 to {_MAX_PROVIDERS} providers, each a name "
            f"or {{name: {{option: value}}}}; got {str(value)[:80]!r}"
        )
    return [_provider(item, known) for item in value]


def _provider(item: Any, known: Sequence[str]) -> tuple[str, dict[str, Any]]:
    options: Any = {}
    if isinstance(item, Mapping) and len(item) == 1:
        item, options = next(iter(item.items()))
        options = {} if options is None else options
    if not isinstance(item, str):
        raise ModelLoadError(f"onnx inferer arg providers: {str(item)[:80]!r} is not a provider name")
    name = ALIASES.get(item.lower(), item)
    if name not in known:
        raise ModelLoadError(
            f"onnx inferer arg providers: unknown execution provider {item[:80]!r}; use one of "
            f"{', '.join(ALIASES)} or ONNX Runtime's names ({', '.join(known)})"
        )
    if not isinstance(options, Mapping) or not all(
        isinstance(k, str) and isinstance(v, _OPTION_TYPES) for k, v in options.items()
    ):
        raise ModelLoadError(
            f"onnx inferer arg providers: the options of {name} must map option names to strings, numbers "
            "or booleans"
        )
    return name, dict(options)


def triton_optimization(active: Sequence[str], plan: ProviderPlan) -> dict[str, Any]:
    """Triton's `optimization.execution_accelerators` for the providers a session really got: how a
    Triton model config says an ONNX model runs through TensorRT or OpenVINO."""
    accelerators: dict[str, list[dict[str, Any]]] = {}
    options = dict(plan.providers)
    for name in active:
        if name in _TRITON_ACCELERATORS:
            kind, short = _TRITON_ACCELERATORS[name]
            entry: dict[str, Any] = {"name": short}
            parameters = {k: str(v) for k, v in options.get(name, {}).items() if k != "device_id"}
            if parameters:
                entry["parameters"] = parameters
            accelerators.setdefault(kind, []).append(entry)
    return {"execution_accelerators": accelerators} if accelerators else {}

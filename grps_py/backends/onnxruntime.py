"""The `onnx` backend: ONNX Runtime sessions on CPU or CUDA, with inputs checked against the model.

Imported only when a configured model uses `inferer_type: onnx`. Torch-free: the number of CUDA
devices comes from the driver's device nodes and CUDA_VISIBLE_DEVICES, and whether CUDA really
works is decided by building the session and asking which providers it got.

Inferer args (all optional): `intra_op_num_threads`, `inter_op_num_threads`,
`graph_optimization_level` (disable | basic | extended | all), `providers` (the execution providers
in order, with options: `execution_providers.py`), `cuda_provider_options` (options for the CUDA
provider, from before `providers`).
"""

from __future__ import annotations

import glob
import logging
import os
import sys
from collections.abc import Mapping
from typing import Any

import numpy as np
import onnxruntime as ort
from onnxruntime.capi.onnxruntime_pybind11_state import Fail, InvalidArgument

from grps_py.backends import execution_providers, short_error
from grps_py.backends.devices import is_cuda, normalize_device, visible_cuda_count
from grps_py.backends.execution_providers import CUDA_EP, GPU_EPS, ProviderPlan
from grps_py.backends.feeds import TensorArg, check_array, match_inputs
from grps_py.core.batch_merge import merge_batch, split_batch
from grps_py.core.context import GrpsContext
from grps_py.core.errors import InvalidInput, ModelLoadError
from grps_py.core.model import ModelInferer

logger = logging.getLogger(__name__)

_UNKNOWN_COUNT = 1 << 16  # device count unknown: CUDA itself rejects a bad index when the session is built

# ONNX Runtime's type strings -> numpy dtypes. Types numpy lacks (bfloat16, float8) are not checked.
ORT_DTYPES: dict[str, np.dtype[Any]] = {
    "tensor(float)": np.dtype(np.float32),
    "tensor(double)": np.dtype(np.float64),
    "tensor(float16)": np.dtype(np.float16),
    "tensor(int8)": np.dtype(np.int8),
    "tensor(int16)": np.dtype(np.int16),
    "tensor(int32)": np.dtype(np.int32),
    "tensor(int64)": np.dtype(np.int64),
    "tensor(uint8)": np.dtype(np.uint8),
    "tensor(uint16)": np.dtype(np.uint16),
    "tensor(uint32)": np.dtype(np.uint32),
    "tensor(uint64)": np.dtype(np.uint64),
    "tensor(bool)": np.dtype(np.bool_),
    "tensor(string)": np.dtype(object),
}
_OPTIMIZATION_LEVELS = {
    "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}


def cuda_device_count() -> int | None:
    """CUDA devices ONNX Runtime could use, without importing torch; None when it cannot be told."""
    if CUDA_EP not in ort.get_available_providers():
        return 0
    return visible_cuda_count(_nvidia_device_nodes(), os.environ.get("CUDA_VISIBLE_DEVICES"))


def _nvidia_device_nodes() -> int | None:
    """GPUs the NVIDIA driver exposes as /dev/nvidiaN (Linux); None elsewhere (Windows, WSL2)."""
    if not sys.platform.startswith("linux") or os.path.exists("/dev/dxg"):
        return None
    return len(glob.glob("/dev/nvidia[0-9]*"))


def resolve_device(device: str | None) -> str:
    """The device an ONNX model runs on: `cpu` or `cuda:N`, with the usual CPU fallback rule.

    `original` means nothing to ONNX (a file records no device) and is read as `auto`.
    """
    count = cuda_device_count()
    name = "auto" if (device or "").strip().lower() == "original" else device
    return normalize_device(name, _UNKNOWN_COUNT if count is None else count)


def session_options(args: Mapping[str, Any]) -> ort.SessionOptions:
    options = ort.SessionOptions()
    try:
        for key in ("intra_op_num_threads", "inter_op_num_threads"):
            if args.get(key) is not None:
                setattr(options, key, int(args[key]))
        level = args.get("graph_optimization_level")
        if level is not None:
            options.graph_optimization_level = _OPTIMIZATION_LEVELS[str(level).lower()]
    except (KeyError, TypeError, ValueError) as exc:
        raise ModelLoadError(
            f"invalid onnx inferer args: {short_error(exc)} "
            f"(graph_optimization_level is one of {', '.join(_OPTIMIZATION_LEVELS)}; "
            "thread counts are integers)"
        ) from exc
    return options


def providers_plan(args: Mapping[str, Any], device: str) -> ProviderPlan:
    return execution_providers.plan(args, device, ort.get_all_providers())


def build_session(
    path: str, device: str, args: Mapping[str, Any], plan: ProviderPlan
) -> ort.InferenceSession:
    """An InferenceSession on `device` with the providers of `plan` (`providers_plan`); a GPU session
    that cannot start CUDA falls back to CPU."""
    try:
        session = ort.InferenceSession(
            path, sess_options=session_options(args), providers=list(plan.providers)
        )
    except ModelLoadError:
        raise
    except Exception as exc:  # missing file, bad protobuf, unsupported opset, CUDA init failure
        raise ModelLoadError(f"cannot load ONNX model {path} on {device}: {short_error(exc)}") from exc
    missing = [name for name in plan.names if name not in session.get_providers()]
    if missing:
        # onnxruntime-gpu lists GPU providers even where CUDA/cuDNN/TensorRT libraries or a GPU are missing.
        logger.warning(
            "ONNX model %s: execution provider(s) %s unavailable on %s; running with %s",
            path,
            ", ".join(missing),
            device,
            ", ".join(session.get_providers()),
        )
    return session


class OnnxInferer(ModelInferer):
    """inferer_type `onnx`: runs an ONNX model with ONNX Runtime.

    `infer` takes a dict of named arrays, a list (matched to the model's inputs in order) or one
    array (for a one-input model), and returns dict[output name, ndarray].
    """

    def __init__(self) -> None:
        super().__init__()
        self.session: ort.InferenceSession | None = None
        self.run_device = "cpu"  # after load: the device the session really runs on
        self._inputs: list[TensorArg] = []
        self._outputs: list[TensorArg] = []
        self._output_names: list[str] = []
        self._plan = ProviderPlan(())

    def load(self) -> bool:
        if not self.path:
            raise ModelLoadError("onnx inferer needs inferer_path: an .onnx file")
        device = resolve_device(self.device)
        self._plan = providers_plan(self.args, device)
        self.session = build_session(self.path, device, self.args, self._plan)
        on_gpu = any(name in GPU_EPS for name in self.session.get_providers())
        self.run_device = device if on_gpu else "cpu"
        self._inputs = [ort_arg(arg) for arg in self.session.get_inputs()]
        self._outputs = [ort_arg(arg) for arg in self.session.get_outputs()]
        self._output_names = [out.name for out in self._outputs]
        logger.info(
            "loaded ONNX model %s on %s (%s)",
            self.path,
            self.run_device,
            ", ".join(self.session.get_providers()),
        )
        return True

    def infer(self, inp: Any, context: GrpsContext) -> dict[str, np.ndarray[Any, Any]]:
        return self._run(self._feed(inp))

    def batch_infer(self, inps: list[Any], contexts: list[GrpsContext]) -> list[Any]:
        """Run the requests as one batch when the model's first dim is dynamic, else one by one."""
        feeds = [self._feed(inp) for inp in inps]
        if len(feeds) > 1 and all(arg.batch_dynamic for arg in self._inputs):
            batch = concat_feeds(feeds)
            if batch is not None:
                merged, sizes = batch
                parts = split_outputs(self._run(merged), sizes)
                if parts is not None:
                    return parts
        return [self._run(feed) for feed in feeds]

    def describe(self) -> dict[str, Any]:
        """Inputs and outputs as {name, dtype (numpy name), shape (-1 for a dynamic dim)}, the execution
        providers the session runs with, and Triton's `optimization` block for them."""
        if self.session is None:
            return {"inputs": [], "outputs": []}
        active = list(self.session.get_providers())
        described: dict[str, Any] = {
            "inputs": [arg.describe() for arg in self._inputs],
            "outputs": [arg.describe() for arg in self._outputs],
            "execution_providers": active,
        }
        optimization = execution_providers.triton_optimization(active, self._plan)
        if optimization:
            described["optimization"] = optimization
        return described

    def _feed(self, inp: Any) -> dict[str, np.ndarray[Any, Any]]:
        self._require_session()
        feed = match_inputs(inp, [arg.name for arg in self._inputs])
        for arg in self._inputs:
            array = feed[arg.name]
            check_array(arg, array.dtype, array.shape)
        return feed

    def _run(self, feed: dict[str, np.ndarray[Any, Any]]) -> dict[str, np.ndarray[Any, Any]]:
        session = self._require_session()
        try:
            if is_cuda(self.run_device):
                outputs = self._run_bound(session, feed)
            else:
                outputs = session.run(self._output_names, feed)
        except (InvalidArgument, Fail, ValueError) as exc:
            raise InvalidInput(f"model rejected the input: {short_error(exc)}") from exc
        return dict(zip(self._output_names, outputs, strict=True))

    def _run_bound(self, session: ort.InferenceSession, feed: dict[str, np.ndarray[Any, Any]]) -> list[Any]:
        """CUDA: bind host inputs and host outputs, so ORT copies each once and allocates no extra output."""
        binding = session.io_binding()
        for name, array in feed.items():
            binding.bind_cpu_input(name, array)
        for name in self._output_names:
            binding.bind_output(name, "cpu")
        session.run_with_iobinding(binding)
        return list(binding.copy_outputs_to_cpu())

    def _require_session(self) -> ort.InferenceSession:
        if self.session is None:
            raise ModelLoadError("onnx model is not loaded")
        return self.session


def ort_arg(arg: Any) -> TensorArg:
    """An ONNX Runtime NodeArg as a TensorArg (a symbolic or missing dim is dynamic; its name kept)."""
    if arg.shape is None:
        return TensorArg(arg.name, ORT_DTYPES.get(arg.type), None)
    fixed = [isinstance(d, int) and d >= 0 for d in arg.shape]
    dims = tuple(d if known else None for d, known in zip(arg.shape, fixed, strict=True))
    labels = tuple(
        d if isinstance(d, str) else "?" for d, known in zip(arg.shape, fixed, strict=True) if not known
    )
    return TensorArg(arg.name, ORT_DTYPES.get(arg.type), dims, labels)


# -- batching ----------------------------------------------------------------------------------


def concat_feeds(feeds: list[dict[str, np.ndarray[Any, Any]]]) -> tuple[dict[str, Any], list[int]] | None:
    """Concatenate checked feeds along axis 0; None when their batch sizes or trailing dims disagree."""
    return merge_batch(feeds)


def split_outputs(outputs: dict[str, np.ndarray[Any, Any]], sizes: list[int]) -> list[Any] | None:
    """Split each batched output back per request; None when an output has no matching batch dim."""
    return split_batch(outputs, sizes)

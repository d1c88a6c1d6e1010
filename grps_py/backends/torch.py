"""The `torch` backend: TorchScript models, and the converter that feeds them tensors on their device.

Imported only when a configured model uses `inferer_type: torch` or `converter_type: torch`.

Devices: `device` in the model config is normalized by `devices.normalize_device` (GPU requested on
a CPU-only host -> cpu, with a warning). `original` keeps the weights where they were saved (on a
CPU-only host they are mapped to cpu) and sends inputs to `inp_device`, or to the weights' device
when none is given.
"""

from __future__ import annotations

import functools
import logging
import warnings
from collections.abc import Mapping
from typing import Any

import ml_dtypes
import numpy as np
import torch

from grps_py.backends import short_error
from grps_py.backends.devices import normalize_device
from grps_py.core.batch_merge import TensorOps, merge_batch, split_batch
from grps_py.core.context import GrpsContext
from grps_py.core.errors import InvalidInput, ModelLoadError
from grps_py.core.model import ModelInferer, NumpyConverter

logger = logging.getLogger(__name__)

ORIGINAL = "original"
BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
# numpy kinds torch cannot hold: strings stay numpy (torch has no string tensors).
_NON_TENSOR_KINDS = frozenset("OUSV")


def device_count() -> int:
    """CUDA devices torch can use (0 on a CPU-only build or host)."""
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


@functools.cache
def _allow_readonly_numpy() -> None:
    """Wire tensors are read-only numpy views (np.frombuffer), and models only read their inputs
    under inference_mode, so torch's "array is not writable" warning would be noise on every request.
    Installed once, when the first torch model loads."""
    warnings.filterwarnings("ignore", message="The given NumPy array is not writable", category=UserWarning)


def to_torch(value: Any, device: str) -> Any:
    """A numpy array as a tensor on `device` (a view, no copy, on cpu); tensors are moved there.

    String arrays and non-array values pass through unchanged.
    """
    if isinstance(value, torch.Tensor):
        return value.to(device)  # a no-op when it is already there
    if not isinstance(value, np.ndarray) or (
        value.dtype.kind in _NON_TENSOR_KINDS and value.dtype != BFLOAT16
    ):
        return value
    if any(stride < 0 for stride in value.strides):  # torch cannot view negative strides
        value = np.ascontiguousarray(value)
    if not value.flags.writeable:
        _allow_readonly_numpy()
    if value.dtype == BFLOAT16:  # numpy's bfloat16 comes from ml_dtypes; torch reads its bits
        return torch.from_numpy(value.view(np.int16)).view(torch.bfloat16).to(device)
    try:
        tensor = torch.from_numpy(value)
    except (TypeError, ValueError) as exc:
        raise InvalidInput(
            f"cannot make a torch tensor from numpy {value.dtype}: {short_error(exc)}"
        ) from exc
    return tensor.to(device)


def to_numpy_array(value: Any) -> Any:
    """A tensor as a numpy array on the host; anything else as numpy via np.asarray."""
    if isinstance(value, torch.Tensor):
        tensor = value.detach()
        if tensor.dtype == torch.bfloat16:  # numpy has no bfloat16 of its own: ml_dtypes' holds the bits
            return tensor.view(torch.int16).cpu().numpy().view(BFLOAT16)
        return tensor.cpu().numpy()
    return value if isinstance(value, np.ndarray) else np.asarray(value)


def apply_num_threads(value: Any) -> None:
    """Inferer arg `num_threads`: torch's intra-op threads. Process-wide (torch has one pool): on a
    small CPU, fewer threads than cores leave room for the event loop that feeds the model."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ModelLoadError(f"torch inferer arg num_threads must be an integer >= 1, not {value!r}")
    if torch.get_num_threads() != value:
        logger.info("torch intra-op threads: %d (was %d)", value, torch.get_num_threads())
        torch.set_num_threads(value)


# torch.jit.load carries no annotations; calling it through Any keeps mypy's untyped-call check quiet.
_jit_load: Any = torch.jit.load


def load_torchscript(path: str, map_location: str | None) -> torch.jit.ScriptModule:
    try:
        module: torch.jit.ScriptModule = _jit_load(path, map_location=map_location)
    except Exception as exc:  # missing file, corrupt zip, a torch.save pickle instead of TorchScript
        raise ModelLoadError(
            f"cannot load TorchScript model {path}: {short_error(exc)} "
            "(expected a file written by torch.jit.save)"
        ) from exc
    return module.eval()


def module_device(module: torch.nn.Module) -> str:
    """Where a module's weights live (cpu for a module without any)."""
    for tensor in (*module.parameters(), *module.buffers()):
        return str(tensor.device)
    return "cpu"


class TorchInferer(ModelInferer):
    """inferer_type `torch`: runs a TorchScript module.

    `infer` takes a dict (called as `module(**inp)`, or `module(inp)` with inferer arg
    `call_with_dict: true`, or positionally in declared order when the model declares `inputs`),
    a list (`module(*inp)`) or one tensor/array (`module(x)`), and returns
    what the module returns. The input device for `original` comes from the `inp_device`
    attribute, which `init` fills from inferer arg `inp_device` (the executor may also set it).
    """

    def __init__(self) -> None:
        super().__init__()
        self.module: torch.jit.ScriptModule | None = None
        self.inp_device: str | None = None
        self.model_device = "cpu"  # where the weights are, after load
        self.input_device = "cpu"  # where inputs are sent, after load
        self.input_names: list[str] = []  # declared inputs: passed positionally in this order

    def bind_input_names(self, names: list[str]) -> None:
        """Declared inputs reach the module positionally, in declared order (as Triton's PyTorch backend)."""
        self.input_names = list(names)

    def init(self, path: str | None, device: str | None = None, args: dict[str, Any] | None = None) -> None:
        super().init(path, device, args)
        if self.args.get("inp_device") is not None:
            self.inp_device = str(self.args["inp_device"])

    def load(self) -> bool:
        if not self.path:
            raise ModelLoadError("torch inferer needs inferer_path: a TorchScript file")
        apply_num_threads(self.args.get("num_threads"))
        count = device_count()
        original = (self.device or "").strip().lower() == ORIGINAL
        map_location = self._map_location(original, count)
        self.module = load_torchscript(self.path, map_location)
        self.model_device = map_location or module_device(self.module)
        if original and self.inp_device:
            self.input_device = normalize_device(self.inp_device, count)
        else:
            self.input_device = self.model_device
        _allow_readonly_numpy()
        logger.info(
            "loaded TorchScript %s on %s (inputs on %s)", self.path, self.model_device, self.input_device
        )
        return True

    def _map_location(self, original: bool, count: int) -> str | None:
        if not original:
            return normalize_device(self.device, count)
        # `original` keeps saved devices, except that CUDA weights cannot load on a CPU-only host.
        return "cpu" if count == 0 else None

    def infer(self, inp: Any, context: GrpsContext) -> Any:
        return self._run(self._to_inputs(inp))

    def batch_infer(self, inps: list[Any], contexts: list[GrpsContext]) -> list[Any]:
        """Run compatible inputs as one batch (concatenated on dim 0), else one by one."""
        converted = [self._to_inputs(inp) for inp in inps]
        batch = concat_inputs(converted) if len(converted) > 1 else None
        if batch is not None:
            merged, sizes = batch
            parts = split_outputs(self._run(merged), sizes)
            if parts is not None:
                return parts
            logger.debug(
                "torch model output has no batch dim to split; running %d items one by one", len(inps)
            )
        return [self._run(x) for x in converted]

    def describe(self) -> dict[str, Any]:
        """Input and output names from the forward schema; TorchScript records no shapes or dtypes."""
        if self.module is None:
            return {"inputs": [], "outputs": []}
        return describe_schema(self.module)

    def _to_inputs(self, inp: Any) -> Any:
        device = self.input_device
        if isinstance(inp, Mapping):
            return {str(name): to_torch(value, device) for name, value in inp.items()}
        if isinstance(inp, (list, tuple)):
            return [to_torch(value, device) for value in inp]
        return to_torch(inp, device)

    def _run(self, x: Any) -> Any:
        if self.module is None:
            raise ModelLoadError("torch model is not loaded")
        with torch.inference_mode():
            try:
                return self._call(self.module, x)
            except torch.OutOfMemoryError:
                raise  # a server condition, not the client's input
            except RuntimeError as exc:  # shape/dtype/argument mistakes; TorchScript errors included
                raise InvalidInput(f"model rejected the input: {short_error(exc)}") from exc

    def _call(self, module: torch.jit.ScriptModule, x: Any) -> Any:
        if isinstance(x, dict) and self.input_names and set(x) == set(self.input_names):
            return module(*[x[name] for name in self.input_names])
        if isinstance(x, dict):
            return module(x) if self.args.get("call_with_dict") else module(**x)
        if isinstance(x, list):
            return module(*x)
        return module(x)


def describe_schema(module: torch.jit.ScriptModule) -> dict[str, Any]:
    schema = getattr(getattr(module, "forward", None), "schema", None)
    if schema is None:  # a module without a scripted forward
        return {"inputs": [], "outputs": []}
    inputs = [_unknown_tensor(arg.name) for arg in schema.arguments[1:]]  # [0] is self
    outputs: list[dict[str, Any]] = []
    if len(schema.returns) == 1:
        returned = schema.returns[0].type
        if isinstance(returned, torch.TensorType):
            outputs = [_unknown_tensor("output")]
        elif isinstance(returned, torch.TupleType):
            outputs = [_unknown_tensor(f"output_{i}") for i in range(len(returned.elements()))]
    return {"inputs": inputs, "outputs": outputs}


def _unknown_tensor(name: str) -> dict[str, Any]:
    return {"name": name, "dtype": None, "shape": None}


# -- batching ----------------------------------------------------------------------------------

TORCH_OPS = TensorOps(
    is_tensor=lambda v: isinstance(v, torch.Tensor) and v.dim() > 0,
    trailing=lambda v: (tuple(v.shape[1:]), v.dtype, v.device),
    concat=lambda column: torch.cat(column, dim=0),
    split=lambda v, rows: list(torch.split(v, rows, dim=0)),
)


def concat_inputs(items: list[Any]) -> tuple[Any, list[int]] | None:
    """Concatenate inputs of the same structure, trailing shapes, dtypes and devices along dim 0.

    Returns the merged input and each item's batch size, or None when the items do not fit together.
    """
    return merge_batch(items, TORCH_OPS)


def split_outputs(out: Any, sizes: list[int]) -> list[Any] | None:
    """Split a batched output (tensor, tuple/list or dict of them) back per item; None if it cannot be."""
    return split_batch(out, sizes, TORCH_OPS)


class TorchConverter(NumpyConverter):
    """converter_type `torch`: request arrays become torch tensors on the model's device.

    The executor calls `bind_device(inferer.input_device)` after the model's inferer has loaded,
    so inputs are created where the model reads them; until then tensors go to cpu. Responses come
    back as numpy arrays on the host. String (object) arrays stay numpy: torch has no string tensors.
    """

    def __init__(self) -> None:
        super().__init__()
        self.device = "cpu"

    def bind_device(self, device: str) -> None:
        """Send inputs to `device` (cpu, cuda, cuda:N...; normalized with the usual CPU fallback)."""
        self.device = normalize_device(device, device_count())

    def to_model(self, array: np.ndarray[Any, Any]) -> Any:
        return to_torch(array, self.device)

    def from_model(self, data: Any) -> Any:
        return to_numpy_array(data)

    def merge_batch(self, items: list[Any]) -> tuple[Any, list[int]] | None:
        return merge_batch(items, TORCH_OPS)

    def split_batch(self, out: Any, rows: list[int]) -> list[Any] | None:
        return split_batch(out, rows, TORCH_OPS)

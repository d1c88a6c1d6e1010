"""The `tensorrt` backend: a serialized TensorRT engine (plan file) run on a CUDA stream, its device buffers
torch tensors.

Imported only when a configured model uses `inferer_type: tensorrt` (TensorRT is the optional extra
`grps-py[tensorrt]`); written to TensorRT 10's name-based tensor API (`execute_async_v3`).

One inferer is one execution context with its own CUDA stream. The instances of a model on one device
(grps's `streams: K` makes K of them, see `config.py`) share one deserialized engine, so its weights are
on the GPU once: `shared_engine` keeps each engine while an inferer holds it. Requests are checked against
the engine before it runs: dtypes, ranks, static dims and the optimisation profile's ranges (a 400 naming
the input and dim). The default converter (`torch`) hands the inputs over as tensors on the engine's
device; the outputs come back as torch tensors on it, which the converter copies to the host.

Inferer args (all optional): `profile` (the optimisation profile the contexts run with, default 0),
`streams` (execution contexts per device: handled by the config, as instances), `customized_op_paths`
(grps's: plugin libraries loaded before the engine is deserialized).
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading
import weakref
from typing import Any

import numpy as np
import tensorrt as trt
import torch

from grps_py.backends import short_error
from grps_py.backends.devices import cuda_index
from grps_py.backends.feeds import TensorArg, check_array, dtype_name, host_array, match_inputs
from grps_py.backends.tensorrt_io import (
    ProfileRange,
    TrtType,
    batch_row_limit,
    check_profile_shape,
    chunk_rows,
    dims_tuple,
    engine_device,
    profile_index,
    torch_dtype_name,
    trt_type,
)
from grps_py.backends.torch import TORCH_OPS, device_count, to_torch
from grps_py.core.batch_merge import merge_batch, split_batch
from grps_py.core.context import GrpsContext
from grps_py.core.errors import InvalidInput, ModelError, ModelLoadError
from grps_py.core.model import ModelInferer

logger = logging.getLogger(__name__)

KNOWN_ARGS = ("profile", "streams", "customized_op_paths", "inp_device")
_MAX_PLUGIN_LIBRARIES = 16
_ALIGNMENT = 256  # TensorRT wants every tensor address 256-byte aligned
_MAX_MESSAGE_CHARS = 300
_LOG_LEVELS = {
    trt.ILogger.Severity.INTERNAL_ERROR: logging.ERROR,
    trt.ILogger.Severity.ERROR: logging.ERROR,
    trt.ILogger.Severity.WARNING: logging.WARNING,
    trt.ILogger.Severity.INFO: logging.DEBUG,  # build and load chatter
}


def one_line(text: str) -> str:
    """A TensorRT message as one bounded line."""
    line = " ".join(text.split())
    return line if len(line) <= _MAX_MESSAGE_CHARS else line[: _MAX_MESSAGE_CHARS - 3] + "..."


class TrtLogger(trt.ILogger):  # type: ignore[misc]
    """TensorRT's messages into grps-py's log. One for the process: TensorRT warns when runtimes come
    with different loggers. Each thread's last error is kept, to say why a load on that thread failed."""

    def __init__(self) -> None:
        trt.ILogger.__init__(self)
        self._local = threading.local()

    def log(self, severity: Any, msg: str) -> None:
        level = _LOG_LEVELS.get(severity)
        if level is None:  # VERBOSE
            return
        text = " ".join(msg.split())  # one log line per message
        if level >= logging.ERROR:
            self._local.last_error = one_line(text)
        logger.log(level, "TensorRT: %s", text)

    def take_last_error(self) -> str:
        """The last error TensorRT reported on this thread ("" for none), forgotten once taken."""
        error: str = getattr(self._local, "last_error", "")
        self._local.last_error = ""
        return error


TRT_LOGGER = TrtLogger()


# -- plugins ------------------------------------------------------------------------------------

_plugin_lock = threading.Lock()
_plugin_libraries: set[str] = set()
_own_plugins: list[bool] = []  # one entry once TensorRT's own plugins are registered


def load_plugins(paths: Any) -> None:
    """grps's `customized_op_paths`: plugin libraries (which register their plugins when loaded), then
    TensorRT's own plugins, each once per process, so an engine that uses them deserializes."""
    if paths is not None and (
        not isinstance(paths, list)
        or len(paths) > _MAX_PLUGIN_LIBRARIES
        or not all(isinstance(p, str) for p in paths)
    ):
        raise ModelLoadError(
            "tensorrt inferer arg customized_op_paths must be a list of at most "
            f"{_MAX_PLUGIN_LIBRARIES} paths"
        )
    with _plugin_lock:
        for path in paths or ():
            if path in _plugin_libraries:
                continue
            if not os.path.isfile(path):
                raise ModelLoadError(f"tensorrt inferer arg customized_op_paths: {path} is not a file")
            try:
                ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
            except OSError as exc:
                raise ModelLoadError(
                    f"cannot load TensorRT plugin library {path}: {short_error(exc)}"
                ) from exc
            _plugin_libraries.add(path)
            logger.info("loaded TensorRT plugin library %s", path)
        if not _own_plugins:
            _own_plugins.append(True)
            if not trt.init_libnvinfer_plugins(TRT_LOGGER, ""):
                logger.warning("TensorRT's own plugins did not register: engines that use them will not load")


# -- engines shared by the contexts on one device -----------------------------------------------


class SharedEngine:
    """One deserialized engine with the runtime it needs, shared by every execution context on its
    device. Kept in `_engines` only while an inferer holds it: the last one gone frees the weights."""

    def __init__(self, path: str, device_index: int, runtime: Any, engine: Any) -> None:
        self.path = path
        self.device_index = device_index
        self.runtime = runtime  # outlives the engine: TensorRT requires it
        self.engine = engine


_engines: weakref.WeakValueDictionary[tuple[str, int, int, int], SharedEngine] = weakref.WeakValueDictionary()
# One load at a time: a second instance of the same model waits for the first's engine instead of
# deserializing its own copy.
_engines_lock = threading.Lock()


def shared_engine(path: str, device_index: int) -> SharedEngine:
    """The engine in `path` on cuda:`device_index`, deserialized once while any inferer holds it. A file
    that changed (mtime or size) is a new engine: a reload picks up a rebuilt plan."""
    try:
        real = os.path.realpath(path)
        stat = os.stat(real)
    except OSError as exc:
        raise ModelLoadError(f"cannot read TensorRT engine {path}: {exc.strerror or exc}") from exc
    key = (real, stat.st_mtime_ns, stat.st_size, device_index)
    with _engines_lock:
        found = _engines.get(key)
        if found is None:
            found = deserialize(path, device_index)
            _engines[key] = found
        return found


def deserialize(path: str, device_index: int) -> SharedEngine:
    try:
        with open(path, "rb") as file:
            plan = file.read()
    except OSError as exc:
        raise ModelLoadError(f"cannot read TensorRT engine {path}: {exc.strerror or exc}") from exc
    TRT_LOGGER.take_last_error()
    with torch.cuda.device(device_index):
        runtime = trt.Runtime(TRT_LOGGER)
        try:
            engine = runtime.deserialize_cuda_engine(plan)
        except Exception as exc:  # the bindings raise on a buffer they cannot read
            raise ModelLoadError(f"cannot load TensorRT engine {path}: {short_error(exc)}") from exc
    if engine is None:  # not a plan, a truncated one, or one built by another TensorRT version or GPU
        reason = TRT_LOGGER.take_last_error() or "TensorRT could not deserialize it"
        raise ModelLoadError(
            f"cannot load TensorRT engine {path}: {reason} (a plan runs only with the TensorRT version and "
            "the GPU model it was built with)"
        )
    return SharedEngine(path, device_index, runtime, engine)


# -- the engine's tensors -----------------------------------------------------------------------


class EngineIO:
    """An engine's inputs and outputs under one optimisation profile: read once at load, then what every
    request is checked against. Refuses (at load) tensors that torch buffers cannot stand for."""

    def __init__(self, engine: Any, profile: int) -> None:
        self.profile = profile
        self.inputs: list[TensorArg] = []
        self.outputs: list[TensorArg] = []
        self.types: dict[str, TrtType] = {}
        self.ranges: dict[str, ProfileRange] = {}
        for i in range(engine.num_io_tensors):
            name = engine.get_tensor_name(i)
            is_input = engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT
            arg = self._read(engine, name, "input" if is_input else "output", profile)
            (self.inputs if is_input else self.outputs).append(arg)
            if is_input:
                self.ranges[name] = profile_range(engine, name, arg, profile)

    @property
    def batch_limit(self) -> int | None:
        """The most rows one run takes when requests can be concatenated (every input's dim 0 is dynamic);
        None when they cannot."""
        if not self.inputs or not all(arg.batch_dynamic for arg in self.inputs):
            return None
        return batch_row_limit(self.ranges)

    def feed(self, inp: Any) -> dict[str, torch.Tensor]:
        """A request's inputs by name as torch tensors (on the host or a GPU), each checked against the
        engine: dtype, rank, static dims, and the profile's range for every dim (a 400 naming it)."""
        values = match_inputs(inp, [arg.name for arg in self.inputs], convert=_tensor_or_array)
        feed: dict[str, torch.Tensor] = {}
        for arg in self.inputs:
            kind = self.types[arg.name]
            value = values[arg.name]
            if isinstance(value, torch.Tensor):
                if value.dtype != kind.torch:
                    raise InvalidInput(
                        f"input '{arg.name}' expects {dtype_name(kind.numpy)}, "
                        f"got {torch_dtype_name(value.dtype)}"
                    )
                check_array(arg, None, tuple(value.shape))
            else:
                check_array(arg, value.dtype, value.shape)
                value = host_tensor(value, kind)
            check_profile_shape(arg.name, tuple(value.shape), self.ranges[arg.name], self.profile)
            feed[arg.name] = value
        return feed

    def describe(self) -> dict[str, Any]:
        """Inputs and outputs as {name, dtype (numpy name), shape (-1 for a dynamic dim)}, and the
        optimisation profile: its index and min/opt/max shape per input."""
        return {
            "inputs": [arg.describe() for arg in self.inputs],
            "outputs": [arg.describe() for arg in self.outputs],
            "profile": {
                "index": self.profile,
                "shapes": {name: shapes.describe() for name, shapes in self.ranges.items()},
            },
        }

    def _read(self, engine: Any, name: str, what: str, profile: int) -> TensorArg:
        dtype = engine.get_tensor_dtype(name)
        kind = trt_type(dtype.name)
        if kind is None:
            raise ModelLoadError(f"TensorRT {what} '{name}' is of type {dtype.name}, which torch cannot hold")
        if (
            engine.is_shape_inference_io(name)
            or engine.get_tensor_location(name) != trt.TensorLocation.DEVICE
        ):
            raise ModelLoadError(
                f"TensorRT {what} '{name}' is a shape tensor (its values set other tensors' shapes), which "
                "the tensorrt backend does not feed"
            )
        if engine.get_tensor_format(name, profile) != trt.TensorFormat.LINEAR:
            raise ModelLoadError(
                f"TensorRT {what} '{name}' has the vectorized format "
                f"{engine.get_tensor_format_desc(name, profile)}; build the engine with linear I/O formats "
                "(the default)"
            )
        dims = dims_tuple(engine.get_tensor_shape(name))
        if dims is None:
            raise ModelLoadError(f"TensorRT {what} '{name}' has no shape")
        self.types[name] = kind
        return TensorArg(name, kind.numpy, tuple(None if d < 0 else d for d in dims))


def profile_range(engine: Any, name: str, arg: TensorArg, profile: int) -> ProfileRange:
    """The shapes the profile takes for input `name` (its own shape when it has no dynamic dim)."""
    assert arg.dims is not None
    if None not in arg.dims:
        return ProfileRange.fixed([d for d in arg.dims if d is not None])
    shapes = [dims_tuple(d) for d in engine.get_tensor_profile_shape(name, profile)]
    if len(shapes) != 3 or any(s is None or len(s) != len(arg.dims) for s in shapes):
        raise ModelLoadError(f"TensorRT input '{name}' has no shapes in optimisation profile {profile}")
    low, opt, high = (s for s in shapes if s is not None)
    return ProfileRange(low, opt, high)


# -- the inferer --------------------------------------------------------------------------------

_warned_args: set[tuple[str, str]] = set()


def warn_unknown_args(path: str, args: dict[str, Any]) -> None:
    """Inferer args the backend does not read: a warning (once per engine and key), not a refusal, so a
    grps config with args of its own still starts."""
    for key in args:
        if key not in KNOWN_ARGS and (path, key) not in _warned_args:
            _warned_args.add((path, key))
            logger.warning(
                "tensorrt model %s: inferer arg %r is not used (known: %s)", path, key, ", ".join(KNOWN_ARGS)
            )


class TensorRTInferer(ModelInferer):
    """inferer_type `tensorrt`: one execution context of a TensorRT engine, on its own CUDA stream.

    `infer` takes a dict of named tensors or arrays, a list (matched to the engine's inputs in order) or
    one tensor (for a one-input engine), and returns dict[output name, torch.Tensor on the engine's GPU].
    """

    def __init__(self) -> None:
        super().__init__()
        self.run_device = "cpu"  # after load: the cuda:N the engine runs on
        self.input_device = "cpu"  # where the converter puts request tensors (the same GPU)
        self.profile_index = 0
        self._shared: SharedEngine | None = None  # a strong reference: keeps the engine while this lives
        self._context: Any = None
        self._stream: torch.cuda.Stream | None = None
        self._io: EngineIO | None = None
        self._scratch: torch.Tensor | None = None  # the address bound to an empty tensor (TensorRT wants one)
        self._lock = threading.Lock()  # one run at a time on the context

    @property
    def engine(self) -> SharedEngine | None:
        """The engine this context runs, shared with the model's other instances on its GPU (after load)."""
        return self._shared

    def load(self) -> bool:
        if not self.path:
            raise ModelLoadError("tensorrt inferer needs inferer_path: a serialized engine (plan) file")
        device = engine_device(self.device, device_count())
        warn_unknown_args(self.path, self.args)
        load_plugins(self.args.get("customized_op_paths"))
        index = cuda_index(device)
        shared = shared_engine(self.path, index)
        engine = shared.engine
        profile = profile_index(self.args.get("profile", 0), engine.num_optimization_profiles)
        io = EngineIO(engine, profile)
        with torch.cuda.device(index):
            TRT_LOGGER.take_last_error()
            context = engine.create_execution_context()
            if context is None:
                raise ModelLoadError(
                    f"cannot create a TensorRT execution context for {self.path} on {device}: "
                    f"{TRT_LOGGER.take_last_error() or 'out of GPU memory?'}"
                )
            stream = _new_stream(device)
            if not context.set_optimization_profile_async(profile, stream.cuda_stream):
                raise ModelLoadError(f"TensorRT engine {self.path} refused optimisation profile {profile}")
            stream.synchronize()
            self._scratch = torch.empty(_ALIGNMENT, dtype=torch.uint8, device=device)
        self._shared, self._context, self._stream, self._io = shared, context, stream, io
        self.profile_index = profile
        self.run_device = self.input_device = device
        logger.info(
            "loaded TensorRT engine %s on %s (profile %d of %d; inputs %s)",
            self.path,
            device,
            profile,
            engine.num_optimization_profiles,
            ", ".join(
                f"{arg.name} {io.ranges[arg.name].min}..{io.ranges[arg.name].max}" for arg in io.inputs
            ),
        )
        return True

    def infer(self, inp: Any, context: GrpsContext) -> dict[str, torch.Tensor]:
        return self._run(self._feed(inp))

    def batch_infer(self, inps: list[Any], contexts: list[GrpsContext]) -> list[Any]:
        """Concatenate the requests along dim 0 in runs that fit the profile's max rows, when every input's
        dim 0 is dynamic; else run them one by one. A bad request fails the call, and the server then runs
        the batch one by one, so it fails alone."""
        feeds = [self._feed(inp) for inp in inps]
        limit = self._require()[2].batch_limit
        if len(feeds) < 2 or limit is None:
            return [self._run(feed) for feed in feeds]
        rows = [int(next(iter(feed.values())).shape[0]) for feed in feeds]
        outputs: list[Any] = [None] * len(feeds)
        for chunk in chunk_rows(rows, limit):
            for index, out in zip(chunk, self._run_together([feeds[i] for i in chunk]), strict=True):
                outputs[index] = out
        return outputs

    def _run_together(self, feeds: list[dict[str, torch.Tensor]]) -> list[dict[str, torch.Tensor]]:
        """One run for requests whose tensors concatenate (same trailing dims, dtype and device), split
        back per request; one run each otherwise."""
        merged = merge_batch(feeds, TORCH_OPS) if len(feeds) > 1 else None
        if merged is not None:
            batch, sizes = merged
            parts = split_batch(self._run(batch), sizes, TORCH_OPS)
            if parts is not None:
                return parts
            logger.debug("TensorRT engine %s: an output has no batch dim; running one by one", self.path)
        return [self._run(feed) for feed in feeds]

    def describe(self) -> dict[str, Any]:
        """Inputs and outputs as {name, dtype (numpy name), shape (-1 for a dynamic dim)}, and the
        optimisation profile the contexts run with: its index and min/opt/max shape per input."""
        return {"inputs": [], "outputs": []} if self._io is None else self._io.describe()

    def _feed(self, inp: Any) -> dict[str, torch.Tensor]:
        return self._require()[2].feed(inp)

    # -- a run ----------------------------------------------------------------------------------

    def _run(self, feed: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Bind the inputs and fresh outputs by name, enqueue the engine on this context's stream and wait
        for it. The stream first waits for the caller's (where the converter made the inputs)."""
        context, stream, io = self._require()
        device = torch.device(self.run_device)
        with self._lock, torch.cuda.device(device):
            caller = torch.cuda.current_stream(device)
            stream.wait_stream(caller)
            with torch.cuda.stream(stream):
                inputs = {name: self._on_device(tensor, device) for name, tensor in feed.items()}
                for arg in io.inputs:
                    tensor = inputs[arg.name]
                    if not context.set_input_shape(arg.name, tuple(tensor.shape)):
                        raise InvalidInput(
                            f"TensorRT refused input '{arg.name}' of shape {list(tensor.shape)} "
                            f"(profile {io.profile})"
                        )
                    self._bind(context, arg.name, tensor)
                outputs = {
                    arg.name: self._output(context, arg.name, io.types[arg.name], device)
                    for arg in io.outputs
                }
                if not context.execute_async_v3(stream.cuda_stream):
                    raise ModelError(
                        f"TensorRT could not run engine {os.path.basename(self.path or '')} "
                        "(its message is in the server log)"
                    )
            stream.synchronize()
            # Made on this stream, used on the caller's: their memory is not reused before that use is done.
            for tensor in outputs.values():
                tensor.record_stream(caller)
        return outputs

    def _output(self, context: Any, name: str, kind: TrtType, device: torch.device) -> torch.Tensor:
        """A buffer for output `name`, shaped as the input shapes set; its address bound."""
        shape = dims_tuple(context.get_tensor_shape(name))
        if shape is None or any(d < 0 for d in shape):
            raise ModelError(
                f"TensorRT output '{name}' has a data-dependent shape ({list(shape or ())}); the tensorrt "
                "backend serves engines whose output shapes follow from their input shapes"
            )
        tensor = torch.empty(shape, dtype=kind.torch, device=device)
        self._bind(context, name, tensor)
        return tensor

    def _on_device(self, tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
        """An input on the engine's GPU (copied on the current stream), contiguous and 256-byte aligned."""
        tensor = tensor.to(device, non_blocking=True).contiguous()
        if tensor.numel() and tensor.data_ptr() % _ALIGNMENT:  # a view into another tensor
            tensor = tensor.clone()
        return tensor

    def _bind(self, context: Any, name: str, tensor: torch.Tensor) -> None:
        address = tensor.data_ptr() if tensor.numel() else self._scratch_address()
        if not context.set_tensor_address(name, address):
            raise ModelError(f"TensorRT refused the buffer of tensor '{name}'")

    def _scratch_address(self) -> int:
        assert self._scratch is not None
        return int(self._scratch.data_ptr())

    def _require(self) -> tuple[Any, torch.cuda.Stream, EngineIO]:
        if self._context is None or self._stream is None or self._io is None:
            raise ModelLoadError("tensorrt model is not loaded")
        return self._context, self._stream, self._io


# torch.cuda.Stream's constructor carries no annotations; called through Any for mypy.
_new_stream: Any = torch.cuda.Stream


def _tensor_or_array(value: Any) -> Any:
    """A request value: torch tensors as they are (on whatever device), anything else as a numpy array."""
    return value if isinstance(value, torch.Tensor) else host_array(value)


def host_tensor(array: np.ndarray[Any, Any], kind: TrtType) -> torch.Tensor:
    """A checked numpy array of the engine's type as a host tensor (a view when it can be); ml_dtypes'
    bfloat16 and float8 arrays by their bits, which torch cannot take from numpy as they are."""
    if array.dtype.kind == "V":  # ml_dtypes: a same-width integer view for torch.from_numpy, then retyped
        bits = np.ascontiguousarray(array).view(np.int16 if array.dtype.itemsize == 2 else np.uint8)
        retyped: torch.Tensor = to_torch(bits, "cpu").view(kind.torch)
        return retyped
    tensor = to_torch(array, "cpu")
    if not isinstance(tensor, torch.Tensor):  # not after check_array: an engine's types are all numeric
        raise InvalidInput(f"cannot make a tensor from numpy {array.dtype}")
    return tensor

"""The `tensorflow` backend: one signature of a SavedModel, and the converter that feeds it `tf.Tensor`s.

Imported only when a configured model uses `inferer_type: tensorflow` or `converter_type: tensorflow`
(TensorFlow is the optional extra `grps-py[tensorflow]`).

Inferer args (all optional): `signature` (default `serving_default`), `tags` (the MetaGraph's tags, when
the SavedModel has several), `customized_op_paths` (grps's: custom-op libraries loaded before the model).
The signature's keyword arguments are the model's inputs and its output keys its outputs; requests are
checked against their dtypes and shapes before TensorFlow sees them. `device`: `cpu`, or `cuda:N` /
`gpu:N` for TensorFlow's `/GPU:N` (with the usual CPU fallback on a host without a GPU).
"""

from __future__ import annotations

import logging
import os
from typing import Any

import numpy as np
import tensorflow as tf

from grps_py.backends import short_error
from grps_py.backends.devices import cuda_index, is_cuda, normalize_device
from grps_py.backends.feeds import TensorArg, check_array, host_array, match_inputs
from grps_py.core.batch_merge import TensorOps, merge_batch, split_batch
from grps_py.core.context import GrpsContext
from grps_py.core.errors import InvalidInput, ModelLoadError
from grps_py.core.model import ModelInferer, NumpyConverter

logger = logging.getLogger(__name__)

SERVING_DEFAULT = "serving_default"
_MAX_OP_LIBRARIES = 16
# What TensorFlow raises for an input its graph cannot take (shapes that disagree inside the graph,
# values an op refuses); anything else is a server-side failure.
_INPUT_ERRORS = (tf.errors.InvalidArgumentError, tf.errors.OutOfRangeError, ValueError, TypeError)

TF_OPS = TensorOps(
    is_tensor=lambda v: isinstance(v, tf.Tensor) and v.shape.rank is not None and v.shape.rank > 0,
    trailing=lambda v: (tuple(v.shape[1:]), v.dtype),
    concat=lambda column: tf.concat(column, axis=0),
    split=lambda v, rows: list(tf.split(v, rows, axis=0)),
)


def gpu_count() -> int:
    """GPUs TensorFlow can use (0 on the CPU build or a host without one)."""
    return len(tf.config.list_physical_devices("GPU"))


def tf_device_name(device: str) -> str:
    """`cpu` / `cuda:N` as TensorFlow names it: `/CPU:0` / `/GPU:N`."""
    return f"/GPU:{cuda_index(device)}" if is_cuda(device) else "/CPU:0"


def numpy_dtype(dtype: tf.DType) -> np.dtype[Any] | None:
    """A TensorFlow dtype's numpy dtype (strings: object); None for one numpy lacks (resource, variant)."""
    if dtype == tf.string:
        return np.dtype(object)
    try:
        result: np.dtype[Any] = np.dtype(dtype.as_numpy_dtype)
    except TypeError:
        return None
    return result


def spec_arg(name: str, spec: Any) -> TensorArg:
    """A signature's tf.TensorSpec as a TensorArg (an unknown dim is dynamic)."""
    rank = spec.shape.rank
    dims = None if rank is None else tuple(spec.shape.as_list())
    return TensorArg(name, numpy_dtype(spec.dtype), dims)


def to_tensor(value: Any) -> tf.Tensor:
    """A request value as a tf.Tensor: tensors pass through; text arrays become tf.string tensors."""
    if isinstance(value, tf.Tensor):
        return value
    array = host_array(value)
    try:
        return tf.convert_to_tensor(array)
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"cannot make a TensorFlow tensor from {array.dtype}: {short_error(exc)}") from exc


def to_host(value: Any) -> Any:
    """A tf.Tensor as a numpy array on the host (strings as object arrays of bytes)."""
    return value.numpy() if isinstance(value, tf.Tensor) else value


def load_op_libraries(paths: Any) -> None:
    """grps's `customized_op_paths`: custom-op shared libraries, loaded before the model needs them."""
    if paths is None:
        return
    if (
        not isinstance(paths, list)
        or len(paths) > _MAX_OP_LIBRARIES
        or not all(isinstance(p, str) for p in paths)
    ):
        raise ModelLoadError(
            f"tensorflow inferer arg customized_op_paths must be a list of at most {_MAX_OP_LIBRARIES} paths"
        )
    for path in paths:
        if not os.path.isfile(path):
            raise ModelLoadError(f"tensorflow inferer arg customized_op_paths: {path} is not a file")
        try:
            tf.load_op_library(path)
        except (tf.errors.NotFoundError, OSError) as exc:
            raise ModelLoadError(f"cannot load custom-op library {path}: {short_error(exc)}") from exc
        logger.info("loaded TensorFlow custom-op library %s", path)


class TensorFlowInferer(ModelInferer):
    """inferer_type `tensorflow`: runs one signature of a SavedModel (a directory).

    `infer` takes a dict of named arrays or tensors, a list (matched to the signature's inputs in order)
    or one array (a one-input signature), and returns dict[output key, tf.Tensor]; the converter takes
    them to the host (`numpy`) or hands them on (`tensorflow`).
    """

    def __init__(self) -> None:
        super().__init__()
        self.run_device = "cpu"  # after load: where the signature runs
        self.signature_name = SERVING_DEFAULT
        self._model: Any = None  # the loaded SavedModel: it owns the variables the signature reads
        self._function: Any = None
        self._inputs: list[TensorArg] = []
        self._outputs: list[TensorArg] = []
        self._signatures: list[str] = []

    def load(self) -> bool:
        if not self.path:
            raise ModelLoadError("tensorflow inferer needs inferer_path: a SavedModel directory")
        load_op_libraries(self.args.get("customized_op_paths"))
        name = "auto" if (self.device or "").strip().lower() == "original" else self.device
        self.run_device = normalize_device(name, gpu_count())
        self.signature_name = str(self.args.get("signature") or SERVING_DEFAULT)
        tags = self.args.get("tags")
        with tf.device(tf_device_name(self.run_device)):
            try:
                self._model = tf.saved_model.load(self.path, tags=tags)
            except Exception as exc:  # missing directory, not a SavedModel, unknown tags, missing custom op
                raise ModelLoadError(
                    f"cannot load TensorFlow SavedModel {self.path}: {short_error(exc)}"
                ) from exc
        signatures = getattr(self._model, "signatures", None) or {}
        self._signatures = sorted(signatures)
        if self.signature_name not in signatures:
            found = ", ".join(self._signatures) or "none"
            raise ModelLoadError(
                f"SavedModel {self.path} has no signature {self.signature_name!r} (its signatures: {found}); "
                "choose one with inferer_args.signature"
            )
        self._function = signatures[self.signature_name]
        _, keyword_specs = self._function.structured_input_signature
        self._inputs = [spec_arg(key, spec) for key, spec in keyword_specs.items()]
        outputs = self._function.structured_outputs
        self._outputs = [spec_arg(key, spec) for key, spec in outputs.items()]
        logger.info(
            "loaded TensorFlow SavedModel %s (signature %s) on %s",
            self.path,
            self.signature_name,
            self.run_device,
        )
        return True

    def infer(self, inp: Any, context: GrpsContext) -> dict[str, tf.Tensor]:
        return self._run(self._feed(inp))

    def batch_infer(self, inps: list[Any], contexts: list[GrpsContext]) -> list[Any]:
        """Run the requests as one batch when every input's first dim is dynamic, else one by one."""
        feeds = [self._feed(inp) for inp in inps]
        if len(feeds) > 1 and all(arg.batch_dynamic for arg in self._inputs):
            batch = merge_batch(feeds, TF_OPS)
            if batch is not None:
                merged, rows = batch
                parts = split_batch(self._run(merged), rows, TF_OPS)
                if parts is not None:
                    return parts
        return [self._run(feed) for feed in feeds]

    def describe(self) -> dict[str, Any]:
        """The signature's inputs and outputs as {name, dtype (numpy name), shape (-1 for a dynamic dim)}."""
        if self._function is None:
            return {"inputs": [], "outputs": []}
        return {
            "inputs": [arg.describe() for arg in self._inputs],
            "outputs": [arg.describe() for arg in self._outputs],
            "signature": self.signature_name,
            "signatures": list(self._signatures),
        }

    def _feed(self, inp: Any) -> dict[str, tf.Tensor]:
        if self._function is None:
            raise ModelLoadError("tensorflow model is not loaded")
        feed = match_inputs(inp, [arg.name for arg in self._inputs], to_tensor)
        for arg in self._inputs:
            tensor = feed[arg.name]
            check_array(arg, numpy_dtype(tensor.dtype), tensor.shape.as_list())
        return feed

    def _run(self, feed: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        with tf.device(tf_device_name(self.run_device)):
            try:
                return dict(self._function(**feed))
            except _INPUT_ERRORS as exc:
                raise InvalidInput(f"model rejected the input: {short_error(exc)}") from exc


class TensorFlowConverter(NumpyConverter):
    """converter_type `tensorflow` (grps's): request arrays become `tf.Tensor`s for the inferer, and the
    tensors it returns come back to the host as numpy arrays."""

    def to_model(self, array: np.ndarray[Any, Any]) -> Any:
        return to_tensor(array)

    def from_model(self, data: Any) -> Any:
        return host_array(to_host(data))

    def merge_batch(self, items: list[Any]) -> tuple[Any, list[int]] | None:
        return merge_batch(items, TF_OPS)

    def split_batch(self, out: Any, rows: list[int]) -> list[Any] | None:
        return split_batch(out, rows, TF_OPS)


def limit_gpu_memory(devices: tuple[int, ...], limit_mib: int) -> list[int]:
    """`gpu.mem_manager_type: tensorflow`: on each listed GPU, memory growth (TensorFlow takes memory as it
    needs it, not all at start), and with `limit_mib` > 0 a hard limit. Must run before TensorFlow first
    uses a GPU. Returns the GPUs configured; a listed GPU TensorFlow does not see is left out."""
    gpus = tf.config.list_physical_devices("GPU")
    configured = []
    for index in devices:
        if index >= len(gpus):
            continue
        gpu = gpus[index]
        try:
            if limit_mib > 0:
                config = tf.config.LogicalDeviceConfiguration(memory_limit=limit_mib)
                tf.config.set_logical_device_configuration(gpu, [config])
            else:
                tf.config.experimental.set_memory_growth(gpu, True)
        except RuntimeError as exc:  # TensorFlow already initialised its GPUs in this process
            logger.warning(
                "GPU %d: TensorFlow's memory settings cannot change now: %s", index, short_error(exc)
            )
            continue
        configured.append(index)
    return configured

"""Warmup: sample requests run through a model before it is reported ready (Triton's model_warmup).

Samples are built from the declared `inputs`, else from those the model file states (ONNX,
TensorFlow, TensorRT), as zeros or random values (a variable dim is the warmup `batch_size` when it is
the first, else 1), or read from an .npz file with one array per input. They go through the
model's whole serving path (converter, scheduler, batching), `count` times, so lazy initialisation,
kernels and caches are warm when the first client arrives.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from grps_py.core.config import WarmupSettings
from grps_py.core.context import GrpsContext
from grps_py.core.datatypes import BYTES, numpy_dtype
from grps_py.core.errors import GrpsError, ModelLoadError
from grps_py.core.signature import TensorSpec, spec_from_description
from grps_py.core.types import Payload, Tensor

if TYPE_CHECKING:
    from grps_py.core.node import ModelNode

log = logging.getLogger("grps_py.warmup")
# Start-up progress for a watching person (the CLI prints it on a terminal); one line per call.
Progress = Callable[[str], None]
PROGRESS_EVERY_S = 1.0


def no_progress(_: str) -> None:
    pass


def sample_shape(spec: TensorSpec, batch_size: int) -> tuple[int, ...]:
    dims = spec.shape if spec.shape is not None else (-1,)
    return tuple((batch_size if i == 0 else 1) if d < 0 else d for i, d in enumerate(dims))


def sample_array(
    spec: TensorSpec, kind: str, batch_size: int, rng: np.random.Generator
) -> np.ndarray[Any, Any]:
    shape = sample_shape(spec, batch_size)
    datatype = spec.datatype or "FP32"
    if datatype == BYTES:
        return np.full(shape, b"" if kind == "zeros" else b"warmup", dtype=object)
    dtype = numpy_dtype(datatype)
    if kind == "zeros":
        return np.zeros(shape, dtype=dtype)
    if dtype.kind == "b":
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        return rng.integers(0, 10, size=shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def samples(settings: WarmupSettings, specs: tuple[TensorSpec, ...]) -> list[Tensor]:
    if settings.kind == "file":
        assert settings.file is not None  # config requires it
        with np.load(settings.file, allow_pickle=False) as data:
            return [Tensor(name, data[name]) for name in data.files]
    rng = np.random.default_rng(0)
    return [Tensor(spec.name, sample_array(spec, settings.kind, settings.batch_size, rng)) for spec in specs]


def warmup_inputs(node: ModelNode) -> tuple[TensorSpec, ...]:
    """The inputs samples are built for: the declared ones, else those the loaded model file states."""
    if node.settings.inputs:
        return node.settings.inputs
    return tuple(spec_from_description(item) for item in node.describe().get("inputs", ()))


async def warm_up(node: ModelNode, on_progress: Progress | None = None) -> None:
    """Run the node's warmup; a failure stops start-up like a failed load."""
    settings = node.settings.warmup
    if settings is None:
        return
    report = on_progress or no_progress
    started = last_report = time.perf_counter()
    report(f"warming up model {node.key} ({settings.count} run(s)) ...")
    try:
        tensors = samples(settings, warmup_inputs(node))
        for i in range(settings.count):
            await node.run(Payload.of_tensors(tensors), GrpsContext(request_id=f"warmup-{node.key}-{i}"))
            if time.perf_counter() - last_report >= PROGRESS_EVERY_S and i + 1 < settings.count:
                last_report = time.perf_counter()
                report(f"warming up model {node.key}: {i + 1}/{settings.count} runs")
    except (GrpsError, OSError, ValueError, KeyError) as exc:
        message = exc.public_message if isinstance(exc, GrpsError) else str(exc)
        raise ModelLoadError(f"model '{node.key}' failed its warmup: {message}") from exc
    elapsed = time.perf_counter() - started
    report(f"warming up model {node.key} ... done ({elapsed:.1f} s)")
    log.info("model '%s' warmed up: %d run(s) in %.3fs", node.key, settings.count, elapsed)

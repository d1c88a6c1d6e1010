"""The rules of the `tensorrt` backend that need no TensorRT: its tensor types as numpy and torch dtypes,
an optimisation profile's shape ranges and the check a request gets against them, how a batch is cut to
fit a profile, and the device an engine may run on.

Apart from TensorRT itself: the backend module imports `tensorrt` at its top, and these are tested on a
machine without it (or without a GPU).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import ml_dtypes
import numpy as np
import torch

from grps_py.backends.devices import normalize_device
from grps_py.core.errors import InvalidInput, ModelLoadError


@dataclass(frozen=True)
class TrtType:
    """A TensorRT data type as grps-py holds it: a numpy dtype for checks and `describe()`, and the torch
    dtype of the device buffers."""

    numpy: np.dtype[Any]
    torch: torch.dtype


# trt.DataType member names (`dtype.name`) -> the same type in numpy and torch. The types that neither has
# (INT4, FP4, E8M0: packed sub-byte formats) are absent: an engine taking or giving one is refused at load.
TRT_TYPES: dict[str, TrtType] = {
    "FLOAT": TrtType(np.dtype(np.float32), torch.float32),
    "HALF": TrtType(np.dtype(np.float16), torch.float16),
    "BF16": TrtType(np.dtype(ml_dtypes.bfloat16), torch.bfloat16),
    "FP8": TrtType(np.dtype(ml_dtypes.float8_e4m3fn), torch.float8_e4m3fn),
    "INT8": TrtType(np.dtype(np.int8), torch.int8),
    "UINT8": TrtType(np.dtype(np.uint8), torch.uint8),
    "INT32": TrtType(np.dtype(np.int32), torch.int32),
    "INT64": TrtType(np.dtype(np.int64), torch.int64),
    "BOOL": TrtType(np.dtype(np.bool_), torch.bool),
}


def trt_type(name: str) -> TrtType | None:
    """The numpy and torch dtypes of the trt.DataType named `name`; None for one they lack."""
    return TRT_TYPES.get(name)


def torch_dtype_name(dtype: torch.dtype) -> str:
    """A torch dtype by the name numpy gives the same type (float32, bfloat16, bool...)."""
    return str(dtype).removeprefix("torch.")


def dims_tuple(dims: Any) -> tuple[int, ...] | None:
    """A trt.Dims (or any sequence of ints) as a tuple; None for TensorRT's "no such shape" (rank -1)."""
    try:
        rank = len(dims)
    except (TypeError, ValueError):  # trt.Dims of rank -1 has a negative __len__, which Python refuses
        return None
    if rank < 0:
        return None
    return tuple(int(dims[i]) for i in range(rank))


# -- optimisation profiles ----------------------------------------------------------------------


@dataclass(frozen=True)
class ProfileRange:
    """The shapes one optimisation profile of an engine takes for one input (min <= shape <= max, dim by
    dim); `opt` is the shape it was tuned for. A static input has min == opt == max == its shape."""

    min: tuple[int, ...]
    opt: tuple[int, ...]
    max: tuple[int, ...]

    @classmethod
    def fixed(cls, shape: Sequence[int]) -> ProfileRange:
        return cls(tuple(shape), tuple(shape), tuple(shape))

    def describe(self) -> dict[str, list[int]]:
        return {"min": list(self.min), "opt": list(self.opt), "max": list(self.max)}


def check_profile_shape(name: str, shape: Sequence[int], shapes: ProfileRange, profile: int) -> None:
    """Refuse (400) an input shape the profile does not take: another rank, or a dim outside its range,
    naming the input, the dim, the value and the range."""
    if len(shape) != len(shapes.min):
        raise InvalidInput(
            f"input '{name}' has rank {len(shape)} (shape {list(shape)}); profile {profile} takes rank "
            f"{len(shapes.min)}"
        )
    for dim, (got, low, high) in enumerate(zip(shape, shapes.min, shapes.max, strict=True)):
        if not low <= got <= high:
            takes = f"only {low}" if low == high else f"{low} to {high}"
            raise InvalidInput(f"input '{name}' dim {dim} is {got}; profile {profile} takes {takes}")


def batch_row_limit(ranges: Mapping[str, ProfileRange]) -> int:
    """The most rows (dim 0) one run can take: the smallest max dim 0 over the inputs."""
    return min(shapes.max[0] for shapes in ranges.values())


def chunk_rows(rows: Sequence[int], limit: int) -> list[list[int]]:
    """Cut a batch of requests (their row counts, in order) into runs of consecutive requests whose rows
    add up to at most `limit`; a request over the limit alone is a run of its own (and is refused)."""
    chunks: list[list[int]] = []
    current: list[int] = []
    total = 0
    for index, count in enumerate(rows):
        if current and total + count > limit:
            chunks.append(current)
            current, total = [], 0
        current.append(index)
        total += count
    if current:
        chunks.append(current)
    return chunks


def profile_index(value: Any, profiles: int) -> int:
    """Inferer arg `profile`: the index of one of the engine's `profiles` optimisation profiles."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < profiles:
        raise ModelLoadError(
            f"tensorrt inferer arg profile must be an optimisation profile index from 0 to {profiles - 1} "
            f"(the engine has {profiles}), not {value!r}"
        )
    return value


# -- the device ---------------------------------------------------------------------------------


def engine_device(device: str | None, cuda_count: int) -> str:
    """The `cuda:N` an engine runs on. TensorRT has no CPU fallback: without a GPU, or with `cpu`
    configured, the model cannot load (`original` means nothing to a plan file and is read as `auto`)."""
    if cuda_count <= 0:
        raise ModelLoadError(
            "tensorrt needs a CUDA GPU, and this host has none that torch can use "
            "(torch.cuda.is_available() is False)"
        )
    name = "auto" if (device or "").strip().lower() == "original" else device
    normalized = normalize_device(name, cuda_count)
    if normalized == "cpu":
        raise ModelLoadError(
            f"tensorrt engines run on a GPU: device {device!r} cannot run one (use auto or cuda:N)"
        )
    return normalized

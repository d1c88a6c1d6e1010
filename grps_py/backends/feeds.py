"""A model's tensor arguments as a backend reads them from its file, and the checks a request's arrays
get against them: one set of rules for ONNX Runtime, TensorFlow and TensorRT.

Framework-free: each backend turns its own argument objects into `TensorArg`s once, at load.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from grps_py.core.errors import InvalidInput
from grps_py.core.types import to_numpy


@dataclass(frozen=True)
class TensorArg:
    """One input or output of a model file. `dtype` None: a type numpy lacks (not checked); `dims`
    None: rank unknown; a None dim is dynamic."""

    name: str
    dtype: np.dtype[Any] | None
    dims: tuple[int | None, ...] | None
    dim_labels: tuple[str, ...] = ()  # the model file's names for its dynamic dims ("batch"), in order

    @property
    def batch_dynamic(self) -> bool:
        """Dim 0 takes any size, so requests can be concatenated along it."""
        return bool(self.dims) and self.dims is not None and self.dims[0] is None

    def shape_text(self) -> str:
        if self.dims is None:
            return "?"
        labels = iter(self.dim_labels)
        return "[" + ", ".join(next(labels, "?") if d is None else str(d) for d in self.dims) + "]"

    def describe(self) -> dict[str, Any]:
        """{name, dtype (numpy name or "string"), shape (-1 for a dynamic dim)}: what `describe()` gives."""
        shape = None if self.dims is None else [-1 if d is None else d for d in self.dims]
        return {
            "name": self.name,
            "dtype": None if self.dtype is None else dtype_name(self.dtype),
            "shape": shape,
        }


def dtype_name(dtype: np.dtype[Any]) -> str:
    return "string" if dtype == np.dtype(object) else dtype.name


def host_array(value: Any) -> np.ndarray[Any, Any]:
    """A request value as a numpy array on the host; text arrays as object arrays of str/bytes."""
    array = to_numpy(value)  # torch tensors from an upstream DAG node come to the host here
    return array.astype(object) if array.dtype.kind in ("U", "S") else array


def match_inputs(
    inp: Any, names: Sequence[str], convert: Callable[[Any], Any] = host_array
) -> dict[str, Any]:
    """Name the request's values after the model's inputs: by key, by position, or the only one;
    each value passed through `convert`."""
    expected = ", ".join(names)
    if isinstance(inp, Mapping):
        unknown = [str(key) for key in inp if key not in names]
        missing = [name for name in names if name not in inp]
        if unknown or missing:
            problem = f"unknown input(s) {unknown}" if unknown else f"missing input(s) {missing}"
            raise InvalidInput(f"{problem}; the model expects: {expected}")
        return {name: convert(inp[name]) for name in names}
    if isinstance(inp, Sequence) and not isinstance(inp, (str, bytes, np.ndarray)):
        if len(inp) != len(names):
            raise InvalidInput(f"the model takes {len(names)} input(s) ({expected}), got {len(inp)}")
        return {name: convert(value) for name, value in zip(names, inp, strict=True)}
    if len(names) != 1:
        raise InvalidInput(
            f"the model takes {len(names)} inputs ({expected}); send them by name or as a list"
        )
    return {names[0]: convert(inp)}


def check_array(arg: TensorArg, dtype: np.dtype[Any] | None, shape: Sequence[int]) -> None:
    """Reject a dtype, rank or static dim that differs from the model's declaration (400 naming it).
    `dtype` None: the value's type is not a numpy one and is left to the framework."""
    if arg.dtype is not None and dtype is not None and dtype != arg.dtype:
        raise InvalidInput(f"input '{arg.name}' expects {dtype_name(arg.dtype)}, got {dtype_name(dtype)}")
    if arg.dims is None:
        return
    if len(shape) != len(arg.dims):
        raise InvalidInput(
            f"input '{arg.name}' expects rank {len(arg.dims)} {arg.shape_text()}, got shape {list(shape)}"
        )
    for want, got in zip(arg.dims, shape, strict=True):
        if want is not None and want != got:
            raise InvalidInput(f"input '{arg.name}' expects shape {arg.shape_text()}, got {list(shape)}")

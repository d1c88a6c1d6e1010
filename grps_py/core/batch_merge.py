"""Concatenating requests' inputs along dim 0 into one batch, and splitting outputs back.

One implementation for every tensor library: `TensorOps` says what a tensor is and how to join and
cut it (numpy here; the torch backend passes torch's). An input is a dict of tensors, a list of
tensors, or one tensor; every tensor of one request shares its row count (dim 0). Anything that
does not fit returns None, and the requests run one by one.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class TensorOps:
    is_tensor: Callable[[Any], bool]  # a tensor of one library with at least one dimension
    trailing: Callable[[Any], Hashable]  # what must agree to concatenate: shape[1:], dtype (device...)
    concat: Callable[[list[Any]], Any]
    split: Callable[[Any, list[int]], list[Any]]


NUMPY_OPS = TensorOps(
    is_tensor=lambda v: isinstance(v, np.ndarray) and v.ndim > 0,
    trailing=lambda v: (v.shape[1:], v.dtype),
    concat=lambda column: np.concatenate(column, axis=0),
    split=lambda v, rows: np.split(v, np.cumsum(rows)[:-1], axis=0),
)


def _leaves(x: Any, ops: TensorOps) -> tuple[Any, list[Any]] | None:
    """The structure of one request's input and its tensors, or None when it is not batchable."""
    key: tuple[Any, ...]
    if isinstance(x, Mapping):
        names = tuple(sorted(x))
        key, values = ("dict", names), [x[name] for name in names]
    elif isinstance(x, list):
        key, values = ("list", len(x)), x
    else:
        key, values = ("one",), [x]
    if not values or not all(ops.is_tensor(v) for v in values):
        return None
    if len({int(v.shape[0]) for v in values}) != 1:
        return None
    return key, values


def merge_batch(items: list[Any], ops: TensorOps = NUMPY_OPS) -> tuple[Any, list[int]] | None:
    """The concatenated input and each request's row count; None when the requests do not fit together."""
    parsed = [_leaves(x, ops) for x in items]
    if any(p is None for p in parsed):
        return None
    leaves = [p for p in parsed if p is not None]
    key = leaves[0][0]
    if any(p[0] != key for p in leaves):
        return None
    columns = list(zip(*(p[1] for p in leaves), strict=True))
    if any(len({ops.trailing(t) for t in column}) != 1 for column in columns):
        return None
    merged = [ops.concat(list(column)) for column in columns]
    rows = [int(p[1][0].shape[0]) for p in leaves]
    if key[0] == "dict":
        return dict(zip(key[1], merged, strict=True)), rows
    return (merged if key[0] == "list" else merged[0]), rows


def split_batch(out: Any, rows: list[int], ops: TensorOps = NUMPY_OPS) -> list[Any] | None:
    """A batched output (tensor, dict, list or tuple of tensors) split back per request, or None."""
    if ops.is_tensor(out):
        return None if int(out.shape[0]) != sum(rows) else list(ops.split(out, rows))
    if isinstance(out, Mapping):
        names = list(out)
        columns = [split_batch(out[name], rows, ops) for name in names]
        if any(c is None for c in columns):
            return None
        return [
            {n: c[i] for n, c in zip(names, columns, strict=True) if c is not None} for i in range(len(rows))
        ]
    if isinstance(out, (list, tuple)) and out:
        parts = [split_batch(value, rows, ops) for value in out]
        if any(p is None for p in parts):
            return None
        rebuild = tuple if isinstance(out, tuple) else list
        return [rebuild(p[i] for p in parts if p is not None) for i in range(len(rows))]
    return None

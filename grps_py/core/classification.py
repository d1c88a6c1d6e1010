"""Triton's classification extension: an output answered as its top K classes instead of its values.

A requested output with `parameters.classification = K` is answered as a BYTES tensor of
`"value:index"` strings, or `"value:index:label"` where the output's label file has a (non-empty)
label for that index, highest values first. A model that batches (max_batch_size > 0) gets the top K
of each row, shape [batch, min(K, values per row)]; any other, the top K of the whole tensor, shape
[min(K, values)]. The strings are Triton's: a float is written as C++'s `std::to_string` writes it
(six decimals, "0.900000"), an integer as its digits. Equal values keep their index order.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from grps_py.core.datatypes import datatype_of
from grps_py.core.errors import InvalidInput
from grps_py.core.untrusted import shown

Array = np.ndarray[Any, Any]
# Triton's bound on the values one row may have ("classification output tensor too large").
MAX_CLASSIFIED_VALUES = 1_000_000
_CLASSIFIABLE = frozenset(
    ("UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64", "FP32", "FP64")
)


def classify(name: str, array: Array, count: int, batched: bool, labels: Sequence[str] = ()) -> Array:
    """The top `count` classes of an output `array`, per row when `batched`, as an object array of bytes."""
    datatype = datatype_of(array.dtype)
    if datatype not in _CLASSIFIABLE:
        raise InvalidInput(
            f"output '{shown(name, 64)}': class results are not available for datatype "
            f"{datatype or array.dtype} (classification takes integers, FP32 and FP64)"
        )
    by_row = batched and array.ndim > 0
    per_row = math.prod(array.shape[1:]) if by_row else array.size
    rows = array.reshape(array.shape[0] if by_row else 1, per_row)
    if per_row > MAX_CLASSIFIED_VALUES:
        raise InvalidInput(
            f"output '{shown(name, 64)}' has {per_row} values per row to classify; at most "
            f"{MAX_CLASSIFIED_VALUES}"
        )
    top = min(count, per_row)
    text = _float_text if array.dtype.kind == "f" else str
    classes = np.empty((rows.shape[0], top), dtype=object)
    for r, row in enumerate(rows):
        for k, index in enumerate(_highest(row, top)):
            value = text(row[index].item())
            label = labels[index] if index < len(labels) else ""
            classes[r, k] = (f"{value}:{index}:{label}" if label else f"{value}:{index}").encode()
    return classes if by_row else classes.reshape(top)


def _highest(row: Array, top: int) -> list[int]:
    """The indices of the `top` highest values, highest first; equal values in index order, NaN last."""
    if top == 0:
        return []
    if row.dtype.kind == "f":
        order = np.argsort(-row, kind="stable")  # -NaN is NaN, which a sort puts last
    else:  # integers: a stable descending sort without negating (no overflow at the minimum)
        order = (row.size - 1 - np.argsort(row[::-1], kind="stable"))[::-1]
    return [int(i) for i in order[:top]]


def _float_text(value: float) -> str:
    """std::to_string(float or double): printf's %f (float is widened to double first, as here)."""
    return "%f" % value  # noqa: UP031 (printf's %f, exactly)

"""The Open Inference Protocol datatypes and their numpy dtypes.

BYTES tensors are numpy object arrays whose elements are `bytes`; BF16 uses `ml_dtypes.bfloat16`
(the dtype tritonclient uses), since numpy has no bfloat16 of its own.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

from grps_py.core.errors import InvalidInput

BYTES = "BYTES"
BF16 = "BF16"

OIP_DTYPES: dict[str, np.dtype[Any]] = {
    "BOOL": np.dtype(np.bool_),
    "UINT8": np.dtype(np.uint8),
    "UINT16": np.dtype(np.uint16),
    "UINT32": np.dtype(np.uint32),
    "UINT64": np.dtype(np.uint64),
    "INT8": np.dtype(np.int8),
    "INT16": np.dtype(np.int16),
    "INT32": np.dtype(np.int32),
    "INT64": np.dtype(np.int64),
    "FP16": np.dtype(np.float16),
    "FP32": np.dtype(np.float32),
    "FP64": np.dtype(np.float64),
    BYTES: np.dtype(object),
    BF16: np.dtype(ml_dtypes.bfloat16),
}
DATATYPE_NAMES: tuple[str, ...] = tuple(OIP_DTYPES)
_DATATYPE_BY_DTYPE: dict[np.dtype[Any], str] = {dtype: name for name, dtype in OIP_DTYPES.items()}


def numpy_dtype(datatype: str) -> np.dtype[Any]:
    """The numpy dtype of an OIP datatype; an unknown name is the client's error."""
    dtype = OIP_DTYPES.get(datatype)
    if dtype is None:
        raise InvalidInput(f"unknown datatype {datatype!r}; expected one of {', '.join(DATATYPE_NAMES)}")
    return dtype


def datatype_of(dtype: np.dtype[Any]) -> str | None:
    """The OIP datatype for a numpy dtype (any byte order); strings and objects are BYTES; None if none."""
    # One lookup in the usual case (it runs per tensor): a dtype in the host's byte order, written "=" or
    # explicitly ("<f4" on a little-endian host), is equal to the table's.
    datatype = _DATATYPE_BY_DTYPE.get(dtype)
    if datatype is None:
        if dtype.kind in ("U", "S", "O"):
            return BYTES
        if not dtype.isnative:
            return _DATATYPE_BY_DTYPE.get(dtype.newbyteorder("="))
    return datatype


def itemsize(datatype: str) -> int | None:
    """Bytes per element; None for BYTES, whose elements vary in length."""
    return None if datatype == BYTES else numpy_dtype(datatype).itemsize

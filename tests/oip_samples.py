"""One sample array per OIP datatype (extremes included), shared by the OIP codec tests."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

Array = np.ndarray[Any, Any]

SAMPLES: dict[str, Array] = {
    "BOOL": np.array([[True, False, True], [False, False, True]]),
    "UINT8": np.array([0, 1, 255], dtype=np.uint8),
    "UINT16": np.array([[0], [65535]], dtype=np.uint16),
    "UINT32": np.array([0, 2**32 - 1], dtype=np.uint32),
    "UINT64": np.array([0, 2**53 + 1, 2**64 - 1], dtype=np.uint64),
    "INT8": np.array([-128, 0, 127], dtype=np.int8),
    "INT16": np.array([-32768, 32767], dtype=np.int16),
    "INT32": np.array([[-(2**31)], [2**31 - 1]], dtype=np.int32),
    "INT64": np.array([-(2**63), 2**53 + 1, -(2**53) - 1, 2**63 - 1], dtype=np.int64),
    "FP16": np.array([0.1, -65504, 6e-8, -0.0], dtype=np.float16),
    "FP32": np.array([[0.1, 1 / 3], [3.4e38, 1e-45]], dtype=np.float32),
    "FP64": np.array([0.1, 1e308, 5e-324, -0.0]),
    "BYTES": np.array([[b"a", b""], ["é".encode(), b"\x00z"]], dtype=object),
    "BF16": np.array([1.5, -2, 0.1], dtype=ml_dtypes.bfloat16),
}
# Every datatype of a fixed size (all but BYTES).
FIXED_SAMPLES: dict[str, Array] = {name: array for name, array in SAMPLES.items() if name != "BYTES"}

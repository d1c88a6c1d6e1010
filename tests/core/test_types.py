"""The dtype table and how inferer outputs become payloads."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from grps_py.core.model import outputs_to_payload
from grps_py.core.types import DTYPE_BY_NAME, PayloadKind, dtype_for_array


@pytest.mark.parametrize(
    ("array", "grps_name", "numpy_dtype"),
    [
        (np.array([1.5], dtype=">f4"), "DT_FLOAT32", np.float32),  # big-endian becomes native
        (np.array([True, False]), "DT_UINT8", np.uint8),
        (np.array([70000], dtype=np.uint32), "DT_INT64", np.int64),
        (np.array(["a", "bc"]), "DT_STRING", object),
        (np.array([1], dtype=np.int16), "DT_INT16", np.int16),
        (np.array([1.5], dtype=ml_dtypes.bfloat16), "DT_FLOAT32", np.float32),  # grps has no bfloat16
    ],
)
def test_dtype_for_array(array: np.ndarray, grps_name: str, numpy_dtype: type) -> None:
    info, converted = dtype_for_array(array)
    assert info is DTYPE_BY_NAME[grps_name]
    assert converted.dtype == np.dtype(numpy_dtype) and converted.dtype.isnative
    assert converted.tolist() == array.tolist()


def test_complex_numbers_have_no_grps_dtype() -> None:
    with pytest.raises(TypeError, match="complex"):
        dtype_for_array(np.array([1j]))


def test_outputs_are_named_by_kind() -> None:
    single = outputs_to_payload(np.zeros(2))
    assert [t.name for t in single.tensors] == ["output"]
    listed = outputs_to_payload([np.zeros(1), np.ones(1)])
    assert [t.name for t in listed.tensors] == ["output_0", "output_1"]
    named = outputs_to_payload({"probs": np.zeros(3)})
    assert [t.name for t in named.tensors] == ["probs"]
    assert outputs_to_payload("hi").kind is PayloadKind.TEXT
    assert outputs_to_payload(b"raw").kind is PayloadKind.BYTES
    assert outputs_to_payload(None).kind is PayloadKind.EMPTY

"""Declared tensor signatures: input checks, positional naming, output naming, GrpsMessage limits."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from grps_py.core.datatypes import datatype_of, numpy_dtype
from grps_py.core.errors import InvalidInput
from grps_py.core.signature import (
    DeclaredInputs,
    TensorSpec,
    check_input,
    check_inputs,
    messages_can_carry,
    name_outputs,
)
from grps_py.core.types import Tensor

SPECS = (TensorSpec("a", "FP32", (-1, 3)), TensorSpec("b", "INT64", (2,)))


def tensors(**arrays: np.ndarray) -> list[Tensor]:
    return [Tensor(name, array) for name, array in arrays.items()]


def test_datatype_table_round_trips() -> None:
    for name in ("BOOL", "UINT64", "INT8", "FP16", "BF16", "BYTES"):
        assert datatype_of(numpy_dtype(name)) == name
    assert datatype_of(np.dtype(">f4")) == "FP32" and datatype_of(np.dtype("U3")) == "BYTES"
    assert datatype_of(np.dtype("<f4")) == "FP32" and datatype_of(np.dtype(">U3")) == "BYTES"
    assert datatype_of(np.dtype(np.complex64)) is None and datatype_of(np.dtype(">c8")) is None
    assert numpy_dtype("BF16") == np.dtype(ml_dtypes.bfloat16)
    with pytest.raises(InvalidInput, match="FP99"):
        numpy_dtype("FP99")


def test_good_inputs_come_back_in_declared_order() -> None:
    got = check_inputs(SPECS, tensors(b=np.zeros(2, np.int64), a=np.zeros((5, 3), np.float32)), "m")
    assert [t.name for t in got] == ["a", "b"]


def test_unnamed_inputs_take_declared_names_by_position() -> None:
    got = check_inputs(
        SPECS, [Tensor("", np.zeros((1, 3), np.float32)), Tensor("", np.zeros(2, np.int64))], "m"
    )
    assert [t.name for t in got] == ["a", "b"]


@pytest.mark.parametrize(
    ("arrays", "message"),
    [
        ({"a": np.zeros((1, 3), np.float32)}, "missing input 'b'"),
        (
            {"a": np.zeros((1, 3), np.float32), "b": np.zeros(2, np.int64), "c": np.zeros(1)},
            "unknown input 'c'",
        ),
        ({"a": np.zeros((1, 3), np.float64), "b": np.zeros(2, np.int64)}, "expects datatype FP32, got FP64"),
        ({"a": np.zeros(3, np.float32), "b": np.zeros(2, np.int64)}, "expects shape [-1, 3], got [3]"),
        (
            {"a": np.zeros((1, 3), np.float32), "b": np.zeros(3, np.int64)},
            "input 'b' expects shape [2], got [3]",
        ),
    ],
)
def test_bad_inputs_name_the_tensor(arrays: dict[str, np.ndarray], message: str) -> None:
    with pytest.raises(InvalidInput) as info:
        check_inputs(SPECS, tensors(**arrays), "m")
    assert message in info.value.public_message


@pytest.mark.parametrize(
    "arrays",
    [
        {"a": np.zeros((1, 3), np.float32), "b": np.zeros(2, np.int64)},  # declared order: the fast path
        {"b": np.zeros(2, np.int64), "a": np.zeros((5, 3), np.float32)},
        {"a": np.zeros((1, 3), np.float32)},
        {"a": np.zeros((1, 3), np.float32), "b": np.zeros(2, np.int64), "c": np.zeros(1)},
        {"a": np.zeros((1, 3), np.float64), "b": np.zeros(2, np.int64)},
        {"a": np.zeros((1, 3), np.float32), "b": np.zeros((1, 2), np.int64)},
        {"a": np.zeros((1, 4), np.float32), "b": np.zeros(2, np.int64)},
    ],
)
def test_declared_inputs_check_as_check_inputs(arrays: dict[str, np.ndarray]) -> None:
    given = tensors(**arrays)
    try:
        expected = check_inputs(SPECS, given, "m")
    except InvalidInput as exc:
        with pytest.raises(InvalidInput) as info:
            DeclaredInputs(SPECS).check(given, "m")
        assert info.value.public_message == exc.public_message
        return
    got = DeclaredInputs(SPECS).check(given, "m")
    assert got == expected
    # Tensors already named in declared order come back as they are: the node then keeps its payload.
    assert (got is given) == ([t.name for t in given] == [spec.name for spec in SPECS])


def test_an_input_of_the_declared_datatype_in_another_form_passes() -> None:
    check_input(TensorSpec("s", "BYTES", (1,)), Tensor("s", np.array(["a"])))  # str for BYTES
    check_input(TensorSpec("a", "FP32"), Tensor("a", np.zeros(2, ">f4")))  # another byte order
    with pytest.raises(InvalidInput, match="expects datatype FP32, got FP64"):
        check_input(TensorSpec("a", "FP32"), Tensor("a", np.zeros(2, ">f8")))


def test_fits_checks_rank_and_fixed_dims() -> None:
    spec = TensorSpec("a", "FP32", (-1, 3))
    assert spec.fits((7, 3)) and not spec.fits((7, 4)) and not spec.fits((3,))
    assert TensorSpec("b").fits((1, 2, 3)) and TensorSpec("c", shape=()).fits(())
    assert spec == TensorSpec("a", "FP32", (-1, 3)) and "_fixed" not in repr(spec)


def test_unnamed_outputs_take_declared_names() -> None:
    specs = (TensorSpec("probs"),)
    assert [t.name for t in name_outputs(specs, [Tensor("output", 1)])] == ["probs"]
    assert [t.name for t in name_outputs(specs, [Tensor("scores", 1)])] == ["scores"]  # named: kept
    two = (TensorSpec("p"), TensorSpec("q"))
    assert [t.name for t in name_outputs(two, [Tensor("output_0", 1), Tensor("output_1", 2)])] == ["p", "q"]
    assert [t.name for t in name_outputs(two, [Tensor("output", 1)])] == ["output"]  # count differs


@pytest.mark.parametrize(
    ("array", "fragment"),
    [
        (np.array([True]), "BOOL"),
        (np.array([1], np.uint16), "UINT16"),
        (np.array([1], np.uint64), "UINT64"),
        (np.array([1], ml_dtypes.bfloat16), "BF16"),
        (np.array([b"\xff"], dtype=object), "not UTF-8"),
    ],
)
def test_grps_messages_refuse_what_they_cannot_carry(array: np.ndarray, fragment: str) -> None:
    with pytest.raises(InvalidInput) as info:
        messages_can_carry([Tensor("x", array)])
    assert fragment in info.value.public_message and "converter_type numpy" in info.value.public_message


def test_grps_messages_carry_the_rest() -> None:
    messages_can_carry(
        tensors(a=np.zeros(1, np.uint8), b=np.zeros(1, np.float16), c=np.array([b"ok"], dtype=object))
    )

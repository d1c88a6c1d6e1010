"""oip_generate: Triton's generate extension, named JSON values in and out."""

from __future__ import annotations

import json
from typing import Any

import ml_dtypes
import numpy as np
import orjson
import pytest

from grps_py.codecs import oip_generate
from grps_py.core.errors import InvalidInput
from grps_py.core.oip import OipResponse
from grps_py.core.types import Tensor

Array = np.ndarray[Any, Any]


def same(got: Array, want: Array) -> None:
    """Same dtype, shape and values."""
    assert (got.dtype, got.shape, got.tolist()) == (want.dtype, want.shape, want.tolist())


def response(*arrays: tuple[str, Any], request_id: str = "") -> OipResponse:
    return OipResponse("m", "1", [Tensor(name, data) for name, data in arrays], request_id)


@pytest.mark.parametrize(
    ("value", "spec", "want"),
    [
        ("hi", (None, None), np.array([b"hi"], dtype=object)),
        (True, (None, None), np.array([True])),
        (3, (None, None), np.array([3], dtype=np.int64)),
        (2.5, (None, None), np.array([2.5])),
        ([1, 2.5], (None, None), np.array([1, 2.5])),
        ([[1, 2], [3, 4]], (None, None), np.array([[1, 2], [3, 4]], dtype=np.int64)),
        ([], (None, None), np.zeros(0)),
        (["a", "b"], (None, None), np.array([b"a", b"b"], dtype=object)),
        (2**63 - 1, (None, None), np.array([2**63 - 1], dtype=np.int64)),
        (0.1, ("FP32", None), np.array([0.1], dtype=np.float32)),
        ([1, 2], ("UINT64", [-1]), np.array([1, 2], dtype=np.uint64)),
        ("hi", ("BYTES", [1, -1]), np.array([[b"hi"]], dtype=object)),
        ([1, 2], ("INT32", [1, 2]), np.array([[1, 2]], dtype=np.int32)),
        ([1, 2], ("INT32", [-1, -1, 2]), np.array([[[1, 2]]], dtype=np.int32)),
        (7, ("INT8", []), np.array(7, dtype=np.int8)),
        (7, ("INT8", [-1]), np.array([7], dtype=np.int8)),
    ],
)
def test_decode_generate_inputs(value: Any, spec: Any, want: Array) -> None:
    inputs, parameters, request_id = oip_generate.decode_generate(orjson.dumps({"x": value}), {"x": spec})
    assert [t.name for t in inputs] == ["x"] and parameters == {} and request_id == ""
    same(inputs[0].data, want)


def test_decode_generate_parameters_id_and_unknown_inputs() -> None:
    document = {
        "text_input": "hello",
        "id": "g1",
        "parameters": {"stream": False, "temperature": 0.5},
        "n": 2,
    }
    inputs, parameters, request_id = oip_generate.decode_generate(
        orjson.dumps(document), {"text_input": ("BYTES", (1,))}
    )
    assert [(t.name, t.data.tolist()) for t in inputs] == [("text_input", [b"hello"]), ("n", [2])]
    assert parameters == {"stream": False, "temperature": 0.5}
    assert request_id == "g1"


@pytest.mark.parametrize(
    ("text", "specs", "fragment"),
    [
        (b"[1]", {}, "the request must be a JSON object"),
        (b"{", {}, "malformed JSON"),
        (b'{"id": 3}', {}, "id must be a string"),
        (b'{"parameters": [1]}', {}, "parameters must be a JSON object"),
        (b'{"parameters": {"stop": ["a"]}}', {}, "'stop' must be a string, number or boolean"),
        (b'{"x": ["a", 1]}', {}, "input 'x': values mix strings, booleans and numbers"),
        (b'{"x": [true, 1]}', {}, "values mix"),
        (b'{"x": null}', {}, "input 'x': values must be strings, booleans or numbers, found null"),
        (b'{"x": {"a": 1}}', {}, 'found {"a":1}'),
        (b'{"x": [[1], [2, 3]]}', {}, "input 'x': data is ragged"),
        (b'{"x": 9223372036854775808}', {}, "9223372036854775808 is out of range for INT64"),
        (b'{"x": 1.5}', {"x": ("INT32", None)}, "INT32 takes integers, found 1.5"),
        (b'{"x": "a"}', {"x": ("FP32", None)}, 'FP32 takes numbers, found "a"'),
        (b'{"x": 1e39}', {"x": ("FP32", None)}, "out of range for FP32"),
        (b'{"x": 1.0}', {"x": ("BF16", None)}, "BF16 is only accepted as binary data"),
        (b'{"x": 1}', {"x": ("FLOAT", None)}, "unknown datatype 'FLOAT'"),
        (b'{"x": [1, 2, 3]}', {"x": ("INT32", (2,))}, "input 'x': shape [3] does not match the model's [2]"),
        (b'{"x": [[1, 2]]}', {"x": (None, (-1,))}, "shape [1, 2] does not match the model's [-1]"),
        (b'{"x": [1, 2]}', {"x": (None, (3, -1))}, "shape [1, 2] does not match the model's [3, -1]"),
    ],
)
def test_decode_generate_errors(text: bytes, specs: Any, fragment: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        oip_generate.decode_generate(text, specs)
    assert fragment in caught.value.public_message


def test_encode_generate() -> None:
    outputs = [
        ("text_output", np.array([b"caf\xc3\xa9"], dtype=object)),
        ("bad", np.array([[b"\xff"]], dtype=object)),
        ("words", np.array([[b"a", b"b"]], dtype=object)),
        ("f32", np.array([[0.1]], dtype=np.float32)),
        ("f16", np.array([0.1, 1], dtype=np.float16)),
        ("bf16", np.array([1.5], dtype=ml_dtypes.bfloat16)),
        ("i64", np.array([[2**63 - 1, -(2**63)]], dtype=np.int64)),
        ("u64", np.array(2**64 - 1, dtype=np.uint64)),
        ("flag", np.array([True])),
        ("empty", np.zeros((0, 2), dtype=np.int32)),
        ("nan", np.array([np.nan, 1.0])),
    ]
    text = oip_generate.encode_generate(response(*outputs, request_id="g"))
    assert json.loads(text) == {
        "model_name": "m",
        "model_version": "1",
        "id": "g",
        "text_output": "café",
        "bad": "\ufffd",
        "words": [["a", "b"]],
        "f32": 0.1,
        "f16": [0.1, 1.0],
        "bf16": 1.5,
        "i64": [[2**63 - 1, -(2**63)]],
        "u64": 2**64 - 1,
        "flag": True,
        "empty": [],
        "nan": [None, 1.0],
    }
    assert b'"f32":0.1,' in text
    assert b'"id"' not in oip_generate.encode_generate(response(("x", np.array([1]))))

"""grps_json: the fast HTTP JSON codec, checked value by value against protobuf's own json_format."""

from __future__ import annotations

import json
import logging
from typing import Any

import numpy as np
import orjson
import pytest
from google.protobuf import json_format

from grps_py.codecs import grps_json, grps_pb
from grps_py.core.errors import InvalidInput
from grps_py.core.types import GMAP_FIELDS, Payload, PayloadKind, Tensor
from grps_py.protos import grps_pb2


def exact_json(text: str | bytes) -> Any:
    """Parsed JSON where each float is its repr, so 0.0 vs -0.0 and every last digit count."""
    return json.loads(text, parse_float=lambda token: repr(float(token)))


def proto3_json(payload: Payload, code: int = 200, msg: str = "OK", ok: bool = True) -> Any:
    """What protobuf's json_format writes for the same reply."""
    message = grps_pb.payload_to_message(payload, grps_pb.status_message(code, msg, ok))
    return exact_json(json_format.MessageToJson(message, preserving_proto_field_name=True))


def tensors(*arrays: Any, name: str = "x") -> Payload:
    return Payload.of_tensors([Tensor(name, np.asarray(array)) for array in arrays])


def float32_from_bits(bits: Any) -> np.ndarray[Any, Any]:
    return np.asarray(bits, dtype=np.uint32).view(np.float32)


ALL_POWERS_OF_TWO = np.concatenate(
    [float32_from_bits(np.arange(1, 255) << 23), -float32_from_bits([1 << 23])]
)
SUBNORMALS = float32_from_bits([1, 2, 3, 100, 12345, 0x7FFFFF, 0x400000])
RANDOM_BITS = float32_from_bits(np.random.default_rng(7).integers(0, 2**32, 20_000, dtype=np.uint32))

ENCODE_CASES: dict[str, Payload] = {
    "uint8": tensors(np.array([[0, 1], [128, 255]], dtype=np.uint8)),
    "int8": tensors(np.array([-128, 0, 127], dtype=np.int8)),
    "int16": tensors(np.array([-32768, 32767], dtype=np.int16)),
    "int32": tensors(np.array([-(2**31), 0, 2**31 - 1], dtype=np.int32)),
    "int64": tensors(np.array([2**62 + 1, -(2**63), 2**63 - 1, 0], dtype=np.int64)),
    "float16": tensors(np.array([0.1, 65504, -0.0, 6e-8, 6.1e-5, np.nan, np.inf], dtype=np.float16)),
    "float32": tensors(
        np.array([0.1, 1e-8, 3.4e38, -3.4e38, 0.9, 1 / 3, 16777217, -0.0, 0], dtype=np.float32)
    ),
    "float32-nan": tensors(np.array([np.nan, 1.5, np.nan], dtype=np.float32)),
    "float32-inf": tensors(np.array([[np.inf], [2.5]], dtype=np.float32)),
    "float32-mixed-specials": tensors(
        np.array([np.nan, np.inf, 1e-45, 2.0**-96, -np.inf, 0.1, 2.0**87], dtype=np.float32)
    ),
    "float32-powers-of-two": tensors(ALL_POWERS_OF_TWO),
    "float32-subnormals": tensors(SUBNORMALS),
    "float32-random-bits": tensors(RANDOM_BITS),
    "float64": tensors(np.array([0.1, 1e-300, 5e-324, 1.7976931348623157e308, -0.0, 1 / 3])),
    "float64-specials": tensors(np.array([np.nan, -np.inf, 0.25, np.inf])),
    "strings": tensors(np.array(["", "héllo", "日本語", 'quote " and \\ and \n', "😀"], dtype=object)),
    "bool-as-uint8": tensors(np.array([True, False])),
    "non-contiguous": Payload.of_tensors(
        [Tensor("f", (np.arange(6, dtype=np.float32) / 7).reshape(2, 3).T), Tensor("i", np.arange(8)[::2])]
    ),
    "scalar": tensors(np.float32(2.5).reshape(())),
    "scalar-string": tensors(np.array("only", dtype=object)),
    "zero-size": Payload.of_tensors(
        [
            Tensor("f", np.zeros((0, 3), np.float32)),
            Tensor("i", np.zeros((3, 0), np.int64)),
            Tensor("s", np.empty((0,), dtype=object)),
        ]
    ),
    "unnamed-and-several": Payload.of_tensors(
        [Tensor("", np.arange(3, dtype=np.int32)), Tensor("b", np.ones((2, 2), np.float64))]
    ),
    "no-tensors": Payload.of_tensors([]),
    "text": Payload.of_text("héllo grps 😀"),
    "empty-text": Payload.of_text(""),
    "bytes": Payload.of_bytes(bytes(range(256))),
    "empty-bytes": Payload.of_bytes(b""),
    "gmap": Payload.of_map(
        {
            "s_s": {"k": "v", "": "é", "quote": '"'},
            "s_b": {"b": b"\x00\xfe\xff", "empty": b""},
            "s_i32": {"min": -(2**31), "max": 2**31 - 1},
            "s_i64": {"big": 2**62 + 1, "neg": -(2**63)},
            "s_f": {"tenth": 0.1, "big": 3.4e38, "nan": float("nan"), "inf": float("-inf"), "tiny": 1e-45},
            "s_d": {"tenth": 0.1, "nan": float("nan"), "inf": float("inf")},
        }
    ),
    "gmap-partial": Payload.of_map({"s_i64": {"x": 5}, "s_s": {}}),
    "gmap-empty": Payload.of_map({}),
    "empty": Payload.empty(),
}


@pytest.mark.parametrize("case", sorted(ENCODE_CASES))
def test_encode_matches_json_format(case: str) -> None:
    payload = ENCODE_CASES[case]
    assert exact_json(grps_json.encode_response(payload)) == proto3_json(payload)


@pytest.mark.parametrize(
    ("code", "msg", "ok"), [(200, "OK", True), (400, "bad 'x'", False), (0, "", True), (-1, "é", False)]
)
def test_status_matches_json_format(code: int, msg: str, ok: bool) -> None:
    payload = ENCODE_CASES["text"]
    assert exact_json(grps_json.encode_response(payload, code, msg, ok)) == proto3_json(
        payload, code, msg, ok
    )
    expected = json_format.MessageToJson(
        grps_pb.status_message(code, msg, ok), preserving_proto_field_name=True
    )
    assert exact_json(grps_json.encode_status(code, msg, ok)) == exact_json(expected)


def test_error_envelope() -> None:
    assert orjson.loads(grps_json.encode_status(400, "bad input", False)) == {
        "status": {"code": 400, "msg": "bad input", "status": "FAILURE"}
    }


def test_message_payload_is_encoded_like_the_message() -> None:
    held = grps_pb.payload_to_message(ENCODE_CASES["float32-mixed-specials"])
    held.model = "ignored-1"
    ours = exact_json(grps_json.encode_response(Payload.of_message(held)))
    assert ours == proto3_json(ENCODE_CASES["float32-mixed-specials"])


def test_large_tensor_roundtrip() -> None:
    array = np.random.default_rng(1).standard_normal((1000, 200)).astype(np.float32)
    (tensor,) = grps_json.decode_request(grps_json.encode_response(tensors(array)))[0].tensors
    np.testing.assert_array_equal(tensor.data, array)


def test_shortest_float32_agrees_with_protobuf() -> None:
    from google.protobuf.internal.type_checkers import ToShortestFloat

    for value in [0.1, 1e-8, 3.4e38, 1 / 3, *SUBNORMALS.tolist(), *RANDOM_BITS[:2000].tolist()]:
        if np.isfinite(value):
            as_float32 = float(np.float32(value))
            assert grps_json.shortest_float32(as_float32) == ToShortestFloat(as_float32)


# --- return_ndarray -----------------------------------------------------------------------------


def ndarray_answer(payload: Payload) -> Any:
    document = orjson.loads(grps_json.encode_response(payload, return_ndarray=True))
    assert document["status"] == {"code": 200, "msg": "OK", "status": "SUCCESS"}
    return document.get("ndarray", document.get("gtensors"))


def test_ndarray_answer_is_nested() -> None:
    assert ndarray_answer(tensors(np.arange(6, dtype=np.float32).reshape(2, 3) / 10)) == [
        [0.0, 0.1, 0.2],
        [0.3, 0.4, 0.5],
    ]


def test_ndarray_answer_writes_specials_as_strings() -> None:
    array = np.array([[np.nan, 1.0], [np.inf, -np.inf]], dtype=np.float32)
    assert ndarray_answer(tensors(array)) == [["NaN", 1.0], ["Infinity", "-Infinity"]]


def test_ndarray_answer_of_a_transposed_array() -> None:
    assert ndarray_answer(tensors(np.arange(6).reshape(2, 3).T)) == [[0, 3], [1, 4], [2, 5]]


def test_ndarray_answer_uses_json_format_float32_digits() -> None:
    array = np.array([[1e-45, 2.0**-96]], dtype=np.float32)
    flat = proto3_json(tensors(array))["gtensors"]["tensors"][0]["flat_float32"]
    nested = json.loads(grps_json.encode_response(tensors(array), return_ndarray=True))["ndarray"]
    assert [repr(v) for v in nested[0]] == flat


@pytest.mark.parametrize(
    ("array", "expected"),
    [
        (np.float32(0.1).reshape(()), 0.1),
        (np.array(np.nan, dtype=np.float64), "NaN"),
        (np.array([2**62 + 1], dtype=np.int64), [2**62 + 1]),
        (np.array([0.5, 1.0], dtype=np.float16), [0.5, 1.0]),
        (np.array([True]), [1]),
    ],
)
def test_ndarray_answer_of_other_shapes_and_dtypes(array: Any, expected: Any) -> None:
    assert ndarray_answer(tensors(array)) == expected


@pytest.mark.parametrize(
    "payload",
    [
        tensors(np.array(["a"], dtype=object)),
        Payload.of_tensors([Tensor("a", np.ones(1)), Tensor("b", np.ones(1))]),
    ],
    ids=["string-tensor", "two-tensors"],
)
def test_ndarray_answer_falls_back_to_gtensors(payload: Payload) -> None:
    assert exact_json(grps_json.encode_response(payload, return_ndarray=True)) == proto3_json(payload)


# --- decoding -----------------------------------------------------------------------------------

DECODE_CASES: dict[str, Any] = {
    "every-dtype-snake": {
        "model": "m-1.0",
        "gtensors": {
            "tensors": [
                {"name": "u8", "dtype": "DT_UINT8", "shape": [2], "flat_uint8": [0, 255]},
                {"name": "i8", "dtype": "DT_INT8", "shape": [2], "flat_int8": [-128, 127]},
                {"name": "i16", "dtype": "DT_INT16", "shape": [1, 2], "flat_int16": [-32768, 32767]},
                {"name": "i32", "dtype": "DT_INT32", "shape": [3], "flat_int32": [-(2**31), 2.0, 2**31 - 1]},
                {
                    "name": "i64",
                    "dtype": "DT_INT64",
                    "shape": [3],
                    "flat_int64": ["9223372036854775807", -5, "-12"],
                },
                {"name": "f16", "dtype": "DT_FLOAT16", "shape": [3], "flat_float16": [0.1, "NaN", 65504]},
                {
                    "name": "f32",
                    "dtype": "DT_FLOAT32",
                    "shape": [2, 2],
                    "flat_float32": [0.1, 1e-8, "Infinity", 7],
                },
                {"name": "f64", "dtype": "DT_FLOAT64", "shape": [2], "flat_float64": [1e-300, "-Infinity"]},
                {"name": "s", "dtype": "DT_STRING", "shape": [3], "flat_string": ["", "héllo", "😀"]},
            ]
        },
    },
    "every-dtype-camel-and-numbers": {
        "gtensors": {
            "tensors": [
                {"dtype": 1, "shape": [1], "flatUint8": [7]},
                {"dtype": 2, "shape": [1], "flatInt8": [-7]},
                {"dtype": 3, "shape": [1], "flatInt16": [300]},
                {"dtype": 4, "shape": [1], "flatInt32": [70000]},
                {"dtype": 5, "shape": [1], "flatInt64": [4611686018427387905]},
                {"dtype": 6, "shape": [1], "flatFloat16": [0.5]},
                {"dtype": 7, "shape": [1], "flatFloat32": [3.4e38]},
                {"dtype": 8, "shape": [1], "flatFloat64": [0.1]},
                {"dtype": 9, "shape": [1], "flatString": ["x"]},
            ]
        }
    },
    "scalar-and-zero-size": {
        "gtensors": {
            "tensors": [
                {"name": "scalar", "dtype": "DT_FLOAT64", "flat_float64": [2.5]},
                {"name": "empty", "dtype": "DT_INT32", "shape": [0, 3]},
                {
                    "name": "other-flat-empty",
                    "dtype": "DT_INT32",
                    "shape": [1],
                    "flat_int32": [1],
                    "flat_string": [],
                },
            ]
        }
    },
    "no-tensors": {"gtensors": {}},
    "str-data": {"str_data": "hello grps"},
    "str-data-camel": {"strData": ""},
    "bin-data": {"bin_data": "AAEC/w=="},
    "bin-data-url-safe-unpadded": {"binData": "AAEC_w"},
    "gmap-snake": {
        "gmap": {
            "s_s": {"k": "v"},
            "s_b": {"b": "AAE="},
            "s_i32": {"i": -3},
            "s_i64": {"l": "123", "m": 7},
            "s_f": {"f": 0.1},
            "s_d": {"d": "-Infinity"},
        }
    },
    "gmap-camel": {
        "gmap": {
            "sS": {"": "é"},
            "sB": {"b": "_w"},
            "sI32": {"i": 1},
            "sI64": {"l": -1},
            "sF": {},
            "sD": {"d": 1},
        }
    },
    "empty": {},
    "model-only": {"model": "m"},
    "status-is-ignored": {"status": {"code": 500, "msg": "x", "status": "FAILURE"}, "str_data": "s"},
    "null-fields-are-absent": {"str_data": None, "bin_data": "YQ==", "model": None},
}


def assert_same_payload(actual: Payload, expected: Payload) -> None:
    assert actual.kind is expected.kind
    if actual.kind is PayloadKind.MAP:  # repr() so that NaN equals NaN
        assert {name: {k: repr(v) for k, v in entries.items()} for name, entries in actual.value.items()} == {
            name: {k: repr(v) for k, v in entries.items()} for name, entries in expected.value.items()
        }
        return
    if actual.kind is not PayloadKind.TENSORS:
        assert actual.value == expected.value
        return
    assert len(actual.tensors) == len(expected.tensors)
    for ours, theirs in zip(actual.tensors, expected.tensors, strict=True):
        assert (ours.name, ours.data.dtype, ours.data.shape) == (
            theirs.name,
            theirs.data.dtype,
            theirs.data.shape,
        )
        np.testing.assert_array_equal(ours.data, theirs.data)


@pytest.mark.parametrize("case", sorted(DECODE_CASES))
def test_decode_matches_json_format(case: str) -> None:
    body = json.dumps(DECODE_CASES[case]).encode()
    parsed = json_format.Parse(body, grps_pb2.GrpsMessage())
    payload, model = grps_json.decode_request(body)
    assert model == parsed.model
    assert_same_payload(payload, grps_pb.message_to_payload(parsed))


def test_decoded_gmap_holds_all_six_maps() -> None:
    payload, _ = grps_json.decode_request(b'{"gmap": {"s_i32": {"a": 1}}}')
    assert payload.value == {name: ({"a": 1} if name == "s_i32" else {}) for name in GMAP_FIELDS}


# grps's template client sends `s_t` (no such map in the proto) in every gmap; json_format with
# ignore_unknown_fields, which grps uses, drops unknown fields at any depth.
UNKNOWN_FIELD_CASES = {
    "gmap-s_t": {
        "gmap": {
            "s_s": {"key": "value"},
            "s_i32": {"key": 1},
            "s_t": {"key": {"dtype": "DT_FLOAT32", "shape": [2, 3], "flat_float32": [1, 2, 3, 4, 5, 6]}},
        }
    },
    "top-level": {"str_data": "hi", "foo": 1, "extra": {"a": [1, 2]}},
    "only-unknown": {"foo": 1},
    "in-a-tensor": {
        "gtensors": {
            "tensors": [
                {"name": "x", "dtype": "DT_INT32", "shape": [1], "flat_int32": [7], "flat_double": [1.0]}
            ],
            "note": "x",
        }
    },
}


@pytest.mark.parametrize("case", sorted(UNKNOWN_FIELD_CASES))
def test_unknown_fields_are_ignored_as_grps_parses(case: str) -> None:
    body = json.dumps(UNKNOWN_FIELD_CASES[case]).encode()
    parsed = json_format.Parse(body, grps_pb2.GrpsMessage(), ignore_unknown_fields=True)
    payload, model = grps_json.decode_request(body)
    assert model == parsed.model
    assert_same_payload(payload, grps_pb.message_to_payload(parsed))


def test_an_unknown_field_is_logged_once_escaped_and_the_names_are_bounded(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(grps_json, "UNKNOWN_FIELDS", grps_json.UnknownFieldLog(limit=3))
    with caplog.at_level(logging.DEBUG, logger="grps_py.codecs"):
        for _ in range(3):
            grps_json.decode_request(b'{"str_data": "a", "odd\\nname": 1}')
        for index in range(10):
            grps_json.decode_request(orjson.dumps({"str_data": "a", f"f{index}": 1}))
    lines = [record.getMessage() for record in caplog.records]
    assert lines[0] == "ignored unknown field 'odd\\nname' in the request (logged once per name)"
    assert len(lines) == 3  # the first name once, then two more until the limit
    assert len(grps_json.UNKNOWN_FIELDS.names) == 3


def test_unknown_fields_do_not_excuse_malformed_or_mistyped_ones() -> None:
    with pytest.raises(InvalidInput, match="request body is not valid JSON"):
        grps_json.decode_request(b'{"foo": 1, ')
    with pytest.raises(InvalidInput, match=r"gmap.s_i32\['k'\]: expected a number"):
        grps_json.decode_request(b'{"gmap": {"s_t": {}, "s_i32": {"k": "x"}}}')
    with pytest.raises(InvalidInput, match="str_data must be a string"):
        grps_json.decode_request(b'{"foo": 1, "str_data": 5}')


@pytest.mark.parametrize("case", sorted(set(ENCODE_CASES) - {"empty"}))
def test_decode_reads_back_what_encode_writes(case: str) -> None:
    payload = ENCODE_CASES[case]
    decoded, model = grps_json.decode_request(grps_json.encode_response(payload))
    assert model == ""
    assert_same_payload(decoded, grps_pb.message_to_payload(grps_pb.payload_to_message(payload)))


@pytest.mark.parametrize(
    ("ndarray", "expected"),
    [
        (
            [[[1, 2, 3], [4, 5, 6]], [[7, 8, 9], [10, 11, 12]]],
            np.arange(1, 13, dtype=np.float32).reshape(2, 2, 3),
        ),
        ([0.1, "NaN", "-Infinity"], np.array([0.1, np.nan, -np.inf], dtype=np.float32)),
        ([], np.zeros(0, dtype=np.float32)),
        (2.5, np.float32(2.5).reshape(())),
    ],
)
def test_ndarray_request_is_one_float32_tensor(ndarray: Any, expected: Any) -> None:
    payload, _ = grps_json.decode_request(orjson.dumps({"ndarray": ndarray}))
    (tensor,) = payload.tensors
    assert (tensor.name, tensor.data.dtype, tensor.data.shape) == ("", np.float32, expected.shape)
    np.testing.assert_array_equal(tensor.data, expected)


def tensor_doc(**fields: Any) -> dict[str, Any]:
    return {"gtensors": {"tensors": [{"name": "x", **fields}]}}


BAD_REQUESTS: list[tuple[Any, str]] = [
    (b"not json", "request body is not valid JSON"),
    (b"", "request body is not valid JSON"),
    ([1], "the request must be a JSON object"),
    ({"str_data": "a", "gtensors": {}}, "the request sets str_data and gtensors; set only one data field"),
    ({"str_data": "a", "strData": "b"}, "field 'str_data' appears twice in the request"),
    ({"model": 5}, "model must be a string"),
    ({"str_data": 5}, "str_data must be a string"),
    ({"bin_data": "***"}, "bin_data is not valid base64"),
    ({"gtensors": []}, "gtensors must be a JSON object"),
    ({"gtensors": {"tensors": {}}}, "gtensors.tensors must be a JSON array"),
    ({"gtensors": {"tensors": [5]}}, r"gtensors.tensors\[0\] must be a JSON object"),
    (
        tensor_doc(dtype="DT_FLOAT32", shape=[2, 3], flat_float32=[1, 2, 3, 4, 5]),
        r"tensor 'x': 5 values do not fit shape \[2, 3\]",
    ),
    (tensor_doc(dtype="DT_FLOAT32", flat_float32=[1, 2, 3]), r"tensor 'x': 3 values do not fit shape \[\]"),
    (
        tensor_doc(dtype="DT_FLOAT32", shape=[1], flat_int32=[1]),
        "tensor 'x': dtype DT_FLOAT32 expects its data in flat_float32, not in flat_int32",
    ),
    (tensor_doc(shape=[1], flat_float32=[1]), r"tensor 'x': dtype is not set \(DT_INVALID\)"),
    (
        tensor_doc(dtype="DT_INVALID", shape=[1], flat_float32=[1]),
        r"tensor 'x': dtype is not set \(DT_INVALID\)",
    ),
    (tensor_doc(dtype="DT_FOO", shape=[1]), "tensor 'x': unknown dtype 'DT_FOO'"),
    (tensor_doc(dtype=42, shape=[1]), "tensor 'x': unknown dtype 42"),
    (tensor_doc(dtype=True, shape=[1]), "tensor 'x': dtype must be a name"),
    (tensor_doc(dtype="DT_INT32", shape=[-1]), "tensor 'x': shape must be a list of non-negative integers"),
    (tensor_doc(dtype="DT_INT32", shape="2"), "tensor 'x': shape must be a list of non-negative integers"),
    (tensor_doc(dtype="DT_INT32", shape=[1.0]), "tensor 'x': shape must be a list of non-negative integers"),
    (tensor_doc(dtype="DT_INT32", shape=[1], flat_int32="1"), "tensor 'x': flat_int32 must be a JSON array"),
    (
        tensor_doc(dtype="DT_INT32", shape=[1], flat_int32=["1"]),
        "tensor 'x': expected a number, found a string",
    ),
    (
        tensor_doc(dtype="DT_INT32", shape=[2], flat_int32=[1, True]),
        "tensor 'x': expected a number, found true/false",
    ),
    (
        tensor_doc(dtype="DT_FLOAT32", shape=[2], flat_float32=[1, None]),
        "tensor 'x': expected a number, found null",
    ),
    (
        tensor_doc(dtype="DT_FLOAT32", shape=[1], flat_float32=[[1]]),
        "tensor 'x': expected a number, found an array",
    ),
    (
        tensor_doc(dtype="DT_STRING", shape=[1], flat_string=[1]),
        "tensor 'x': expected a string, found a number",
    ),
    (tensor_doc(dtype="DT_INT32", shape=[1], flat_int32=[1.5]), "tensor 'x': 1.5 is not an integer"),
    (
        tensor_doc(dtype="DT_UINT8", shape=[2], flat_uint8=[1, 300]),
        "tensor 'x': 300 is out of range for DT_UINT8",
    ),
    (tensor_doc(dtype="DT_UINT8", shape=[1], flat_uint8=[-1]), "tensor 'x': -1 is out of range for DT_UINT8"),
    (tensor_doc(dtype="DT_INT8", shape=[1], flat_int8=[300]), "tensor 'x': 300 is out of range for DT_INT8"),
    (
        tensor_doc(dtype="DT_INT32", shape=[1], flat_int32=[2**31]),
        "tensor 'x': 2147483648 is out of range for DT_INT32",
    ),
    (
        tensor_doc(dtype="DT_INT64", shape=[1], flat_int64=[2**63]),
        "tensor 'x': 9223372036854775808 is out of range for DT_INT64",
    ),
    (
        tensor_doc(dtype="DT_INT64", shape=[1], flat_int64=["2e3"]),
        "tensor 'x': expected a number, found the string '2e3'",
    ),
    (
        tensor_doc(dtype="DT_FLOAT32", shape=[1], flat_float32=[1e39]),
        "tensor 'x': 1e\\+39 is out of range for DT_FLOAT32",
    ),
    (
        tensor_doc(dtype="DT_FLOAT16", shape=[1], flat_float16=[70000]),
        "tensor 'x': 70000.0 is out of range for DT_FLOAT16",
    ),
    (
        tensor_doc(dtype="DT_FLOAT32", shape=[1], flat_float32=["nan"]),
        "tensor 'x': expected a number, found the string 'nan'",
    ),
    (
        {"gtensors": {"tensors": [{"dtype": "DT_INT8", "shape": [2], "flat_int8": [1]}]}},
        r"tensor #0: 1 values do not fit",
    ),
    ({"ndarray": [[1, 2], [3]]}, "ndarray is ragged"),
    ({"ndarray": [[1, 2], [3, "x"]]}, "ndarray: expected a number, found the string 'x'"),
    ({"ndarray": [True, False]}, "ndarray: expected a number, found true/false"),
    ({"ndarray": [1e39]}, "ndarray: 1e\\+39 is out of range for DT_FLOAT32"),
    ({"ndarray": {"a": 1}}, "ndarray: expected a number, found an object"),
    ({"gmap": {"s_s": []}}, "gmap.s_s must be a JSON object"),
    ({"gmap": {"s_s": {"k": 1}}}, r"gmap.s_s\['k'\] must be a string"),
    ({"gmap": {"s_b": {"k": "%%"}}}, r"gmap.s_b\['k'\] is not valid base64"),
    ({"gmap": {"s_i32": {"k": "5"}}}, r"gmap.s_i32\['k'\]: expected a number, found a string"),
    ({"gmap": {"s_i32": {"k": 2**31}}}, r"gmap.s_i32\['k'\]: 2147483648 is out of range for DT_INT32"),
    ({"gmap": {"s_f": {"k": None}}}, r"gmap.s_f\['k'\]: expected a number, found null"),
]


@pytest.mark.parametrize(("document", "message"), BAD_REQUESTS)
def test_bad_requests_are_invalid_input(document: Any, message: str) -> None:
    body = document if isinstance(document, bytes) else orjson.dumps(document)
    with pytest.raises(InvalidInput, match=f"^{message}"):
        grps_json.decode_request(body)


def test_the_float32_exception_scan_is_the_same_for_few_and_many_values() -> None:
    """Short answers are scanned in Python, long ones with numpy: the same indices either way (zeros,
    subnormals, NaN, infinities, every power of two, ordinary values)."""
    powers = (np.arange(256, dtype=np.uint32) << np.uint32(23)).view(np.float32)
    rng = np.random.default_rng(7)
    special = np.array([0.0, -0.0, np.nan, np.inf, -np.inf, 1e-45, 3.4028235e38], dtype=np.float32)
    pool = np.concatenate([powers, -powers, special, rng.standard_normal(64).astype(np.float32)])
    for size in [1, 5, grps_json.SMALL_ARRAY, grps_json.SMALL_ARRAY + 1, 300]:
        for _ in range(50):
            flat = rng.choice(pool, size).astype(np.float32)
            few = grps_json._float32_exceptions_few(flat)
            many = np.concatenate([flat, np.full(grps_json.SMALL_ARRAY + 1, 1.5, np.float32)])  # numpy path
            assert (
                few.tolist()
                == grps_json._float32_exceptions(many).tolist()
                == (grps_json._float32_exceptions(flat).tolist())
            )

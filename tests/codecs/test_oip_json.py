"""oip_json: OIP HTTP requests and responses (JSON and binary), checked against tritonclient itself."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import ml_dtypes
import numpy as np
import orjson
import pytest
import tritonclient.http as httpclient
from tritonclient.http._utils import _get_inference_request
from tritonclient.utils import np_to_triton_dtype

from grps_py.codecs import oip_json
from grps_py.core.errors import InvalidInput, ModelError
from grps_py.core.oip import OipResponse, RequestedOutput
from grps_py.core.protection import LimitsSettings
from grps_py.core.types import Tensor
from oip_samples import SAMPLES

Array = np.ndarray[Any, Any]

JSON_DATATYPES = [name for name in SAMPLES if name != "BF16"]  # tritonclient sends BF16 only binary

NO_ELEMENT_LIMIT = LimitsSettings(elements=10**40)  # larger than any shape these tests claim


def same(got: Array, want: Array) -> None:
    """Same dtype, shape and values (bit for bit where the dtype has a fixed size)."""
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert got.shape == want.shape
    if want.dtype == object:
        assert got.tolist() == want.tolist()
    else:
        assert got.tobytes() == want.tobytes()


def body(document: dict[str, Any]) -> bytes:
    return orjson.dumps(document)


def one_input(**fields: Any) -> bytes:
    """A request with one input; `fields` replace the defaults (None removes a field)."""
    entry: dict[str, Any] = {"name": "x", "datatype": "INT32", "shape": [2], "data": [1, 2]}
    entry.update(fields)
    return body({"inputs": [{k: v for k, v in entry.items() if v is not None}]})


def decode_one(**fields: Any) -> Array:
    request = oip_json.decode_request(one_input(**fields))
    assert [t.name for t in request.inputs] == ["x"]
    array: Array = request.inputs[0].data
    return array


def triton_request(
    arrays: dict[str, Array],
    binary: bool,
    outputs: list[Any] | None = None,
    request_id: str = "",
    parameters: dict[str, Any] | None = None,
) -> tuple[bytes, str | None]:
    """The body and Inference-Header-Content-Length that tritonclient's HTTP client would send."""
    inputs = []
    for name, array in arrays.items():
        infer_input = httpclient.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
        infer_input.set_data_from_numpy(array, binary_data=binary)
        inputs.append(infer_input)
    request_body, json_size = _get_inference_request(
        inputs, request_id, outputs, 0, False, False, 0, None, parameters
    )
    return request_body, None if json_size is None else str(json_size)


def response(*arrays: tuple[str, Any], request_id: str = "", **parameters: Any) -> OipResponse:
    return OipResponse("m", "1", [Tensor(name, data) for name, data in arrays], request_id, parameters)


def read_back(encoded: tuple[bytes, int | None], name: str) -> Array:
    """An output as tritonclient reads it from the response body."""
    result = httpclient.InferResult.from_response_body(encoded[0], header_length=encoded[1])
    array: Array = result.as_numpy(name)
    return array


def header_of(encoded: tuple[bytes, int | None]) -> Any:
    data, length = encoded
    return json.loads(data if length is None else data[:length])


# --- requests: tritonclient interop ------------------------------------------------------------


@pytest.mark.parametrize("datatype", SAMPLES)
def test_decode_tritonclient_binary_request(datatype: str) -> None:
    array = SAMPLES[datatype]
    request_body, header_length = triton_request({"a": array, "b": array[:0]}, binary=True)
    request = oip_json.decode_request(request_body, header_length)
    assert [t.name for t in request.inputs] == ["a", "b"]
    same(request.inputs[0].data, array)
    same(request.inputs[1].data, array[:0])
    assert request.binary_output  # tritonclient asks for binary outputs when none are named


@pytest.mark.parametrize("datatype", [name for name in SAMPLES if name != "BYTES"])
def test_binary_input_is_a_read_only_view_of_the_body(datatype: str) -> None:
    request_body, header_length = triton_request({"a": SAMPLES[datatype]}, binary=True)
    array = oip_json.decode_request(request_body, header_length).inputs[0].data
    assert np.shares_memory(array, np.frombuffer(request_body, dtype=np.uint8))
    assert not array.flags.writeable


@pytest.mark.parametrize("datatype", JSON_DATATYPES)
def test_decode_tritonclient_json_request(datatype: str) -> None:
    array = SAMPLES[datatype]
    request_body, header_length = triton_request({"a": array}, binary=False)
    assert header_length is None
    same(oip_json.decode_request(request_body).inputs[0].data, array)


def test_decode_mixed_binary_and_json_inputs_with_outputs_and_parameters() -> None:
    outputs = [
        httpclient.InferRequestedOutput("y", binary_data=True),
        httpclient.InferRequestedOutput("z", binary_data=False),
    ]
    request_body, header_length = triton_request(
        {"a": SAMPLES["FP32"], "b": SAMPLES["BYTES"], "c": SAMPLES["INT64"]},
        binary=True,
        outputs=outputs,
        request_id="r-1",
        parameters={"temperature": 0.5, "mode": "fast"},
    )
    request = oip_json.decode_request(request_body, header_length)
    same(request.inputs[0].data, SAMPLES["FP32"])
    same(request.inputs[1].data, SAMPLES["BYTES"])
    same(request.inputs[2].data, SAMPLES["INT64"])
    assert request.outputs == [RequestedOutput("y", True), RequestedOutput("z", False)]
    assert request.id == "r-1"
    assert request.parameters == {"temperature": 0.5, "mode": "fast"}
    assert not request.binary_output


def test_decode_keeps_other_parameters() -> None:
    document = {
        "id": "7",
        "parameters": {"binary_data_output": True, "k": 3, "flag": False},
        "inputs": [{"name": "x", "datatype": "INT32", "shape": [1], "data": [1], "parameters": {"p": 1}}],
        "outputs": [{"name": "y", "parameters": {"classification": 2}}, {"name": "z"}],
    }
    request = oip_json.decode_request(body(document))
    assert request.parameters == {"binary_data_output": True, "k": 3, "flag": False}
    assert request.binary_output and request.id == "7"
    assert request.outputs == [RequestedOutput("y", None, {"classification": 2}), RequestedOutput("z")]


# --- requests: JSON data -----------------------------------------------------------------------

JSON_DATA_CASES: list[tuple[str, list[int], Any, Array]] = [
    ("BOOL", [2, 2], [[True, False], [False, True]], np.array([[True, False], [False, True]])),
    ("UINT8", [3], [0, 7, 255], np.array([0, 7, 255], dtype=np.uint8)),
    ("UINT16", [2], [0, 65535], np.array([0, 65535], dtype=np.uint16)),
    ("UINT32", [1, 2], [[0, 2**32 - 1]], np.array([[0, 2**32 - 1]], dtype=np.uint32)),
    ("UINT64", [4], [0, 2**53 + 1, 2**63, 2**64 - 1], np.array([0, 2**53 + 1, 2**63, 2**64 - 1], np.uint64)),
    ("INT8", [2], [-128, 127], np.array([-128, 127], dtype=np.int8)),
    ("INT16", [2], [-32768, 32767], np.array([-32768, 32767], dtype=np.int16)),
    ("INT32", [2], [-(2**31), 2**31 - 1], np.array([-(2**31), 2**31 - 1], dtype=np.int32)),
    ("INT64", [3], [-(2**63), 2**53 + 1, 2**63 - 1], np.array([-(2**63), 2**53 + 1, 2**63 - 1], np.int64)),
    ("FP16", [3], [0.1, 1, 65504], np.array([0.1, 1, 65504], dtype=np.float16)),
    ("FP32", [2, 2], [[1, 0.1], [-2.5, 3.4e38]], np.array([[1, 0.1], [-2.5, 3.4e38]], dtype=np.float32)),
    ("FP64", [3], [2**53 + 1, 0.1, 1e308], np.array([2**53 + 1, 0.1, 1e308])),
    ("BYTES", [3], ["a", "é", ""], np.array([b"a", "é".encode(), b""], dtype=object)),
    ("INT32", [2, 3], [1, 2, 3, 4, 5, 6], np.arange(1, 7, dtype=np.int32).reshape(2, 3)),  # flat
    ("INT32", [2, 3], [[1, 2, 3], [4, 5, 6]], np.arange(1, 7, dtype=np.int32).reshape(2, 3)),  # nested
    ("INT32", [6], [[1, 2, 3], [4, 5, 6]], np.arange(1, 7, dtype=np.int32)),  # nested, flat shape
    ("FP32", [1, 2, 1], [[[1.5], [2]]], np.array([[[1.5], [2]]], dtype=np.float32)),
    ("INT64", [], [5], np.array(5, dtype=np.int64)),  # 0-d
    ("BYTES", [], ["z"], np.array(b"z", dtype=object)),
    ("FP32", [0], [], np.zeros(0, dtype=np.float32)),  # empty
    ("BOOL", [2, 0], [[], []], np.zeros((2, 0), dtype=bool)),
    ("BYTES", [0, 3], [], np.zeros((0, 3), dtype=object)),
    ("UINT64", [0], [], np.zeros(0, np.uint64)),
]


@pytest.mark.parametrize(("datatype", "shape", "data", "want"), JSON_DATA_CASES)
def test_decode_json_data(datatype: str, shape: list[int], data: Any, want: Array) -> None:
    same(decode_one(datatype=datatype, shape=shape, data=data), want)


def test_int64_extremes_are_exact() -> None:
    """Checked on the raw text, so no float rounding anywhere can hide (2**53 + 1 is not a float64)."""
    head = b'{"inputs":[{"name":"x","datatype":"%s","shape":[3],"data":[%s]}]}'
    text = head % (b"INT64", b"9223372036854775807,-9223372036854775808,9007199254740993")
    assert decode_one_raw(text).tolist() == [2**63 - 1, -(2**63), 2**53 + 1]
    text = head % (b"UINT64", b"18446744073709551615,9007199254740993,9223372036854775808")
    assert decode_one_raw(text).tolist() == [2**64 - 1, 2**53 + 1, 2**63]


def decode_one_raw(text: bytes) -> Array:
    array: Array = oip_json.decode_request(text).inputs[0].data
    return array


def test_large_json_data_is_converted_in_bulk() -> None:
    values = np.random.default_rng(3).standard_normal(100_000).astype(np.float32)
    got = decode_one(datatype="FP32", shape=[100, 1000], data=values.tolist())
    same(got, values.reshape(100, 1000))


JSON_DATA_ERRORS: list[tuple[str, Any, Any, str]] = [
    ("BOOL", [1], [1], "BOOL takes true/false, found 1"),
    ("BOOL", [1], ["true"], 'found "true"'),
    ("INT32", [1], [True], "INT32 takes integers, found true"),
    ("INT32", [2], [1, 1.0], "INT32 takes integers, found 1.0"),
    ("UINT8", [1], [2.5], "found 2.5"),
    ("INT8", [2], [1, 300], "input 'x': 300 is out of range for INT8"),
    ("INT8", [1], [-129], "-129 is out of range for INT8"),
    ("UINT8", [1], [-1], "-1 is out of range for UINT8"),
    ("UINT32", [1], [2**32], "4294967296 is out of range for UINT32"),
    ("INT64", [1], [2**63], "9223372036854775808 is out of range for INT64"),
    ("UINT64", [1], [-1], "-1 is out of range for UINT64"),
    ("FP32", [1], [True], "FP32 takes numbers, found true"),
    ("FP64", [2], [1.5, "2"], 'FP64 takes numbers, found "2"'),
    ("FP16", [1], [None], "found null"),
    ("FP32", [1], [{"a": 1}], 'found {"a":1}'),
    ("FP32", [1], [1e39], "input 'x': 1e+39 is out of range for FP32"),
    ("FP16", [2], [1, 70000], "70000.0 is out of range for FP16"),
    ("BYTES", [1], [1], "BYTES takes strings, found 1"),
    ("BYTES", [1], [None], "BYTES takes strings, found null"),
    ("BF16", [1], [1.0], "BF16 is only accepted as binary data"),
    ("INT32", [2, 3], [1, 2, 3, 4, 5], "input 'x': 5 values do not fit shape [2, 3]"),
    ("INT32", [2], [[1, 2], [3, 4]], "4 values do not fit shape [2]"),
    ("INT32", [], [], "0 values do not fit shape []"),
    ("INT32", [3], [[1, 2], [3]], "data is ragged"),
    ("INT32", [3], [1, [2, 3]], "data is ragged"),
    ("INT32", [3], [[1, 2], 3], "data is ragged"),
    ("BYTES", [2], [["ab"], "cd"], "data is ragged"),
    ("INT32", [8], [[[1, 2], [3, 4]], [[5, 6, 7, 8]]], "data is ragged"),  # same count, still ragged
    ("INT32", [1], 5, "input 'x': data must be a JSON array"),
    ("INT32", [1], {"a": 1}, "data must be a JSON array"),
]


@pytest.mark.parametrize(("datatype", "shape", "data", "fragment"), JSON_DATA_ERRORS)
def test_decode_json_data_errors(datatype: str, shape: Any, data: Any, fragment: str) -> None:
    with pytest.raises(InvalidInput, match="input 'x'") as caught:
        decode_one(datatype=datatype, shape=shape, data=data)
    assert fragment in caught.value.public_message


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        (
            b'{"inputs":[{"name":"x","datatype":"UINT64","shape":[1],"data":[18446744073709551616]}]}',
            "out of range",
        ),
        (
            b'{"inputs":[{"name":"x","datatype":"INT64","shape":[1],"data":[-9223372036854775809]}]}',
            "out of range",
        ),
        (b'{"inputs":[{"name":"x","datatype":"FP64","shape":[1],"data":[1e400]}]}', "malformed JSON"),
        (b'{"inputs":[{"name":"x","datatype":"FP32","shape":[1],"data":[NaN]}]}', "malformed JSON"),
        (b'{"inputs":[{"name":"x","datatype":"BYTES","shape":[1],"data":["\\ud800"]}]}', "malformed JSON"),
        (b'{"inputs": [', "malformed JSON"),
        (b"\xff\xfe", "malformed JSON"),
    ],
)
def test_decode_raw_json_errors(text: bytes, fragment: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        oip_json.decode_request(text)
    assert fragment in caught.value.public_message


# --- requests: structure -----------------------------------------------------------------------

GOOD_INPUT = {"name": "x", "datatype": "INT32", "shape": [1], "data": [1]}
STRUCTURE_ERRORS: list[tuple[Any, str]] = [
    ([], "the request must be a JSON object"),
    ({}, "inputs must be a JSON array"),
    ({"inputs": {}}, "inputs must be a JSON array"),
    ({"inputs": [1]}, "inputs[0] must be a JSON object"),
    ({"inputs": [{**GOOD_INPUT, "name": ""}]}, "inputs[0].name must be a non-empty string"),
    ({"inputs": [{**GOOD_INPUT, "name": 3}]}, "inputs[0].name must be a non-empty string"),
    (
        {"inputs": [{**GOOD_INPUT, "datatype": "FP8"}]},
        "input 'x': unknown datatype \"FP8\"; use one of BOOL, UINT8",
    ),
    ({"inputs": [{**GOOD_INPUT, "datatype": None}]}, "unknown datatype null"),
    ({"inputs": [{**GOOD_INPUT, "datatype": ["FP32"]}]}, 'unknown datatype ["FP32"]'),
    ({"inputs": [{**GOOD_INPUT, "shape": "1"}]}, "input 'x': shape must be a list of non-negative integers"),
    ({"inputs": [{**GOOD_INPUT, "shape": [-1]}]}, "shape must be a list of non-negative integers"),
    ({"inputs": [{**GOOD_INPUT, "shape": [True]}]}, "shape must be a list of non-negative integers"),
    ({"inputs": [{**GOOD_INPUT, "shape": [1.0]}]}, "shape must be a list of non-negative integers"),
    ({"inputs": [{k: v for k, v in GOOD_INPUT.items() if k != "data"}]}, "give either data or parameters"),
    ({"inputs": [{**GOOD_INPUT, "parameters": {"binary_data_size": 4}}]}, "give either data or parameters"),
    ({"inputs": [{**GOOD_INPUT, "parameters": {"binary_data_size": -4}}]}, "must be a non-negative integer"),
    (
        {"inputs": [{**GOOD_INPUT, "parameters": {"binary_data_size": True}}]},
        "must be a non-negative integer",
    ),
    ({"inputs": [{**GOOD_INPUT, "parameters": {"binary_data_size": "4"}}]}, "must be a non-negative integer"),
    ({"inputs": [{**GOOD_INPUT, "parameters": []}]}, "input 'x' parameters must be a JSON object"),
    (
        {"inputs": [{**GOOD_INPUT, "parameters": {"shared_memory_region": "r"}}]},
        "'shared_memory_region' needs 'shared_memory_byte_size'",
    ),
    ({"inputs": [GOOD_INPUT, GOOD_INPUT]}, "two inputs have the same name"),
    ({"inputs": [], "id": 5}, "id must be a string"),
    ({"inputs": [], "parameters": [1]}, "parameters must be a JSON object"),
    ({"inputs": [], "parameters": {"a": [1]}}, "parameters: 'a' must be a string, number or boolean"),
    ({"inputs": [], "parameters": {"a": None}}, "'a' must be a string, number or boolean"),
    (
        {"inputs": [], "parameters": {"binary_data_output": "yes"}},
        "'binary_data_output' must be true or false",
    ),
    ({"inputs": [], "outputs": {}}, "outputs must be a JSON array"),
    ({"inputs": [], "outputs": ["y"]}, "outputs[0] must be a JSON object"),
    ({"inputs": [], "outputs": [{}]}, "outputs[0].name must be a non-empty string"),
    (
        {"inputs": [], "outputs": [{"name": "y", "parameters": {"binary_data": 1}}]},
        "'binary_data' must be true",
    ),
    ({"inputs": [], "outputs": [{"name": "y"}, {"name": "y"}]}, "an output is requested twice"),
]


@pytest.mark.parametrize(("document", "fragment"), STRUCTURE_ERRORS)
def test_decode_structure_errors(document: Any, fragment: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        oip_json.decode_request(body(document))
    assert fragment in caught.value.public_message


def test_decode_allows_no_inputs_and_no_outputs() -> None:
    request = oip_json.decode_request(b'{"inputs": []}')
    assert (request.inputs, request.outputs, request.id, request.parameters) == ([], [], "", {})


# --- requests: the binary part -----------------------------------------------------------------


def binary_request(inputs: list[dict[str, Any]], binary: bytes) -> tuple[bytes, str]:
    header = body({"inputs": inputs})
    return header + binary, str(len(header))


def binary_input(name: str, datatype: str, shape: list[int], size: int) -> dict[str, Any]:
    return {"name": name, "datatype": datatype, "shape": shape, "parameters": {"binary_data_size": size}}


def test_binary_inputs_take_consecutive_slices_in_input_order() -> None:
    a, b = np.arange(3, dtype=np.int32), np.array([1.5, 2.5])
    inputs = [
        binary_input("a", "INT32", [3], 12),
        {"name": "j", "datatype": "BOOL", "shape": [1], "data": [True]},
        binary_input("e", "FP32", [0], 0),
        binary_input("b", "FP64", [2, 1], 16),
    ]
    request = oip_json.decode_request(*binary_request(inputs, a.tobytes() + b.tobytes()))
    same(request.inputs[0].data, a)
    same(request.inputs[1].data, np.array([True]))
    same(request.inputs[2].data, np.zeros(0, dtype=np.float32))
    same(request.inputs[3].data, b.reshape(2, 1))


@pytest.mark.parametrize(
    ("inputs", "binary", "fragment"),
    [
        ([binary_input("a", "INT32", [3], 12)], bytes(8), "input 'a': binary_data_size 12 runs past the end"),
        ([binary_input("a", "INT32", [2], 8)], bytes(12), "4 bytes of binary data that no input claims"),
        (
            [binary_input("a", "INT32", [3], 8)],
            bytes(8),
            "input 'a': shape [3] of INT32 needs 12 bytes, got 8",
        ),
        (
            [binary_input("a", "INT64", [2**40, 2**40], 8)],
            bytes(8),
            "input 'a': 1208925819614629174706176 elements exceed limits.elements (268435456)",
        ),
        ([binary_input("a", "BYTES", [2**50], 4)], bytes(4), "input 'a': 1125899906842624 elements exceed"),
        ([binary_input("a", "BYTES", [1], 6)], b"\x05\x00\x00\x00ab", "BYTES element 0 (length 5) runs past"),
        ([binary_input("a", "BYTES", [1], 7)], b"\x02\x00\x00\x00abc", "1 bytes left over after 1 BYTES"),
        ([binary_input("a", "BYTES", [2], 6)], b"\x02\x00\x00\x00ab", "cannot hold 2 elements"),
    ],
)
def test_binary_part_errors(inputs: list[dict[str, Any]], binary: bytes, fragment: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        oip_json.decode_request(*binary_request(inputs, binary))
    assert fragment in caught.value.public_message


@pytest.mark.parametrize(
    ("inputs", "binary", "fragment"),
    [
        ([binary_input("a", "INT64", [2**40, 2**40], 8)], bytes(8), "needs 9671406556917033397649408 bytes"),
        ([binary_input("a", "BYTES", [2**50], 4)], bytes(4), "input 'a': 4 bytes of BYTES data cannot hold"),
    ],
)
def test_huge_claimed_shapes_are_refused_by_arithmetic_without_limits(
    inputs: list[dict[str, Any]], binary: bytes, fragment: str
) -> None:
    with pytest.raises(InvalidInput) as caught:
        oip_json.decode_request(*binary_request(inputs, binary), limits=NO_ELEMENT_LIMIT)
    assert fragment in caught.value.public_message


def test_binary_input_without_header_length_is_explained() -> None:
    header = body({"inputs": [binary_input("a", "INT32", [1], 4)]})
    with pytest.raises(InvalidInput, match="is Inference-Header-Content-Length set"):
        oip_json.decode_request(header)


@pytest.mark.parametrize(
    ("header_length", "fragment"),
    [
        ("x", "must be a non-negative integer"),
        ("-3", "non-negative"),
        ("999", "body has only"),
        ("3", "malformed"),
    ],
)
def test_header_length_errors(header_length: str, fragment: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        oip_json.decode_request(b'{"inputs": []}', header_length)
    assert fragment in caught.value.public_message


ODD_VALUES: list[Any] = [
    None,
    True,
    0,
    -1,
    2**63,
    1.5,
    1e300,
    "",
    "x",
    [],
    [1],
    [[1], [2, 3]],
    {},
    {"a": [1]},
]


@pytest.mark.parametrize("field", ["name", "datatype", "shape", "data", "parameters", "binary_data_size"])
@pytest.mark.parametrize("datatype", SAMPLES)
def test_odd_values_anywhere_raise_only_invalid_input(field: str, datatype: str) -> None:
    """Whatever a client puts in a field, the codec answers a tensor or InvalidInput, never a crash."""
    for value in ODD_VALUES:
        entry: dict[str, Any] = {"name": "x", "datatype": datatype, "shape": [1], "data": [1]}
        if field == "binary_data_size":
            entry = {**binary_input("x", datatype, [1], 0), "parameters": {"binary_data_size": value}}
        else:
            entry[field] = value
        for data, header_length in ((body({"inputs": [entry]}), None), binary_request([entry], bytes(8))):
            with contextlib.suppress(InvalidInput):
                oip_json.decode_request(data, header_length)


def test_truncated_binary_bodies_raise_only_invalid_input() -> None:
    request_body, header_length = triton_request(dict(SAMPLES), binary=True)
    assert header_length is not None
    for cut in range(int(header_length), len(request_body)):
        with pytest.raises(InvalidInput):
            oip_json.decode_request(request_body[:cut], header_length)
    for cut in range(int(header_length)):
        with pytest.raises(InvalidInput):
            oip_json.decode_request(request_body[:cut], str(cut))


# --- responses ---------------------------------------------------------------------------------


@pytest.mark.parametrize("datatype", SAMPLES)
def test_encode_json_output_read_by_tritonclient(datatype: str) -> None:
    array = SAMPLES[datatype]
    encoded = oip_json.encode_response(response(("y", array)), set())
    got = read_back(encoded, "y")
    if datatype == "BF16":  # JSON cannot carry BF16: it goes binary unasked
        assert encoded[1] is not None
        same(got, array)
    elif datatype == "BYTES":  # tritonclient reads JSON strings as str
        assert encoded[1] is None
        assert got.tolist() == [[v.decode() for v in row] for row in array.tolist()]
    else:
        assert encoded[1] is None
        same(got, array)


@pytest.mark.parametrize("datatype", SAMPLES)
def test_encode_binary_output_read_by_tritonclient(datatype: str) -> None:
    array = SAMPLES[datatype]
    encoded = oip_json.encode_response(response(("y", array), ("e", array[:0])), {"y", "e"})
    assert encoded[1] is not None
    same(read_back(encoded, "y"), array)
    assert read_back(encoded, "e").shape == array[:0].shape
    outputs = header_of(encoded)["outputs"]
    assert outputs[0] == {
        "name": "y",
        "datatype": datatype,
        "shape": list(array.shape),
        "parameters": {"binary_data_size": len(encoded[0]) - encoded[1]},
    }


def test_encode_response_document() -> None:
    encoded = oip_json.encode_response(
        response(("y", np.array([[1, 2]], dtype=np.int32)), request_id="r", seq=3), set()
    )
    assert encoded[1] is None
    assert header_of(encoded) == {
        "model_name": "m",
        "model_version": "1",
        "id": "r",
        "parameters": {"seq": 3},
        "outputs": [{"name": "y", "datatype": "INT32", "shape": [1, 2], "data": [1, 2]}],
    }
    bare = header_of(oip_json.encode_response(response(), set()))
    assert bare == {"model_name": "m", "model_version": "1", "outputs": []}


def test_binary_outputs_follow_the_header_in_output_order() -> None:
    a, b, c = np.arange(2, dtype=np.int16), np.array([1.5], dtype=np.float32), np.array([True])
    data, length = oip_json.encode_response(response(("a", a), ("c", c), ("b", b)), {"b", "a"})
    assert length is not None
    assert data[length:] == a.tobytes() + b.tobytes()
    assert header_of((data, length))["outputs"][1] == {
        "name": "c",
        "datatype": "BOOL",
        "shape": [1],
        "data": [True],
    }


def test_float_digits_are_shortest_for_their_precision() -> None:
    encoded = oip_json.encode_response(
        response(
            ("f32", np.array([0.1, 1 / 3, 16777216, 1e-45], dtype=np.float32)),
            ("f16", np.array([0.1, 65504, 6e-8], dtype=np.float16)),
            ("f64", np.array([0.1, 1 / 3])),
        ),
        set(),
    )
    text = encoded[0]
    assert b'"data":[0.1,0.33333334,16777216.0,1e-45]' in text
    assert b'"data":[0.1,65500.0,6e-8]' in text
    assert b'"data":[0.1,0.3333333333333333]' in text


def test_64_bit_integers_are_exact_json_integers() -> None:
    values = [-(2**63), 2**63 - 1, 2**53 + 1]
    encoded = oip_json.encode_response(
        response(("i", np.array(values, dtype=np.int64)), ("u", np.array([2**64 - 1, 2**53 + 1], np.uint64))),
        set(),
    )
    outputs = json.loads(encoded[0])["outputs"]
    assert outputs[0]["data"] == values
    assert outputs[1]["data"] == [2**64 - 1, 2**53 + 1]


@pytest.mark.parametrize(
    "array",
    [
        np.array([1.0, np.nan], dtype=np.float32),
        np.array([[np.inf], [0.5]]),
        np.array([-np.inf], dtype=np.float16),
        np.array([b"ok", b"\xff\xfe"], dtype=object),
        np.array([1, 2], dtype=ml_dtypes.bfloat16),
    ],
    ids=["nan-fp32", "inf-fp64", "inf-fp16", "not-utf8", "bf16"],
)
def test_values_json_cannot_carry_go_binary_unasked(array: Array) -> None:
    encoded = oip_json.encode_response(response(("ok", np.array([1])), ("y", array)), set())
    assert encoded[1] is not None
    outputs = header_of(encoded)["outputs"]
    assert "data" in outputs[0] and "parameters" in outputs[1]
    got = read_back(encoded, "y")
    assert got.dtype == array.dtype and got.shape == array.shape
    assert got.tobytes() == array.tobytes() if array.dtype != object else got.tolist() == array.tolist()


def test_encode_shapes_and_layouts() -> None:
    zero_d = oip_json.encode_response(response(("s", np.array(2.5, dtype=np.float32))), set())
    assert header_of(zero_d)["outputs"][0]["shape"] == [] and header_of(zero_d)["outputs"][0]["data"] == [2.5]
    zero_d_binary = oip_json.encode_response(response(("s", np.array(2.5, dtype=np.float32))), {"s"})
    same(read_back(zero_d_binary, "s"), np.array(2.5, dtype=np.float32))
    empty = oip_json.encode_response(response(("e", np.zeros((2, 0), dtype=np.int8))), set())
    assert header_of(empty)["outputs"][0] == {"name": "e", "datatype": "INT8", "shape": [2, 0], "data": []}
    transposed = np.arange(6, dtype=np.int32).reshape(2, 3).T
    same(read_back(oip_json.encode_response(response(("t", transposed)), set()), "t"), transposed.copy())
    same(read_back(oip_json.encode_response(response(("t", transposed)), {"t"}), "t"), transposed.copy())
    big_endian = np.array([1.5, -2], dtype=">f8")
    for binary in (set(), {"b"}):
        same(
            read_back(oip_json.encode_response(response(("b", big_endian)), binary), "b"), np.array([1.5, -2])
        )


def test_encode_text_arrays_as_bytes() -> None:
    outputs = [
        ("u", np.array(["a", "é"])),
        ("s", np.array([b"a", b"b"])),
        ("o", np.array(["x", b"y"], dtype=object)),
    ]
    document = header_of(oip_json.encode_response(response(*outputs), set()))
    assert [(o["datatype"], o["data"]) for o in document["outputs"]] == [
        ("BYTES", ["a", "é"]),
        ("BYTES", ["a", "b"]),
        ("BYTES", ["x", "y"]),
    ]
    encoded = oip_json.encode_response(response(*outputs), {"u", "s", "o"})
    assert read_back(encoded, "u").tolist() == [b"a", "é".encode()]
    assert read_back(encoded, "o").tolist() == [b"x", b"y"]


@pytest.mark.parametrize("array", [np.array([1j]), np.array(["2020-01-01"], dtype="datetime64[D]")])
def test_output_without_an_oip_datatype_is_a_model_error(array: Array) -> None:
    with pytest.raises(ModelError, match="output 'y': numpy dtype"):
        oip_json.encode_response(response(("y", array)), set())


def test_round_trip_decode_of_encoded_binary_outputs() -> None:
    """A binary response body has a request's layout too, so decode(encode(x)) == x."""
    arrays = [(name, SAMPLES[name]) for name in SAMPLES]
    data, length = oip_json.encode_response(response(*arrays), {name for name, _ in arrays})
    header = json.loads(data[:length])
    request_body = orjson.dumps({"inputs": header["outputs"]})
    request = oip_json.decode_request(request_body + data[length:], str(len(request_body)))
    for (name, array), tensor in zip(arrays, request.inputs, strict=True):
        assert tensor.name == name
        same(tensor.data, array)


@pytest.mark.parametrize("datatype", JSON_DATATYPES)
def test_round_trip_decode_of_encoded_json_outputs(datatype: str) -> None:
    data, length = oip_json.encode_response(response(("y", SAMPLES[datatype])), set())
    assert length is None
    request = oip_json.decode_request(orjson.dumps({"inputs": json.loads(data)["outputs"]}))
    same(request.inputs[0].data, SAMPLES[datatype])


def test_encode_error() -> None:
    assert json.loads(oip_json.encode_error('bad "input"')) == {"error": 'bad "input"'}

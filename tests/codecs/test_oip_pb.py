"""oip_pb: ModelInferRequest/Response (protobuf) <-> OipRequest/OipResponse, metadata and config.

The expected wire bytes are built here independently (struct, numpy), not with the codec's helpers.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from google.protobuf import json_format

from grps_py.codecs import oip_pb
from grps_py.core.catalog import ModelEntry, model_config
from grps_py.core.errors import InvalidInput, ModelError
from grps_py.core.oip import OipResponse, RequestedOutput, SharedMemoryRef
from grps_py.core.protection import LimitsSettings
from grps_py.core.signature import TensorSpec
from grps_py.core.types import Tensor
from grps_py.protos import open_inference_pb2 as pb
from oip_clients import CONTENTS_FIELD

Array = np.ndarray[Any, Any]

NO_ELEMENT_LIMIT = LimitsSettings(elements=10**40)  # larger than any shape these tests claim


def objects(values: list[bytes], shape: tuple[int, ...]) -> Array:
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out.reshape(shape)


ARRAYS: dict[str, Array] = {
    "BOOL": np.array([[True, False, True], [False, False, True]]),
    "UINT8": np.array([0, 1, 255], dtype=np.uint8),
    "UINT16": np.array([0, 1, 65535], dtype=np.uint16),
    "UINT32": np.array([0, 1, 2**32 - 1], dtype=np.uint32),
    "UINT64": np.array([[0, 1], [2**63, 2**64 - 1]], dtype=np.uint64),
    "INT8": np.array([-128, 0, 127], dtype=np.int8),
    "INT16": np.array([-32768, 0, 32767], dtype=np.int16),
    "INT32": np.array([-(2**31), 0, 2**31 - 1], dtype=np.int32),
    "INT64": np.array([[-(2**63), -1], [0, 2**63 - 1]], dtype=np.int64),
    "FP16": np.array([0.1, -65504, np.inf, 6e-8, -0.0], dtype=np.float16),
    "FP32": np.array([[0.1, 1e-45], [3.4e38, -np.inf], [np.nan, -0.0]], dtype=np.float32),
    "FP64": np.array([0.1, 1e-300, 1.7e308, -np.inf, np.nan], dtype=np.float64),
    "BYTES": objects([b"", b"\x00\xff\x01", "héllo".encode(), "日本語 😀".encode()], (2, 2)),
    "BF16": np.array([1.0, -2.5, 3.0e38, -np.inf, 0.0078125], dtype=ml_dtypes.bfloat16),
}


def length_prefixed(values: Any) -> bytes:
    return b"".join(struct.pack("<I", len(v)) + v for v in values)


def wire_bytes(array: Array, datatype: str) -> bytes:
    """What the spec says raw contents hold: row-major little-endian values, or length-prefixed BYTES."""
    if datatype == "BYTES":
        return length_prefixed(array.ravel().tolist())
    little = array.astype(array.dtype.newbyteorder("<")) if array.dtype.itemsize > 1 else array
    return little.tobytes(order="C")


def raw_request(*inputs: tuple[str, str, Array]) -> pb.ModelInferRequest:
    msg = pb.ModelInferRequest(model_name="m")
    for name, datatype, array in inputs:
        msg.inputs.add(name=name, datatype=datatype, shape=array.shape)
        msg.raw_input_contents.append(wire_bytes(array, datatype))
    return msg


def typed_request(
    name: str, datatype: str, shape: list[int], field: str, values: list[Any]
) -> pb.ModelInferRequest:
    msg = pb.ModelInferRequest(model_name="m")
    tensor = msg.inputs.add(name=name, datatype=datatype, shape=shape)
    getattr(tensor.contents, field).extend(values)
    return msg


def over_the_wire(msg: pb.ModelInferRequest) -> pb.ModelInferRequest:
    return pb.ModelInferRequest.FromString(msg.SerializeToString())


def assert_same(got: Array, want: Array) -> None:
    assert got.dtype == want.dtype
    assert got.shape == want.shape
    if want.dtype == object:
        assert got.tolist() == want.tolist()
    else:  # bit for bit: NaN, -0.0 and inf included
        assert got.tobytes() == want.tobytes()


def decode_one(msg: pb.ModelInferRequest) -> Array:
    (tensor,) = oip_pb.decode_infer_request(over_the_wire(msg)).inputs
    return tensor.array


# --- every datatype -----------------------------------------------------------------------------


@pytest.mark.parametrize("datatype", sorted(ARRAYS))
def test_raw_input_of_every_datatype(datatype: str) -> None:
    array = ARRAYS[datatype]
    assert_same(decode_one(raw_request(("x", datatype, array))), array)


@pytest.mark.parametrize("datatype", sorted(CONTENTS_FIELD))
def test_typed_contents_of_every_datatype(datatype: str) -> None:
    array = ARRAYS[datatype]
    msg = typed_request("x", datatype, list(array.shape), CONTENTS_FIELD[datatype], array.ravel().tolist())
    assert_same(decode_one(msg), array)


@pytest.mark.parametrize("datatype", sorted(ARRAYS))
def test_every_output_is_encoded_raw(datatype: str) -> None:
    array = ARRAYS[datatype]
    reply = oip_pb.encode_infer_response(OipResponse("m", "1", [Tensor("y", array)], id="r"))
    reply = pb.ModelInferResponse.FromString(reply.SerializeToString())
    (out,) = reply.outputs
    assert (out.name, out.datatype, list(out.shape)) == ("y", datatype, list(array.shape))
    assert not out.HasField("contents")
    assert list(reply.raw_output_contents) == [wire_bytes(array, datatype)]
    assert (reply.model_name, reply.model_version, reply.id) == ("m", "1", "r")


def test_many_inputs_keep_their_order_and_data() -> None:
    inputs = [(f"in_{name}", name, array) for name, array in sorted(ARRAYS.items())]
    request = oip_pb.decode_infer_request(over_the_wire(raw_request(*inputs)))
    assert [t.name for t in request.inputs] == [name for name, _, _ in inputs]
    for tensor, (_, _, array) in zip(request.inputs, inputs, strict=True):
        assert_same(tensor.array, array)


def test_encoded_outputs_decode_back() -> None:
    outputs = [Tensor(name, array) for name, array in sorted(ARRAYS.items())]
    reply = oip_pb.encode_infer_response(OipResponse("m", "1", outputs))
    msg = pb.ModelInferRequest(raw_input_contents=reply.raw_output_contents)
    for out in reply.outputs:
        msg.inputs.add(name=out.name, datatype=out.datatype, shape=out.shape)
    for tensor, original in zip(oip_pb.decode_infer_request(msg).inputs, outputs, strict=True):
        assert_same(tensor.array, original.array)


# --- shapes: scalars, empty tensors -------------------------------------------------------------


@pytest.mark.parametrize(
    ("datatype", "array"),
    [
        ("FP32", np.array(2.5, dtype=np.float32)),
        ("INT32", np.zeros((0,), dtype=np.int32)),
        ("FP64", np.zeros((0, 3), dtype=np.float64)),
        ("BYTES", objects([], (0, 2))),
        ("BYTES", objects([b"one"], ())),
    ],
    ids=["0-d", "empty", "empty-2d", "empty-bytes", "0-d-bytes"],
)
def test_scalars_and_empty_tensors(datatype: str, array: Array) -> None:
    assert_same(decode_one(raw_request(("x", datatype, array))), array)
    reply = oip_pb.encode_infer_response(OipResponse("m", "1", [Tensor("y", array)]))
    assert list(reply.outputs[0].shape) == list(array.shape)
    assert reply.raw_output_contents[0] == wire_bytes(array, datatype)


def test_typed_scalar_and_empty_typed_tensor() -> None:
    assert_same(
        decode_one(typed_request("x", "INT64", [], "int64_contents", [7])), np.array(7, dtype=np.int64)
    )
    assert_same(
        decode_one(typed_request("x", "FP32", [2, 0], "fp32_contents", [])), np.zeros((2, 0), np.float32)
    )


def test_an_empty_tensor_needs_no_data() -> None:
    msg = pb.ModelInferRequest()
    msg.inputs.add(name="x", datatype="FP16", shape=[3, 0])
    assert_same(decode_one(msg), np.zeros((3, 0), dtype=np.float16))


# --- zero copy and the fast float path ---------------------------------------------------------


def owner(array: Array) -> Any:
    """The object that really holds an array's memory (through views and memoryviews)."""
    base: Any = array
    while isinstance(base, np.ndarray | memoryview):
        base = base.base if isinstance(base, np.ndarray) else base.obj
    return base


def test_raw_inputs_are_views_of_the_message_bytes() -> None:
    array = np.arange(12, dtype=np.float32).reshape(3, 4)
    decoded = decode_one(raw_request(("x", "FP32", array)))
    assert isinstance(owner(decoded), bytes) and len(owner(decoded)) == array.nbytes
    assert not decoded.flags.owndata and not decoded.flags.writeable


@pytest.mark.parametrize(("datatype", "dtype"), [("FP32", np.float32), ("FP64", np.float64)])
def test_typed_floats_are_read_from_the_packed_field_in_one_piece(datatype: str, dtype: Any) -> None:
    values = np.linspace(-1, 1, 1000, dtype=dtype)
    decoded = decode_one(typed_request("x", datatype, [1000], CONTENTS_FIELD[datatype], values.tolist()))
    assert isinstance(owner(decoded), bytes)  # frombuffer over the serialized field, not fromiter
    assert_same(decoded, values)


def test_unpacked_typed_floats_are_read_too() -> None:
    # proto3 parsers accept repeated floats sent unpacked (one tag per value); so must we.
    values = [1.5, -2.25, 3.0]
    msg = typed_request("x", "FP32", [3], "fp32_contents", [])
    msg.inputs[0].contents.MergeFromString(b"".join(b"\x35" + struct.pack("<f", v) for v in values))
    assert_same(decode_one(msg), np.array(values, dtype=np.float32))


# --- outputs: dtypes numpy has, layouts, torch --------------------------------------------------


@pytest.mark.parametrize(
    ("array", "datatype", "raw"),
    [
        (np.array(["a", "é"]), "BYTES", length_prefixed([b"a", "é".encode()])),
        (np.array([b"a", b"bc"]), "BYTES", length_prefixed([b"a", b"bc"])),
        (np.array([1, 256], dtype=">i4"), "INT32", struct.pack("<2i", 1, 256)),
        (np.arange(6, dtype=np.int16).reshape(2, 3)[:, ::2], "INT16", struct.pack("<4h", 0, 2, 3, 5)),
        (np.arange(4, dtype=np.uint8).reshape(2, 2).T, "UINT8", bytes([0, 2, 1, 3])),
    ],
    ids=["unicode", "numpy-bytes", "big-endian", "strided", "transposed"],
)
def test_output_layouts_and_string_dtypes(array: Array, datatype: str, raw: bytes) -> None:
    reply = oip_pb.encode_infer_response(OipResponse("m", "1", [Tensor("y", array)]))
    assert reply.outputs[0].datatype == datatype
    assert reply.raw_output_contents[0] == raw


def test_torch_outputs_are_encoded() -> None:
    torch = pytest.importorskip("torch")
    reply = oip_pb.encode_infer_response(OipResponse("m", "1", [Tensor("y", torch.arange(6).reshape(2, 3))]))
    assert (reply.outputs[0].datatype, list(reply.outputs[0].shape)) == ("INT64", [2, 3])
    assert reply.raw_output_contents[0] == np.arange(6, dtype="<i8").tobytes()


def test_an_output_oip_cannot_carry_is_the_models_fault() -> None:
    with pytest.raises(ModelError, match="output 'y' has numpy dtype complex64"):
        oip_pb.encode_infer_response(OipResponse("m", "1", [Tensor("y", np.zeros(2, np.complex64))]))


def test_reply_is_filled_in_place() -> None:
    stream = pb.ModelStreamInferResponse()
    filled = oip_pb.encode_infer_response(
        OipResponse(
            "m", "1", [Tensor("y", np.ones(2, np.float32))], parameters={"triton_final_response": True}
        ),
        stream.infer_response,
    )
    assert filled is stream.infer_response
    assert stream.infer_response.parameters["triton_final_response"].bool_param is True
    assert stream.infer_response.raw_output_contents[0] == np.ones(2, "<f4").tobytes()


# --- client mistakes ----------------------------------------------------------------------------


def with_contents(
    field: str, values: list[Any], datatype: str = "INT32", shape: tuple[int, ...] = (2,)
) -> Any:
    return lambda: typed_request("x", datatype, list(shape), field, values)


def raw_with(datatype: str, shape: list[int], raw: bytes) -> Callable[[], pb.ModelInferRequest]:
    def build() -> pb.ModelInferRequest:
        msg = pb.ModelInferRequest()
        msg.inputs.add(name="x", datatype=datatype, shape=shape)
        msg.raw_input_contents.append(raw)
        return msg

    return build


def two_inputs_one_raw() -> pb.ModelInferRequest:
    msg = raw_request(("x", "INT8", np.zeros(2, np.int8)))
    msg.inputs.add(name="y", datatype="INT8", shape=[2])
    return msg


def raw_and_contents() -> pb.ModelInferRequest:
    msg = raw_request(("x", "INT32", np.zeros(2, np.int32)))
    msg.inputs[0].contents.int_contents.extend([1, 2])
    return msg


def no_data() -> pb.ModelInferRequest:
    msg = pb.ModelInferRequest()
    msg.inputs.add(name="x", datatype="FP32", shape=[2])
    return msg


def two_fields() -> pb.ModelInferRequest:
    msg = typed_request("x", "INT32", [2], "int_contents", [1, 2])
    msg.inputs[0].contents.int64_contents.extend([1, 2])
    return msg


def param_without_value() -> pb.ModelInferRequest:
    msg = raw_request(("x", "INT8", np.zeros(1, np.int8)))
    msg.parameters["p"].SetInParent()
    return msg


HUGE = [2**31, 2**31, 2**31]
HUGE_ELEMENTS = r"input 'x': 9903520314283042199192993792 elements exceed limits.elements \(268435456\)"
# Without limits, a huge claimed shape is still refused, by arithmetic, before anything is allocated.
UNLIMITED_MISTAKES: dict[str, tuple[Callable[[], pb.ModelInferRequest], str]] = {
    "huge raw": (
        raw_with("FP64", HUGE, b"\0" * 8),
        r"input 'x': shape \[2147483648, .*\] of FP64 needs \d+ bytes, got 8",
    ),
    "huge typed": (
        with_contents("int_contents", [1], "INT32", tuple(HUGE)),
        r"input 'x': 1 values do not fit",
    ),
    "huge bytes": (
        raw_with("BYTES", HUGE, length_prefixed([b"a"])),
        r"input 'x': 5 bytes of BYTES data cannot hold \d+ elements",
    ),
}
MISTAKES: dict[str, tuple[Callable[[], pb.ModelInferRequest], str]] = {
    "raw count": (two_inputs_one_raw, r"raw_input_contents has 1 entries for 2 inputs"),
    "raw and contents": (raw_and_contents, r"input 'x': sets contents while .* raw_input_contents"),
    "raw size": (
        raw_with("FP32", [2, 3], b"\0" * 20),
        r"input 'x': shape \[2, 3\] of FP32 needs 24 bytes, got 20",
    ),
    "typed count": (with_contents("int_contents", [1, 2, 3]), r"input 'x': 3 values do not fit shape \[2\]"),
    "int8 range": (
        with_contents("int_contents", [1, 300], "INT8"),
        r"input 'x': 300 is out of range for INT8",
    ),
    "int16 range": (with_contents("int_contents", [-40000, 0], "INT16"), r"-40000 is out of range for INT16"),
    "uint8 range": (with_contents("uint_contents", [256, 0], "UINT8"), r"256 is out of range for UINT8"),
    "uint16 range": (
        with_contents("uint_contents", [0, 70000], "UINT16"),
        r"70000 is out of range for UINT16",
    ),
    "wrong field": (
        with_contents("fp32_contents", [1.0, 2.0]),
        r"INT32 takes contents.int_contents, not fp32_co",
    ),
    "bool field": (with_contents("int_contents", [1, 0], "BOOL"), r"BOOL takes contents.bool_contents"),
    "two fields": (two_fields, r"INT32 takes contents.int_contents, not int64_contents"),
    "fp16 typed": (with_contents("fp32_contents", [1.0, 2.0], "FP16"), r"FP16 has no typed contents field"),
    "bf16 typed": (with_contents("fp32_contents", [1.0, 2.0], "BF16"), r"BF16 has no typed contents field"),
    "unknown datatype": (
        raw_with("FLOAT32", [1], b"\0" * 4),
        r"input 'x': unknown datatype 'FLOAT32'; expected",
    ),
    "no datatype": (raw_with("", [1], b"\0" * 4), r"input 'x': unknown datatype ''"),
    "no data": (no_data, r"input 'x': no data"),
    "negative dim": (
        raw_with("INT8", [-1, 2], b"\0\0"),
        r"input 'x': shape \[-1, 2\] has a negative dimension",
    ),
    "huge raw": (raw_with("FP64", HUGE, b"\0" * 8), HUGE_ELEMENTS),
    "huge typed": (with_contents("int_contents", [1], "INT32", tuple(HUGE)), HUGE_ELEMENTS),
    "huge bytes": (raw_with("BYTES", HUGE, length_prefixed([b"a"])), HUGE_ELEMENTS),
    "huge empty": (raw_with("INT8", [0, 2**62, 4], b""), r"input 'x': shape \[0, .*\] cannot be used"),
    "bytes overrun": (
        raw_with("BYTES", [1], struct.pack("<I", 9) + b"abc"),
        r"input 'x': BYTES element 0 \(length 9\) runs past the end",
    ),
    "bytes cut": (
        raw_with("BYTES", [2], length_prefixed([b"ab"]) + b"\0\0"),
        r"input 'x': BYTES data ends before element 1 of 2",
    ),
    "bytes left": (
        raw_with("BYTES", [1], length_prefixed([b"ab"]) + b"zz"),
        r"input 'x': 2 bytes left over after 1 BYTES elements",
    ),
    "param value": (param_without_value, r"parameter 'p' has no value"),
}


@pytest.mark.parametrize("case", sorted(MISTAKES))
def test_client_mistakes_are_invalid_input(case: str) -> None:
    build, message = MISTAKES[case]
    with pytest.raises(InvalidInput, match=message):
        oip_pb.decode_infer_request(over_the_wire(build()))


@pytest.mark.parametrize("case", sorted(UNLIMITED_MISTAKES))
def test_huge_shapes_are_refused_by_arithmetic_without_limits(case: str) -> None:
    build, message = UNLIMITED_MISTAKES[case]
    with pytest.raises(InvalidInput, match=message):
        oip_pb.decode_infer_request(over_the_wire(build()), NO_ELEMENT_LIMIT)


def test_shared_memory_parameters_are_read_and_checked() -> None:
    msg = raw_request(("x", "INT8", np.zeros(1, np.int8)))
    msg.inputs[0].parameters["shared_memory_region"].string_param = "region"
    with pytest.raises(InvalidInput, match="input 'x': 'shared_memory_region' needs"):
        oip_pb.decode_infer_request(msg)
    msg = raw_request(("x", "INT8", np.zeros(1, np.int8)))
    output = msg.outputs.add(name="y")
    output.parameters["shared_memory_region"].string_param = "region"
    output.parameters["shared_memory_byte_size"].int64_param = 8
    assert oip_pb.decode_infer_request(msg).outputs[0].shared_memory == SharedMemoryRef("region", 8)


# --- parameters, ids, requested outputs ---------------------------------------------------------

PARAMETERS: dict[str, Any] = {
    "flag": True,
    "off": False,
    "count": 7,
    "int64_min": -(2**63),
    "int64_max": 2**63 - 1,
    "uint64_max": 2**64 - 1,
    "text": "héllo",
    "ratio": 0.25,
}


def test_request_parameters_id_and_requested_outputs() -> None:
    msg = raw_request(("x", "INT8", np.zeros(1, np.int8)))
    msg.id = "req-1"
    oip_pb.set_parameters(msg.parameters, PARAMETERS)
    oip_pb.set_parameters(msg.outputs.add(name="a").parameters, {"classification": 2})
    msg.outputs.add(name="b")
    request = oip_pb.decode_infer_request(over_the_wire(msg))
    assert request.id == "req-1"
    assert request.parameters == PARAMETERS
    assert {k: type(v) for k, v in request.parameters.items()} == {k: type(v) for k, v in PARAMETERS.items()}
    assert request.outputs == [
        RequestedOutput("a", None, {"classification": 2}),
        RequestedOutput("b", None, {}),
    ]


@pytest.mark.parametrize(
    ("value", "field", "stored"),
    [
        (True, "bool_param", True),
        (np.bool_(False), "bool_param", False),
        (5, "int64_param", 5),
        (-(2**63), "int64_param", -(2**63)),
        (2**63 - 1, "int64_param", 2**63 - 1),
        (2**63, "uint64_param", 2**63),
        (2**64 - 1, "uint64_param", 2**64 - 1),
        (np.int32(-3), "int64_param", -3),
        (np.uint64(2**64 - 1), "uint64_param", 2**64 - 1),
        (1.5, "double_param", 1.5),
        (np.float32(0.5), "double_param", 0.5),
        ("s", "string_param", "s"),
        ("", "string_param", ""),
    ],
)
def test_set_parameters_picks_the_field(value: Any, field: str, stored: Any) -> None:
    msg = pb.ModelInferResponse()
    oip_pb.set_parameters(msg.parameters, {"p": value})
    assert msg.parameters["p"].WhichOneof("parameter_choice") == field
    assert oip_pb.parameters_to_dict(msg.parameters) == {"p": stored}


@pytest.mark.parametrize(
    ("value", "error"),
    [(2**64, ValueError), (-(2**63) - 1, ValueError), (b"x", TypeError), (None, TypeError)],
)
def test_set_parameters_refuses_what_no_field_holds(value: Any, error: type[Exception]) -> None:
    msg = pb.ModelInferResponse()
    with pytest.raises(error, match="parameter 'p'"):
        oip_pb.set_parameters(msg.parameters, {"p": value})
    assert "p" not in msg.parameters
    with pytest.raises(ModelError, match="invalid response parameter"):
        oip_pb.encode_infer_response(OipResponse("m", "1", [], parameters={"p": value}))


def test_response_parameters_are_encoded() -> None:
    reply = oip_pb.encode_infer_response(OipResponse("m", "1", [], parameters=PARAMETERS))
    reply = pb.ModelInferResponse.FromString(reply.SerializeToString())
    assert oip_pb.parameters_to_dict(reply.parameters) == PARAMETERS


# --- metadata and config ------------------------------------------------------------------------


def entry(**overrides: Any) -> ModelEntry:
    fields: dict[str, Any] = {
        "name": "clf",
        "version": "2",
        "key": "clf-2",
        "platform": "onnxruntime_onnx",
        "backend": "onnxruntime",
        "inputs": (TensorSpec("x", "FP32", (-1, 3)), TensorSpec("names", "BYTES", (-1,))),
        "outputs": (TensorSpec("y"),),
        "declared_inputs": True,
        "max_batch_size": 8,
        "batch_timeout_us": 500,
        "takes_messages": False,
        "gpu": True,
    }
    return ModelEntry(**{**fields, **overrides})


def test_model_metadata() -> None:
    reply = oip_pb.encode_model_metadata(entry(), ["1", "2"])
    assert json_format.MessageToDict(reply) == {
        "name": "clf",
        "versions": ["1", "2"],
        "platform": "onnxruntime_onnx",
        "inputs": [
            {"name": "x", "datatype": "FP32", "shape": ["-1", "3"]},
            {"name": "names", "datatype": "BYTES", "shape": ["-1"]},
        ],
        "outputs": [{"name": "y"}],  # datatype "" and shape [] where the model does not tell
    }


def test_model_config_of_a_batched_gpu_model() -> None:
    config = oip_pb.encode_model_config(model_config(entry())).config
    assert (config.name, config.platform, config.backend, config.max_batch_size) == (
        "clf",
        "onnxruntime_onnx",
        "onnxruntime",
        8,
    )
    assert [(t.name, pb.DataType.Name(t.data_type), list(t.dims)) for t in config.input] == [
        ("x", "TYPE_FP32", [3]),  # Triton leaves the batch dimension out when max_batch_size > 0
        ("names", "TYPE_STRING", []),
    ]
    assert [(t.name, pb.DataType.Name(t.data_type), list(t.dims)) for t in config.output] == [
        ("y", "TYPE_INVALID", [])
    ]
    assert [(g.count, g.kind) for g in config.instance_group] == [(1, pb.ModelInstanceGroup.KIND_GPU)]
    assert config.WhichOneof("scheduling_choice") == "dynamic_batching"
    assert config.dynamic_batching.max_queue_delay_microseconds == 500


def test_model_config_of_a_plain_cpu_model() -> None:
    config = oip_pb.encode_model_config(model_config(entry(max_batch_size=0, gpu=False, outputs=()))).config
    assert config.max_batch_size == 0 and not config.output
    assert [list(t.dims) for t in config.input] == [[-1, 3], [-1]]
    assert config.instance_group[0].kind == pb.ModelInstanceGroup.KIND_CPU
    assert config.WhichOneof("scheduling_choice") is None


def test_model_config_refuses_keys_the_proto_lacks() -> None:
    with pytest.raises(json_format.ParseError, match="ensemble_scheduling"):
        oip_pb.encode_model_config({"name": "m", "ensemble_scheduling": {}})

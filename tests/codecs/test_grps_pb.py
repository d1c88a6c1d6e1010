"""grps_pb: GrpsMessage <-> Payload, the message bridge and status replies."""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import pytest

from grps_py.codecs import grps_pb
from grps_py.core.errors import InvalidInput, ModelError
from grps_py.core.types import DTYPE_BY_NAME, GMAP_FIELDS, Payload, PayloadKind, Tensor
from grps_py.protos import grps_pb2

ARRAYS_BY_DTYPE: dict[str, np.ndarray[Any, Any]] = {
    "DT_UINT8": np.array([[0, 1, 255]], dtype=np.uint8),
    "DT_INT8": np.array([-128, 0, 127], dtype=np.int8),
    "DT_INT16": np.array([-32768, 7, 32767], dtype=np.int16),
    "DT_INT32": np.array([-(2**31), 0, 2**31 - 1], dtype=np.int32),
    "DT_INT64": np.array([[-(2**63), 2**62 + 1], [0, 2**63 - 1]], dtype=np.int64),
    "DT_FLOAT16": np.array([0.1, -65504, np.inf, 6e-8], dtype=np.float16),
    "DT_FLOAT32": np.array([[0.1, 1e-8], [3.4e38, -np.inf], [1e-45, -0.0]], dtype=np.float32),
    "DT_FLOAT64": np.array([0.1, 1e-300, 1.7e308, -np.inf], dtype=np.float64),
    "DT_STRING": np.array(["", "héllo", "日本語", "emoji 😀"], dtype=object),
}


def roundtrip(payload: Payload) -> Payload:
    """Through the message and its wire bytes, as gRPC does."""
    wire = grps_pb.payload_to_message(payload).SerializeToString()
    return grps_pb.message_to_payload(grps_pb2.GrpsMessage.FromString(wire))


def message_with_tensor(**fields: Any) -> grps_pb2.GrpsMessage:
    msg = grps_pb2.GrpsMessage()
    msg.gtensors.tensors.add(**fields)
    return msg


# --- tensors ------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype_name", sorted(ARRAYS_BY_DTYPE))
def test_every_dtype_survives_the_wire(dtype_name: str) -> None:
    array = ARRAYS_BY_DTYPE[dtype_name]
    back = roundtrip(Payload.of_tensors([Tensor("x", array)]))
    (tensor,) = back.tensors
    assert tensor.name == "x"
    assert tensor.data.dtype == array.dtype
    assert tensor.data.shape == array.shape
    np.testing.assert_array_equal(tensor.data, array)


@pytest.mark.parametrize("dtype_name", sorted(ARRAYS_BY_DTYPE))
def test_message_matches_one_built_value_by_value(dtype_name: str) -> None:
    # The packed-bytes shortcut for floats must give the very message that extend() would.
    array = ARRAYS_BY_DTYPE[dtype_name]
    expected = message_with_tensor(name="x", dtype=dtype_name, shape=list(array.shape))
    getattr(expected.gtensors.tensors[0], DTYPE_BY_NAME[dtype_name].flat_field).extend(array.ravel().tolist())
    assert grps_pb.payload_to_message(Payload.of_tensors([Tensor("x", array)])) == expected


def test_nan_survives_the_wire() -> None:
    array = np.array([np.nan, 1.5], dtype=np.float32)
    (tensor,) = roundtrip(Payload.of_tensors([Tensor("", array)])).tensors
    np.testing.assert_array_equal(tensor.data, array)


def test_scalar_and_zero_size_tensors() -> None:
    scalar = np.float32(2.5).reshape(())
    empty = np.zeros((0, 3), dtype=np.int32)
    back = roundtrip(Payload.of_tensors([Tensor("s", scalar), Tensor("e", empty)]))
    assert back.tensors[0].data.shape == () and back.tensors[0].data == 2.5
    assert back.tensors[1].data.shape == (0, 3) and back.tensors[1].data.dtype == np.int32


@pytest.mark.parametrize(
    ("array", "expected_dtype", "expected_values"),
    [
        (np.array([True, False]), np.uint8, [1, 0]),
        (np.array([1, 65535], dtype=np.uint16), np.int32, [1, 65535]),
        (np.array([2**32 - 1], dtype=np.uint32), np.int64, [2**32 - 1]),
        (np.array(["a", "bc"]), object, ["a", "bc"]),
        (np.array([b"a", "é".encode()]), object, ["a", "é"]),
    ],
)
def test_numpy_dtypes_without_a_grps_dtype_are_widened(
    array: Any, expected_dtype: Any, expected_values: list[Any]
) -> None:
    (tensor,) = roundtrip(Payload.of_tensors([Tensor("x", array)])).tensors
    assert tensor.data.dtype == expected_dtype
    assert tensor.data.tolist() == expected_values


def test_torch_tensors_are_written() -> None:
    torch = pytest.importorskip("torch")
    (tensor,) = roundtrip(Payload.of_tensors([Tensor("t", torch.arange(6).reshape(2, 3))])).tensors
    np.testing.assert_array_equal(tensor.data, np.arange(6).reshape(2, 3))


def test_read_arrays_are_writable() -> None:
    (tensor,) = roundtrip(Payload.of_tensors([Tensor("x", np.ones(4, dtype=np.float32))])).tensors
    tensor.data[0] = 7.0
    assert tensor.data[0] == 7.0


def test_unpacked_float_encoding_is_read() -> None:
    # proto3 parsers accept repeated floats sent unpacked (one tag per value); so must we.
    values = [1.5, -2.25, 3.0]
    wire = b"".join(b"\x55" + struct.pack("<f", v) for v in values)  # field 10, wire type 5
    tensor_bytes = grps_pb2.GenericTensor(dtype="DT_FLOAT32", shape=[3]).SerializeToString() + wire
    msg = grps_pb2.GrpsMessage()
    msg.gtensors.tensors.add().MergeFromString(tensor_bytes)
    (tensor,) = grps_pb.message_to_payload(msg).tensors
    np.testing.assert_array_equal(tensor.data, np.array(values, dtype=np.float32))


def test_tensor_without_name_or_data_reads_as_named_by_position() -> None:
    with pytest.raises(InvalidInput, match=r"tensor #0: dtype is not set \(DT_INVALID\)"):
        grps_pb.message_to_payload(message_with_tensor(shape=[1], flat_float32=[1.0]))


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {"dtype": "DT_FLOAT32", "shape": [2, 3], "flat_float32": [1.0] * 5},
            r"5 values do not fit shape \[2, 3\]",
        ),
        ({"dtype": "DT_FLOAT32", "flat_float32": [1.0, 2.0]}, r"2 values do not fit shape \[\]"),
        (
            {"dtype": "DT_FLOAT32", "shape": [1], "flat_int32": [1]},
            "expects its data in flat_float32, not in flat_int32",
        ),
        ({"dtype": "DT_INT32", "shape": [1], "flat_int32": [1], "flat_string": ["a"]}, "not in flat_string"),
        ({"dtype": "DT_INVALID", "shape": [1], "flat_float32": [1.0]}, "dtype is not set"),
        ({"dtype": 42, "shape": [1], "flat_float32": [1.0]}, "unknown dtype 42"),
        ({"dtype": "DT_UINT8", "shape": [1], "flat_uint8": [300]}, "300 is out of range for DT_UINT8"),
        ({"dtype": "DT_INT8", "shape": [1], "flat_int8": [-129]}, "-129 is out of range for DT_INT8"),
        ({"dtype": "DT_INT16", "shape": [1], "flat_int16": [40000]}, "40000 is out of range for DT_INT16"),
        (
            {"dtype": "DT_FLOAT16", "shape": [1], "flat_float16": [70000.0]},
            "70000.0 is out of range for DT_FLOAT16",
        ),
    ],
)
def test_bad_tensors_are_invalid_input(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidInput, match=message) as raised:
        grps_pb.message_to_payload(message_with_tensor(name="x", **fields))
    assert raised.value.public_message.startswith("tensor 'x': ")


def test_second_tensor_is_named_in_errors() -> None:
    msg = message_with_tensor(name="a", dtype="DT_INT32", shape=[1], flat_int32=[1])
    msg.gtensors.tensors.add(dtype="DT_INT32", shape=[2], flat_int32=[1])
    with pytest.raises(InvalidInput, match=r"^tensor #1: 1 values do not fit shape \[2\]$"):
        grps_pb.message_to_payload(msg)


def test_ndarray_is_refused_over_protobuf() -> None:
    msg = grps_pb2.GrpsMessage()
    msg.ndarray.SetInParent()
    with pytest.raises(InvalidInput, match="ndarray is only for HTTP JSON"):
        grps_pb.message_to_payload(msg)


# --- other payload kinds ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "payload",
    [Payload.of_text(""), Payload.of_text("héllo"), Payload.of_bytes(b""), Payload.of_bytes(b"\x00\xff")],
    ids=["empty-text", "text", "empty-bytes", "bytes"],
)
def test_text_and_bytes_roundtrip(payload: Payload) -> None:
    assert roundtrip(payload) == payload


def test_empty_payload_sets_no_data() -> None:
    msg = grps_pb.payload_to_message(Payload.empty())
    assert msg.WhichOneof("data_oneof") is None
    assert grps_pb.message_to_payload(msg).kind is PayloadKind.EMPTY


def test_empty_tensor_list_is_still_gtensors() -> None:
    msg = grps_pb.payload_to_message(Payload.of_tensors([]))
    assert msg.WhichOneof("data_oneof") == "gtensors"
    assert grps_pb.message_to_payload(msg) == Payload.of_tensors([])


def test_gmap_holds_all_six_maps() -> None:
    gmap = {
        "s_s": {"k": "v", "": "é"},
        "s_b": {"b": b"\x00\x01"},
        "s_i32": {"i": -(2**31)},
        "s_i64": {"l": 2**62},
        "s_f": {"f": 0.5},
        "s_d": {"d": 0.1},
    }
    assert roundtrip(Payload.of_map(gmap)) == Payload.of_map(gmap)
    partial = roundtrip(Payload.of_map({"s_s": {"k": "v"}}))
    assert partial.value == {name: ({"k": "v"} if name == "s_s" else {}) for name in GMAP_FIELDS}


def test_gmap_float_values_are_float32() -> None:
    back = roundtrip(Payload.of_map({"s_f": {"f": 0.1}}))
    assert back.value["s_f"]["f"] == float(np.float32(0.1))


def test_gmap_with_unknown_map_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="gmap has no map 's_x'"):
        grps_pb.payload_to_message(Payload.of_map({"s_x": {}}))


# --- filling a given message, MESSAGE payloads, bridge, status -----------------------------------


def test_given_message_keeps_status_and_model_and_loses_old_data() -> None:
    msg = grps_pb.status_message(200, "OK", True)
    msg.model = "m-1"
    msg.str_data = "old"
    out = grps_pb.payload_to_message(Payload.of_tensors([Tensor("x", np.ones(1, np.float32))]), msg)
    assert out is msg
    assert out.status.code == 200 and out.model == "m-1"
    assert out.WhichOneof("data_oneof") == "gtensors"
    assert grps_pb.payload_to_message(Payload.empty(), msg).WhichOneof("data_oneof") is None


def test_message_payload_returns_the_held_message() -> None:
    held = grps_pb2.GrpsMessage(str_data="hi")
    assert grps_pb.payload_to_message(Payload.of_message(held)) is held


@pytest.mark.parametrize(
    "held",
    [
        grps_pb2.GrpsMessage(str_data="hi"),
        grps_pb2.GrpsMessage(bin_data=b"\x01"),
        grps_pb.payload_to_message(Payload.of_map({"s_i32": {"a": 1}})),
        grps_pb.payload_to_message(Payload.of_tensors([Tensor("x", np.arange(3))])),
        grps_pb2.GrpsMessage(),
    ],
    ids=["str", "bin", "gmap", "gtensors", "nothing"],
)
def test_message_payload_is_copied_into_a_given_message(held: grps_pb2.GrpsMessage) -> None:
    reply = grps_pb.status_message(200, "OK", True)
    reply.str_data = "old"
    out = grps_pb.payload_to_message(Payload.of_message(held), reply)
    assert out is reply and out.status.code == 200
    expected = grps_pb2.GrpsMessage()
    expected.CopyFrom(held)
    expected.status.CopyFrom(reply.status)
    assert out == expected


def test_message_payload_copied_into_itself_keeps_its_data() -> None:
    held = grps_pb2.GrpsMessage(str_data="hi")
    assert grps_pb.payload_to_message(Payload.of_message(held), held).str_data == "hi"


def test_message_payload_must_hold_a_grps_message() -> None:
    with pytest.raises(TypeError, match="must hold a GrpsMessage, not dict"):
        grps_pb.payload_to_message(Payload.of_message({}))


def test_bridge() -> None:
    bridge = grps_pb.GrpsMessageBridge()
    payload = Payload.of_tensors([Tensor("x", np.arange(4, dtype=np.int32))])
    msg = bridge.to_message(payload)
    assert bridge.is_message(msg) and not bridge.is_message(payload)
    (tensor,) = bridge.from_message(msg).tensors
    np.testing.assert_array_equal(tensor.data, np.arange(4, dtype=np.int32))


def test_bridge_refuses_other_objects() -> None:
    with pytest.raises(TypeError, match="expected a grps GrpsMessage, got str"):
        grps_pb.GrpsMessageBridge().from_message("hello")


def test_bridge_blames_the_model_for_a_bad_message() -> None:
    bad = message_with_tensor(name="y", dtype="DT_FLOAT32", shape=[2], flat_float32=[1.0])
    with pytest.raises(ModelError, match=r"invalid GrpsMessage: tensor 'y': 1 values do not fit shape \[2\]"):
        grps_pb.GrpsMessageBridge().from_message(bad)


@pytest.mark.parametrize(("ok", "flag"), [(True, grps_pb2.Status.SUCCESS), (False, grps_pb2.Status.FAILURE)])
def test_status_message(ok: bool, flag: int) -> None:
    msg = grps_pb.status_message(404, "model not found", ok)
    assert (msg.status.code, msg.status.msg, msg.status.status) == (404, "model not found", flag)
    assert msg.WhichOneof("data_oneof") is None and msg.model == ""

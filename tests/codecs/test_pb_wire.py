"""The wire-level shortcuts of codecs/pb_wire.py read and write what protobuf itself does."""

from __future__ import annotations

import numpy as np
import pytest
from google.protobuf.internal.encoder import _VarintBytes
from google.protobuf.message import DecodeError
from hypothesis import given, settings
from hypothesis import strategies as st

from grps_py.codecs.pb_wire import SerializedWithRaw, WithRawField, encode_varint, split_field
from grps_py.protos import open_inference_pb2 as pb

RAW_IN = pb.ModelInferRequest.DESCRIPTOR.fields_by_name["raw_input_contents"].number
RAW_OUT = pb.ModelInferResponse.DESCRIPTOR.fields_by_name["raw_output_contents"].number


def request(contents: list[bytes], model: str = "m", request_id: str = "r1") -> pb.ModelInferRequest:
    message = pb.ModelInferRequest(model_name=model, id=request_id)
    for i, data in enumerate(contents):
        message.inputs.add(name=f"x{i}", datatype="UINT8", shape=[len(data)])
        message.raw_input_contents.append(data)
    message.parameters["priority"].int64_param = 2
    return message


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=300), max_size=4), st.text(max_size=20), st.text(max_size=20))
def test_split_field_gives_the_message_and_its_raw_contents(
    contents: list[bytes], model: str, rid: str
) -> None:
    original = request(contents, model, rid)
    rest, values = split_field(original.SerializeToString(), RAW_IN)
    assert [bytes(v) for v in values] == contents
    parsed = pb.ModelInferRequest.FromString(rest)
    assert list(parsed.raw_input_contents) == []
    parsed.raw_input_contents.extend(contents)
    assert parsed == original


def test_the_raw_contents_are_views_into_the_received_bytes() -> None:
    wire = request([b"a" * 1000]).SerializeToString()
    _, (view,) = split_field(wire, RAW_IN)
    assert view.obj is wire  # not a copy


def test_a_message_without_the_field_is_returned_as_it_is() -> None:
    wire = pb.ModelInferRequest(model_name="m").SerializeToString()
    rest, values = split_field(wire, RAW_IN)
    assert rest is wire and values == []


def test_unknown_fields_of_every_wire_type_are_kept() -> None:
    unknown = (
        encode_varint((100 << 3) | 0)
        + encode_varint(300)  # varint
        + encode_varint((101 << 3) | 1)
        + b"\x01" * 8  # fixed64
        + encode_varint((102 << 3) | 5)
        + b"\x02" * 4  # fixed32
        + encode_varint((103 << 3) | 2)
        + encode_varint(3)
        + b"abc"  # length-delimited
    )
    wire = request([b"xyz"]).SerializeToString() + unknown
    rest, values = split_field(wire, RAW_IN)
    assert [bytes(v) for v in values] == [b"xyz"]
    assert rest.endswith(unknown)


@pytest.mark.parametrize(
    "wire",
    [
        encode_varint((RAW_IN << 3) | 2) + encode_varint(10) + b"short",  # the field runs past the end
        encode_varint((1 << 3) | 2) + encode_varint(10) + b"short",  # another field does
        b"\x80\x80",  # a varint that never ends
        encode_varint((1 << 3) | 3),  # a group (wire type 3)
        encode_varint((1 << 3) | 1) + b"\x00",  # fixed64 cut short
    ],
)
def test_malformed_messages_are_refused(wire: bytes) -> None:
    with pytest.raises(DecodeError):
        split_field(wire, RAW_IN)


def test_with_raw_field_reads_as_the_message_but_for_its_field() -> None:
    message = pb.ModelInferRequest(model_name="m", id="7")
    views = [memoryview(b"abc")]
    wrapped = WithRawField(message, "raw_input_contents", views)
    assert wrapped.model_name == "m" and wrapped.id == "7"
    assert wrapped.raw_input_contents is views


@settings(max_examples=100, deadline=None)
@given(st.lists(st.binary(max_size=300), max_size=4))
def test_serialized_with_raw_parses_as_the_same_reply(contents: list[bytes]) -> None:
    head = pb.ModelInferResponse(model_name="m", model_version="1", id="r")
    for i, data in enumerate(contents):
        head.outputs.add(name=f"y{i}", datatype="UINT8", shape=[len(data)])
    buffers = [np.frombuffer(data, dtype=np.uint8).data for data in contents]
    wire = SerializedWithRaw(head, RAW_OUT, buffers).SerializeToString()
    expected = pb.ModelInferResponse()
    expected.CopyFrom(head)
    expected.raw_output_contents.extend(contents)
    assert pb.ModelInferResponse.FromString(wire) == expected


def test_a_4_mb_output_is_written_whole() -> None:
    array = np.arange(1 << 20, dtype=np.float32)
    head = pb.ModelInferResponse(model_name="m")
    wire = SerializedWithRaw(head, RAW_OUT, [array.view(np.uint8).data]).SerializeToString()
    (raw,) = pb.ModelInferResponse.FromString(wire).raw_output_contents
    assert np.array_equal(np.frombuffer(raw, dtype=np.float32), array)


@pytest.mark.parametrize("value", [0, 1, 127, 128, 300, 16383, 16384, 2**21, 2**35, 2**63 - 1])
def test_varints_are_protobufs_own(value: int) -> None:
    assert encode_varint(value) == _VarintBytes(value)

"""Fuzz grps_pb.message_to_payload (the gRPC grps API): GrpsMessages built field by field, their wire
bytes damaged, and any bytes that parse as a GrpsMessage."""

from __future__ import annotations

import math
from typing import Any

from fuzz.fuzzing import FUZZ, assert_within_limits, damage, decode_or_refuse, limits, mostly
from google.protobuf.message import DecodeError
from hypothesis import given
from hypothesis import strategies as st

from grps_py.codecs import grps_pb
from grps_py.core.protection import LimitsSettings
from grps_py.core.types import DTYPE_BY_FLAT_FIELD, GMAP_FIELDS, PayloadKind
from grps_py.protos import grps_pb2

FLAT_FIELDS = list(DTYPE_BY_FLAT_FIELD)
unicode = st.text(st.characters(exclude_categories=["Cs"]), max_size=12)  # protobuf strings are UTF-8
INT32 = st.integers(-(2**31), 2**31 - 1)
FIELD_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "flat_uint8": st.one_of(st.integers(0, 300), st.integers(0, 2**32 - 1)),
    "flat_int8": st.one_of(st.integers(-200, 200), INT32),
    "flat_int16": st.one_of(st.integers(-40000, 40000), INT32),
    "flat_int32": INT32,
    "flat_int64": st.integers(-(2**63), 2**63 - 1),
    "flat_float16": st.floats(width=32),
    "flat_float32": st.floats(width=32),
    "flat_float64": st.floats(),
    "flat_string": unicode,
}
MAP_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "s_s": unicode,
    "s_b": st.binary(max_size=12),
    "s_i32": INT32,
    "s_i64": st.integers(-(2**63), 2**63 - 1),
    "s_f": st.floats(width=32),
    "s_d": st.floats(),
}
shape_dims = st.one_of(st.integers(0, 4), st.sampled_from([2**31, 2**32 - 1]), st.integers(0, 2**32 - 1))
shapes = mostly(
    st.lists(st.integers(0, 4), max_size=4),
    st.one_of(st.lists(shape_dims, max_size=5), st.lists(st.integers(0, 1), min_size=60, max_size=80)),
)


@st.composite
def messages(draw: st.DrawFn) -> grps_pb2.GrpsMessage:
    msg = grps_pb2.GrpsMessage(model=draw(unicode))
    kind = draw(st.sampled_from(["gtensors", "gtensors", "gmap", "str_data", "bin_data", "ndarray", "none"]))
    if kind == "gtensors":
        msg.gtensors.SetInParent()
        for _ in range(draw(st.integers(0, 4))):
            dtype = draw(mostly(st.integers(1, 9), st.integers(0, 20)))
            tensor = msg.gtensors.tensors.add(name=draw(unicode), dtype=dtype)
            shape = draw(shapes)
            tensor.shape.extend(shape)
            own = FLAT_FIELDS[dtype - 1] if 1 <= dtype <= 9 else draw(st.sampled_from(FLAT_FIELDS))
            for field in {own, draw(mostly(st.just(own), st.sampled_from(FLAT_FIELDS)))}:
                fits = len(shape) <= 4 and all(d <= 4 for d in shape) and draw(st.integers(0, 4))
                n = math.prod(shape) if fits else draw(st.integers(0, 6))
                getattr(tensor, field).extend(draw(st.lists(FIELD_VALUES[field], min_size=n, max_size=n)))
    elif kind == "gmap":
        msg.gmap.SetInParent()
        for name in draw(st.lists(st.sampled_from(GMAP_FIELDS), max_size=3)):
            getattr(msg.gmap, name).update(draw(st.dictionaries(unicode, MAP_VALUES[name], max_size=3)))
    elif kind == "str_data":
        msg.str_data = draw(st.text(st.characters(exclude_categories=["Cs"]), max_size=40))
    elif kind == "bin_data":
        msg.bin_data = draw(st.binary(max_size=40))
    elif kind == "ndarray":
        msg.ndarray.SetInParent()
    return msg


@st.composite
def damaged(draw: st.DrawFn) -> bytes:
    """A message's wire bytes with a few bytes changed, cut or inserted."""
    return damage(draw, draw(messages()).SerializeToString())


def check(wire: bytes, limits: LimitsSettings) -> None:
    try:
        msg = grps_pb2.GrpsMessage.FromString(wire)  # what grpc hands the service
    except DecodeError:
        return  # grpc answers that itself
    payload = decode_or_refuse(lambda: grps_pb.message_to_payload(msg, limits), len(wire))
    if payload is None:
        return
    if payload.kind is PayloadKind.TENSORS:
        assert_within_limits(payload.value, limits)
    elif payload.kind is PayloadKind.BYTES:
        assert len(payload.value) <= limits.string_bytes
    elif payload.kind is PayloadKind.TEXT:
        assert len(payload.value.encode()) <= limits.string_bytes


@FUZZ
@given(messages(), limits)
def test_built_messages(msg: grps_pb2.GrpsMessage, limits: LimitsSettings) -> None:
    check(msg.SerializeToString(), limits)


@FUZZ
@given(damaged(), limits)
def test_damaged_messages(wire: bytes, limits: LimitsSettings) -> None:
    check(wire, limits)


@FUZZ
@given(st.binary(max_size=200), limits)
def test_any_bytes(wire: bytes, limits: LimitsSettings) -> None:
    check(wire, limits)

"""Fuzz oip_pb.decode_infer_request (ModelInfer / ModelStreamInfer): requests built field by field with
raw or typed contents, their wire bytes damaged, and any bytes that parse as a ModelInferRequest.

Every refusal is `InvalidInput` (`Unsupported` is still accepted as one, should a parameter be refused
as not supported); shared-memory parameters are decoded and checked here, their regions read later.
"""

from __future__ import annotations

import math
import struct
from typing import Any

from fuzz.fuzzing import DATATYPES, FUZZ, assert_within_limits, damage, decode_or_refuse, limits, mostly
from google.protobuf.message import DecodeError
from hypothesis import given
from hypothesis import strategies as st

from grps_py.codecs import oip_pb
from grps_py.codecs.oip_binary import wire_dtype
from grps_py.core.errors import InvalidInput, Unsupported
from grps_py.core.oip import OipRequest
from grps_py.core.protection import LimitsSettings
from grps_py.protos import open_inference_pb2 as pb

unicode = st.text(st.characters(exclude_categories=["Cs"]), max_size=10)
INT32 = st.integers(-(2**31), 2**31 - 1)
UINT32 = st.integers(0, 2**32 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
CONTENTS: dict[str, st.SearchStrategy[Any]] = {
    "bool_contents": st.booleans(),
    "int_contents": st.one_of(st.integers(-200, 200), st.integers(-40000, 40000), INT32),
    "int64_contents": INT64,
    "uint_contents": st.one_of(st.integers(0, 300), st.integers(0, 70000), UINT32),
    "uint64_contents": st.integers(0, 2**64 - 1),
    "fp32_contents": st.floats(width=32),
    "fp64_contents": st.floats(),
    "bytes_contents": st.binary(max_size=10),
}
OWN_FIELD = {
    **dict.fromkeys(("INT8", "INT16", "INT32"), "int_contents"),
    **dict.fromkeys(("UINT8", "UINT16", "UINT32"), "uint_contents"),
    **{name: f"{name.lower()}_contents" for name in ("BOOL", "INT64", "UINT64", "FP32", "FP64", "BYTES")},
}
shapes = mostly(
    st.lists(st.integers(0, 4), max_size=4),
    st.one_of(
        st.lists(
            st.one_of(st.integers(-2, 4), st.sampled_from([2**31, 2**62, 2**63 - 1]), INT64), max_size=5
        ),
        st.lists(st.integers(0, 1), min_size=60, max_size=80),
    ),
)
parameter_values = st.one_of(
    st.builds(lambda v: pb.InferParameter(bool_param=v), st.booleans()),
    st.builds(lambda v: pb.InferParameter(int64_param=v), INT64),
    st.builds(lambda v: pb.InferParameter(string_param=v), unicode),
    st.builds(lambda v: pb.InferParameter(double_param=v), st.floats()),
    st.builds(lambda v: pb.InferParameter(uint64_param=v), st.integers(0, 2**64 - 1)),
    st.just(pb.InferParameter()),  # no value set
)
parameters = mostly(
    st.dictionaries(st.sampled_from(["timeout", "priority", "p"]), parameter_values, max_size=2),
    st.dictionaries(st.sampled_from(["shared_memory_region", "binary_data_size", "x"]), parameter_values),
)


def fill(target: Any, params: dict[str, pb.InferParameter]) -> None:
    for key, value in params.items():
        target[key].CopyFrom(value)


def count(shape: list[int]) -> int | None:
    small = len(shape) <= 4 and all(0 <= d <= 4 for d in shape)
    return math.prod(shape) if small else None


@st.composite
def raw_contents(draw: st.DrawFn, datatype: str, n: int | None) -> bytes:
    if n is None or datatype not in DATATYPES:
        return draw(st.binary(max_size=24))
    if datatype == "BYTES":
        items = draw(st.lists(st.binary(max_size=6), min_size=n, max_size=n))
        data = b"".join(struct.pack("<I", len(x)) + x for x in items)
    else:
        data = draw(
            st.binary(min_size=n * wire_dtype(datatype).itemsize, max_size=n * wire_dtype(datatype).itemsize)
        )
    return bytes(draw(mostly(st.just(data), st.one_of(st.just(data[:-1]), st.binary(max_size=24)))))


@st.composite
def requests(draw: st.DrawFn) -> pb.ModelInferRequest:
    msg = pb.ModelInferRequest(model_name=draw(unicode), id=draw(unicode))
    fill(msg.parameters, draw(parameters))
    raw = draw(st.booleans())
    for index in range(draw(st.integers(0, 4))):
        datatype = draw(mostly(st.sampled_from(DATATYPES), st.sampled_from(["", "FLOAT32", "fp32"])))
        shape = draw(shapes)
        tensor = msg.inputs.add(name=f"i{index}", datatype=datatype, shape=shape)
        fill(tensor.parameters, draw(mostly(st.just({}), parameters)))
        n = count(shape)
        if raw:
            msg.raw_input_contents.append(draw(raw_contents(datatype, n)))
            continue
        own = OWN_FIELD.get(datatype, "fp32_contents")
        field = draw(mostly(st.just(own), st.sampled_from(list(CONTENTS))))
        size = n if n is not None and draw(st.integers(0, 4)) else draw(st.integers(0, 6))
        values = draw(st.lists(CONTENTS[field], min_size=size, max_size=size))
        getattr(tensor.contents, field).extend(values)
    if raw and not draw(st.integers(0, 9)):
        msg.raw_input_contents.append(b"")  # one entry too many
    for index in range(draw(st.integers(0, 2))):
        fill(msg.outputs.add(name=f"o{index}").parameters, draw(mostly(st.just({}), parameters)))
    return msg


@st.composite
def damaged(draw: st.DrawFn) -> bytes:
    """A request's wire bytes with a few bytes changed, cut or inserted."""
    return damage(draw, draw(requests()).SerializeToString())


def check(wire: bytes, limits: LimitsSettings) -> None:
    try:
        msg = pb.ModelInferRequest.FromString(wire)  # what grpc hands the service
    except DecodeError:
        return  # grpc answers that itself
    refusals = (InvalidInput, Unsupported)
    request = decode_or_refuse(lambda: oip_pb.decode_infer_request(msg, limits), len(wire), refusals)
    if request is not None:
        assert isinstance(request, OipRequest)
        assert len(request.outputs) <= limits.tensors
        assert_within_limits(request.inputs, limits)


@FUZZ
@given(requests(), limits)
def test_built_requests(msg: pb.ModelInferRequest, limits: LimitsSettings) -> None:
    check(msg.SerializeToString(), limits)


@FUZZ
@given(damaged(), limits)
def test_damaged_requests(wire: bytes, limits: LimitsSettings) -> None:
    check(wire, limits)


@FUZZ
@given(st.binary(max_size=200), limits)
def test_any_bytes(wire: bytes, limits: LimitsSettings) -> None:
    check(wire, limits)

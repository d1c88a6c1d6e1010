"""Fuzz the binary tensor extension's pieces: the body split, BYTES records and fixed-size tensors."""

from __future__ import annotations

import struct

from fuzz.fuzzing import DATATYPES, FUZZ, assert_within_limits, decode_or_refuse, limits, mostly, shapes
from hypothesis import given
from hypothesis import strategies as st

from grps_py.codecs.oip_binary import deserialize_bytes, split_body, tensor_from_bytes
from grps_py.core.protection import LimitsSettings
from grps_py.core.types import Tensor

counts = st.one_of(st.integers(0, 8), st.sampled_from([2**31, 2**32, 2**40, 2**62]))


@st.composite
def records(draw: st.DrawFn) -> tuple[bytes, int]:
    """Length-prefixed BYTES elements and their count; now and then a length or count that lies."""
    out, n = b"", draw(st.integers(0, 6))
    for _ in range(n):
        data = draw(st.binary(max_size=12))
        claimed = draw(mostly(st.just(len(data)), st.integers(0, 2**32 - 1)))
        out += struct.pack("<I", claimed) + data
    out += draw(mostly(st.just(b""), st.binary(max_size=5)))
    return out, draw(mostly(st.just(n), counts))


@FUZZ
@given(st.binary(max_size=120), st.one_of(st.none(), st.text(max_size=24), st.integers(-5, 130).map(str)))
def test_split_body(body: bytes, header_length: str | None) -> None:
    parts = decode_or_refuse(lambda: split_body(body, header_length), len(body))
    if parts is not None:
        header, binary = parts
        assert bytes(header) + bytes(binary) == body


@FUZZ
@given(st.one_of(records(), st.tuples(st.binary(max_size=80), counts)), limits)
def test_bytes_records(records: tuple[bytes, int], limits: LimitsSettings) -> None:
    buffer, count = records
    array = decode_or_refuse(lambda: deserialize_bytes(buffer, count, "input 'x'", limits), len(buffer))
    if array is not None:
        assert array.shape == (count,)
        assert all(len(value) <= limits.string_bytes for value in array.tolist())


@FUZZ
@given(
    st.one_of(records().map(lambda r: r[0]), st.binary(max_size=80)),
    st.sampled_from(DATATYPES),
    shapes,
    limits,
)
def test_tensors_from_bytes(buffer: bytes, datatype: str, shape: list[int], limits: LimitsSettings) -> None:
    if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
        shape = []  # the codec gets shapes the JSON or protobuf reader has checked
    array = decode_or_refuse(
        lambda: tensor_from_bytes(buffer, datatype, shape, "input 'x'", limits), len(buffer)
    )
    if array is not None:
        assert list(array.shape) == shape
        assert_within_limits([Tensor("x", array)], LimitsSettings(string_bytes=limits.string_bytes))

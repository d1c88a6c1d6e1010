"""Fuzz oip_json.decode_request (JSON bodies) and its binary tensor extension (header + raw bytes)."""

from __future__ import annotations

import struct
from typing import Any

import orjson
from fuzz.fuzzing import (
    DATATYPES,
    FUZZ,
    assert_within_limits,
    count,
    datatypes,
    decode_or_refuse,
    deep_texts,
    dump,
    huge_ints,
    json_scalars,
    json_values,
    limits,
    mostly,
    nest,
    nesting,
    shapes,
    texts,
    value_lists,
)
from hypothesis import given
from hypothesis import strategies as st

from grps_py.codecs import oip_json
from grps_py.codecs.oip_binary import split_body, wire_dtype
from grps_py.core.oip import OipRequest
from grps_py.core.protection import LimitsSettings

names = st.text(min_size=1, max_size=8)
parameters = mostly(
    st.one_of(
        st.none(),
        st.dictionaries(
            st.sampled_from(["binary_data_output", "binary_data", "timeout", "priority", "p"]),
            st.one_of(st.booleans(), st.integers(0, 10), texts),
            max_size=3,
        ),
    ),
    st.one_of(json_values, st.fixed_dictionaries({"shared_memory_region": texts})),
)


@st.composite
def json_inputs(draw: st.DrawFn) -> dict[str, Any]:
    """One `inputs` entry with JSON data, nested or flat, mostly fitting its shape and datatype."""
    datatype = draw(datatypes)
    shape = draw(shapes)
    size = count(shape)
    n = size if size is not None and draw(st.integers(0, 4)) else draw(st.integers(0, 6))
    values = draw(value_lists(datatype, n))
    data = nest(values, shape) if size == n and draw(st.booleans()) else values
    entry = {"name": draw(mostly(names, json_scalars)), "datatype": datatype, "shape": shape}
    if draw(st.integers(0, 5)):
        entry["data"] = data
    if not draw(st.integers(0, 5)):
        entry["parameters"] = draw(parameters)
    return entry


outputs = mostly(
    st.lists(st.fixed_dictionaries({"name": names}), max_size=3, unique_by=str),
    st.lists(
        st.fixed_dictionaries({}, optional={"name": json_scalars, "parameters": parameters}), max_size=3
    ),
)
requests = st.fixed_dictionaries(
    {
        "inputs": mostly(
            st.lists(json_inputs(), max_size=4, unique_by=lambda i: str(i.get("name"))), json_scalars
        )
    },
    optional={"id": mostly(texts, json_scalars), "parameters": parameters, "outputs": outputs},
)


def element_bytes(datatype: str, n: int) -> st.SearchStrategy[bytes]:
    """Wire bytes for n elements: exact for fixed-size datatypes, length-prefixed records for BYTES."""
    if datatype == "BYTES":
        records = st.lists(st.binary(max_size=8), min_size=n, max_size=n)
        return records.map(lambda items: b"".join(struct.pack("<I", len(x)) + x for x in items))
    return st.binary(min_size=n * wire_dtype(datatype).itemsize, max_size=n * wire_dtype(datatype).itemsize)


@st.composite
def binary_bodies(draw: st.DrawFn) -> tuple[bytes, str | None]:
    """A header whose inputs claim binary sizes, the binary part, and the header-length header."""
    entries: list[dict[str, Any]] = []
    chunks: list[bytes] = []
    for _ in range(draw(st.integers(0, 4))):
        datatype = draw(st.sampled_from(DATATYPES))
        shape = draw(shapes)
        n = count(shape)
        chunk = draw(element_bytes(datatype, n) if n is not None else st.binary(max_size=16))
        if not draw(st.integers(0, 5)):  # a damaged chunk
            chunk = draw(st.one_of(st.just(chunk[:-1]), st.just(chunk + b"\0"), st.binary(max_size=16)))
        size = draw(mostly(st.just(len(chunk)), st.one_of(huge_ints, json_scalars)))
        entry: dict[str, Any] = {"name": f"i{len(entries)}", "datatype": datatype, "shape": shape}
        entry["parameters"] = {"binary_data_size": size}
        entries.append(entry)
        chunks.append(chunk)
    header = dump({"inputs": entries, "outputs": draw(outputs)})
    body = header + b"".join(chunks)
    length = draw(
        mostly(
            st.just(str(len(header))),
            st.one_of(st.integers(-2, len(body) + 2).map(str), st.text(max_size=24), st.none()),
        )
    )
    return body, length


def check(body: bytes, header_length: str | None, limits: LimitsSettings) -> None:
    request = decode_or_refuse(lambda: oip_json.decode_request(body, header_length, limits), len(body))
    if request is None:
        return
    assert isinstance(request, OipRequest)
    assert len(request.outputs) <= limits.tensors
    assert_within_limits(request.inputs, limits)
    header, _ = split_body(body, header_length)
    assert nesting(orjson.loads(header)) <= limits.json_depth


@FUZZ
@given(st.binary(max_size=200), st.one_of(st.none(), st.integers(0, 210).map(str)), limits)
def test_any_bytes(body: bytes, header_length: str | None, limits: LimitsSettings) -> None:
    check(body, header_length, limits)


@FUZZ
@given(json_values, limits)
def test_any_json(value: Any, limits: LimitsSettings) -> None:
    check(dump(value), None, limits)


@FUZZ
@given(requests, limits)
def test_near_valid_json_requests(request: dict[str, Any], limits: LimitsSettings) -> None:
    check(dump(request), None, limits)


@FUZZ
@given(binary_bodies(), limits)
def test_binary_extension_bodies(body: tuple[bytes, str | None], limits: LimitsSettings) -> None:
    check(*body, limits)


@FUZZ
@given(deep_texts, limits)
def test_deep_nesting(nested: bytes, limits: LimitsSettings) -> None:
    check(b'{"inputs":[{"name":"x","datatype":"FP32","shape":[1],"data":' + nested + b"}]}", None, limits)
    check(b'{"ignored":' + nested + b',"inputs":[]}', None, limits)

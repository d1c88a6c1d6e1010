"""Fuzz oip_generate.decode_generate (Triton's generate extension): any bytes, any JSON, and named
values against models that declare their inputs or do not."""

from __future__ import annotations

from typing import Any

import orjson
from fuzz.fuzzing import (
    DATATYPES,
    FUZZ,
    assert_within_limits,
    decode_or_refuse,
    deep_texts,
    dump,
    json_values,
    limits,
    mostly,
    nest,
    nesting,
    texts,
    value_lists,
)
from hypothesis import given
from hypothesis import strategies as st

from grps_py.codecs import oip_generate
from grps_py.codecs.oip_generate import GenerateSpecs
from grps_py.core.protection import LimitsSettings

NAMES = ["text_input", "max_tokens", "a", "b"]
declared_shapes = st.one_of(st.none(), st.lists(st.sampled_from([-1, 0, 1, 2, 3]), max_size=3).map(tuple))
specs = st.dictionaries(
    st.sampled_from(NAMES),
    st.tuples(mostly(st.one_of(st.none(), st.sampled_from(DATATYPES)), st.just("FLOAT32")), declared_shapes),
)


@st.composite
def values(draw: st.DrawFn) -> Any:
    """A scalar, a flat list or a nested list, of one kind of value (mostly)."""
    kind = draw(st.sampled_from(["BYTES", "BOOL", "INT64", "FP64"]))
    shape = draw(st.lists(st.integers(0, 3), max_size=3))
    n = 1
    for dim in shape:
        n *= dim
    items = draw(value_lists(kind, n))
    if not shape:
        return items[0] if items else None
    return nest(items, shape)


documents = st.dictionaries(
    mostly(st.sampled_from(NAMES), texts),
    mostly(values(), json_values),
    max_size=4,
).flatmap(
    lambda doc: st.fixed_dictionaries(
        {}, optional={"parameters": mostly(st.dictionaries(texts, st.integers()), json_values), "id": texts}
    ).map(lambda extra: {**doc, **extra})
)


def check(body: bytes, specs: GenerateSpecs, limits: LimitsSettings) -> None:
    decoded = decode_or_refuse(lambda: oip_generate.decode_generate(body, specs, limits), len(body))
    if decoded is None:
        return
    tensors, parameters, request_id = decoded
    assert isinstance(parameters, dict) and isinstance(request_id, str)
    assert_within_limits(tensors, limits)
    assert nesting(orjson.loads(body)) <= limits.json_depth


@FUZZ
@given(st.binary(max_size=200), specs, limits)
def test_any_bytes(body: bytes, specs: GenerateSpecs, limits: LimitsSettings) -> None:
    check(body, specs, limits)


@FUZZ
@given(json_values, specs, limits)
def test_any_json(value: Any, specs: GenerateSpecs, limits: LimitsSettings) -> None:
    check(dump(value), specs, limits)


@FUZZ
@given(documents, specs, limits)
def test_named_values(document: dict[str, Any], specs: GenerateSpecs, limits: LimitsSettings) -> None:
    check(dump(document), specs, limits)


@FUZZ
@given(deep_texts, specs, limits)
def test_deep_nesting(nested: bytes, specs: GenerateSpecs, limits: LimitsSettings) -> None:
    check(b'{"text_input":' + nested + b"}", specs, limits)

"""Fuzz grps_json.decode_request: any bytes, any JSON, and near-valid GrpsMessage JSON."""

from __future__ import annotations

import base64
from typing import Any

import orjson
from fuzz.fuzzing import (
    FUZZ,
    assert_within_limits,
    count,
    decode_or_refuse,
    deep_texts,
    dump,
    floats,
    ints,
    json_scalars,
    json_values,
    limits,
    mostly,
    nest,
    nesting,
    shapes,
    texts,
)
from hypothesis import given
from hypothesis import strategies as st

from grps_py.codecs import grps_json
from grps_py.core.protection import LimitsSettings
from grps_py.core.types import DTYPE_BY_FLAT_FIELD, DTYPE_BY_NAME, GMAP_FIELDS, Payload, PayloadKind

FLAT_FIELDS = list(DTYPE_BY_FLAT_FIELD)
DTYPE_NAMES = list(DTYPE_BY_NAME)


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def key(name: str) -> st.SearchStrategy[str]:
    """A field's proto name or its json_name; now and then a name no parser knows."""
    return mostly(st.sampled_from([name, camel(name)]), st.just(name + "_x"))


def flat_values(field: str, n: int) -> st.SearchStrategy[list[Any]]:
    """n values for a flat field: all of its kind, or now and then with other JSON values mixed in."""
    if field == "flat_string":
        good: st.SearchStrategy[Any] = texts
    elif field.startswith("flat_float"):
        good = st.one_of(floats, ints, st.sampled_from(["NaN", "Infinity", "-Infinity", "nan"]))
    else:
        good = st.one_of(ints, st.integers(-3, 300).map(float), st.integers(0, 9).map(str))
    odd = st.one_of(good, json_scalars)
    return mostly(st.lists(good, min_size=n, max_size=n), st.lists(odd, min_size=n, max_size=n))


@st.composite
def tensors(draw: st.DrawFn) -> dict[str, Any]:
    dtype = draw(mostly(st.sampled_from(DTYPE_NAMES), st.one_of(st.integers(-1, 12), json_scalars)))
    info = DTYPE_BY_NAME.get(dtype) if isinstance(dtype, str) else None
    own = st.just(info.flat_field) if info is not None else st.sampled_from(FLAT_FIELDS)
    field = draw(mostly(own, st.sampled_from(FLAT_FIELDS)))
    shape = draw(shapes)
    size = count(shape)
    n = size if size is not None and draw(st.integers(0, 4)) else draw(st.integers(0, 6))
    return {
        draw(key("name")): draw(texts),
        draw(key("dtype")): dtype,
        draw(key("shape")): shape,
        draw(key(field)): draw(flat_values(field, n)),
    }


@st.composite
def ndarrays(draw: st.DrawFn) -> Any:
    shape = draw(st.lists(st.integers(0, 3), max_size=4))
    values = draw(flat_values("flat_float32", count(shape) or 0))
    return draw(mostly(st.just(nest(values, shape)), st.one_of(json_values, floats)))


def base64_texts(data: bytes, urlsafe: bool, padded: bool) -> str:
    text = (base64.urlsafe_b64encode if urlsafe else base64.b64encode)(data).decode()
    return text if padded else text.rstrip("=")


base64s = st.builds(base64_texts, st.binary(max_size=40), st.booleans(), st.booleans())
gmap_entries = mostly(
    st.dictionaries(texts, st.one_of(texts, base64s, ints, floats), max_size=4),
    st.one_of(st.dictionaries(texts, json_scalars, max_size=4), json_scalars),
)
gmaps = st.dictionaries(mostly(st.sampled_from(GMAP_FIELDS), st.sampled_from(["sS", "s_x"])), gmap_entries)
data_fields = st.one_of(
    st.fixed_dictionaries({"gtensors": st.fixed_dictionaries({"tensors": st.lists(tensors(), max_size=4)})}),
    st.fixed_dictionaries({"ndarray": ndarrays()}),
    st.fixed_dictionaries({"gmap": gmaps}),
    st.fixed_dictionaries({"str_data": mostly(texts, json_scalars)}),
    st.fixed_dictionaries({"bin_data": mostly(base64s, texts)}),
)
messages = st.builds(
    lambda data, extra: {**data, **extra},
    data_fields,
    mostly(
        st.fixed_dictionaries({}, optional={"model": texts, "status": st.just({"code": 200})}),
        st.dictionaries(st.sampled_from(["model", "status", "str_data", "unknown"]), json_values, max_size=2),
    ),
)


def check(body: bytes, limits: LimitsSettings) -> None:
    decoded = decode_or_refuse(lambda: grps_json.decode_request(body, limits), len(body))
    if decoded is None:
        return
    payload, model = decoded
    assert isinstance(payload, Payload) and isinstance(model, str)
    assert nesting(orjson.loads(body)) <= limits.json_depth
    if payload.kind is PayloadKind.TENSORS:
        assert_within_limits(payload.value, limits)
    elif payload.kind in (PayloadKind.TEXT, PayloadKind.BYTES):
        size = len(payload.value) if payload.kind is PayloadKind.BYTES else len(payload.value.encode())
        assert size <= limits.string_bytes


@FUZZ
@given(st.binary(max_size=200), limits)
def test_any_bytes(body: bytes, limits: LimitsSettings) -> None:
    check(body, limits)


@FUZZ
@given(json_values, st.booleans(), limits)
def test_any_json(value: Any, ascii_only: bool, limits: LimitsSettings) -> None:
    check(dump(value, ascii_only), limits)


@FUZZ
@given(messages, limits)
def test_near_valid_messages(message: dict[str, Any], limits: LimitsSettings) -> None:
    check(dump(message), limits)


@FUZZ
@given(deep_texts, st.sampled_from(["ndarray", "gmap", "str_data"]), limits)
def test_deep_nesting(nested: bytes, field: str, limits: LimitsSettings) -> None:
    check(b'{"' + field.encode() + b'":' + nested + b"}", limits)


@FUZZ
@given(st.integers(0, 3000), st.integers(1, 3000), st.integers(0, 3000), limits)
def test_ndarray_with_one_long_string(numbers: int, length: int, where: int, limits: LimitsSettings) -> None:
    """Typed element by element, never by `np.array`, which would give every element that string's width."""
    values: list[Any] = [1.5] * numbers
    values.insert(min(where, numbers), "x" * length)
    check(dump({"ndarray": values}), limits)

"""Shared by the codec fuzz tests: hypothesis settings, the one property they all check, and strategies.

The property: a codec given any input either decodes it into something within the limits it was
given, or refuses it with `InvalidInput`; any other exception, an example slower than the deadline,
or an allocation out of proportion to the input fails the test. `FUZZ_EXAMPLES` raises the number
of examples per property (default 150), `FUZZ_DEADLINE_MS` the time one example may take.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import tracemalloc
from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar

import numpy as np
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

from grps_py.codecs.limits import DEFAULT_LIMITS
from grps_py.core.datatypes import DATATYPE_NAMES
from grps_py.core.errors import InvalidInput
from grps_py.core.protection import LimitsSettings
from grps_py.core.types import Tensor

T = TypeVar("T")
Array = np.ndarray[Any, Any]

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "150"))
DEADLINE_MS = int(os.environ.get("FUZZ_DEADLINE_MS", "1000"))  # generous: a hang, not a slow CI box
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=timedelta(milliseconds=DEADLINE_MS),
    database=None,  # nothing written into the repository; a failure prints its example
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
# What decoding may allocate beyond the input: a fixed allowance plus a multiple of the input's size
# (Python objects for JSON values cost tens of bytes each). A claimed shape such as [2**40] that
# reached numpy would blow far past it.
ALLOWANCE_BYTES = 4 << 20
BYTES_PER_INPUT_BYTE = 96


def decode_or_refuse(
    call: Callable[[], T], input_size: int, refusals: tuple[type[BaseException], ...] = (InvalidInput,)
) -> T | None:
    """The decoded value, or None when `call` refused with one of `refusals` (InvalidInput).

    Anything else it raises propagates and fails the property; so does allocating more than the
    input's size allows (measured with tracemalloc).
    """
    tracemalloc.start()  # only around the call: tracing hypothesis itself would slow it sixfold
    try:
        result: T | None = call()
        note("decoded")
    except refusals as exc:
        assert str(exc), "a refusal says why"
        note("refused")
        result = None
    finally:
        extra = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert extra <= ALLOWANCE_BYTES + BYTES_PER_INPUT_BYTE * input_size, f"allocated {extra} bytes"
    return result


def note(outcome: str) -> None:
    """Count an outcome in hypothesis's statistics (`--hypothesis-show-statistics`), inside a test only."""
    with contextlib.suppress(InvalidArgument):
        event(outcome)


def assert_within_limits(tensors: list[Tensor], limits: LimitsSettings) -> None:
    """What a successful decode promises: no more tensors, elements or string bytes than allowed."""
    assert len(tensors) <= limits.tensors
    assert sum(t.array.size for t in tensors) <= limits.elements
    for tensor in tensors:
        assert isinstance(tensor.array, np.ndarray)
        if tensor.array.dtype == object:
            for value in tensor.array.reshape(-1).tolist():
                size = len(value) if isinstance(value, bytes) else len(value.encode("utf-8", "surrogatepass"))
                assert size <= limits.string_bytes


def nesting(value: Any) -> int:
    """The nesting depth of a parsed JSON value, the slow and obvious way."""
    if isinstance(value, list):
        return 1 + max(map(nesting, value), default=0)
    if isinstance(value, dict):
        return 1 + max(map(nesting, value.values()), default=0)
    return 0


# --- strategies --------------------------------------------------------------------------------

small_limits = st.builds(
    LimitsSettings,
    tensors=st.integers(1, 6),
    elements=st.integers(1, 40),
    json_depth=st.integers(2, 10),
    string_bytes=st.integers(1, 24),
)
# Half the time the defaults, half the time limits small enough for fuzzed inputs to reach them.
limits = st.one_of(st.just(DEFAULT_LIMITS), small_limits)

HUGE_INTS = [2**31, 2**32 - 1, 2**32, 2**40, 2**53 + 1, 2**62, 2**63 - 1, 2**63, 2**64 - 1, 2**64, 10**30]
huge_ints = st.sampled_from(HUGE_INTS + [-x for x in HUGE_INTS])
ints = st.one_of(st.integers(-3, 300), huge_ints, st.integers())
floats = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False), st.sampled_from([1e39, -1e39, 1e-45, 1e308])
)
texts = st.text(max_size=12)
json_scalars = st.one_of(st.none(), st.booleans(), ints, floats, texts)
json_values = st.recursive(
    json_scalars,
    lambda children: st.one_of(st.lists(children, max_size=5), st.dictionaries(texts, children, max_size=5)),
    max_leaves=20,
)
# Dimensions: small ones (so shapes fit data), and ones that would be huge if anything believed them.
dims = st.one_of(st.integers(0, 4), huge_ints, st.integers())
odd_shapes = st.one_of(
    st.lists(dims, max_size=5),
    st.lists(st.integers(0, 1), min_size=60, max_size=80),  # more dims than numpy holds
    json_scalars,
)
small_shapes = st.lists(st.integers(0, 4), max_size=4)
DATATYPES = list(DATATYPE_NAMES)
odd_datatypes = st.one_of(st.sampled_from(["FLOAT32", "", "fp32", "INT128"]), json_scalars)


@st.composite
def mostly(draw: st.DrawFn, good: st.SearchStrategy[Any], odd: st.SearchStrategy[Any]) -> Any:
    """`good` about nine times in ten, else `odd`: near-valid inputs, one field going wrong at a time.

    (`st.one_of(good, good, ..., odd)` does not weigh: hypothesis picks among distinct strategies.)
    """
    return draw(odd) if draw(st.integers(0, 9)) == 9 else draw(good)


shapes = mostly(small_shapes, odd_shapes)
datatypes = mostly(st.sampled_from(DATATYPES), odd_datatypes)


def dump(value: Any, ascii_only: bool = True) -> bytes:
    """JSON text (stdlib: it writes integers of any size); lone surrogates become invalid UTF-8."""
    return json.dumps(value, ensure_ascii=ascii_only, allow_nan=False).encode("utf-8", "surrogatepass")


def deep(depth: int, opener: str) -> bytes:
    """`depth` nested arrays or objects around one number."""
    if opener == "[":
        return b"[" * depth + b"1" + b"]" * depth
    return b'{"a":' * depth + b"1" + b"}" * depth


deep_texts = st.builds(deep, st.integers(1, 1500), st.sampled_from(["[", "{"]))


def count(shape: Any) -> int | None:
    """A shape's element count when it is a small list of small integers, else None."""
    if not isinstance(shape, list) or not all(type(d) is int and 0 <= d <= 64 for d in shape):
        return None
    total = math.prod(shape)
    return total if total <= 64 else None


def nest(values: list[Any], shape: list[int]) -> Any:
    """Flat row-major values as nested lists of `shape` (values must number prod(shape))."""
    if len(shape) <= 1:
        return values
    step = len(values) // shape[0] if shape[0] else 0
    return [nest(values[i * step : (i + 1) * step], shape[1:]) for i in range(shape[0])]


def values_for(datatype: Any) -> st.SearchStrategy[Any]:
    """JSON values a datatype takes (any value for an unknown datatype)."""
    if datatype == "BOOL":
        return st.booleans()
    if datatype == "BYTES":
        return texts
    if isinstance(datatype, str) and datatype.startswith(("INT", "UINT")):
        return ints
    if datatype in DATATYPES:
        return st.one_of(ints, floats)
    return json_scalars


def value_lists(datatype: Any, n: int) -> st.SearchStrategy[list[Any]]:
    """n values for a datatype: all of its kind, or now and then with other JSON values mixed in."""
    good = values_for(datatype)
    return mostly(
        st.lists(good, min_size=n, max_size=n),
        st.lists(st.one_of(good, json_scalars), min_size=n, max_size=n),
    )


def damage(draw: st.DrawFn, wire: bytes) -> bytes:
    """`wire` with a few bytes changed, cut or inserted (for protobuf decoders)."""
    data = bytearray(wire)
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, len(data)))
        action = draw(st.sampled_from(["set", "cut", "insert"]))
        if action == "set" and at < len(data):
            data[at] = draw(st.integers(0, 255))
        elif action == "cut":
            del data[at : at + draw(st.integers(1, 4))]
        else:
            data[at:at] = draw(st.binary(min_size=1, max_size=4))
    return bytes(data)

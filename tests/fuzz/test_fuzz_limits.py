"""The vectorised JSON depth scan against a recursive count, and the fuzz harness's own teeth."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import orjson
import pytest
from fuzz.fuzzing import FUZZ, decode_or_refuse, nesting
from hypothesis import given
from hypothesis import strategies as st

from grps_py.codecs.limits import DEFAULT_LIMITS, check_json_depth, json_depth
from grps_py.core.errors import InvalidInput
from grps_py.core.protection import LimitsSettings

# Strings full of what could fool a scan: brackets, quotes, backslashes and their escapes.
tricky_text = st.text(st.sampled_from('[]{}"\\:,ab\u00e9\u2028'), max_size=10)
tricky_json = st.recursive(
    st.one_of(
        st.none(), st.booleans(), st.integers(-(2**63), 2**63 - 1), st.floats(allow_nan=False), tricky_text
    ),
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(tricky_text, children, max_size=4)
    ),
    max_leaves=40,
)


@FUZZ
@given(tricky_json, st.sampled_from(["orjson", "ascii", "utf-8", "indented"]))
def test_json_depth_matches_a_recursive_count(value: Any, style: str) -> None:
    if style == "orjson":
        text = orjson.dumps(value)
    elif style == "indented":
        text = json.dumps(value, indent=1).encode()
    else:
        text = json.dumps(value, ensure_ascii=style == "ascii").encode()
    assert json_depth(text) == nesting(value)


@FUZZ
@given(tricky_json, st.integers(2, 8))
def test_check_json_depth_refuses_exactly_what_nests_too_deep(value: Any, limit: int) -> None:
    text = orjson.dumps(value)
    limits = LimitsSettings(json_depth=limit)
    if nesting(value) > limit:
        with pytest.raises(
            InvalidInput, match=rf"nests {nesting(value)} levels deep; limits.json_depth is {limit}"
        ):
            check_json_depth(text, limits)
    else:
        check_json_depth(text, limits)


@FUZZ
@given(st.binary(max_size=300))
def test_json_depth_of_any_bytes_is_a_number(data: bytes) -> None:
    assert json_depth(data) >= 0  # never an exception, whatever the bytes


def test_the_harness_catches_a_large_allocation() -> None:
    with pytest.raises(AssertionError, match="allocated"):
        decode_or_refuse(lambda: np.ones(2**23), 10)  # 64 MiB for a 10-byte input


def test_the_harness_lets_other_exceptions_through() -> None:
    def raising(exc: Exception) -> None:
        raise exc

    with pytest.raises(ValueError, match="a bug"):
        decode_or_refuse(lambda: raising(ValueError("a bug")), 10)
    assert decode_or_refuse(lambda: raising(InvalidInput("refused")), 10) is None
    assert decode_or_refuse(lambda: 5, 10) == 5


def test_default_limits_are_the_settings_defaults() -> None:
    assert LimitsSettings() == DEFAULT_LIMITS

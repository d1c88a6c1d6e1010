"""What one request may carry, checked by every decoding codec: server.yml's `limits.tensors`,
`limits.elements`, `limits.json_depth` and `limits.string_bytes` (`LimitsSettings`).

The adapters pass their server's `LimitsSettings`; `DEFAULT_LIMITS` (its documented defaults) serves
codec users without a server, and `UNLIMITED` reads what a model itself returned. Every check looks
at a count, a claimed shape or a length, before anything is allocated for it and never once per
value, so the hot path stays cheap. A refusal is an `InvalidInput` naming the limit and the value.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from grps_py.core.errors import InvalidInput
from grps_py.core.protection import LimitsSettings

__all__ = [
    "DEFAULT_LIMITS",
    "MAX_DIM",
    "UNLIMITED",
    "ElementBudget",
    "check_json_depth",
    "check_length",
    "check_strings",
    "check_tensors",
    "for_body",
    "json_depth",
]

DEFAULT_LIMITS = LimitsSettings()
UNLIMITED = LimitsSettings(
    tensors=sys.maxsize, elements=sys.maxsize, json_depth=sys.maxsize, string_bytes=sys.maxsize
)
MAX_DIM = 2**63 - 1  # OIP dims are int64; a larger one cannot reach numpy
_UTF8_MAX = 4  # bytes per character, at most
_OPEN, _CLOSE = 0x7B, 0x7D  # "{" and "}"; "[" and "]" fold onto them with | 0x20
_QUOTE, _BACKSLASH = 0x22, 0x5C


def for_body(limits: LimitsSettings, size: int) -> LimitsSettings:
    """`limits` for decoding a body of `size` bytes. No string or bytes element read from a body is
    longer than the body, so when the body is within `limits.string_bytes` the per-element string
    checks are skipped (the common case: one comparison instead of a pass over every string)."""
    return _strings_unchecked(limits) if size <= limits.string_bytes else limits


@functools.cache
def _strings_unchecked(limits: LimitsSettings) -> LimitsSettings:
    return dataclasses.replace(limits, string_bytes=UNLIMITED.string_bytes)


def check_tensors(count: int, limits: LimitsSettings, what: str = "tensors") -> None:
    """A request names at most `limits.tensors` tensors (inputs, or requested outputs)."""
    if count > limits.tensors:
        raise InvalidInput(f"the request has {count} {what}; limits.tensors is {limits.tensors}")


class ElementBudget:
    """The elements of one request's tensors, counted tensor by tensor against `limits.elements`.

    `take` is called with a tensor's claimed element count (the product of its shape) before the
    tensor is read, so a shape such as [2**40] is refused without allocating anything.
    """

    def __init__(self, limits: LimitsSettings) -> None:
        self.limit = limits.elements
        self.total = 0

    def take(self, count: int, label: str) -> None:
        self.total += count
        if count > self.limit:
            raise InvalidInput(f"{label}: {count} elements exceed limits.elements ({self.limit})")
        if self.total > self.limit:
            raise InvalidInput(
                f"{label}: the request's tensors hold {self.total} elements so far, over limits.elements "
                f"({self.limit})"
            )

    def take_shape(self, shape: Sequence[int], label: str) -> int:
        """`take` for a shape; its element count (a Python int, so no overflow) is returned."""
        count = math.prod(shape)
        self.take(count, label)
        return count


def check_length(length: int, label: str, limits: LimitsSettings) -> None:
    """One string or bytes value of `length` bytes."""
    if length > limits.string_bytes:
        raise InvalidInput(
            f"{label}: a value of {length} bytes exceeds limits.string_bytes ({limits.string_bytes})"
        )


def check_strings(values: Sequence[str | bytes], label: str, limits: LimitsSettings) -> None:
    """Every element's UTF-8 length within `limits.string_bytes`.

    One C-level pass finds the longest; a `str` is encoded only where its character count alone
    cannot settle it (between a quarter of the limit and the limit), which is rare.
    """
    limit = limits.string_bytes
    longest = max(map(len, values), default=0)
    if longest > limit:
        check_length(longest, label, limits)
    if longest * _UTF8_MAX <= limit or not values or isinstance(values[0], bytes):
        return
    lengths = np.fromiter(map(len, values), np.int64, count=len(values))
    for index in np.flatnonzero(lengths * _UTF8_MAX > limit).tolist():
        value = values[index]
        if isinstance(value, str):
            check_length(len(value.encode("utf-8", "surrogatepass")), label, limits)


SMALL_TEXT_BYTES = 64 << 10  # below this, counting brackets with bytes.count beats numpy's set-up


def check_json_depth(text: bytes | memoryview, limits: LimitsSettings) -> None:
    """A JSON text nests at most `limits.json_depth` arrays and objects.

    A few vectorised passes over the bytes; the structure is traced only when the text holds more
    brackets than the limit.
    """
    limit = limits.json_depth
    if len(text) <= SMALL_TEXT_BYTES and _brackets(bytes(text)) <= limit:
        return  # the usual request (or the JSON head of a binary one): two C-level counts
    raw = np.frombuffer(text, np.uint8)
    if raw.size <= limit:
        return
    folded = raw | 0x20
    opens = folded == _OPEN
    if np.count_nonzero(opens) <= limit:
        return
    depth = _structural_depth(raw, np.flatnonzero(opens), np.flatnonzero(folded == _CLOSE))
    if depth > limit:
        raise InvalidInput(f"the JSON nests {depth} levels deep; limits.json_depth is {limit}")


def _brackets(text: bytes) -> int:
    return text.count(b"[") + text.count(b"{")


def json_depth(text: bytes | memoryview) -> int:
    """The deepest nesting of arrays and objects in a JSON text (0 for a scalar)."""
    raw = np.frombuffer(text, np.uint8)
    folded = raw | 0x20
    return _structural_depth(raw, np.flatnonzero(folded == _OPEN), np.flatnonzero(folded == _CLOSE))


def _structural_depth(
    raw: np.ndarray[Any, Any], opens: np.ndarray[Any, Any], closes: np.ndarray[Any, Any]
) -> int:
    """The deepest nesting, given the positions of every opening and closing bracket.

    Brackets inside strings do not count: a bracket is structural when an even number of unescaped
    quotes precede it, and a quote is escaped when an odd run of backslashes precedes it. Exact for
    valid JSON; for anything else a number, never an error.
    """
    quotes = _unescaped_quotes(raw)
    if quotes.size:
        opens = opens[np.searchsorted(quotes, opens) % 2 == 0]
        closes = closes[np.searchsorted(quotes, closes) % 2 == 0]
    positions = np.concatenate([opens, closes])
    steps = np.concatenate([np.ones(opens.size, np.int64), -np.ones(closes.size, np.int64)])
    depths = np.cumsum(steps[np.argsort(positions, kind="stable")])
    return int(depths.max(initial=0))


def _unescaped_quotes(raw: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Positions of the quotes that open or close strings (not `\\"`)."""
    quotes = np.flatnonzero(raw == _QUOTE)
    slashes = np.flatnonzero(raw == _BACKSLASH)
    if not quotes.size or not slashes.size:
        return quotes
    run_start = np.ones(slashes.size, bool)  # where each run of consecutive backslashes begins
    run_start[1:] = np.diff(slashes) != 1
    first = slashes[np.maximum.accumulate(np.where(run_start, np.arange(slashes.size), 0))]
    before = np.searchsorted(slashes, quotes - 1)  # the backslash just before each quote, if any
    has = before < slashes.size
    has[has] = slashes[before[has]] == quotes[has] - 1
    run = np.zeros(quotes.size, np.int64)
    run[has] = quotes[has] - first[before[has]]
    unescaped: np.ndarray[Any, Any] = quotes[run % 2 == 0]
    return unescaped

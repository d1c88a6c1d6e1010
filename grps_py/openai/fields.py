"""Readers of OpenAI request fields: each checks one value's type and range and names the field when it
is wrong (`InvalidParameter`, whose `param` is the field's path, e.g. `messages[2].content`).

A JSON `null` reads as absent (the reader's default), as OpenAI takes it. Booleans are never numbers
here (Python's `True` is an int, JSON's `true` is not), and integers are never floats (`5.0` is no
token count). A request's object is read with `Fields`: every key is taken by a reader or a refusal,
and whatever is left is unknown and refused by name.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from grps_py.codecs import json_values
from grps_py.codecs.limits import check_strings
from grps_py.core.errors import InvalidInput
from grps_py.core.protection import LimitsSettings
from grps_py.core.untrusted import shown
from grps_py.openai.errors import (
    INVALID_TYPE,
    INVALID_VALUE,
    MISSING_PARAMETER,
    UNKNOWN_PARAMETER,
    UNSUPPORTED_PARAMETER,
    InvalidParameter,
)

T = TypeVar("T")
Trivial = Callable[[Any], bool]  # is a value of an unsupported parameter one that asks for nothing?

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
_SHOWN_KEY_CHARS = 64
_LISTED_UNKNOWN = 5  # unknown keys named in one message


def path(parent: str, key: str | int) -> str:
    """The OpenAI form of a field's path: `stream_options.include_usage`, `messages[0].content`."""
    if isinstance(key, int):
        return f"{parent}[{key}]"
    return f"{parent}.{key}" if parent else key


def show(value: Any) -> str:
    """A client's value in a message: its JSON, cut short and escaped (no bidi control or line break)."""
    return shown(json_values.show(value), 48)


def wrong_type(param: str, wanted: str, value: Any) -> InvalidParameter:
    return InvalidParameter(f"'{param}' must be {wanted}, got {show(value)}", param, INVALID_TYPE)


class Fields:
    """One JSON object of a request, read key by key (each `take` removes its key)."""

    def __init__(self, value: Any, where: str = "") -> None:
        if not isinstance(value, dict):
            raise wrong_type(where or "the request body", "a JSON object", value)
        self._left = dict(value)
        self.where = where

    def path(self, key: str) -> str:
        return path(self.where, key)

    def take(self, key: str) -> Any:
        """The key's value; None when absent or null."""
        return self._left.pop(key, None)

    def required(self, key: str) -> Any:
        value = self.take(key)
        if value is None:
            param = self.path(key)
            raise InvalidParameter(f"'{param}' is required", param, MISSING_PARAMETER)
        return value

    def refuse_unsupported(self, table: dict[str, Trivial]) -> None:
        """Each key of `table` the request sets, to anything but null or a value that asks for nothing
        (`logprobs: false`, `frequency_penalty: 0`), is refused by name."""
        for key, trivial in table.items():
            value = self.take(key)
            if value is not None and not trivial(value):
                param = self.path(key)
                raise InvalidParameter(
                    f"'{param}' is not supported by this server (got {show(value)})",
                    param,
                    UNSUPPORTED_PARAMETER,
                )

    def finish(self) -> None:
        """Refuse whatever key no reader took. Deliberate: an unknown parameter is never ignored
        silently, since a client that sent it expects it to change the answer (or misspelt one)."""
        if not self._left:
            return
        keys = [shown(key, _SHOWN_KEY_CHARS) for key in list(self._left)[:_LISTED_UNKNOWN]]
        more = len(self._left) - len(keys)
        listed = ", ".join(f"'{self.where + '.' if self.where else ''}{key}'" for key in keys)
        suffix = f" and {more} more" if more > 0 else ""
        param = self.path(keys[0])
        raise InvalidParameter(f"unknown parameter {listed}{suffix}", param, UNKNOWN_PARAMETER)


# --- trivial values of unsupported parameters --------------------------------------------------


def never(_: Any) -> bool:
    return False


def is_false(value: Any) -> bool:
    return value is False


def is_zero(value: Any) -> bool:
    return type(value) in (int, float) and value == 0


def is_empty_object(value: Any) -> bool:
    return isinstance(value, dict) and not value


def is_one_of(*allowed: Any) -> Trivial:
    """Equal to one of `allowed`, type for type (`0` is not `false`, `"none"` is not `["none"]`)."""

    def trivial(value: Any) -> bool:
        return any(type(value) is type(each) and value == each for each in allowed)

    return trivial


# --- scalar readers ----------------------------------------------------------------------------


def boolean(value: Any, param: str, default: bool = False) -> bool:
    if value is None:
        return default
    if type(value) is not bool:
        raise wrong_type(param, "a boolean", value)
    return value


def integer(value: Any, param: str, low: int, high: int) -> int | None:
    if value is None:
        return None
    if type(value) is not int:
        raise wrong_type(param, "an integer", value)
    if not low <= value <= high:
        raise InvalidParameter(f"'{param}' must be from {low} to {high}, got {show(value)}", param)
    return value


def number(value: Any, param: str, low: float, high: float, low_open: bool = False) -> float | None:
    """A number within [low, high], or (low, high] when `low_open`."""
    if value is None:
        return None
    if type(value) not in (int, float):
        raise wrong_type(param, "a number", value)
    if value > high or value < low or (low_open and value == low):
        interval = f"{'(' if low_open else '['}{low:g}, {high:g}]"
        raise InvalidParameter(f"'{param}' must be in {interval}, got {show(value)}", param)
    return float(value)


def text(value: Any, param: str, max_chars: int, non_empty: bool = False) -> str | None:
    """A short string (a model name, a user id, a stop sequence): at most `max_chars` characters."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise wrong_type(param, "a string", value)
    if non_empty and not value:
        raise InvalidParameter(f"'{param}' must not be empty", param)
    if len(value) > max_chars:
        raise InvalidParameter(f"'{param}' is {len(value)} characters; at most {max_chars} are taken", param)
    return value


def bounded_list(value: Any, param: str, max_items: int) -> list[Any]:
    """A JSON array of 1 to `max_items` items."""
    if not isinstance(value, list):
        raise wrong_type(param, "an array", value)
    if not value:
        raise InvalidParameter(f"'{param}' must not be empty", param)
    if len(value) > max_items:
        raise InvalidParameter(f"'{param}' has {len(value)} items; at most {max_items} are taken", param)
    return value


def strings_within(values: list[str], param: str, limits: LimitsSettings) -> None:
    """Each long text (a message, a prompt) within `limits.string_bytes` of UTF-8."""
    try:
        check_strings(values, param, limits)
    except InvalidInput as exc:
        raise InvalidParameter(exc.public_message, param) from None


def or_default(value: T | None, default: T) -> T:
    return default if value is None else value


__all__ = [
    "INT64_MAX",
    "INT64_MIN",
    "INVALID_VALUE",
    "Fields",
    "Trivial",
    "boolean",
    "bounded_list",
    "integer",
    "is_empty_object",
    "is_false",
    "is_one_of",
    "is_zero",
    "never",
    "number",
    "or_default",
    "path",
    "strings_within",
    "text",
    "wrong_type",
]

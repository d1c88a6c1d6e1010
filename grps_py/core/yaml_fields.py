"""Reading one YAML mapping with its file and key path, so every config error names both.

`Fields` wraps a mapping from a config file: each accessor validates one key and fails with a
ConfigError "FILE: KEY: VALUE is not valid; expected WHAT" (or "missing", or "unknown key" with the
allowed key it most likely misspells). A file that is not YAML fails in one line too:
"FILE:LINE:COLUMN: YAML syntax error: PROBLEM (HINT)".
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn, TypeGuard

import yaml

from grps_py.core.errors import ConfigError

TOP_LEVEL = "(top level)"


def fail(source: str, key: str, value: object, expected: str) -> NoReturn:
    raise ConfigError(f"{source}: {key}: {value!r} is not valid; expected {expected}")


def one_of(choices: Sequence[str]) -> str:
    return "one of " + ", ".join(repr(choice) for choice in choices)


Allowed = Sequence[str] | re.Pattern[str]


def allows(allowed: Allowed, value: str) -> bool:
    if isinstance(allowed, re.Pattern):
        return allowed.fullmatch(value) is not None
    return not allowed or value in allowed


def describe(allowed: Allowed) -> str:
    if isinstance(allowed, re.Pattern) or not allowed:
        return "a non-empty string"
    return one_of(allowed)


def is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def unknown_key(name: str, allowed: Sequence[str]) -> str:
    """The "unknown key" message, with the allowed key it most likely misspells (the usual cause)."""
    close = difflib.get_close_matches(name, allowed, n=1)
    listed = ", ".join(allowed)
    if close:
        return f"unknown key; did you mean {close[0]!r}? (allowed keys: {listed})"
    return f"unknown key; allowed keys: {listed}"


class Fields:
    """One YAML mapping being read. It knows its file and key path, so every error names both."""

    def __init__(self, data: object, source: str, prefix: str, allowed: Sequence[str]) -> None:
        self.source, self.prefix = source, prefix
        if data is None:
            data = {}
        if not isinstance(data, dict):
            fail(source, prefix or TOP_LEVEL, data, "a mapping with keys " + ", ".join(allowed))
        for name in data:
            if name not in allowed:
                raise ConfigError(f"{source}: {self.key(str(name))}: {unknown_key(str(name), allowed)}")
        self.data: dict[str, object] = data

    def key(self, name: str) -> str:
        return f"{self.prefix}.{name}" if self.prefix else name

    def get(self, name: str) -> object:
        """The raw value; None when the key is absent or null (both mean "use the default")."""
        return self.data.get(name)

    def fail(self, name: str, value: object, expected: str) -> NoReturn:
        fail(self.source, self.key(name), value, expected)

    def missing(self, name: str, expected: str) -> NoReturn:
        raise ConfigError(f"{self.source}: {self.key(name)}: missing; expected {expected}")

    def opt_text(self, name: str, allowed: Allowed = (), expected: str | None = None) -> str | None:
        """A non-empty string, one of `allowed` (choices, or a regex it must match in full)."""
        value = self.get(name)
        if value is None:
            return None
        if isinstance(value, str) and value and allows(allowed, value):
            return value
        self.fail(name, value, expected or describe(allowed))

    def req_text(self, name: str, allowed: Allowed = (), expected: str | None = None) -> str:
        value = self.opt_text(name, allowed, expected)
        if value is None:
            self.missing(name, expected or describe(allowed))
        return value

    def integer(self, name: str, default: int, minimum: int) -> int:
        value = self.get(name)
        if value is None:
            return default
        if is_int(value) and value >= minimum:
            return value
        self.fail(name, value, f"an integer >= {minimum}")

    def number(self, name: str, default: float, minimum: float) -> float:
        value = self.get(name)
        if value is None:
            return default
        if is_number(value) and math.isfinite(value) and value >= minimum:
            return float(value)
        self.fail(name, value, f"a number >= {minimum:g}")

    def boolean(self, name: str, default: bool) -> bool:
        value = self.get(name)
        if value is None:
            return default
        if isinstance(value, bool):
            return value
        self.fail(name, value, "true or false")

    def mapping(self, name: str) -> dict[str, Any]:
        value = self.get(name)
        if value is None:
            return {}
        if isinstance(value, dict) and all(isinstance(key, str) for key in value):
            return dict(value)
        self.fail(name, value, "a mapping with string keys")

    def int_list(self, name: str, minimum: int) -> tuple[int, ...]:
        value = self.get(name)
        if value is None:
            return ()
        if isinstance(value, list) and all(is_int(item) and item >= minimum for item in value):
            return tuple(value)
        self.fail(name, value, f"a list of integers >= {minimum}")

    def text_list(self, name: str) -> tuple[str, ...]:
        value = self.get(name)
        if value is None:
            return ()
        if isinstance(value, list) and all(isinstance(item, str) and item for item in value):
            return tuple(value)
        self.fail(name, value, "a list of non-empty strings")

    def file_path(self, name: str, project_dir: Path, required_why: str | None = None) -> Path | None:
        """A path resolved against project_dir; it must exist. Required when `required_why` is given."""
        value = self.opt_text(name)
        if value is None:
            if required_why is not None:
                self.missing(name, f"a path {required_why}")
            return None
        path = resolve_path(value, project_dir)
        if not path.exists():
            self.fail(name, value, f"an existing path (resolved to {path}, which does not exist)")
        return path

    def shape(self, name: str) -> tuple[int, ...] | None:
        value = self.get(name)
        if value is None:
            return None
        if isinstance(value, list) and all(is_int(item) and item >= -1 for item in value):
            return tuple(value)
        self.fail(name, value, "a list of dimensions, each an integer >= 0 or -1 for a variable size")

    def section(self, name: str, allowed: Sequence[str]) -> Fields:
        return Fields(self.get(name), self.source, self.key(name), allowed)

    def items(self, name: str, allowed: Sequence[str], required: bool = True) -> list[Fields]:
        """A non-empty list of mappings, each read with the key path `name[i]` (may be absent if optional)."""
        value = self.get(name)
        if value is None:
            if not required:
                return []
            self.missing(name, "a non-empty list")
        if not isinstance(value, list) or not value:
            self.fail(name, value, "a non-empty list")
        return [Fields(item, self.source, f"{self.key(name)}[{i}]", allowed) for i, item in enumerate(value)]


def resolve_path(value: str, project_dir: Path) -> Path:
    path = Path(value)
    return path if path.is_absolute() else project_dir / path


def check_unique(source: str, entries: Sequence[tuple[str, str]], what: str) -> None:
    """`entries` are (key path, value) pairs; a value seen twice is an error at its second place."""
    seen: dict[str, str] = {}
    for key, value in entries:
        if value in seen:
            fail(source, key, value, f"a unique {what} (already used by {seen[value]})")
        seen[value] = key


def read_yaml(path: Path) -> object:
    """The file's YAML; a ConfigError in one line when it cannot be read or parsed."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise ConfigError(f"{path}: file not found") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read the file: {exc}") from exc
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(yaml_error(path, exc)) from exc


# What usually causes each of PyYAML's complaints, by a piece of its wording; the first match wins.
_YAML_HINTS = (
    ("mapping values are not allowed", "check the indentation and the ':' on that line"),
    ("'\\t'", "indent with spaces, not tabs"),
    ("but found ']'", "this ']' closes no '['"),
    ("but found '}'", "this '}' closes no '{'"),
    ("expected <block end>", "check the indentation: this line does not line up with the lines above"),
    ("could not find expected ':'", "a key needs ': ' after it, or the line above is not finished"),
    ("expected ',' or ']'", "a '[' opened before this point is not closed"),
    ("expected ',' or '}'", "a '{' opened before this point is not closed"),
    ("undefined alias", "a value starting with '*' must be quoted"),
    ("end of stream", "a quote or bracket opened before this point is not closed"),
)
_YAML_HINT = "check the indentation and quoting there"


def yaml_error(path: Path, exc: yaml.YAMLError) -> str:
    """One line, `FILE:LINE:COLUMN: YAML syntax error: PROBLEM (HINT)`, for PyYAML's several lines."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None)
    if mark is None or not problem:
        lines = str(exc).strip().splitlines()
        return f"{path}: YAML syntax error: {lines[0] if lines else type(exc).__name__}"
    hint = next((h for words, h in _YAML_HINTS if words in problem), _YAML_HINT)
    return f"{path}:{mark.line + 1}:{mark.column + 1}: YAML syntax error: {problem} ({hint})"

"""The read-only maps of a custom route's request, as Flask's request has them (werkzeug's types).

`MultiDict` (query arguments, form fields, files, cookies) keeps every value of a key and answers the
first one as a plain dict would (`args["a"]`, `args.get("a", type=int)`, `args.getlist("a")`,
`args.to_dict()`); being a dict of first values, it serializes as one (`set_http_response(request.args)`).
`Headers` is a case-insensitive multi-map of the request's (or an answer's) header lines.

A key that is missing raises `MissingKey`: a KeyError (so `except KeyError` works, as in Flask) that
answers the client 400 when model code lets it out, as Flask's BadRequestKeyError does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, NoReturn, TypeVar

from grps_py.core.errors import InvalidInput
from grps_py.core.untrusted import shown

V = TypeVar("V")


class MissingKey(InvalidInput, KeyError):
    """`args["x"]`, `form["x"]`, `headers["X"]`... of a key the request does not have."""

    def __init__(self, what: str, key: object) -> None:
        super().__init__(f"the request has no {what} {shown(key)}")
        self.key = key

    def __str__(self) -> str:  # KeyError's own quotes the message
        return self.public_message


def _converted(value: Any, type: Callable[[Any], Any] | None) -> Any:
    return value if type is None else type(value)


class MultiDict(dict[str, V]):
    """Read-only: a dict of each key's first value, with every value at hand (`getlist`)."""

    what = "key"  # how MissingKey names a key of this map

    def __init__(self, pairs: Iterable[tuple[str, V]] = (), what: str = "key") -> None:
        lists: dict[str, list[V]] = {}
        for key, value in pairs:
            lists.setdefault(key, []).append(value)
        super().__init__((key, values[0]) for key, values in lists.items())
        self._lists = lists
        self.what = what

    def __getitem__(self, key: str) -> V:
        try:
            return super().__getitem__(key)
        except KeyError:
            raise MissingKey(self.what, key) from None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({list(self.items(multi=True))!r})"

    def get(self, key: str, default: Any = None, type: Callable[[V], Any] | None = None) -> Any:
        """The first value, converted by `type` if given; `default` when missing or not convertible
        (as werkzeug: a ValueError or TypeError of `type` gives the default)."""
        if not super().__contains__(key):
            return default
        try:
            return _converted(super().__getitem__(key), type)
        except (ValueError, TypeError):
            return default

    def getlist(self, key: str, type: Callable[[V], Any] | None = None) -> list[Any]:
        """Every value of `key` (those `type` cannot convert left out, as werkzeug does)."""
        values = self._lists.get(key, [])
        if type is None:
            return list(values)
        converted = []
        for value in values:
            try:
                converted.append(type(value))
            except (ValueError, TypeError):
                continue
        return converted

    def items(self, multi: bool = False) -> Any:
        """(key, first value) pairs, or with `multi=True` every (key, value) pair."""
        if not multi:
            return super().items()
        return [(key, value) for key, values in self._lists.items() for value in values]

    def lists(self) -> list[tuple[str, list[V]]]:
        return [(key, list(values)) for key, values in self._lists.items()]

    def listvalues(self) -> list[list[V]]:
        return [list(values) for values in self._lists.values()]

    def to_dict(self, flat: bool = True) -> dict[str, Any]:
        """A plain dict: each key's first value, or with `flat=False` the list of its values."""
        if flat:
            return dict(super().items())
        return {key: list(values) for key, values in self._lists.items()}

    def copy(self) -> dict[str, V]:
        """A plain, mutable dict of the first values."""
        return self.to_dict()

    def _read_only(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise TypeError(f"the request's {type(self).__name__} cannot be changed")

    __setitem__ = __delitem__ = _read_only
    setdefault = update = pop = popitem = clear = _read_only


class Headers(Mapping[str, str]):
    """Header lines, looked up case-insensitively; a repeated header keeps each of its values (`getlist`),
    `headers["X"]` and `get` give the first. Mutable, for answers; a request's is never changed."""

    def __init__(self, lines: Iterable[tuple[str, str]] | Mapping[str, str] = ()) -> None:
        if isinstance(lines, Headers):
            items: Iterable[tuple[str, str]] = lines.lines()  # every line, repeated names too
        else:
            items = lines.items() if isinstance(lines, Mapping) else lines
        self._lines: list[tuple[str, str]] = [(str(k), str(v)) for k, v in items]

    # -- Mapping ---------------------------------------------------------------------------------
    def __getitem__(self, name: str) -> str:
        wanted = name.lower()
        for key, value in self._lines:
            if key.lower() == wanted:
                return value
        raise MissingKey("header", name)

    def __iter__(self) -> Iterator[str]:
        """Each header name once, as first sent."""
        seen: set[str] = set()
        for key, _ in self._lines:
            if key.lower() not in seen:
                seen.add(key.lower())
                yield key

    def __len__(self) -> int:
        return len({key.lower() for key, _ in self._lines})

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and any(key.lower() == name.lower() for key, _ in self._lines)

    def __repr__(self) -> str:
        return f"Headers({self._lines!r})"

    def get(self, name: str, default: Any = None, type: Callable[[str], Any] | None = None) -> Any:
        """The first value of `name`, converted by `type` if given; `default` when missing or not
        convertible."""
        try:
            return _converted(self[name], type)
        except (KeyError, ValueError, TypeError):
            return default

    def getlist(self, name: str, type: Callable[[str], Any] | None = None) -> list[Any]:
        wanted = name.lower()
        values = [value for key, value in self._lines if key.lower() == wanted]
        return values if type is None else [_converted(value, type) for value in values]

    get_all = getlist  # werkzeug's older name

    def lines(self) -> list[tuple[str, str]]:
        """Every (name, value) line, repeated names included, in order."""
        return list(self._lines)

    def to_wsgi_list(self) -> list[tuple[str, str]]:
        return self.lines()

    # -- changes (answers) -------------------------------------------------------------------------
    def __setitem__(self, name: str, value: object) -> None:
        """Replace every line of `name` with one."""
        self.remove(name)
        self._lines.append((name, str(value)))

    def __delitem__(self, name: str) -> None:
        if name not in self:
            raise MissingKey("header", name)
        self.remove(name)

    def set(self, name: str, value: object) -> None:
        self[name] = value

    def add(self, name: str, value: object) -> None:
        """One more line of `name` (Set-Cookie is sent once per cookie)."""
        self._lines.append((name, str(value)))

    def remove(self, name: str) -> None:
        wanted = name.lower()
        self._lines = [(key, value) for key, value in self._lines if key.lower() != wanted]

    def update(self, other: Mapping[str, str] | Iterable[tuple[str, str]]) -> None:
        for key, value in other.items() if isinstance(other, Mapping) else other:
            self[key] = value


def parse_cookies(headers: Headers) -> MultiDict[str]:
    """The request's cookies (`Cookie: a=1; b="x y"`), every Cookie line read."""
    pairs: list[tuple[str, str]] = []
    for line in headers.getlist("Cookie"):
        for part in line.split(";"):
            name, sep, value = part.partition("=")
            name, value = name.strip(), value.strip()
            if not sep or not name:
                continue
            if len(value) >= 2 and value[0] == value[-1] == '"':
                value = value[1:-1]
            pairs.append((name, value))
    return MultiDict(pairs, what="cookie")

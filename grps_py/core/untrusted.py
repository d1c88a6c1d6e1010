"""Values that come from a request, made fit for a log line or an error message; and the one reader of
integer controls.

A model name, tensor name, id, path or header value is the client's text: it may hold a line break (to
write a fake log line after it), terminal escapes or bidi controls, or be 100 KB long (a gRPC error
message quoting it whole could not be sent). Every message that quotes such a value quotes `shown(value)`:
each character that is not printable is escaped as `repr` escapes it (a line break shows as `\\n`), so is
the backslash itself (the text shown reads one way only), and the value is cut at `MAX_SHOWN_CHARS`.
An ordinary value (printable, short, no backslash) is returned as it is, after one scan.

`one_line` is the net under that: it escapes what is not printable in a whole message (not backslashes:
a message may already quote shown values), for the log formatters and the messages clients get.

Integer controls (a timeout, a priority) are read by `decimal`: ASCII digits only, at most
`MAX_DECIMAL_DIGITS` of them. `int()` would also take `1_000`, `+5`, ` 5 ` and digits of other scripts
(`١٢`), forms a proxy or a filter in front of the server may read otherwise.
"""

from __future__ import annotations

import re

MAX_SHOWN_CHARS = 200
MAX_DECIMAL_DIGITS = 18
_DECIMAL = re.compile(rf"[0-9]{{1,{MAX_DECIMAL_DIGITS}}}")
_ESCAPES = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def shown(value: object, limit: int = MAX_SHOWN_CHARS) -> str:
    """A request's value for a message or a log line: escaped where not printable, at most about
    `limit` characters (then `... [N more chars]`)."""
    text = value if type(value) is str else str(value)
    if len(text) <= limit and text.isprintable() and "\\" not in text:
        return text
    return _escaped(text, limit, escape_backslash=True)


def one_line(text: str, limit: int | None = None) -> str:
    """`text` with every character that is not printable escaped (no line break is left in it), cut at
    about `limit` characters when a limit is given."""
    if text.isprintable() and (limit is None or len(text) <= limit):
        return text
    return _escaped(text, len(text) * 10 if limit is None else limit, escape_backslash=False)


def _escaped(text: str, limit: int, escape_backslash: bool) -> str:
    """Loops in Python, but only for values that need it, and over at most `limit` characters."""
    pieces: list[str] = []
    size = 0
    for index, char in enumerate(text):
        if char.isprintable() and (char != "\\" or not escape_backslash):
            piece = char
        else:
            piece = _ESCAPES.get(char) or repr(char)[1:-1]
        size += len(piece)
        if size > limit:
            return "".join(pieces) + f"... [{len(text) - index} more chars]"
        pieces.append(piece)
    return "".join(pieces)


def decimal(text: str) -> int | None:
    """The value of `text` when it is 1 to `MAX_DECIMAL_DIGITS` ASCII digits (0-9), else None."""
    return int(text) if _DECIMAL.fullmatch(text) is not None else None

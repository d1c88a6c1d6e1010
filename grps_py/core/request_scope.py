"""The request being handled, for log lines: a context variable the transports set per request.

Each HTTP request and each RPC runs in an asyncio task of its own, so a boundary sets the id once for
the rest of its task (tasks it starts inherit it). Worker threads do not inherit context variables
(`run_in_executor` copies none), so the scheduler and instances set the id there while a request's
model code runs. Transport-free: the logging filter and the core both read it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar, Token

NONE = "-"  # what a log line shows outside any request
MAX_ID_CHARS = 128
ID_RULE = f"letters, digits and . _ : - only, at most {MAX_ID_CHARS} characters"
_ID = re.compile(rf"[A-Za-z0-9._:-]{{1,{MAX_ID_CHARS}}}")
_current: ContextVar[str] = ContextVar("grps_request_id", default="")


# The context variable's own methods, not functions around them: they run per request.
current: Callable[[], str] = _current.get
"""The id of the request being handled here, or "" outside any request."""
enter: Callable[[str], Token[str]] = _current.set
"""Set the id for the rest of the current task (or thread, until `leave`)."""
leave: Callable[[Token[str]], None] = _current.reset


@contextmanager
def scoped(request_id: str) -> Iterator[None]:
    token = _current.set(request_id)
    try:
        yield
    finally:
        _current.reset(token)


def batch_id(request_ids: Iterable[str]) -> str:
    """The id of lines about a batch as a whole: its requests' ids, comma-separated."""
    return ",".join(request_ids)


def client_request_id(text: object) -> str:
    """An id a client chose (X-Request-Id, x-request-id metadata, an OIP `id`), when it may name the
    request in log lines and headers: 1 to 128 of `A-Z a-z 0-9 . _ : -` (nothing that could end the
    `[id]` of a log line or look like more of it). "" when it may not: the request gets an id of ours."""
    if type(text) is not str or _ID.fullmatch(text) is None:
        return ""
    return text

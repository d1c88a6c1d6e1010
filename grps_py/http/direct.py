"""The hot routes, answered on grps-py's own connection without Tornado's web layer.

OIP infer and grps predict are what a gateway answers all day. Around them, Tornado's web layer
(routing, a RequestHandler with its header tables, the `_execute` coroutine, `flush`) cost about as much
CPU as the rest of the request together (bench/compare.py: floor-httptools against the bare connection).
A `DirectCall` takes its request straight from the connection (http/connection.py) and keeps the rules
every route keeps (http/base.py): the request id, the tokens, the body limit checked before the body is
read, one error boundary with the route's error body, one telemetry record. It writes its answer in one
piece, with a Content-Length.

A route class says which requests it takes (`DirectRoute.accepts`); the rest of the requests on its
path (other methods, a predict that asks to stream) go to the Tornado Application as before.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable
from email.utils import formatdate
from http.client import responses
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, unquote

from tornado import httputil

from grps_py import status
from grps_py.access_log import log_refused_id
from grps_py.core import request_scope, telemetry
from grps_py.core.errors import InvalidInput
from grps_py.core.executor import Executor
from grps_py.core.untrusted import shown
from grps_py.http.base import (
    CLIENT_CLOSED,
    LARGE_BODY_BYTES,
    REQUEST_ID_HEADER,
    client_log,
    declared_length,
    failure_headers,
    int_control,
    log_failure,
    too_large,
)
from grps_py.http.policy import HttpPolicy
from grps_py.request_ids import new_request_id

if TYPE_CHECKING:
    from grps_py.http.connection import Exchange

Header = tuple[str, str]


class DirectCall(httputil.HTTPMessageDelegate):
    """One request of a direct route, from its head to its record. Subclasses write `answer`, which
    returns the answer's body, Content-Type and any more headers, or None when the client went away.

    It is the connection's delegate for the request (Tornado's HTTPMessageDelegate): the head, then the
    body's pieces, then the end or the connection's close."""

    protocol = "http"  # the telemetry label of its requests

    def __init__(
        self,
        exchange: Exchange,
        route: DirectRoute,
        start_line: httputil.RequestStartLine,
        headers: httputil.HTTPHeaders,
        path: str,
        args: tuple[str, ...],
    ) -> None:
        self.exchange = exchange
        self.route = route
        self.executor = route.executor
        self.method = start_line.method
        self.path = path
        self.query = start_line.path[len(path) + 1 :]
        self.args = args  # the route pattern's groups, unquoted
        self.headers = headers
        self.started = time.time()
        self.request_id = ""
        self._client_id = ""
        self._chunks: list[bytes] = []
        self.body_bytes = 0
        self.body = b""
        self.model_key: str | None = None  # set once request_started was reported
        self.answered = False
        self._client_gone = False
        self._task: asyncio.Task[None] | None = None
        self._query: dict[str, list[str]] | None = None

    # -- the request, in (HTTPMessageDelegate) ----------------------------------------------------
    def headers_received(
        self,
        start_line: httputil.RequestStartLine | httputil.ResponseStartLine,
        headers: httputil.HTTPHeaders,
    ) -> None:
        """Who may call and how large a body may be, before the body is read (as BaseHandler.prepare)."""
        sent_id = headers.get(REQUEST_ID_HEADER)
        self._client_id = request_scope.client_request_id(sent_id) if sent_id else ""
        self.request_id = self._client_id or new_request_id()
        policy = self.route.policy
        if sent_id and not self._client_id:
            with request_scope.scoped(self.request_id):
                log_refused_id(REQUEST_ID_HEADER, sent_id)
        try:
            if policy.guard.inference_tokens:
                policy.guard.check_inference(headers.get("Authorization"))
            length = declared_length(headers)
            if length is not None and length > policy.body_bytes:
                raise too_large(policy)
            model_key = self.model_of_head()
            if model_key is not None:
                self.mark_started(model_key)
        except Exception as exc:
            self.fail(exc)

    def data_received(self, chunk: bytes) -> None:
        """Keep the body up to the limit; past it, answer 413 at once (the rest is not read)."""
        self.body_bytes += len(chunk)
        if self.body_bytes <= self.route.policy.body_bytes:
            self._chunks.append(chunk)
        elif not self.answered:
            self._chunks = []
            self.fail(too_large(self.route.policy))

    def finish(self) -> None:
        """The body is in: answer it in a task of its own."""
        chunks, self._chunks = self._chunks, []
        self.body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        self.exchange.set_close_callback(self.on_connection_close)
        self._task = asyncio.get_running_loop().create_task(self._run())

    def on_connection_close(self) -> None:
        """The client went away before its answer: tell the model; record the request if nothing will."""
        if self.answered:
            return
        policy = self.route.policy
        if self._task is None and time.time() - self.started >= policy.body_timeout_s:
            client_log.info(
                "%s %s -> the body did not arrive within %ss (limits.body_timeout_s); connection closed",
                self.method,
                shown(self.path),
                policy.body_timeout_s,
            )
            self.answered = True
            self.record(408, None, 0)  # a client's failing, as Tornado's 408 is recorded
            return
        self._client_gone = True
        self.client_gone()
        if self._task is None:  # cut off while its body was arriving: nothing else will record it
            self.answered = True
            self.record(CLIENT_CLOSED, None, 0)

    # -- what a route uses --------------------------------------------------------------------
    async def answer(self) -> tuple[bytes, str, tuple[Header, ...]] | None:
        raise NotImplementedError

    def model_of_head(self) -> str | None:
        """The model key the request names in its path ("": no such model); None: the body names it."""
        return None

    def error_body(self, http_status: int, msg: str) -> bytes:
        raise NotImplementedError

    def client_gone(self) -> None:
        """The client left before its answer (cancel what runs for it)."""

    def mark_started(self, model_key: str) -> None:
        """The request knows its model: report it in flight (once)."""
        if self.model_key is None:
            self.model_key = model_key
            self.executor.telemetry.request_started(self.protocol, model_key)

    def query_argument(self, name: str, default: str, strip: bool = True) -> str:
        """The last value of a query parameter, stripped (unless `strip` is false), as Tornado's
        get_query_argument gives it (a value that is not UTF-8 is a 400, as there; values not asked for
        are not decoded)."""
        if self._query is None:
            self._query = parse_qs(self.query, keep_blank_values=True, encoding="latin-1")
        values = self._query.get(name)
        if not values:
            return default
        try:
            value = values[-1].encode("latin-1").decode("utf-8")
            return value.strip() if strip else value
        except UnicodeDecodeError:
            raise InvalidInput(f"invalid unicode in the query argument {name!r}") from None

    def control(self, header: str, query: str) -> int | None:
        """A scheduling control (timeout, priority), as a header or a query parameter (the header wins);
        the query's value as sent, not stripped (` 5 ` is refused, as `int_control` says)."""
        text = self.headers.get(header) or self.query_argument(query, "", strip=False)
        return int_control(text, header, query)

    def adopt_request_id(self, candidate: str) -> None:
        """Name the request by an id found in its body (OIP `id`) when the client sent no X-Request-Id
        (an id that may not name it is logged at debug; it still is the answer's `id`)."""
        if self._client_id or not candidate:
            return
        chosen = request_scope.client_request_id(candidate)
        if chosen:
            self.request_id = chosen
            request_scope.enter(chosen)
        else:
            log_refused_id("the request's id", candidate, in_body=True)

    # -- the answer, out -----------------------------------------------------------------------
    async def _run(self) -> None:
        request_scope.enter(self.request_id)
        try:
            answer = await self.answer()
        except asyncio.CancelledError:
            answer = None
        except Exception as exc:
            self.fail(exc)
            return
        if answer is None:  # the client went away
            if not self.answered:
                self.answered = True
                self.record(CLIENT_CLOSED, None, 0)
            return
        body, content_type, headers = answer
        self.respond(200, body, content_type, headers)

    def fail(self, exc: BaseException) -> None:
        """The error boundary: the status from the one error table, a short message, the log's detail."""
        with request_scope.scoped(self.request_id):
            log_failure(self.method, self.path, exc)
        http_status = status.wire_status(exc).http
        msg = f"{status.public_message(exc)} [request_id={self.request_id}]"
        headers = failure_headers(exc)
        if not self.exchange.read_finished:
            headers += (("Connection", "close"),)  # answered before its body was read: it is not read
        self.respond(http_status, self.error_body(http_status, msg), "application/json", headers, exc)

    def respond(
        self,
        http_status: int,
        body: bytes,
        content_type: str,
        headers: tuple[Header, ...] = (),
        exc: BaseException | None = None,
    ) -> None:
        if self.answered:
            return
        self.answered = True
        if self._client_gone:
            self.record(CLIENT_CLOSED, exc, 0)
            return
        lines = [
            ("Content-Type", content_type),
            ("Content-Length", str(len(body))),
            ("Date", http_date()),
            (REQUEST_ID_HEADER, self.request_id),
            *headers,
        ]
        reason = responses.get(http_status, "Unknown")
        exchange = self.exchange
        if len(body) >= LARGE_BODY_BYTES:  # sent after its head rather than copied in behind it
            exchange.write_head(http_status, reason, lines)
            exchange.write(body)
        else:
            exchange.write_head(http_status, reason, lines, body)
        exchange.finish()
        self.record(http_status, exc, len(body))

    def record(self, http_status: int, exc: BaseException | None, bytes_out: int) -> None:
        """Hand the request's record to the telemetry (once: every path here ends by `answered`)."""
        if self.model_key is None:
            self.mark_started("")
        duration_s = time.time() - self.started
        self.executor.telemetry.request_finished(
            telemetry.RequestRecord(
                request_id=self.request_id,
                protocol=self.protocol,
                route=f"{self.method} {self.path}",
                model=self.model_key or "",
                inference=True,
                status=http_status,
                reason=telemetry.reason_of(exc, http_status),
                started=self.started,
                duration_s=duration_s,
                bytes_in=self.body_bytes,
                bytes_out=bytes_out,
            )
        )


class DirectRoute:
    """A path pattern and the DirectCall class that answers the requests it accepts there."""

    def __init__(
        self,
        pattern: str,
        call: type[DirectCall],
        executor: Executor,
        policy: HttpPolicy,
        accepts: Callable[[DirectRoute, httputil.RequestStartLine, httputil.HTTPHeaders], bool] | None = None,
        **options: Any,
    ) -> None:
        self.regex = re.compile(pattern + "$")
        self.call = call
        self.executor = executor
        self.policy = policy
        self._accepts = accepts
        self.options = options  # what the route's calls read (e.g. the predict route's streaming control)

    def match(
        self, exchange: Exchange, start_line: httputil.RequestStartLine, headers: httputil.HTTPHeaders
    ) -> DirectCall | None:
        path = start_line.path.partition("?")[0]
        found = self.regex.match(path)
        if found is None or (self._accepts is not None and not self._accepts(self, start_line, headers)):
            return None
        try:
            args = tuple("" if group is None else unquote(group, errors="strict") for group in found.groups())
        except UnicodeDecodeError:
            return None  # Tornado's route answers it: 400, invalid unicode in the path
        return self.call(exchange, self, start_line, headers, path, args)


class DirectRoutes:
    """The direct routes of a listener, tried in order for each POST."""

    def __init__(self, routes: list[DirectRoute]) -> None:
        self.routes = routes

    def call_for(
        self, exchange: Exchange, start_line: httputil.RequestStartLine, headers: httputil.HTTPHeaders
    ) -> DirectCall | None:
        if start_line.method != "POST":
            return None
        for route in self.routes:
            call = route.match(exchange, start_line, headers)
            if call is not None:
                return call
        return None


_date_cache: list[Any] = [0, ""]


def http_date() -> str:
    """The Date header's value, formatted once a second."""
    now = int(time.time())
    if _date_cache[0] != now:
        _date_cache[:] = [now, formatdate(now, usegmt=True)]
    return str(_date_cache[1])

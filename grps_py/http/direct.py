"""Unary routes, answered on grps-py's own connection (http/connection.py) without Tornado's web layer.

A unary route is a path pattern and, per method, an `async (call) -> Answer` (`Serve`); the route
table (`http/app.py`) lists them beside the routes Tornado serves. Tornado's RequestHandler machinery
costs about as much CPU as the rest of a small request together (bench/compare.py: `floor-httptools`
against the Tornado floor), so every route that answers in one piece is served here; Tornado keeps the
routes that stream, and the user's custom routes.

A `DirectCall` is one request of such a route, from its head to its record: the connection hands it
the head, the body's pieces and the end (it is the request's `HTTPMessageDelegate`). It keeps the rules
of every route (`http/policy.py`) through the request's `RequestLifecycle` (grps_py/lifecycle.py):
its id, access, the body limit checked before the body is read, one error boundary that answers with the
route's error body and the status of the one error table, one telemetry record. HEAD is answered wherever
GET is (the GET's head, no body), OPTIONS names the methods the route takes, and any other method is a
405 that names them too.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from email.utils import formatdate
from http.client import responses
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, unquote

from tornado import httputil

from grps_py.access import is_loopback, refuse_cross_site
from grps_py.core import request_scope
from grps_py.core.errors import InvalidInput
from grps_py.core.telemetry import RequestObserver
from grps_py.core.untrusted import shown
from grps_py.http.policy import (
    LARGE_BODY_BYTES,
    REQUEST_ID_HEADER,
    Header,
    HttpPolicy,
    MethodNotAllowed,
    allow_header,
    failure_headers,
    int_control,
    log,
)
from grps_py.lifecycle import ADMIN, OPEN, RequestLifecycle, log_failure, needs_check

if TYPE_CHECKING:
    from grps_py.http.connection import Exchange

JSON = "application/json"


@dataclass(slots=True)
class Answer:
    """What a unary route answers: a body in one piece, its type, its status and any more headers."""

    body: bytes
    content_type: str = JSON
    status: int = 200
    headers: tuple[Header, ...] = ()


Serve = Callable[["DirectCall"], Awaitable[Answer | None]]  # None: the client went away first
ErrorBody = Callable[[int, str], bytes]  # (status, message) -> the API's error answer


@dataclass
class UnaryRoute:
    """A path pattern and what answers each method there. `accepts` may leave a request to Tornado (a
    predict that asks to stream); `model_of_head` names an inference request's model from its path so it
    is in flight from its head; `options` are what the route's code reads (its dataplane, controls)."""

    pattern: str
    methods: dict[str, Serve]
    error_body: ErrorBody
    protocol: str = "http"
    access: str = OPEN
    cross_site_refused: bool = False  # an admin switch a browser sends for another site's page: 403
    accepts: Callable[[httputil.RequestStartLine, httputil.HTTPHeaders], bool] | None = None
    model_of_head: Callable[[DirectCall], str] | None = None
    options: dict[str, Any] = field(default_factory=dict)
    regex: re.Pattern[str] = field(init=False)
    allowed: frozenset[str] = field(init=False)

    def __post_init__(self) -> None:
        self.regex = re.compile(self.pattern + "$")
        methods = set(self.methods) | {"OPTIONS"} | ({"HEAD"} if "GET" in self.methods else set())
        self.allowed = frozenset(methods)


class DirectCall(httputil.HTTPMessageDelegate):
    """One request of a unary route. The route's `Serve` reads `body`, `args` (the pattern's groups,
    unquoted), `headers`, `query_argument` and `control`, and the server's parts through `route` and
    `policy`."""

    def __init__(
        self,
        exchange: Exchange,
        route: UnaryRoute,
        serve: Serve,
        observer: RequestObserver,
        policy: HttpPolicy,
        start_line: httputil.RequestStartLine,
        headers: httputil.HTTPHeaders,
        path: str,
        args: tuple[str, ...],
    ) -> None:
        self.exchange = exchange
        self.route = route
        self.serve = serve
        self.policy = policy
        self.method = start_line.method
        self.path = path
        self.query = start_line.path[len(path) + 1 :]
        self.args = args
        self.headers = headers
        self.life = RequestLifecycle(
            observer, route.protocol, f"{self.method} {path}", route.access, headers.get(REQUEST_ID_HEADER)
        )
        self._chunks: list[bytes] = []
        self.body = b""
        self.answered = False
        self._cancel: list[Callable[[], None]] = []  # what stops the request's work when its client leaves
        self._client_gone = False
        self._task: asyncio.Task[None] | None = None
        self._query: dict[str, list[str]] | None = None

    @property
    def request_id(self) -> str:
        return self.life.request_id

    # -- the request, in (HTTPMessageDelegate) ----------------------------------------------------
    def headers_received(
        self,
        start_line: httputil.RequestStartLine | httputil.ResponseStartLine,
        headers: httputil.HTTPHeaders,
    ) -> None:
        """Who may call and how large a body may be, before the body is read."""
        life, route = self.life, self.route
        if life.refused_id:
            with request_scope.scoped(life.request_id):
                life.log_refused_id(REQUEST_ID_HEADER)
        try:
            if route.cross_site_refused:
                scheme = self.exchange.context.protocol
                refuse_cross_site(
                    headers.get("Origin"), headers.get("Sec-Fetch-Site"), scheme, headers.get("Host")
                )
            if needs_check(route.access, self.policy.guard):
                local = route.access == ADMIN and is_loopback(self.exchange.context.remote_ip)
                life.admit(self.policy.guard, headers.get("Authorization"), local)
            self.policy.check_declared_length(headers)
            if route.model_of_head is not None and self.args:  # (no args: a path that is not UTF-8)
                life.start(route.model_of_head(self))
        except Exception as exc:
            self.fail(exc)

    def data_received(self, chunk: bytes) -> None:
        """Keep the body up to the limit; past it, answer 413 at once (the rest is not read)."""
        life = self.life
        life.bytes_in += len(chunk)
        if life.bytes_in <= self.policy.body_bytes:
            self._chunks.append(chunk)
        elif not self.answered:
            self._chunks = []
            self.fail(self.policy.too_large())

    def finish(self) -> None:
        """The body is in: answer it in a task of its own."""
        chunks, self._chunks = self._chunks, []
        self.body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        self.exchange.set_close_callback(self.on_connection_close)
        self._task = asyncio.get_running_loop().create_task(self._run())

    def on_connection_close(self) -> None:
        """The client went away before its answer: stop its work; record the request if nothing will."""
        if self.answered:
            return
        life = self.life
        if self._task is None and self.policy.body_timed_out(
            self.method, self.path, time.time() - life.started
        ):
            self.answered = True
            life.status = 408  # a client's failing: recorded without an exception, as nothing failed here
            life.finish()
            return
        self._client_gone = True
        for cancel in self._cancel:
            cancel()
        if self._task is None:  # cut off while its body was arriving: nothing else will record it
            self.answered = True
            life.cancel()
            life.finish()

    # -- what a route reads ---------------------------------------------------------------------
    def query_argument(self, name: str, default: str, strip: bool = True) -> str:
        """The last value of a query parameter, stripped (unless `strip` is false); a value that is not
        UTF-8 is a 400. Values not asked for are not decoded."""
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

    def cancel_on_close(self, cancel: Callable[[], None]) -> None:
        """Call `cancel` when the client goes away before its answer (stops the model's work)."""
        self._cancel.append(cancel)

    def adopt_request_id(self, candidate: str) -> None:
        """Name the request by an id from its body (OIP `id`) when the client sent no X-Request-Id."""
        self.life.adopt(candidate)

    # -- the answer, out -----------------------------------------------------------------------
    async def _run(self) -> None:
        request_scope.enter(self.life.request_id)
        try:
            answer = await self.serve(self)
        except asyncio.CancelledError:
            answer = None
        except Exception as exc:
            self.fail(exc)
            return
        if answer is None:  # the client went away
            if not self.answered:
                self.answered = True
                self.life.cancel()
                self.life.finish()
            return
        self.respond(answer.status, answer.body, answer.content_type, answer.headers)

    def fail(self, exc: BaseException) -> None:
        """The error boundary: the status from the one error table, a short message, the log's detail."""
        life = self.life
        with request_scope.scoped(life.request_id):
            log_failure(log, f"{shown(self.method)} {shown(self.path)}", exc)
        http_status = life.fail(exc)
        headers = failure_headers(exc)
        if isinstance(exc, MethodNotAllowed):
            headers += (("Allow", allow_header(self.route.allowed)),)
        if not self.exchange.read_finished:
            headers += (("Connection", "close"),)  # answered before its body was read: it is not read
        self.respond(http_status, self.route.error_body(http_status, life.public_error(exc)), JSON, headers)

    def respond(
        self, http_status: int, body: bytes, content_type: str, headers: tuple[Header, ...] = ()
    ) -> None:
        if self.answered:
            return
        self.answered = True
        life = self.life
        if self._client_gone:
            life.cancel()
            life.finish()
            return
        lines = [
            ("Content-Type", content_type),
            ("Content-Length", str(len(body))),
            ("Date", http_date()),
            (REQUEST_ID_HEADER, life.request_id),
            *headers,
        ]
        if http_status == 204:
            lines = [line for line in lines if line[0] not in ("Content-Type", "Content-Length")]
        reason = responses.get(http_status, "Unknown")
        exchange = self.exchange
        if self.method == "HEAD" or http_status == 204:
            exchange.write_head(http_status, reason, lines)
        elif len(body) >= LARGE_BODY_BYTES:  # sent after its head rather than copied in behind it
            exchange.write_head(http_status, reason, lines)
            exchange.write(body)
            life.bytes_out = len(body)
        else:
            exchange.write_head(http_status, reason, lines, body)
            life.bytes_out = len(body)
        exchange.finish()
        if life.status < 400:
            life.status = http_status
        life.finish()


async def _answer_options(call: DirectCall) -> Answer:
    return Answer(b"", status=204, headers=(("Allow", allow_header(call.route.allowed)),))


async def _refuse_method(call: DirectCall) -> Answer:
    takes = ", ".join(m for m in call.route.methods)
    raise MethodNotAllowed(f"{shown(call.path)} takes {takes}, not {shown(call.method)}")


async def _refuse_path(call: DirectCall) -> Answer:
    raise InvalidInput(f"invalid unicode in the path {shown(call.path)}")


class DirectRoutes:
    """The unary routes of a listener, tried in order for each request; a request none of them takes
    goes to the Tornado application."""

    def __init__(self, routes: list[UnaryRoute], observer: RequestObserver, policy: HttpPolicy) -> None:
        self.routes = routes
        self.observer = observer
        self.policy = policy

    def call_for(
        self, exchange: Exchange, start_line: httputil.RequestStartLine, headers: httputil.HTTPHeaders
    ) -> DirectCall | None:
        path = start_line.path.partition("?")[0]
        for route in self.routes:
            found = route.regex.match(path)
            if found is None:
                continue
            if route.accepts is not None and not route.accepts(start_line, headers):
                return None
            method = start_line.method
            serve = route.methods.get("GET" if method == "HEAD" else method)
            if serve is None:
                serve = _answer_options if method == "OPTIONS" else _refuse_method
            try:
                args = tuple("" if g is None else unquote(g, errors="strict") for g in found.groups())
            except UnicodeDecodeError:
                args, serve = (), _refuse_path
            return DirectCall(
                exchange, route, serve, self.observer, self.policy, start_line, headers, path, args
            )
        return None


_date_cache: list[Any] = [0, ""]


def http_date() -> str:
    """The Date header's value, formatted once a second."""
    now = int(time.time())
    if _date_cache[0] != now:
        _date_cache[:] = [now, formatdate(now, usegmt=True)]
    return str(_date_cache[1])

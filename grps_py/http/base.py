"""The routes Tornado's web layer serves (streams, custom routes, monitoring) derive from BaseHandler.

It keeps the rules every HTTP route keeps (`http/policy.py`) through the request's `RequestLifecycle`
(grps_py/lifecycle.py), as the unary routes on the connection do (`http/direct.py`): its id, access, the
body limit, one error boundary, one telemetry record.

Tornado routes any exception a handler raises (and its own 404/405/413 errors) to `write_error`; here it
becomes the route's error body with the status from the one error table, a short message and the request
id, while the log gets the detail under the same id. A 405 names in `Allow` the methods the route takes,
as OPTIONS does; HEAD is answered wherever GET is.

Bodies are streamed in (`stream_request_body`), so `prepare` runs as soon as the headers have arrived: a
caller without the token its route needs, or a body whose Content-Length is over the limit, is answered
(401/403/413) before the body is read; a chunked body is cut off with 413 as soon as it passes the limit,
having kept no more than the limit. Routes read the whole body as `self.body`.
"""

from __future__ import annotations

from asyncio import Future
from collections.abc import Callable
from http.client import responses
from typing import Any

import orjson
import tornado.web

from grps_py import status
from grps_py.access import is_loopback
from grps_py.core import request_scope
from grps_py.core.errors import RouteNotFound
from grps_py.core.executor import Executor
from grps_py.core.untrusted import shown
from grps_py.http.policy import (
    LARGE_BODY_BYTES,
    POLICY_SETTING,
    PRIORITY_HEADER,
    PRIORITY_QUERY,
    REQUEST_ID_HEADER,
    TIMEOUT_HEADER,
    TIMEOUT_QUERY,
    BodyTimeout,
    HttpPolicy,
    MethodNotAllowed,
    allow_header,
    failure_headers,
    grps_error_body,
    int_control,
    log,
    oip_error_body,
)
from grps_py.lifecycle import (
    ADMIN,
    CLIENT_CLOSED,
    INFERENCE,
    OPEN,
    RequestLifecycle,
    client_log,
    log_failure,
    needs_check,
)

# The methods a route answers with its own code; HEAD (a GET without its body) and OPTIONS come with them.
ROUTE_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")


def skip_tornado_access_log(handler: tornado.web.RequestHandler) -> None:
    """The Application's `log_function`: each request is logged once, by our access log."""


def implemented_methods(handler: type[tornado.web.RequestHandler]) -> set[str]:
    """The methods a handler class answers itself: those it defines over RequestHandler's 405s."""
    base = tornado.web.RequestHandler
    return {m for m in ROUTE_METHODS if getattr(handler, m.lower()) is not getattr(base, m.lower())}


@tornado.web.stream_request_body
class BaseHandler(tornado.web.RequestHandler):
    """Common to every route Tornado serves: the request's lifecycle, executor access, the error answer.

    `protocol` labels the request in telemetry; `inference` routes report `request_started` (once their
    model is known, at the latest when they finish) and need an inference token when tokens are
    configured; `admin` routes need the admin token, or a loopback caller when none is configured.
    `error_body` words the API's error answers (the grps envelope unless the API has its own)."""

    executor: Executor
    protocol = "http"
    inference = False
    admin = False
    error_body = staticmethod(grps_error_body)

    def initialize(self, executor: Executor, **_: Any) -> None:
        self.executor = executor
        self.policy: HttpPolicy = self.application.settings[POLICY_SETTING]  # set by the app's builder
        access = ADMIN if self.admin else INFERENCE if self.inference else OPEN
        route = f"{self.request.method} {self.request.path}"
        sent_id = self.request.headers.get(REQUEST_ID_HEADER)
        self.life = RequestLifecycle(executor.telemetry, self.protocol, route, access, sent_id)
        self._chunks: list[bytes] = []
        self._body: bytes | None = None
        self.answered = False  # finish() was called: the answer is complete
        self._head_sent = False
        self._gone = False
        self._cancel: list[Callable[[], None]] = []  # what stops the request's work when its client leaves

    @property
    def request_id(self) -> str:
        return self.life.request_id

    @property
    def body(self) -> bytes:
        """The whole request body (the route's method runs once it is in)."""
        if self._body is None:
            chunks, self._chunks = self._chunks, []
            self._body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        return self._body

    def _body_complete(self) -> bool:
        """Whether the connection read the whole request body (http/connection.py's Exchange). Another
        connection (Tornado's own HTTPServer, in tests) does not say: assume not, since Tornado closes a
        connection answered before its request was read, and the answer must then say so."""
        return bool(getattr(self.request.connection, "read_finished", False))

    def prepare(self) -> None:
        """Runs once the headers are in, before the body: who may call, and how large a body may be."""
        life = self.life
        request_scope.enter(life.request_id)
        self.set_header(REQUEST_ID_HEADER, life.request_id)
        life.log_refused_id(REQUEST_ID_HEADER)
        if needs_check(life.access, self.policy.guard):
            local = is_loopback(self.request.remote_ip)
            life.admit(self.policy.guard, self.request.headers.get("Authorization"), local)
        self.policy.check_declared_length(self.request.headers)

    # -- methods -------------------------------------------------------------------------------
    def allowed_methods(self) -> set[str]:
        """The methods this route takes (the Allow header of its 405s and of OPTIONS)."""
        methods = implemented_methods(type(self))
        return methods | {"OPTIONS"} | ({"HEAD"} if "GET" in methods else set())

    async def head(self, *args: str, **kwargs: str) -> None:
        """HEAD is GET without the body (Tornado sends the headers of the GET's answer, not its body)."""
        if "GET" not in self.allowed_methods():
            raise MethodNotAllowed(f"{shown(self.request.path)} does not take HEAD")
        answer: Any = self.get(*args, **kwargs)
        if answer is not None:
            await answer

    def options(self, *args: str, **kwargs: str) -> None:
        self.set_header("Allow", allow_header(self.allowed_methods()))
        self.set_status(204)
        self.finish()

    # -- the body ------------------------------------------------------------------------------
    def data_received(self, chunk: bytes) -> None:
        """Keep the body up to the limit; past it, answer 413 at once (Tornado drops the rest)."""
        life = self.life
        life.bytes_in += len(chunk)
        if life.bytes_in <= self.policy.body_bytes:
            self._chunks.append(chunk)
        elif not self.answered:
            self._chunks = []
            exc = self.policy.too_large()
            self.log_exception(type(exc), exc, None)
            self.send_error(413, exc_info=(type(exc), exc, None))

    def adopt_request_id(self, candidate: str) -> None:
        """Name the request by an id found in its body (OIP `id`) when the client sent no X-Request-Id."""
        if self.life.adopt(candidate):
            self.set_header(REQUEST_ID_HEADER, self.life.request_id)

    # -- the course of the request --------------------------------------------------------------
    def fail(self, exc: BaseException) -> int:
        """Remember why the request failed (for its record); the HTTP status that failure answers."""
        if isinstance(exc, tornado.web.HTTPError):  # Tornado's own refusals (a query that is not UTF-8)
            self.life.error, self.life.status = None, exc.status_code
            return exc.status_code
        return self.life.fail(exc)

    def cancel_on_close(self, cancel: Callable[[], None]) -> None:
        """Call `cancel` when the client goes away before the answer is complete."""
        self._cancel.append(cancel)

    def cancel(self) -> None:
        """The client went away before its answer was complete (the record says so, whatever else)."""
        self._gone = True
        self.life.cancel()

    def on_connection_close(self) -> None:
        life = self.life
        cut_off = not self._body_complete() and not self.answered
        if cut_off and self.policy.body_timed_out(
            self.request.method or "", self.request.path, self.request.request_time()
        ):
            self.fail(BodyTimeout())
        else:
            self.cancel()
        for cancel in self._cancel:
            cancel()
        super().on_connection_close()
        if cut_off:
            life.finish()  # the connection closed while the body was arriving: nothing will finish it

    # -- the answer ----------------------------------------------------------------------------
    def write(self, chunk: str | bytes | dict[str, Any]) -> None:
        if isinstance(chunk, dict):
            self.set_header("Content-Type", "application/json; charset=UTF-8")
            chunk = orjson.dumps(chunk)
        elif isinstance(chunk, str):
            chunk = chunk.encode("utf-8")
        super().write(chunk)
        self.life.bytes_out += len(chunk)

    def flush(self, include_footers: bool = False) -> Future[None]:
        self._head_sent = True
        return super().flush(include_footers)

    def finish(self, chunk: str | bytes | dict[str, Any] | None = None) -> Future[None]:
        """A large body goes out after its headers rather than appended to them: Tornado would copy
        the whole body once more to put its headers in front."""
        if isinstance(chunk, bytes) and len(chunk) >= LARGE_BODY_BYTES and not self._head_sent:
            self.set_header("Content-Length", len(chunk))
            self.flush()  # the headers alone
            self.write(chunk)
            chunk = None
        self.answered = True
        return super().finish(chunk)

    def on_finish(self) -> None:
        self._record()

    def _record(self) -> None:
        """Hand the finished request's record to the telemetry (the lifecycle does it once)."""
        life = self.life
        if self._gone:
            life.status = CLIENT_CLOSED
        elif life.status < 400 and life.error is None:
            life.status = self.get_status()
        life.finish()

    def scheduling(self) -> tuple[float | None, int]:
        """The request's timeout (seconds, from microseconds) and priority level (0: the model's default)."""
        timeout_us = self._int_control(TIMEOUT_HEADER, TIMEOUT_QUERY)
        priority = self._int_control(PRIORITY_HEADER, PRIORITY_QUERY) or 0
        return (None if not timeout_us else timeout_us / 1e6), priority

    def _int_control(self, header: str, query: str) -> int | None:
        text = self.request.headers.get(header) or self.get_query_argument(query, None, strip=False)
        return int_control(text, header, query)

    def write_json(self, body: bytes, http_status: int = 200) -> None:
        self.set_status(http_status)
        self.set_header("Content-Type", "application/json")
        self.finish(body)

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        request_scope.enter(self.life.request_id)  # Tornado's own errors (405) come before prepare()
        exc = kwargs.get("exc_info", (None, None, None))[1]
        if isinstance(exc, tornado.web.HTTPError):
            # Tornado doubles each "%" of a message given without args ("%%"): format it back.
            text = exc.log_message % exc.args if exc.log_message else ""
            http_status, msg = (
                exc.status_code,
                text or exc.reason or responses.get(exc.status_code, "Unknown"),
            )
        elif exc is not None:
            http_status, msg = status.wire_status(exc).http, status.public_message(exc)
        else:
            http_status, msg = status_code, responses.get(status_code, "Unknown")
        if exc is not None:
            self.fail(exc)
        self.set_status(http_status)
        for name, value in failure_headers(exc) if exc is not None else ():
            self.set_header(name, value)
        if http_status == 405:  # RFC 9110: a 405 says which methods would do
            self.set_header("Allow", allow_header(self.allowed_methods()))
        if not self._body_complete():
            self.set_header("Connection", "close")  # answered before its body was read: Tornado closes
        rid = self.life.request_id
        self.set_header(REQUEST_ID_HEADER, rid)  # send_error cleared the headers set in prepare()
        self.set_header("Content-Type", "application/json")
        self.finish(self.error_body(http_status, f"{msg} [request_id={rid}]"))

    def log_exception(self, typ: Any, value: Any, tb: Any) -> None:
        """Called for every exception a handler raises, also after the answer began (a stream)."""
        request_scope.enter(self.life.request_id)
        if value is None:
            return
        self.fail(value)
        what = f"{shown(self.request.method)} {shown(self.request.path)}"
        if isinstance(value, tornado.web.HTTPError):  # Tornado's own refusal of a malformed request
            client_log.info("%s -> %s", what, value)
        else:
            log_failure(log, what, value)


class NotFoundHandler(BaseHandler):
    """Unknown routes answer 404 whatever the method: with the OIP error body (`{"error": msg}`) under
    /v2, where tritonclient reads it, and with the grps envelope elsewhere."""

    def initialize(self, executor: Executor, **kwargs: Any) -> None:
        super().initialize(executor, **kwargs)
        path = self.request.path
        if path == "/v2" or path.startswith("/v2/"):
            self.error_body = oip_error_body

    def prepare(self) -> None:
        super().prepare()
        raise self._no_route()

    def _no_route(self) -> RouteNotFound:
        return RouteNotFound(f"no route {shown(self.request.path)}")

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        if status_code == 405:  # a method Tornado does not know, refused before prepare: still no route
            exc = self._no_route()
            status_code, kwargs = 404, {"exc_info": (type(exc), exc, None)}
        super().write_error(status_code, **kwargs)

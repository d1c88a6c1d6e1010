"""The one HTTP error boundary: every handler derives from BaseHandler.

Tornado routes any exception raised by a handler (and its own 404/405/413 errors) to `write_error`;
here it becomes the grps envelope with the status from the one error table, a short message and a
request id, while the log gets the detail under the same id. A 405 (Tornado's own, for a method the
handler does not define, or a route's) names in `Allow` the methods the route takes, as OPTIONS does;
HEAD is answered wherever GET is.

It is also where each request is measured: one `RequestRecord` per request, handed to the executor's
telemetry when the request finishes (answered, failed, or abandoned by its client).

And where the HTTP policy is enforced (`http/policy.py`). Bodies are streamed in (Tornado's
`stream_request_body`), so `prepare` runs as soon as the headers have arrived: a caller without the
token its route needs, or a body whose Content-Length is over the limit, is answered (401/403/413) before
the body is read; a chunked body is cut off with 413 as soon as it passes the limit, having kept no more
than the limit. The body is joined into `request.body` when it is complete, before the route's method runs.
"""

from __future__ import annotations

import logging
import time
from asyncio import Future
from typing import Any

import tornado.web
from tornado.httputil import HTTPHeaders

from grps_py import status
from grps_py.access_log import log_refused_id
from grps_py.codecs import grps_json
from grps_py.core import request_scope, telemetry
from grps_py.core.errors import (
    Cancelled,
    GrpsError,
    InvalidInput,
    ModelError,
    Overloaded,
    PayloadTooLarge,
    Unauthenticated,
)
from grps_py.core.executor import Executor
from grps_py.core.untrusted import MAX_DECIMAL_DIGITS, decimal, shown
from grps_py.http.auth import is_loopback
from grps_py.http.policy import POLICY_SETTING, HttpPolicy, http_policy
from grps_py.logs import ACCESS_LOGGER
from grps_py.request_ids import new_request_id

log = logging.getLogger("grps_py.http")
client_log = logging.getLogger(ACCESS_LOGGER)  # client mistakes: per request, silent with log.access off
REQUEST_ID_HEADER = "X-Request-Id"
LARGE_BODY_BYTES = 64 << 10
# The client went away before its answer was complete (499, as nginx logs it).
CLIENT_CLOSED = status.ERROR_TABLE[Cancelled].http
# Scheduling controls of the grps API, as a header or a query parameter (the header wins).
TIMEOUT_HEADER, TIMEOUT_QUERY = "Grps-Timeout-Us", "timeout_us"
PRIORITY_HEADER, PRIORITY_QUERY = "Grps-Priority", "priority"
# The methods a route answers with its own code; HEAD (a GET without its body) and OPTIONS come with them.
ROUTE_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")


def skip_tornado_access_log(handler: tornado.web.RequestHandler) -> None:
    """The Application's `log_function`: each request is logged once, by our access log."""


def error_status(exc: BaseException) -> int:
    if isinstance(exc, tornado.web.HTTPError):
        return exc.status_code
    return status.wire_status(exc).http


def declared_length(headers: HTTPHeaders) -> int | None:
    """The body's Content-Length when Tornado will accept it; None when absent, chunked or malformed
    (Tornado then refuses a malformed one itself, and a chunked body is counted as it arrives)."""
    text = headers.get("Content-Length")
    if text is None or "Transfer-Encoding" in headers:
        return None
    pieces = {piece.strip() for piece in text.split(",")}
    value = pieces.pop()
    return int(value) if not pieces and value.isdigit() else None


def too_large(policy: HttpPolicy) -> PayloadTooLarge:
    return PayloadTooLarge(f"the request body exceeds {policy.body_setting} ({policy.body_bytes} bytes)")


def failure_headers(exc: BaseException) -> tuple[tuple[str, str], ...]:
    """Headers an error answer carries beside its body: when to retry, how to authenticate."""
    if isinstance(exc, Overloaded):
        return (("Retry-After", "1"),)
    if isinstance(exc, Unauthenticated):
        return (("WWW-Authenticate", "Bearer"),)
    return ()


def log_failure(method: str, path: str, exc: BaseException) -> None:
    """Log why a request failed: a client's mistake in the access log, our own failure with its traceback."""
    if isinstance(exc, ModelError):
        log.warning("%s", exc.public_message)  # the node logged the traceback
    elif isinstance(exc, (GrpsError, tornado.web.HTTPError)):
        client_log.info("%s %s -> %s", shown(method), shown(path), exc)
    else:
        log.error("%s %s failed", shown(method), shown(path), exc_info=exc)


def implemented_methods(handler: type[tornado.web.RequestHandler]) -> set[str]:
    """The methods a handler class answers itself: those it defines over RequestHandler's 405s."""
    base = tornado.web.RequestHandler
    return {m for m in ROUTE_METHODS if getattr(handler, m.lower()) is not getattr(base, m.lower())}


def allow_header(methods: set[str]) -> str:
    """An Allow header's value (RFC 9110): the methods in their usual order."""
    return ", ".join(m for m in tornado.web.RequestHandler.SUPPORTED_METHODS if m in methods)


def int_control(text: str | None, header: str, query: str) -> int | None:
    """A scheduling control's value, or None when it is absent or empty: ASCII digits only, at most 18
    (`untrusted.decimal`); anything else (`1_000`, `+5`, ` 5 `, `١٢`) is refused, naming the header."""
    if not text:
        return None
    value = decimal(text)
    if value is None:
        raise InvalidInput(
            f"{header} / ?{query}= must be a non-negative integer "
            f"(0-9, at most {MAX_DECIMAL_DIGITS} digits), not '{shown(text, 40)}'"
        )
    return value


@tornado.web.stream_request_body
class BaseHandler(tornado.web.RequestHandler):
    """Common to every route: request id, executor access, the error envelope, and the request's record.

    `protocol` labels the request in telemetry; `inference` routes also report `request_started` (once
    their model is known, at the latest when they finish) and need an inference token when tokens are
    configured; `admin` routes need the admin token, or a loopback caller when none is configured."""

    executor: Executor
    protocol = "http"
    inference = False
    admin = False
    direct_methods: tuple[str, ...] = ()  # methods of this path a direct route answers (http/direct.py)

    def initialize(self, executor: Executor, **_: Any) -> None:
        self.executor = executor
        policy = self.application.settings.get(POLICY_SETTING)
        self.policy: HttpPolicy = policy if policy is not None else http_policy(executor.server_settings)
        self._chunks: list[bytes] = []
        self._body_size = 0
        self._body_done = False
        sent_id = self.request.headers.get(REQUEST_ID_HEADER)
        self._client_id = request_scope.client_request_id(sent_id) if sent_id else ""
        self._refused_id = sent_id if sent_id and not self._client_id else ""
        self.request_id = self._client_id or new_request_id()
        self._model_key: str | None = None  # set once request_started was reported
        self._error: BaseException | None = None
        self._failure_status = 0
        self._client_gone = False
        self._bytes_out = 0
        self._recorded = False

    def prepare(self) -> None:
        """Runs once the headers are in, before the body: who may call, and how large a body may be."""
        request_scope.enter(self.request_id)
        self.set_header(REQUEST_ID_HEADER, self.request_id)
        if self._refused_id:
            log_refused_id(REQUEST_ID_HEADER, self._refused_id)
        if self.admin:
            authorization = self.request.headers.get("Authorization")
            self.policy.guard.check_admin(authorization, is_loopback(self.request.remote_ip))
        elif self.inference and self.policy.guard.inference_tokens:
            self.policy.guard.check_inference(self.request.headers.get("Authorization"))
        length = declared_length(self.request.headers)
        if length is not None and length > self.policy.body_bytes:
            raise self._too_large()
        self.request._body_future.add_done_callback(self._body_received)

    # -- methods -------------------------------------------------------------------------------
    def allowed_methods(self) -> set[str]:
        """The methods this route takes (the Allow header of its 405s and of OPTIONS)."""
        methods = implemented_methods(type(self)) | set(self.direct_methods)
        return methods | {"OPTIONS"} | ({"HEAD"} if "GET" in methods else set())

    async def head(self, *args: str, **kwargs: str) -> None:
        """HEAD is GET without the body (Tornado sends the headers of the GET's answer, not its body)."""
        if "GET" not in self.allowed_methods():
            raise tornado.web.HTTPError(405)
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
        self._body_size += len(chunk)
        if self._body_size <= self.policy.body_bytes:
            self._chunks.append(chunk)
        elif not self._finished:
            self._chunks = []
            exc = self._too_large()
            self.log_exception(type(exc), exc, None)
            self.send_error(413, exc_info=(type(exc), exc, None))

    def _body_received(self, future: Future[None]) -> None:
        """The whole body is in: join it for the route (registered in prepare, so before the route runs)."""
        if future.cancelled() or future.exception() is not None:
            return
        self._body_done = True
        chunks, self._chunks = self._chunks, []
        self.request.body = chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def _too_large(self) -> PayloadTooLarge:
        return too_large(self.policy)

    def adopt_request_id(self, candidate: str) -> None:
        """Name the request by an id found in its body (OIP `id`) when the client sent no X-Request-Id.
        An id that may not name it (it is still the answer's `id`) is logged at debug."""
        if self._client_id or not candidate:
            return
        chosen = request_scope.client_request_id(candidate)
        if not chosen:
            log_refused_id("the request's id", candidate, in_body=True)
            return
        self.request_id = chosen
        request_scope.enter(chosen)
        self.set_header(REQUEST_ID_HEADER, chosen)

    # -- telemetry -----------------------------------------------------------------------------
    def mark_started(self, model_key: str) -> None:
        """An inference request knows its model: report it in flight (once)."""
        if self.inference and self._model_key is None:
            self._model_key = model_key
            self.executor.telemetry.request_started(self.protocol, model_key)

    def mark_failed(self, exc: BaseException) -> int:
        """Remember why the request failed (for its record); the HTTP status that failure answers."""
        self._error = exc
        self._failure_status = error_status(exc)
        return self._failure_status

    def mark_client_gone(self) -> None:
        self._client_gone = True

    def on_connection_close(self) -> None:
        cut_off = not self._body_done and not self._finished
        if cut_off and self.request.request_time() >= self.policy.body_timeout_s:
            client_log.info(
                "%s %s -> the body did not arrive within %ss (limits.body_timeout_s); connection closed",
                shown(self.request.method),
                shown(self.request.path),
                self.policy.body_timeout_s,
            )
            self.mark_failed(tornado.web.HTTPError(408, "request body timeout"))
        else:
            self.mark_client_gone()
        super().on_connection_close()
        if cut_off:
            self._record()  # the connection closed while the body was arriving: nothing will finish it

    def write(self, chunk: str | bytes | dict[str, Any]) -> None:
        super().write(chunk)
        self._bytes_out += len(chunk) if isinstance(chunk, bytes) else len(self._write_buffer[-1])

    def finish(self, chunk: str | bytes | dict[str, Any] | None = None) -> Future[None]:
        """A large body goes out after its headers rather than appended to them: Tornado would copy
        the whole body once more to put its headers in front."""
        if isinstance(chunk, bytes) and len(chunk) >= LARGE_BODY_BYTES and not self._headers_written:
            self.set_header("Content-Length", len(chunk))
            self.flush()  # the headers alone
            self.write(chunk)
            chunk = None
        return super().finish(chunk)

    def on_finish(self) -> None:
        self._record()

    def _record(self) -> None:
        """Hand the finished request's record to the telemetry (exactly once)."""
        if self._recorded:
            return
        self._recorded = True
        if self.inference and self._model_key is None:
            self.mark_started("")  # failed before its model was known: still one start, one finish
        duration_s = self.request.request_time()
        http_status = CLIENT_CLOSED if self._client_gone else self._failure_status or self.get_status()
        exc = None if isinstance(self._error, tornado.web.HTTPError) else self._error
        record = telemetry.RequestRecord(
            request_id=self.request_id,
            protocol=self.protocol,
            route=f"{self.request.method} {self.request.path}",
            model=self._model_key or "",
            inference=self.inference,
            status=http_status,
            reason=telemetry.reason_of(exc, http_status),
            started=time.time() - duration_s,
            duration_s=duration_s,
            bytes_in=self._body_size,
            bytes_out=self._bytes_out,
        )
        self.executor.telemetry.request_finished(record)

    def _int_control(self, header: str, query: str) -> int | None:
        text = self.request.headers.get(header) or self.get_query_argument(query, None, strip=False)
        return int_control(text, header, query)

    def scheduling(self) -> tuple[float | None, int]:
        """The request's timeout (seconds, from microseconds) and priority level (0: the model's default)."""
        timeout_us = self._int_control(TIMEOUT_HEADER, TIMEOUT_QUERY)
        priority = self._int_control(PRIORITY_HEADER, PRIORITY_QUERY) or 0
        return (None if not timeout_us else timeout_us / 1e6), priority

    def write_json(self, body: bytes, http_status: int = 200) -> None:
        self.set_status(http_status)
        self.set_header("Content-Type", "application/json")
        self.finish(body)

    def write_envelope(self, http_status: int, msg: str, ok: bool) -> None:
        self.write_json(grps_json.encode_status(http_status, msg, ok), http_status)

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        request_scope.enter(self.request_id)  # Tornado's own errors (405) come before prepare()
        exc = kwargs.get("exc_info", (None, None, None))[1]
        if isinstance(exc, tornado.web.HTTPError):
            # Tornado doubles each "%" of a message given without args ("%%"): format it back.
            text = exc.log_message % exc.args if exc.log_message else ""
            http_status, msg = exc.status_code, text or self._reason
        elif exc is not None:
            http_status, msg = status.wire_status(exc).http, status.public_message(exc)
        else:
            http_status, msg = status_code, self._reason
        if exc is not None:
            self.mark_failed(exc)
        self.set_status(http_status)
        for name, value in failure_headers(exc) if exc is not None else ():
            self.set_header(name, value)
        if http_status == 405:  # RFC 9110: a 405 says which methods would do
            self.set_header("Allow", allow_header(self.allowed_methods()))
        if not self._body_done:
            self.set_header("Connection", "close")  # answered before its body was read: Tornado closes
        rid = self.request_id
        self.set_header(REQUEST_ID_HEADER, rid)  # send_error cleared the headers set in prepare()
        self.set_header("Content-Type", "application/json")
        self.finish(self.error_body(http_status, f"{msg} [request_id={rid}]"))

    def error_body(self, http_status: int, msg: str) -> bytes:
        """The body of an error answer: the grps envelope here; protocols with their own form override it."""
        return grps_json.encode_status(http_status, msg, False)

    def log_exception(self, typ: Any, value: Any, tb: Any) -> None:
        """Called for every exception a handler raises, also after the answer began (a stream)."""
        request_scope.enter(self.request_id)
        if value is not None:
            self.mark_failed(value)
            log_failure(self.request.method or "", self.request.path, value)


class NotFoundHandler(BaseHandler):
    """Unknown routes answer 404 with the envelope, like everything else, whatever the method."""

    def prepare(self) -> None:
        super().prepare()
        raise self._no_route()

    def _no_route(self) -> tornado.web.HTTPError:
        return tornado.web.HTTPError(404, f"no route {shown(self.request.path)}")

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        if status_code == 405:  # a method Tornado does not know, refused before prepare: still no route
            exc = self._no_route()
            status_code, kwargs = 404, {"exc_info": (type(exc), exc, None)}
        super().write_error(status_code, **kwargs)

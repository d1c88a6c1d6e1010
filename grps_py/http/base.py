"""The one HTTP error boundary: every handler derives from BaseHandler.

Tornado routes any exception raised by a handler (and its own 404/405/413 errors) to `write_error`;
here it becomes the grps envelope with the status from the one error table, a short message and a
request id, while the log gets the detail under the same id.

It is also where each request is measured: one `RequestRecord` per request, handed to the executor's
telemetry when the request finishes (answered, failed, or abandoned by its client).
"""

from __future__ import annotations

import logging
import time
from typing import Any

import tornado.web

from grps_py import status
from grps_py.codecs import grps_json
from grps_py.core import request_scope, telemetry
from grps_py.core.errors import Cancelled, GrpsError, InvalidInput, ModelError, Overloaded
from grps_py.core.executor import Executor
from grps_py.logs import ACCESS_LOGGER
from grps_py.request_ids import new_request_id

log = logging.getLogger("grps_py.http")
client_log = logging.getLogger(ACCESS_LOGGER)  # client mistakes: per request, silent with log.access off
REQUEST_ID_HEADER = "X-Request-Id"
# The client went away before its answer was complete (499, as nginx logs it).
CLIENT_CLOSED = status.ERROR_TABLE[Cancelled].http
# Scheduling controls of the grps API, as a header or a query parameter (the header wins).
TIMEOUT_HEADER, TIMEOUT_QUERY = "Grps-Timeout-Us", "timeout_us"
PRIORITY_HEADER, PRIORITY_QUERY = "Grps-Priority", "priority"


def skip_tornado_access_log(handler: tornado.web.RequestHandler) -> None:
    """The Application's `log_function`: each request is logged once, by our access log."""


def error_status(exc: BaseException) -> int:
    if isinstance(exc, tornado.web.HTTPError):
        return exc.status_code
    return status.wire_status(exc).http


class BaseHandler(tornado.web.RequestHandler):
    """Common to every route: request id, executor access, the error envelope, and the request's record.

    `protocol` labels the request in telemetry; `inference` routes also report `request_started` (once
    their model is known, at the latest when they finish)."""

    executor: Executor
    protocol = "http"
    inference = False

    def initialize(self, executor: Executor, **_: Any) -> None:
        self.executor = executor
        self._client_id = request_scope.client_request_id(self.request.headers.get(REQUEST_ID_HEADER))
        self.request_id = self._client_id or new_request_id()
        self._model_key: str | None = None  # set once request_started was reported
        self._error: BaseException | None = None
        self._failure_status = 0
        self._client_gone = False
        self._bytes_out = 0
        self._recorded = False

    def prepare(self) -> None:
        request_scope.enter(self.request_id)
        self.set_header(REQUEST_ID_HEADER, self.request_id)

    def adopt_request_id(self, candidate: str) -> None:
        """Name the request by an id found in its body (OIP `id`) when the client sent no X-Request-Id."""
        chosen = request_scope.client_request_id(candidate)
        if self._client_id or not chosen:
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
        self.mark_client_gone()
        super().on_connection_close()

    def write(self, chunk: str | bytes | dict[str, Any]) -> None:
        super().write(chunk)
        self._bytes_out += len(chunk) if isinstance(chunk, bytes) else len(self._write_buffer[-1])

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
            bytes_in=len(self.request.body),
            bytes_out=self._bytes_out,
        )
        self.executor.telemetry.request_finished(record)

    def _int_control(self, header: str, query: str) -> int | None:
        text = self.request.headers.get(header) or self.get_query_argument(query, None)
        if text is None or not text.strip():
            return None
        try:
            value = int(text)
        except ValueError:
            raise InvalidInput(f"{header} / ?{query}= must be a non-negative integer, not {text!r}") from None
        if value < 0:
            raise InvalidInput(f"{header} / ?{query}= must be a non-negative integer, not {text!r}")
        return value

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
        if isinstance(exc, Overloaded):
            self.set_header("Retry-After", "1")
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
        if isinstance(value, ModelError):
            log.warning("%s", value.public_message)  # the node logged the traceback
        elif isinstance(value, (GrpsError, tornado.web.HTTPError)):
            client_log.info("%s %s -> %s", self.request.method, self.request.path, value)
        else:
            log.error("%s %s failed", self.request.method, self.request.path, exc_info=(typ, value, tb))


class NotFoundHandler(BaseHandler):
    """Unknown routes answer 404 with the envelope, like everything else."""

    def prepare(self) -> None:
        super().prepare()
        raise tornado.web.HTTPError(404, f"no route {self.request.path}")

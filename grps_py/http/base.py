"""The one HTTP error boundary: every handler derives from BaseHandler.

Tornado routes any exception raised by a handler (and its own 404/405/413 errors) to `write_error`;
here it becomes the grps envelope with the status from the one error table, a short message and a
request id, while the log gets the detail under the same id.
"""

from __future__ import annotations

import logging
from typing import Any

import tornado.web

from grps_py import status
from grps_py.codecs import grps_json
from grps_py.core.errors import GrpsError, InvalidInput, ModelError, Overloaded
from grps_py.core.executor import Executor
from grps_py.request_ids import new_request_id

log = logging.getLogger("grps_py.http")
REQUEST_ID_HEADER = "X-Request-Id"
# Scheduling controls of the grps API, as a header or a query parameter (the header wins).
TIMEOUT_HEADER, TIMEOUT_QUERY = "Grps-Timeout-Us", "timeout_us"
PRIORITY_HEADER, PRIORITY_QUERY = "Grps-Priority", "priority"


class BaseHandler(tornado.web.RequestHandler):
    """Common to every route: request id, executor access, and the error envelope."""

    executor: Executor

    def initialize(self, executor: Executor, **_: Any) -> None:
        self.executor = executor

    def prepare(self) -> None:
        incoming = self.request.headers.get(REQUEST_ID_HEADER, "")
        self.request_id = incoming[:64] if incoming.isascii() and incoming.isprintable() and incoming else ""
        self.request_id = self.request_id or new_request_id()
        self.set_header(REQUEST_ID_HEADER, self.request_id)

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
        exc = kwargs.get("exc_info", (None, None, None))[1]
        if isinstance(exc, tornado.web.HTTPError):
            http_status, msg = exc.status_code, exc.log_message or self._reason
        elif exc is not None:
            http_status, msg = status.wire_status(exc).http, status.public_message(exc)
        else:
            http_status, msg = status_code, self._reason
        self.set_status(http_status)
        if isinstance(exc, Overloaded):
            self.set_header("Retry-After", "1")
        rid = getattr(self, "request_id", "")
        if rid:  # send_error cleared the headers set in prepare()
            self.set_header(REQUEST_ID_HEADER, rid)
        self.set_header("Content-Type", "application/json")
        self.finish(self.error_body(http_status, f"{msg} [request_id={rid}]" if rid else msg))

    def error_body(self, http_status: int, msg: str) -> bytes:
        """The body of an error answer: the grps envelope here; protocols with their own form override it."""
        return grps_json.encode_status(http_status, msg, False)

    def log_exception(self, typ: Any, value: Any, tb: Any) -> None:
        rid = getattr(self, "request_id", "-")
        if isinstance(value, ModelError):
            log.warning("request %s: %s", rid, value.public_message)  # the node logged the traceback
        elif isinstance(value, (GrpsError, tornado.web.HTTPError)):
            log.info("request %s: %s %s -> %s", rid, self.request.method, self.request.path, value)
        else:
            log.error(
                "request %s: %s %s failed",
                rid,
                self.request.method,
                self.request.path,
                exc_info=(typ, value, tb),
            )


class NotFoundHandler(BaseHandler):
    """Unknown routes answer 404 with the envelope, like everything else."""

    def prepare(self) -> None:
        super().prepare()
        raise tornado.web.HTTPError(404, f"no route {self.request.path}")

"""One request's life, whatever carries it: HTTP on grps-py's connection, HTTP through Tornado's web
layer, a gRPC call, or one request on a gRPC stream.

Every transport does the same things in the same order, through this object:

1. **name** the request: the id the client sent (`X-Request-Id`, `x-request-id` metadata) when it may
   name it (`request_scope.client_request_id`), else a fresh one; a refused id is logged, escaped;
2. **admit** it: the caller's token or address, as `access.AccessGuard` decides for the route's kind;
3. **adopt** an id found in the body (OIP `id`) when the client sent none;
4. report it **started** once its model is known (every request is started once, finished once);
5. end it **failed** (the status from the one error table, `status.py`), **cancelled** (its client left)
   or answered, and **finish** it: one `RequestRecord` to the telemetry, exactly once;
6. on failure, **log** why (a client's mistake in the access log, a model's failure as a warning, our own
   bug with its traceback) and answer the **public message** with the request id.

The transports differ only in how they read the request's headers and write the answer.
"""

from __future__ import annotations

import logging
import time

from grps_py import status
from grps_py.access import AccessGuard
from grps_py.access_log import log_refused_id
from grps_py.core import request_scope, telemetry
from grps_py.core.errors import Cancelled, GrpsError, ModelError
from grps_py.core.telemetry import RequestObserver
from grps_py.logs import ACCESS_LOGGER
from grps_py.request_ids import new_request_id

client_log = logging.getLogger(ACCESS_LOGGER)  # client mistakes: per request, silent with log.access off
CLIENT_CLOSED = status.ERROR_TABLE[Cancelled].http  # 499, as nginx logs a client that left first
# What a route's caller must show (access.AccessGuard): nothing, an inference token, or admin rights.
OPEN, INFERENCE, ADMIN = "open", "inference", "admin"


def log_failure(log: logging.Logger, what: str, exc: BaseException) -> None:
    """Why a request failed, under its id: a client's mistake at info in the access log, a model's
    failure as a warning (its node logged the traceback), anything else with its traceback."""
    if isinstance(exc, ModelError):
        log.warning("%s", exc.public_message)
    elif isinstance(exc, GrpsError):
        client_log.info("%s -> %s", what, status.public_message(exc))
    else:
        log.error("%s failed", what, exc_info=exc)


def needs_check(access: str, guard: AccessGuard) -> bool:
    """Whether a route of this kind has anything to `admit` (an open server pays nothing for it)."""
    return access == ADMIN or (access == INFERENCE and bool(guard.inference_tokens))


class RequestLifecycle:
    """A request from its head to its record. `route` names it in the record ("POST /v2/..." or the
    gRPC method's path); `protocol` is its telemetry label; `access` is OPEN, INFERENCE or ADMIN.

    Only inference requests report started/finished to the per-model statistics; every request gets a
    record (the access log and the route metrics read it)."""

    __slots__ = (
        "_clock",
        "_finished",
        "_telemetry",
        "access",
        "bytes_in",
        "bytes_out",
        "error",
        "inference",
        "model",
        "named",
        "protocol",
        "refused_id",
        "request_id",
        "route",
        "started",
        "status",
    )

    def __init__(
        self, observer: RequestObserver, protocol: str, route: str, access: str, sent_id: str | None
    ) -> None:
        chosen = request_scope.client_request_id(sent_id) if sent_id else ""
        self.request_id = chosen or new_request_id()
        self.named = bool(chosen)  # the client chose the id: an id in the body does not replace it
        self.refused_id = "" if chosen or not sent_id else sent_id  # logged by `log_refused_id`
        self._telemetry = observer
        self.protocol = protocol
        self.route = route
        self.access = access
        self.inference = access == INFERENCE
        self.model: str | None = None  # set once request_started was reported
        self.status = 200
        self.error: BaseException | None = None
        self.bytes_in = 0
        self.bytes_out = 0
        self.started = time.time()
        self._clock = time.perf_counter()
        self._finished = False

    # -- naming and admitting -------------------------------------------------------------------
    def log_refused_id(self, source: str) -> None:
        """Log the id the client sent when it may not name the request (call in the request's scope)."""
        if self.refused_id:
            log_refused_id(source, self.refused_id)

    def adopt(self, candidate: str) -> bool:
        """Name the request by an id from its body (OIP `id`) when the client sent none; True when it
        did (the caller returns the new id to the client). An id that may not name it is logged."""
        if self.named or not candidate:
            return False
        chosen = request_scope.client_request_id(candidate)
        if not chosen:
            log_refused_id("the request's id", candidate, in_body=True)
            return False
        self.request_id = chosen
        request_scope.enter(chosen)
        return True

    def admit(self, guard: AccessGuard, authorization: str | None, local_caller: bool) -> None:
        """Raise Unauthenticated / PermissionDenied unless the caller may make this request."""
        if self.access == ADMIN:
            guard.check_admin(authorization, local_caller)
        elif self.inference:
            guard.check_inference(authorization)

    # -- its course -----------------------------------------------------------------------------
    def start(self, model_key: str) -> None:
        """An inference request knows its model ("" when there is none): report it in flight, once."""
        if self.inference and self.model is None:
            self.model = model_key
            self._telemetry.request_started(self.protocol, model_key)

    def fail(self, exc: BaseException) -> int:
        """Remember why the request failed; the HTTP status of that failure (the one error table)."""
        self.error = exc
        self.status = status.wire_status(exc).http
        return self.status

    def cancel(self) -> None:
        """The client went away before its answer was complete."""
        self.status = CLIENT_CLOSED

    def public_error(self, exc: BaseException) -> str:
        """What the client reads about a failure: the short message and the request id."""
        return f"{status.public_message(exc)} [request_id={self.request_id}]"

    def finish(self) -> None:
        """Hand the request's record to the telemetry, exactly once."""
        if self._finished:
            return
        self._finished = True
        if self.inference and self.model is None:
            self.start("")  # failed before its model was known: still one start, one finish
        error, code = self.error, self.status
        self._telemetry.request_finished(
            telemetry.RequestRecord(
                request_id=self.request_id,
                protocol=self.protocol,
                route=self.route,
                model=self.model or "",
                inference=self.inference,
                status=code,
                reason=None if error is None and code < 400 else telemetry.reason_of(error, code),
                started=self.started,
                duration_s=time.perf_counter() - self._clock,
                bytes_in=self.bytes_in,
                bytes_out=self.bytes_out,
            )
        )

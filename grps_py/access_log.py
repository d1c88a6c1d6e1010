"""The access log: one line per request, written from its RequestRecord to the `grps_py.access` logger.

Text: `<time> INFO grps_py.access [<request id>] <protocol> <route> model=<key> status=<n> <ms>ms
in=<bytes> out=<bytes>` (and ` reason=<why>` when it failed); JSON carries the same as fields. Nothing
is formatted unless the logger is enabled for INFO (`log.access: false` sets it to WARNING).
"""

from __future__ import annotations

import logging

from grps_py.core import request_scope
from grps_py.core.config import LogSettings
from grps_py.core.executor import Executor
from grps_py.core.telemetry import RequestRecord
from grps_py.core.untrusted import shown
from grps_py.logs import ACCESS_LOGGER, write_access_line

LINE = "%s %s model=%s status=%d %.2fms in=%d out=%d"
_REQUEST_IDS_LOG = logging.getLogger("grps_py.request_ids")


class AccessLog:
    """A RequestObserver writing each finished request (started requests and stream messages: nothing)."""

    def __init__(self, logger: logging.Logger | None = None) -> None:
        self.logger = logger or logging.getLogger(ACCESS_LOGGER)

    def request_started(self, protocol: str, model: str) -> None:
        pass

    def stream_message(self, protocol: str, model: str, first_after_s: float | None) -> None:
        pass

    def request_finished(self, record: RequestRecord) -> None:
        if not self.logger.isEnabledFor(logging.INFO):
            return
        latency_ms = record.duration_s * 1e3
        fields = {
            "protocol": record.protocol,
            "route": record.route,
            "model": record.model,
            "status": record.status,
            "latency_ms": round(latency_ms, 3),
            "bytes_in": record.bytes_in,
            "bytes_out": record.bytes_out,
            "reason": record.reason,
        }
        args = (
            record.protocol,
            record.route,
            record.model or "-",
            record.status,
            latency_ms,
            record.bytes_in,
            record.bytes_out,
        )
        message = LINE % args if record.reason is None else f"{LINE % args} reason={record.reason}"
        write_access_line(self.logger, record.request_id, message, fields)


def log_refused_id(source: str, text: str, in_body: bool = False) -> None:
    """A request id a client sent that may not name its request (`request_scope.client_request_id`):
    one line, the id escaped, under the id the request got instead (the current scope's). `source` names
    where it came from. A header's or metadata's (the client meant to name the request) is a client
    mistake, on the access logger at INFO; an OIP body `id` (any string, by the protocol; it still is
    the answer's `id`) is written at DEBUG only (`log.level: DEBUG`)."""
    logger = _REQUEST_IDS_LOG if in_body else logging.getLogger(ACCESS_LOGGER)
    logger.log(
        logging.DEBUG if in_body else logging.INFO,
        "%s '%s' refused (%s); a new id names the request",
        source,
        shown(text),
        request_scope.ID_RULE,
    )


def install_access_log(executor: Executor, settings: LogSettings) -> AccessLog | None:
    """Add the access log to the executor's request observers (once); nothing when `log.access` is off."""
    if not settings.access:
        return None
    for observer in executor.telemetry.observers:
        if isinstance(observer, AccessLog):
            return observer
    access = AccessLog()
    executor.telemetry.add(access)
    return access

"""What one finished request looked like, and who hears about it (metrics, the access log).

The transport boundaries (HTTP `BaseHandler`, the gRPC boundary) build one `RequestRecord` per request
and hand it to the executor's `RequestObserver`s; the executor itself reports streamed messages.
Observers are injected per server (no global state) and called on the event loop thread.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from grps_py.core.errors import (
    CANCELLED,
    ERROR_TABLE,
    INTERNAL,
    INVALID,
    MODEL_ERROR,
    NOT_FOUND,
    REASONS,
    REJECTED,
    TIMEOUT,
    error_row,
)

__all__ = [
    "CANCELLED",
    "CUSTOM",
    "GRPS_GRPC",
    "GRPS_HTTP",
    "INTERNAL",
    "INVALID",
    "MODEL_ERROR",
    "NOT_FOUND",
    "OIP_GRPC",
    "OIP_HTTP",
    "OPENAI_HTTP",
    "PROTOCOLS",
    "REASONS",
    "REJECTED",
    "TIMEOUT",
    "RequestFanOut",
    "RequestObserver",
    "RequestRecord",
    "reason_of",
]

# Protocol labels of inference requests; other HTTP routes (health, metadata, metrics) are "http",
# other gRPC methods "grpc".
GRPS_HTTP, GRPS_GRPC, OIP_HTTP, OIP_GRPC, CUSTOM = "grps-http", "grps-grpc", "oip-http", "oip-grpc", "custom"
OPENAI_HTTP = "openai-http"  # the OpenAI-compatible routes (/v1/chat/completions, ...)
PROTOCOLS = (GRPS_HTTP, GRPS_GRPC, OIP_HTTP, OIP_GRPC, CUSTOM, OPENAI_HTTP)


@dataclass
class RequestRecord:
    """One request, as the access log writes it and the metrics count it."""

    request_id: str
    protocol: str  # one of PROTOCOLS for inference requests; "http" / "grpc" for the rest
    route: str  # HTTP "METHOD /path" or the gRPC method "/package.Service/Method"
    model: str  # the model key it ran ("name-version", or the DAG's name); "" for none or unknown
    inference: bool  # an inference request (predict, infer, generate, custom routes)
    status: int  # the HTTP status (for gRPC: the HTTP status of its code, as grps_py.status maps them)
    reason: str | None  # None on success, else one of REASONS
    started: float  # time.time() when it arrived
    duration_s: float
    bytes_in: int
    bytes_out: int


def reason_of(exc: BaseException | None, status: int) -> str | None:
    """The failure reason of an answer: from its exception when there is one, else from its status
    (the reason of the status's first row in the error table; else invalid below 500, internal above)."""
    if exc is not None:
        return error_row(exc).reason
    if status < 400:
        return None
    return _REASON_BY_STATUS.get(status, INVALID if status < 500 else INTERNAL)


_REASON_BY_STATUS: dict[int, str] = {}
for _row in ERROR_TABLE.values():
    _REASON_BY_STATUS.setdefault(_row.http, _row.reason)


class RequestObserver(Protocol):
    def request_started(self, protocol: str, model: str) -> None:
        """An inference request arrived (for the in-flight gauge); `model` as in RequestRecord."""

    def request_finished(self, record: RequestRecord) -> None:
        """Every request, inference or not, once answered (or abandoned by its client)."""

    def stream_message(self, protocol: str, model: str, first_after_s: float | None) -> None:
        """A streamed message went out; `first_after_s` is set on a stream's first message."""


class RequestFanOut:
    """Hands every event to each observer in turn."""

    def __init__(self, observers: list[RequestObserver] | None = None) -> None:
        self.observers: list[RequestObserver] = list(observers or [])

    def add(self, observer: RequestObserver) -> None:
        self.observers.append(observer)

    def request_started(self, protocol: str, model: str) -> None:
        for observer in self.observers:
            observer.request_started(protocol, model)

    def request_finished(self, record: RequestRecord) -> None:
        for observer in self.observers:
            observer.request_finished(record)

    def stream_message(self, protocol: str, model: str, first_after_s: float | None) -> None:
        for observer in self.observers:
            observer.stream_message(protocol, model, first_after_s)

"""The client's exception, and the status <-> code names it carries.

HTTP statuses and gRPC codes are related through the server's own error table
(`grps_py.core.errors.ERROR_TABLE`: the first row with a status or code gives its meaning), so the
same failure reads the same over both protocols: a 404 over HTTP and NOT_FOUND over gRPC both
give `status=404, code="NOT_FOUND"`.

Two subclasses are failures with no answer from the server, so their text names no status:
`GrpsConnectionError` (no connection, or it broke) and `GrpsTimeoutError` (no answer in time). They keep
the status and code a retrying caller already looks at: 503 UNAVAILABLE and 504 DEADLINE_EXCEEDED.
"""

from __future__ import annotations

import errno as errnos
import os
import socket

import grpc

from grps_py.core.errors import ERROR_TABLE

__all__ = [
    "REFUSED",
    "GrpsClientError",
    "GrpsConnectionError",
    "GrpsTimeoutError",
    "answer_unreadable",
    "code_for_status",
    "deadline_exceeded",
    "status_for_code",
    "unavailable",
]

# Statuses and codes a proxy or another grps server may send, for those the table has no row for.
_EXTRA_CODES = {
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    405: "UNIMPLEMENTED",
    408: "DEADLINE_EXCEEDED",
    409: "ABORTED",
    429: "RESOURCE_EXHAUSTED",
    502: "UNAVAILABLE",
}
_EXTRA_STATUSES = {
    "UNKNOWN": 500,
    "UNAUTHENTICATED": 401,
    "PERMISSION_DENIED": 403,
    "ALREADY_EXISTS": 409,
    "ABORTED": 409,
    "FAILED_PRECONDITION": 400,
    "OUT_OF_RANGE": 400,
    "DATA_LOSS": 500,
}
_CODE_BY_STATUS: dict[int, str] = {}
_STATUS_BY_CODE: dict[str, int] = {}
for _row in ERROR_TABLE.values():  # the first row wins: 500 is INTERNAL, INTERNAL is 500
    _CODE_BY_STATUS.setdefault(_row.http, _row.grpc)
    _STATUS_BY_CODE.setdefault(_row.grpc, _row.http)


def code_for_status(http_status: int) -> str:
    """The gRPC-style code name for an HTTP status ("UNKNOWN" for one with no meaning to grps)."""
    return _CODE_BY_STATUS.get(http_status) or _EXTRA_CODES.get(http_status, "UNKNOWN")


def status_for_code(code: grpc.StatusCode) -> int:
    """The HTTP status for a gRPC code (500 for one with no meaning to grps)."""
    return _STATUS_BY_CODE.get(code.name) or _EXTRA_STATUSES.get(code.name, 500)


class GrpsClientError(Exception):
    """Any failed call: the server's refusal, a timeout, or a server that cannot be reached.

    `status` is an HTTP-style status (400, 404, 503, 504, ...), `code` its gRPC-style name
    ("INVALID_ARGUMENT", "NOT_FOUND", ...), `message` what the server said (with its request id).
    """

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message

    @classmethod
    def from_status(cls, http_status: int, message: str) -> GrpsClientError:
        return cls(http_status, code_for_status(http_status), message)

    @classmethod
    def from_rpc_error(cls, error: grpc.RpcError) -> GrpsClientError:
        """A failed gRPC call (`grpc.RpcError` and `grpc.aio.AioRpcError` both have code() and details())."""
        code: grpc.StatusCode = error.code()
        details: str = error.details() or code.name
        return cls(status_for_code(code), code.name, details)


class GrpsConnectionError(GrpsClientError):
    """No answer: the server could not be reached (`connecting`), or the connection broke before the
    answer came. `where` is `host:port (HTTP)` or `host:port (gRPC)`, `reason` what went wrong
    ("connection refused"). Status 503 and code UNAVAILABLE, as for a server not ready: retry later."""

    def __init__(self, where: str, reason: str, connecting: bool) -> None:
        text = f"cannot connect to {where}" if connecting else f"connection to {where} failed"
        super().__init__(503, "UNAVAILABLE", f"{text}: {reason}")
        self.where, self.reason, self.connecting = where, reason, connecting

    def __str__(self) -> str:
        return self.message


class GrpsTimeoutError(GrpsClientError):
    """No answer within the call's timeout (the client's own deadline; a server answering 504 at its
    deadline raises a plain GrpsClientError). Status 504, code DEADLINE_EXCEEDED."""

    def __init__(self, where: str, timeout_s: float | None) -> None:
        within = "in time" if timeout_s is None else f"within {timeout_s:g} s"
        super().__init__(504, "DEADLINE_EXCEEDED", f"no answer from {where} {within}")
        self.where, self.timeout_s = where, timeout_s

    def __str__(self) -> str:
        return self.message


# OSErrors raised before any connection is made: nothing reached a server.
_NOT_CONNECTED = {errnos.ECONNREFUSED, errnos.EHOSTUNREACH, errnos.ENETUNREACH, errnos.EADDRNOTAVAIL}
REFUSED = "connection refused"  # the same words over HTTP and gRPC, on every platform
UNRESOLVED = "cannot resolve the host name"


def unavailable(where: str, exc: BaseException, connecting: bool | None = None) -> GrpsConnectionError:
    """The server cannot be reached, or dropped the connection: worth retrying later. `connecting`: the
    exception came from opening the connection (None: tell by its errno)."""
    if isinstance(exc, socket.gaierror):  # its errno is getaddrinfo's, which os.strerror does not know
        return GrpsConnectionError(where, UNRESOLVED, connecting=True)
    errno = exc.errno if isinstance(exc, OSError) else None
    if errno == errnos.ECONNREFUSED:
        return GrpsConnectionError(where, REFUSED, connecting=True)
    reason = os.strerror(errno) if errno else str(exc) or type(exc).__name__  # asyncio's text names no cause
    if connecting is None:
        connecting = errno in _NOT_CONNECTED
    return GrpsConnectionError(where, reason[:1].lower() + reason[1:], connecting)


def grpc_unavailable(where: str, details: str) -> GrpsConnectionError:
    """gRPC's UNAVAILABLE that no server sent (it has no request id): its long details, made short."""
    text = details.lower()
    if "refused" in text:
        return GrpsConnectionError(where, REFUSED, connecting=True)
    if "resolv" in text or "lookup" in text:
        return GrpsConnectionError(where, UNRESOLVED, connecting=True)
    return GrpsConnectionError(where, details, connecting="failed to connect" in text)


def deadline_exceeded(where: str, timeout_s: float | None) -> GrpsTimeoutError:
    return GrpsTimeoutError(where, timeout_s)


def answer_unreadable(what: str) -> GrpsClientError:
    """The server answered something this client cannot turn into the value asked for."""
    return GrpsClientError(500, "INTERNAL", what)

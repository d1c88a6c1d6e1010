"""The one table: each core error class -> (HTTP status, gRPC status code).

Retry meaning is kept: not ready and overloaded -> 503/UNAVAILABLE (retry later, as OIP and load
balancers expect); bad input -> 400/INVALID_ARGUMENT (do not retry); a missing or wrong token ->
401/UNAUTHENTICATED, a caller refused whatever its token -> 403/PERMISSION_DENIED (do not retry as sent);
anything unexpected -> 500/INTERNAL.
"""

from __future__ import annotations

from dataclasses import dataclass

import grpc

from grps_py.core import errors
from grps_py.core.untrusted import one_line


@dataclass(frozen=True)
class WireStatus:
    http: int
    grpc: grpc.StatusCode


ERROR_TABLE: dict[type[errors.GrpsError], WireStatus] = {
    errors.GrpsError: WireStatus(500, grpc.StatusCode.INTERNAL),
    errors.InvalidInput: WireStatus(400, grpc.StatusCode.INVALID_ARGUMENT),
    errors.PayloadTooLarge: WireStatus(413, grpc.StatusCode.RESOURCE_EXHAUSTED),
    errors.Unauthenticated: WireStatus(401, grpc.StatusCode.UNAUTHENTICATED),
    errors.PermissionDenied: WireStatus(403, grpc.StatusCode.PERMISSION_DENIED),
    errors.ModelNotFound: WireStatus(404, grpc.StatusCode.NOT_FOUND),
    errors.ModelNotReady: WireStatus(503, grpc.StatusCode.UNAVAILABLE),
    errors.Overloaded: WireStatus(503, grpc.StatusCode.UNAVAILABLE),
    errors.DeadlineExceeded: WireStatus(504, grpc.StatusCode.DEADLINE_EXCEEDED),
    errors.Cancelled: WireStatus(499, grpc.StatusCode.CANCELLED),
    errors.Unsupported: WireStatus(501, grpc.StatusCode.UNIMPLEMENTED),
    errors.ModelError: WireStatus(500, grpc.StatusCode.INTERNAL),
    errors.InternalError: WireStatus(500, grpc.StatusCode.INTERNAL),
}
INTERNAL = ERROR_TABLE[errors.InternalError]
INTERNAL_MESSAGE = "internal server error"
# A message a client gets is one line of at most this many characters: request values in messages are
# escaped and cut where the message is made (`untrusted.shown`); this holds the rest (a model's error
# text, a value quoted without `shown`), so a gRPC status message always fits its header.
MAX_PUBLIC_MESSAGE_CHARS = 2000


def wire_status(exc: BaseException) -> WireStatus:
    """The status for an exception; unknown exceptions are internal errors."""
    for cls in type(exc).__mro__:
        if cls in ERROR_TABLE:
            return ERROR_TABLE[cls]
    return INTERNAL


def public_message(exc: BaseException) -> str:
    """What a client may read about an exception: never a traceback or an internal detail; one line."""
    if isinstance(exc, errors.GrpsError):
        return one_line(exc.public_message, MAX_PUBLIC_MESSAGE_CHARS)
    return INTERNAL_MESSAGE

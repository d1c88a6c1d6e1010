"""One exception hierarchy. Each error carries a short message that is safe to show a client.

Detail meant only for the log (tracebacks, internal state) is never put in `public_message`; the
transports log the exception with the request id and answer with `public_message` alone. A message that
quotes a value from the request (a model or tensor name, a header) quotes `untrusted.shown(value)`:
escaped and cut, so it can neither break a log line nor outgrow a gRPC status.
"""

from __future__ import annotations

from dataclasses import dataclass


class GrpsError(Exception):
    """Base of every error the server answers with. `public_message` is safe for clients."""

    default_message = "internal error"

    def __init__(self, message: str | None = None) -> None:
        self.public_message = message or self.default_message
        super().__init__(self.public_message)


class InvalidInput(GrpsError):
    """The request is malformed: bad JSON, wrong dtype, a shape that does not fit the data."""

    default_message = "invalid input"


class PayloadTooLarge(InvalidInput):
    """The request body or message exceeds the configured limit."""

    default_message = "request is too large"


class UnsupportedMediaType(InvalidInput):
    """The body's Content-Type is not one the reader takes (Flask's get_json without force)."""

    default_message = "unsupported media type"


class Unauthenticated(InvalidInput):
    """The request lacks the token its route needs, or carries a wrong one (a client error: not retried)."""

    default_message = "missing or wrong token"


class PermissionDenied(InvalidInput):
    """The caller may not use this route (admin routes without a token answer loopback callers only)."""

    default_message = "permission denied"


class NotFound(GrpsError):
    """The request names something that does not exist here."""

    default_message = "not found"


class ModelNotFound(NotFound):
    """The request names a model that is not served."""

    default_message = "model not found"


class ModelNotReady(GrpsError):
    """The model exists but cannot serve yet (still loading, or failed to load)."""

    default_message = "model is not ready"


class Overloaded(GrpsError):
    """Admission control refused the request; the client may retry later."""

    default_message = "server is overloaded"


class DeadlineExceeded(GrpsError):
    """The request's deadline passed before it finished."""

    default_message = "deadline exceeded"


class Cancelled(GrpsError):
    """The client went away or cancelled the request."""

    default_message = "request cancelled"


class Unsupported(GrpsError):
    """The request asks for something this server or model does not do."""

    default_message = "not supported"


class ModelError(GrpsError):
    """The model's own code failed or reported an error through its context."""

    default_message = "model failed"


class RouteNotFound(NotFound):
    """No route of the server answers the request's path."""

    default_message = "no such route"


class InternalError(GrpsError):
    """Anything else: a bug in the server. The log has the detail."""

    default_message = "internal error"


class ConfigError(ValueError):
    """A configuration file is invalid. The message names the file, key, bad value and what is allowed."""


class ModelLoadError(RuntimeError):
    """A model could not be loaded at start-up."""


ALL_ERRORS: tuple[type[GrpsError], ...] = (
    GrpsError,
    InvalidInput,
    PayloadTooLarge,
    UnsupportedMediaType,
    Unauthenticated,
    PermissionDenied,
    NotFound,
    ModelNotFound,
    RouteNotFound,
    ModelNotReady,
    Overloaded,
    DeadlineExceeded,
    Cancelled,
    Unsupported,
    ModelError,
    InternalError,
)

# Why a request failed, as the metrics label it (`grps_requests_failed_total{reason}`).
INVALID, NOT_FOUND, REJECTED, TIMEOUT, CANCELLED, MODEL_ERROR, INTERNAL = (
    "invalid",
    "not_found",
    "rejected",
    "timeout",
    "cancelled",
    "model_error",
    "internal",
)
REASONS = (INVALID, NOT_FOUND, REJECTED, TIMEOUT, CANCELLED, MODEL_ERROR, INTERNAL)


@dataclass(frozen=True)
class ErrorRow:
    """What an error means on the wire and in the metrics."""

    http: int  # the HTTP status
    grpc: str  # the name of the gRPC status code (`grps_py.status` turns it into grpc's enum)
    reason: str  # the failure reason the metrics count it under: one of REASONS


# The one table: each error class -> (HTTP status, gRPC code, failure reason). `grps_py.status` maps
# exceptions with it, the telemetry takes reasons from it, the client its status <-> code pairs.
#
# Retry meaning is kept: not ready and overloaded -> 503/UNAVAILABLE (retry later, as OIP and load
# balancers expect); bad input -> 400/INVALID_ARGUMENT (do not retry); a missing or wrong token ->
# 401/UNAUTHENTICATED, a caller refused whatever its token -> 403/PERMISSION_DENIED (do not retry as
# sent); anything unexpected -> 500/INTERNAL.
#
# Order matters where rows share an HTTP status or a gRPC code: the first row is what that status or
# code means when nothing else is known (the reason of a bare 404, the status of a NOT_FOUND the client
# receives). So the general rows come first, and a row that reuses a status or code comes after them.
ERROR_TABLE: dict[type[GrpsError], ErrorRow] = {
    GrpsError: ErrorRow(500, "INTERNAL", INTERNAL),
    InvalidInput: ErrorRow(400, "INVALID_ARGUMENT", INVALID),
    NotFound: ErrorRow(404, "NOT_FOUND", NOT_FOUND),
    ModelNotReady: ErrorRow(503, "UNAVAILABLE", REJECTED),
    DeadlineExceeded: ErrorRow(504, "DEADLINE_EXCEEDED", TIMEOUT),
    Cancelled: ErrorRow(499, "CANCELLED", CANCELLED),
    Unsupported: ErrorRow(501, "UNIMPLEMENTED", INTERNAL),
    PayloadTooLarge: ErrorRow(413, "RESOURCE_EXHAUSTED", INVALID),
    UnsupportedMediaType: ErrorRow(415, "INVALID_ARGUMENT", INVALID),
    Unauthenticated: ErrorRow(401, "UNAUTHENTICATED", INVALID),
    PermissionDenied: ErrorRow(403, "PERMISSION_DENIED", INVALID),
    ModelNotFound: ErrorRow(404, "NOT_FOUND", NOT_FOUND),
    RouteNotFound: ErrorRow(404, "NOT_FOUND", NOT_FOUND),
    Overloaded: ErrorRow(503, "UNAVAILABLE", REJECTED),
    ModelError: ErrorRow(500, "INTERNAL", MODEL_ERROR),
    InternalError: ErrorRow(500, "INTERNAL", INTERNAL),
}


def error_row(exc: BaseException) -> ErrorRow:
    """The row of an exception's nearest class in the table; anything else is an internal error."""
    for cls in type(exc).__mro__:
        row = ERROR_TABLE.get(cls)
        if row is not None:
            return row
    return ERROR_TABLE[InternalError]

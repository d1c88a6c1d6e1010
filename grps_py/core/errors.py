"""One exception hierarchy. Each error carries a short message that is safe to show a client.

Detail meant only for the log (tracebacks, internal state) is never put in `public_message`; the
transports log the exception with the request id and answer with `public_message` alone. A message that
quotes a value from the request (a model or tensor name, a header) quotes `untrusted.shown(value)`:
escaped and cut, so it can neither break a log line nor outgrow a gRPC status.
"""

from __future__ import annotations


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


class Unauthenticated(InvalidInput):
    """The request lacks the token its route needs, or carries a wrong one (a client error: not retried)."""

    default_message = "missing or wrong token"


class PermissionDenied(InvalidInput):
    """The caller may not use this route (admin routes without a token answer loopback callers only)."""

    default_message = "permission denied"


class ModelNotFound(GrpsError):
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
    Unauthenticated,
    PermissionDenied,
    ModelNotFound,
    ModelNotReady,
    Overloaded,
    DeadlineExceeded,
    Cancelled,
    Unsupported,
    ModelError,
    InternalError,
)

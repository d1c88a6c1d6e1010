"""Errors in the OpenAI API's shape: `{"error": {"message", "type", "param", "code"}}`.

The HTTP status is the one the server's error table gives the exception (`grps_py.status`), and so is
the message (the safe public one, never a traceback). The OpenAI `type` follows the status:

| status | type | code (by error class) |
| --- | --- | --- |
| 400, 413, 415 | invalid_request_error | the field's problem (`InvalidParameter`), `request_too_large`, ... |
| 401 | authentication_error | `invalid_api_key` |
| 403 | permission_error | `permission_denied` |
| 404 | not_found_error | `model_not_found` (ModelNotFound), `unknown_url` (RouteNotFound) |
| 429 | rate_limit_error | |
| 499 | cancelled_error | `cancelled` |
| 503 | server_error | `server_overloaded` (Overloaded), `model_not_ready` (ModelNotReady) |
| 504 | timeout_error | `timeout` |
| 500, 501, other 5xx | server_error | `model_error`, `unsupported`, ... |

As OpenAI does for a 503 ("The server is overloaded or not ready yet."), an overloaded or not-ready
server says `server_error`: the official clients retry by status (429 and 5xx), not by type.

An error after a stream began is sent as one more event, `data: {"error": {...}}` (`error_event`);
the official clients raise it as an `APIError`. The transport then ends the stream without `[DONE]`.
"""

from __future__ import annotations

from typing import Any

from grps_py import status
from grps_py.codecs.json_values import dumps
from grps_py.core import errors
from grps_py.core.untrusted import shown
from grps_py.openai.answers import sse_event

__all__ = [
    "InvalidParameter",
    "error_answer",
    "error_code",
    "error_document",
    "error_event",
    "error_status",
    "error_type",
]

# Field problems: the `code` an `InvalidParameter` carries.
UNKNOWN_PARAMETER = "unknown_parameter"
UNSUPPORTED_PARAMETER = "unsupported_parameter"
MISSING_PARAMETER = "missing_required_parameter"
INVALID_TYPE = "invalid_type"
INVALID_VALUE = "invalid_value"


class InvalidParameter(errors.InvalidInput):
    """A request field is wrong, unknown or not supported: a 400 that names the field (`param`, in the
    OpenAI form `messages[0].content`) and why (`code`)."""

    def __init__(self, message: str, param: str | None, code: str | None = INVALID_VALUE) -> None:
        super().__init__(message)
        self.param = param
        self.code = code


_TYPE_BY_STATUS = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "invalid_request_error",
    415: "invalid_request_error",
    429: "rate_limit_error",
    499: "cancelled_error",
    503: "server_error",
    504: "timeout_error",
}

# The nearest class in an exception's MRO that is here gives its code (InvalidParameter's own wins).
_CODE_BY_CLASS: dict[type[errors.GrpsError], str] = {
    errors.PayloadTooLarge: "request_too_large",
    errors.UnsupportedMediaType: "unsupported_media_type",
    errors.Unauthenticated: "invalid_api_key",
    errors.PermissionDenied: "permission_denied",
    errors.ModelNotFound: "model_not_found",
    errors.RouteNotFound: "unknown_url",
    errors.ModelNotReady: "model_not_ready",
    errors.Overloaded: "server_overloaded",
    errors.DeadlineExceeded: "timeout",
    errors.Cancelled: "cancelled",
    errors.Unsupported: "unsupported",
    errors.ModelError: "model_error",
    errors.InternalError: "internal_error",
}


def error_status(exc: BaseException) -> int:
    """The HTTP status of an exception, from the server's one error table."""
    return status.wire_status(exc).http


def error_type(http_status: int) -> str:
    """OpenAI's error `type` for an HTTP status."""
    known = _TYPE_BY_STATUS.get(http_status)
    if known is not None:
        return known
    return "server_error" if http_status >= 500 else "invalid_request_error"


def error_code(exc: BaseException) -> str | None:
    if isinstance(exc, InvalidParameter):
        return exc.code
    for cls in type(exc).__mro__:
        code = _CODE_BY_CLASS.get(cls)
        if code is not None:
            return code
    return None if isinstance(exc, errors.GrpsError) else _CODE_BY_CLASS[errors.InternalError]


def error_document(exc: BaseException, request_id: str | None = None) -> dict[str, Any]:
    """`{"error": {...}}` for an exception. The message is the public one, one line, with the request
    id (as the other APIs' error answers carry it) so a client's report can be found in the log."""
    message = status.public_message(exc)
    if request_id:
        message = f"{message} [request_id={shown(request_id, 128)}]"
    param = exc.param if isinstance(exc, InvalidParameter) else None
    return {
        "error": {
            "message": message,
            "type": error_type(error_status(exc)),
            "param": param,
            "code": error_code(exc),
        }
    }


def error_answer(exc: BaseException, request_id: str | None = None) -> tuple[int, bytes]:
    """(HTTP status, JSON body) of the answer to a request that failed before its answer began."""
    return error_status(exc), dumps(error_document(exc, request_id))


def error_event(exc: BaseException, request_id: str | None = None) -> bytes:
    """The SSE event that reports an error after a stream began: `data: {"error": {...}}`."""
    return sse_event(error_document(exc, request_id))

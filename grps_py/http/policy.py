"""The rules every HTTP route keeps, whichever layer serves it (the connection's unary routes in
`http/direct.py`, or Tornado's web layer in `http/base.py`): the body's size limit checked before the body
is read, who may call, the 408 of a body that does not arrive, the headers an error answer carries, the
scheduling controls, and how large an answer may be (`answer_bytes`, checked before it is encoded).

Built once per server from server.yml (`limits`, `security`) and handed to both layers.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from tornado.httputil import HTTPHeaders

from grps_py.access import AccessGuard
from grps_py.codecs import grps_json, oip_json
from grps_py.core.config import ServerSettings
from grps_py.core.errors import InvalidInput, Overloaded, PayloadTooLarge, Unauthenticated
from grps_py.core.protection import LimitsSettings
from grps_py.core.untrusted import MAX_DECIMAL_DIGITS, decimal, shown
from grps_py.lifecycle import client_log

POLICY_SETTING = "grps_http_policy"  # the key in tornado.web.Application.settings
REQUEST_ID_HEADER = "X-Request-Id"
# Scheduling controls of the grps API, as a header or a query parameter (the header wins).
TIMEOUT_HEADER, TIMEOUT_QUERY = "Grps-Timeout-Us", "timeout_us"
PRIORITY_HEADER, PRIORITY_QUERY = "Grps-Priority", "priority"
# A body at least this large goes out after its head rather than copied in behind it.
LARGE_BODY_BYTES = 64 << 10
# The order of the methods in an Allow header (as Tornado's RequestHandler.SUPPORTED_METHODS).
METHOD_ORDER = ("GET", "HEAD", "POST", "DELETE", "PATCH", "PUT", "OPTIONS")
Header = tuple[str, str]
log = logging.getLogger("grps_py.http")


class MethodNotAllowed(InvalidInput):
    """The route does not take the request's method (its answer names, in Allow, the methods it takes).
    An HTTP refinement of InvalidInput's row (`status.wire_status`): 405, reason `invalid`."""

    default_message = "method not allowed"
    http_status = 405


class BodyTimeout(InvalidInput):
    """The request's body did not arrive within `limits.body_timeout_s`: 408, reason `invalid`."""

    default_message = "request body timeout"
    http_status = 408


@dataclass(frozen=True)
class HttpPolicy:
    body_bytes: int  # the largest request body accepted (413 above it)
    body_setting: str  # the server.yml key that set it, for the 413 message
    body_timeout_s: float
    guard: AccessGuard
    answer_bytes: int  # the largest answer body (limits.http_answer_bytes; see codecs/answer_size.py)
    limits: LimitsSettings  # what the codecs bound (tensor sizes, JSON depth, ...)

    def too_large(self) -> PayloadTooLarge:
        return PayloadTooLarge(f"the request body exceeds {self.body_setting} ({self.body_bytes} bytes)")

    def check_declared_length(self, headers: HTTPHeaders) -> None:
        """Refuse (413) a body whose Content-Length is over the limit, before it is read."""
        length = declared_length(headers)
        if length is not None and length > self.body_bytes:
            raise self.too_large()

    def body_timed_out(self, method: str, path: str, elapsed_s: float) -> bool:
        """Whether a request whose connection closed while its body was arriving was cut off by the body
        timeout (logged as the client's failing, a 408) rather than by its client."""
        if elapsed_s < self.body_timeout_s:
            return False
        client_log.info(
            "%s %s -> the body did not arrive within %ss (limits.body_timeout_s); connection closed",
            shown(method),
            shown(path),
            self.body_timeout_s,
        )
        return True


def http_policy(settings: ServerSettings) -> HttpPolicy:
    limits = settings.limits
    if limits.http_body_bytes is None:
        body, key = settings.interface.max_message_bytes, "interface.max_message_bytes"
    else:
        body, key = limits.http_body_bytes, "limits.http_body_bytes"
    guard = AccessGuard(settings.security)
    return HttpPolicy(body, key, limits.body_timeout_s, guard, http_answer_limit(settings), limits)


def http_answer_limit(settings: ServerSettings) -> int:
    """`limits.http_answer_bytes`; by default the gRPC message limit (`limits.grpc_message_bytes`, else
    `interface.max_message_bytes`), so HTTP answers what gRPC would send (as grpc/server.py computes it)."""
    limits = settings.limits
    if limits.http_answer_bytes is not None:
        return limits.http_answer_bytes
    if limits.grpc_message_bytes is not None:
        return limits.grpc_message_bytes
    return settings.interface.max_message_bytes


def declared_length(headers: HTTPHeaders) -> int | None:
    """The body's Content-Length when it is well-formed; None when absent, chunked or malformed (a
    malformed one is refused by the connection, and a chunked body is counted as it arrives)."""
    text = headers.get("Content-Length")
    if text is None or "Transfer-Encoding" in headers:
        return None
    pieces = {piece.strip() for piece in text.split(",")}
    value = pieces.pop()
    return int(value) if not pieces and value.isdigit() else None


def failure_headers(exc: BaseException) -> tuple[Header, ...]:
    """Headers an error answer carries beside its body: when to retry, how to authenticate."""
    if isinstance(exc, Overloaded):
        return (("Retry-After", "1"),)
    if isinstance(exc, Unauthenticated):
        return (("WWW-Authenticate", "Bearer"),)
    return ()


def allow_header(methods: set[str] | frozenset[str]) -> str:
    """An Allow header's value (RFC 9110): the methods in their usual order."""
    return ", ".join(m for m in METHOD_ORDER if m in methods)


def int_control(text: str | None, header: str, query: str) -> int | None:
    """A scheduling control's value, or None when it is absent or empty: ASCII digits only, at most 18
    (`untrusted.decimal`); anything else (`1_000`, `+5`, ` 5 `, `١٢`) is refused, naming the header."""
    if not text:
        return None
    value = decimal(text)
    if value is None:
        raise InvalidInput(
            f"{header} / ?{query}= must be a non-negative integer "
            f"(0-9, at most {MAX_DECIMAL_DIGITS} digits), not '{shown(text, 40)}'"
        )
    return value


def grps_error_body(http_status: int, msg: str) -> bytes:
    """The grps API's error answer: its status envelope."""
    return grps_json.encode_status(http_status, msg, False)


def oip_error_body(http_status: int, msg: str) -> bytes:
    """The Open Inference Protocol's error answer: `{"error": msg}`."""
    return oip_json.encode_error(msg)

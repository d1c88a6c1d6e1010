"""What every HTTP handler enforces before a request's body is read (its size limit and who may call),
and how large an answer it may write (`answer_bytes`, checked before the answer is encoded).

Built once per application from server.yml (`limits`, `security`) and kept in the Tornado application's
settings, so each request pays one dict lookup for it.
"""

from __future__ import annotations

from dataclasses import dataclass

from grps_py.core.config import ServerSettings
from grps_py.http.auth import AccessGuard

POLICY_SETTING = "grps_http_policy"  # the key in tornado.web.Application.settings


@dataclass(frozen=True)
class HttpPolicy:
    body_bytes: int  # the largest request body accepted (413 above it)
    body_setting: str  # the server.yml key that set it, for the 413 message
    body_timeout_s: float
    guard: AccessGuard
    answer_bytes: int  # the largest answer body (limits.http_answer_bytes; see codecs/answer_size.py)


def http_policy(settings: ServerSettings) -> HttpPolicy:
    limits = settings.limits
    if limits.http_body_bytes is None:
        body, key = settings.interface.max_message_bytes, "interface.max_message_bytes"
    else:
        body, key = limits.http_body_bytes, "limits.http_body_bytes"
    guard = AccessGuard(settings.security)
    return HttpPolicy(body, key, limits.body_timeout_s, guard, http_answer_limit(settings))


def http_answer_limit(settings: ServerSettings) -> int:
    """`limits.http_answer_bytes`; by default the gRPC message limit (`limits.grpc_message_bytes`, else
    `interface.max_message_bytes`), so HTTP answers what gRPC would send (as grpc/server.py computes it)."""
    limits = settings.limits
    if limits.http_answer_bytes is not None:
        return limits.http_answer_bytes
    if limits.grpc_message_bytes is not None:
        return limits.grpc_message_bytes
    return settings.interface.max_message_bytes

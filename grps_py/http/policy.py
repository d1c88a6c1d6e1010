"""What every HTTP handler enforces before a request's body is read: its size limit and who may call.

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


def http_policy(settings: ServerSettings) -> HttpPolicy:
    limits = settings.limits
    if limits.http_body_bytes is None:
        body, key = settings.interface.max_message_bytes, "interface.max_message_bytes"
    else:
        body, key = limits.http_body_bytes, "limits.http_body_bytes"
    return HttpPolicy(body, key, limits.body_timeout_s, AccessGuard(settings.security))

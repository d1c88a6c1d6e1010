"""Who may call what: admin routes and (optionally) inference routes, for both transports.

Kept free of Tornado and gRPC so the HTTP handlers and the gRPC boundary apply the same rules:

- admin operations (online/offline, future management routes): with `security.admin_token`, the
  caller must send `Bearer <admin_token>`; without it, only loopback callers are accepted. Over HTTP
  they are also refused when a browser sends them for another site's page (`refuse_cross_site`): a
  page elsewhere could otherwise make a browser on this host switch the server (a GET is enough);
- inference routes: when `security.inference_tokens` is set, `Bearer <any one of them>`;
- everything else (health probes, metadata, metrics) stays open.

Tokens are compared with `hmac.compare_digest` against every configured token, so the time taken
says nothing about which one (or how much of one) matched.
"""

from __future__ import annotations

import hmac
import ipaddress
from urllib.parse import unquote

from grps_py.core.errors import PermissionDenied, Unauthenticated
from grps_py.core.protection import SecuritySettings

BEARER = "bearer"


def bearer_token(authorization: str | None) -> bytes | None:
    """The token of an `Authorization: Bearer <token>` value (scheme case-insensitive), else None."""
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != BEARER or not token:
        return None
    return token.encode("utf-8", "surrogateescape")


def is_loopback(host: str | None) -> bool:
    """Whether an IP address (IPv4, IPv6, IPv4-mapped IPv6) is a loopback address."""
    if not host:
        return False
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


def grpc_peer_is_local(peer: str | None) -> bool:
    """`ServicerContext.peer()` ("ipv4:127.0.0.1:5000", "ipv6:[::1]:5000", "unix:...") is this host."""
    if not peer:
        return False
    kind, _, rest = peer.partition(":")
    if kind.startswith("unix"):
        return True
    if kind == "ipv4":
        return is_loopback(rest.rpartition(":")[0])
    if kind == "ipv6":
        return is_loopback(unquote(rest.rpartition(":")[0]).strip("[]"))
    return False


# Sec-Fetch-Site values of requests a page of this server made, or the user made (address bar, bookmark).
_SAME_SITE_VALUES = frozenset({"same-origin", "none"})
_DEFAULT_PORTS = {"http": "80", "https": "443"}


def refuse_cross_site(origin: str | None, fetch_site: str | None, scheme: str, host: str | None) -> None:
    """Raise PermissionDenied (403) for a request a browser sent for a page of another origin: its
    `Sec-Fetch-Site` is anything but `same-origin` or `none` (`cross-site`, `same-site`), or its `Origin`
    is not this server's own (`scheme://Host`; `null` never is). Clients that send neither header
    (curl, load balancers, grps clients) pass, whatever the method."""
    if fetch_site is not None:
        site = fetch_site.strip().lower()
        if site not in _SAME_SITE_VALUES:
            said = site if site in ("cross-site", "same-site") else "neither same-origin nor none"
            raise PermissionDenied(
                f"admin operations are not accepted from another site's page (Sec-Fetch-Site: {said}); "
                "call them from a client of your own"
            )
    if origin is not None and (host is None or _origin(origin) != _origin(f"{scheme}://{host}")):
        raise PermissionDenied(
            "admin operations are not accepted from a page of another origin "
            "(the Origin header is not this server's scheme://Host); call them from a client of your own"
        )


def _origin(value: str) -> tuple[str, str] | None:
    """An origin as (scheme, host[:port]) in lower case, a scheme's default port left out; None when it
    is not one (`null`, a path, no host)."""
    scheme, sep, authority = value.strip().lower().partition("://")
    if not sep or not scheme or not authority or "/" in authority or "@" in authority:
        return None
    host, colon, port = authority.rpartition(":")
    if colon and port.isdigit() and (host.endswith("]") or ":" not in host):  # not inside [v6]
        authority = host if port == _DEFAULT_PORTS.get(scheme) else authority
    return scheme, authority


def _matches(token: bytes | None, accepted: tuple[bytes, ...]) -> bool:
    if token is None:
        return False
    found = False
    for candidate in accepted:  # no early exit: every token is compared
        found |= hmac.compare_digest(token, candidate)
    return found


class AccessGuard:
    """The security settings, ready to check a request's `Authorization` value and its peer."""

    def __init__(self, security: SecuritySettings) -> None:
        admin = security.admin_token
        self.admin_tokens: tuple[bytes, ...] = () if admin is None else (admin.encode("utf-8"),)
        self.inference_tokens: tuple[bytes, ...] = tuple(t.encode("utf-8") for t in security.inference_tokens)

    def check_admin(self, authorization: str | None, local_caller: bool) -> None:
        """Raise Unauthenticated (401) or PermissionDenied (403) unless the caller may run admin routes."""
        if self.admin_tokens:
            if not _matches(bearer_token(authorization), self.admin_tokens):
                raise Unauthenticated(_refusal("admin token", authorization))
        elif not local_caller:
            raise PermissionDenied(
                "admin operations are accepted from loopback callers only "
                "(configure security.admin_token to allow remote callers)"
            )

    def check_inference(self, authorization: str | None) -> None:
        """Raise Unauthenticated unless inference is open or the request carries an accepted token."""
        if self.inference_tokens and not _matches(bearer_token(authorization), self.inference_tokens):
            raise Unauthenticated(_refusal("inference token", authorization))


def _refusal(what: str, authorization: str | None) -> str:
    if bearer_token(authorization) is None:
        return f"this route needs an {what}: send 'Authorization: Bearer <token>'"
    return f"the {what} is not accepted"

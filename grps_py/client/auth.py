"""The admin token a client sends with admin calls, as `Authorization: Bearer <token>` (the HTTP header,
or the gRPC metadata `authorization`): the server's `security.admin_token`."""

from __future__ import annotations

__all__ = ["authorization"]

_MAX_TOKEN_CHARS = 4096


def authorization(token: str | None) -> str | None:
    """The `Authorization` value for `token` (None: send none). A token must be printable ASCII without
    spaces, as a header and gRPC metadata can carry it; anything else raises ValueError here, not as an
    obscure failure of the first call."""
    if token is None:
        return None
    if not token or len(token) > _MAX_TOKEN_CHARS or not all("!" <= char <= "~" for char in token):
        raise ValueError(f"a token must be 1 to {_MAX_TOKEN_CHARS} printable ASCII characters without spaces")
    return f"Bearer {token}"

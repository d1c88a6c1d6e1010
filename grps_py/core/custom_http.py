"""The raw HTTP request and answer that model code handles itself on a custom route.

Transport-free: the HTTP layer fills an `HttpRequest` from its own request object and writes the
`HttpResponse` the model set. Model code may answer with a str, bytes, a dict or list (sent as
JSON), an `HttpResponse`, or a `(body, status)` / `(body, status, headers)` tuple, as Flask allows.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from grps_py.core.errors import InvalidInput

JSON = "application/json"
TEXT = "text/plain; charset=utf-8"
OCTET_STREAM = "application/octet-stream"


@dataclass
class HttpRequest:
    """What the client sent. `headers` is case-insensitive when the server fills it."""

    method: str
    path: str
    headers: Mapping[str, str]
    query: dict[str, list[str]]
    body: bytes
    remote_addr: str = ""

    @property
    def content_type(self) -> str:
        """The media type without parameters, lower case ("" when the client sent none)."""
        return self.headers.get("Content-Type", "").split(";")[0].strip().lower()

    @property
    def args(self) -> dict[str, str]:
        """Query arguments, the last value of each (Flask's `request.args`)."""
        return {key: values[-1] for key, values in self.query.items() if values}

    def get_query(self, key: str, default: str | None = None) -> str | None:
        values = self.query.get(key)
        return values[-1] if values else default

    def get_data(self) -> bytes:
        return self.body

    def get_json(self) -> Any:
        """The body parsed as JSON; malformed JSON answers the client 400 with the parser's reason."""
        try:
            return orjson.loads(self.body)
        except orjson.JSONDecodeError as exc:
            raise InvalidInput(f"the request body is not valid JSON: {exc}") from None


@dataclass
class HttpResponse:
    """An HTTP answer set by model code on a custom route."""

    body: bytes | str = b""
    status: int = 200
    content_type: str = OCTET_STREAM
    headers: dict[str, str] = field(default_factory=dict)

    def body_bytes(self) -> bytes:
        return self.body.encode() if isinstance(self.body, str) else bytes(self.body)


def make_response(
    value: Any, status: int = 200, content_type: str | None = None, headers: Mapping[str, str] | None = None
) -> HttpResponse:
    """Normalise what model code answered into an `HttpResponse` (a bad value is the model's error)."""
    if isinstance(value, HttpResponse):
        return value
    if isinstance(value, tuple):
        return _from_tuple(value, content_type)
    extra = dict(headers or {})
    header_type = next((v for k, v in extra.items() if k.lower() == "content-type"), None)
    if isinstance(value, (dict, list)):
        body: bytes | str = orjson.dumps(value, option=orjson.OPT_SERIALIZE_NUMPY)
        default_type = JSON
    elif isinstance(value, str):
        body, default_type = value, TEXT
    elif isinstance(value, (bytes, bytearray, memoryview)):
        body, default_type = bytes(value), OCTET_STREAM
    else:
        raise TypeError(
            "set_http_response takes str, bytes, a dict or list (JSON), an HttpResponse or a "
            f"(body, status[, headers]) tuple, not {type(value).__name__}"
        )
    if not (isinstance(status, int) and 100 <= status <= 599):
        raise TypeError(f"set_http_response: status must be an HTTP status code, not {status!r}")
    extra = {k: v for k, v in extra.items() if k.lower() != "content-type"}
    return HttpResponse(body, status, content_type or header_type or default_type, extra)


def _from_tuple(value: tuple[Any, ...], content_type: str | None) -> HttpResponse:
    if len(value) not in (2, 3):
        raise TypeError("set_http_response: a tuple is (body, status) or (body, status, headers)")
    headers = value[2] if len(value) == 3 else None
    if headers is not None and not isinstance(headers, Mapping):
        raise TypeError("set_http_response: the tuple's headers must be a mapping")
    return make_response(value[0], value[1], content_type, headers)

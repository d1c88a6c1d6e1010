"""The raw HTTP request and answer that model code handles itself on a custom route.

Transport-free: the HTTP layer fills an `HttpRequest` from its own request object and writes the
`HttpResponse` the model set. The request reads as Flask's does (`flask_request.py`), since grps hands
model code a Flask request. Model code may answer with a str, bytes, a dict or list (sent as JSON), an
`HttpResponse`, a `flask.Response` (any werkzeug Response, recognised without importing Flask), an
iterator of chunks (streamed), or a `(body, status)`, `(body, headers)` or `(body, status, headers)`
tuple, as Flask allows.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from grps_py.core.flask_request import FlaskRequestSurface
from grps_py.core.request_maps import Headers

JSON = "application/json"
TEXT = "text/plain; charset=utf-8"
OCTET_STREAM = "application/octet-stream"
# Content-Type is written from `content_type`; the framing headers by the server from the body it sends
# (a model's own would contradict a streamed body).
_NOT_MODEL_SET = frozenset({"content-type", "content-length", "transfer-encoding"})


@dataclass
class HttpRequest(FlaskRequestSurface):
    """What the client sent. `headers` is case-insensitive (a `Headers`, whatever mapping was given);
    `query` holds every value of each argument. Read it as Flask's request (`args`, `form`, `files`,
    `get_json()`...) or by these fields."""

    method: str
    path: str
    headers: Mapping[str, str]
    query: dict[str, list[str]]
    body: bytes
    remote_addr: str = ""
    scheme: str = "http"
    raw_query: str = ""  # as sent, %-escapes and all (`query_string`)

    def __post_init__(self) -> None:
        if not isinstance(self.headers, Headers):
            self.headers = Headers(self.headers)

    def get_query(self, key: str, default: str | None = None) -> str | None:
        """The last value of a query argument (`args.get` gives the first, as Flask)."""
        values = self.query.get(key)
        return values[-1] if values else default


@dataclass
class HttpResponse:
    """An HTTP answer set by model code on a custom route. It reads as a Flask response too
    (`status_code`, `headers["Content-Type"]`, `get_data()`, `response`), for grps's unit tests.

    `chunks` (an iterator of bytes) is a streamed body, written as it comes; `on_close` is called once
    it is over (a werkzeug Response's `close`)."""

    body: bytes | str = b""
    status: int = 200
    content_type: str = OCTET_STREAM
    headers: Headers = field(default_factory=Headers)  # any mapping given is made one
    chunks: Iterator[bytes] | None = None
    on_close: Callable[[], object] | None = None

    def __post_init__(self) -> None:
        headers = self.headers if isinstance(self.headers, Headers) else Headers(self.headers)
        if "Content-Type" in headers:  # a Content-Type among the headers is the answer's
            self.content_type = headers["Content-Type"]
        else:
            headers["Content-Type"] = self.content_type
        self.headers = headers

    def body_bytes(self) -> bytes:
        return self.body.encode() if isinstance(self.body, str) else bytes(self.body)

    def header_lines(self) -> list[tuple[str, str]]:
        """The headers to send besides Content-Type (which is `content_type`) and the framing."""
        return [(k, v) for k, v in self.headers.lines() if k.lower() not in _NOT_MODEL_SET]

    # -- as Flask's response reads -----------------------------------------------------------------
    @property
    def status_code(self) -> int:
        return self.status

    @status_code.setter
    def status_code(self, value: int) -> None:
        self.status = value

    @property
    def is_streamed(self) -> bool:
        return self.chunks is not None

    @property
    def mimetype(self) -> str:
        return self.content_type.split(";")[0].strip().lower()

    @property
    def response(self) -> Iterable[bytes]:
        """The body as werkzeug keeps it: a list of chunks (the iterator itself when streamed)."""
        return self.chunks if self.chunks is not None else [self.body_bytes()]

    def get_data(self, as_text: bool = False) -> Any:
        """The whole body; a streamed one is read to its end (and kept) first, as werkzeug does."""
        if self.chunks is not None:
            self.body, self.chunks = b"".join(self.chunks), None
        return self.body_bytes().decode("utf-8", "replace") if as_text else self.body_bytes()

    @property
    def data(self) -> bytes:
        data: bytes = self.get_data()
        return data

    def get_json(self) -> Any:
        return orjson.loads(self.get_data())

    @property
    def json(self) -> Any:
        return self.get_json()


def make_response(
    value: Any, status: int = 200, content_type: str | None = None, headers: Any = None
) -> HttpResponse:
    """Normalise what model code answered into an `HttpResponse`, by Flask's rules for a view's return
    value (a bad value is the model's error: TypeError)."""
    if isinstance(value, tuple):
        return _from_tuple(value, content_type)
    if isinstance(value, HttpResponse) or _is_werkzeug_response(value):
        answer = value if isinstance(value, HttpResponse) else _from_werkzeug(value)
        return _overridden(answer, status, content_type, headers)
    extra = _headers_of(headers)
    chunks: Iterator[bytes] | None = None
    if isinstance(value, (dict, list)):
        body: bytes | str = orjson.dumps(value, option=orjson.OPT_SERIALIZE_NUMPY)
        default_type = JSON
    elif isinstance(value, str):
        body, default_type = value, TEXT
    elif isinstance(value, (bytes, bytearray, memoryview)):
        body, default_type = bytes(value), OCTET_STREAM
    elif isinstance(value, Iterator):  # a generator: streamed, as Flask streams one
        body, default_type, chunks = b"", OCTET_STREAM, _encoded(value)
    else:
        raise TypeError(
            "set_http_response takes str, bytes, a dict or list (JSON), an iterator of chunks, an "
            "HttpResponse, a flask.Response or a (body, status[, headers]) / (body, headers) tuple, "
            f"not {type(value).__name__}"
        )
    chosen = content_type or extra.get("Content-Type") or default_type
    extra["Content-Type"] = chosen
    return HttpResponse(body, _status_code(status), chosen, extra, chunks)


def _from_tuple(value: tuple[Any, ...], content_type: str | None) -> HttpResponse:
    """Flask's forms: (body, status), (body, headers), (body, status, headers)."""
    if len(value) == 3:
        body, status, headers = value
    elif len(value) == 2 and isinstance(value[1], (Mapping, list)):
        (body, headers), status = value, None
    elif len(value) == 2:
        (body, status), headers = value, None
    else:
        raise TypeError(
            "set_http_response: a tuple is (body, status), (body, headers) or (body, status, headers)"
        )
    if isinstance(body, tuple):
        raise TypeError("set_http_response: a tuple's body cannot be a tuple")
    if isinstance(body, HttpResponse) or _is_werkzeug_response(body):
        return make_response(body, status, content_type, headers)
    return make_response(body, 200 if status is None else status, content_type, headers)


def _overridden(answer: HttpResponse, status: Any, content_type: str | None, headers: Any) -> HttpResponse:
    """A response object with a tuple's (or the call's) status and headers laid over it, as Flask does."""
    if status is not None and status != 200:  # 200 is set_http_response's default: nothing to lay over
        answer.status = _status_code(status)
    extra = _headers_of(headers)
    if content_type:
        extra["Content-Type"] = content_type
    for key in extra:
        answer.headers.remove(key)
    for key, value in extra.lines():
        answer.headers.add(key, value)
    answer.content_type = answer.headers.get("Content-Type", answer.content_type)
    return answer


def _headers_of(headers: Any) -> Headers:
    if headers is None:
        return Headers()
    if isinstance(headers, (Mapping, list)):
        try:
            return Headers(headers)
        except (TypeError, ValueError):
            pass
    raise TypeError("set_http_response: headers are a mapping or a list of (name, value) pairs")


def _status_code(status: Any) -> int:
    """An int (or HTTPStatus), or Flask's "404" / "404 NOT FOUND"; a code outside 100-599 is refused."""
    code = status
    if isinstance(status, str):
        head = status.split(" ", 1)[0]
        code = int(head) if head.isdigit() and len(head) == 3 else None
    if isinstance(code, int) and not isinstance(code, bool) and 100 <= code <= 599:
        return int(code)
    raise TypeError(f"set_http_response: status must be an HTTP status code, not {status!r}")


def _is_werkzeug_response(value: Any) -> bool:
    """A werkzeug (so also Flask) Response. Without werkzeug imported there can be none: its module is
    looked up, never imported, so Flask stays optional and unloaded."""
    module = sys.modules.get("werkzeug.wrappers.response")
    response_class = getattr(module, "Response", None)
    return response_class is not None and isinstance(value, response_class)


def _from_werkzeug(response: Any) -> HttpResponse:
    """Through werkzeug's public API: status, header lines, and the body, whole or streamed."""
    lines = [(str(k), str(v)) for k, v in response.headers.items()]
    content_type = response.headers.get("Content-Type") or OCTET_STREAM
    status = int(response.status_code)
    if response.is_streamed:
        chunks = iter(response.iter_encoded())
        return HttpResponse(b"", status, content_type, Headers(lines), chunks, response.close)
    return HttpResponse(response.get_data(), status, content_type, Headers(lines))


def _encoded(chunks: Iterator[Any]) -> Iterator[bytes]:
    """A model's streamed chunks as bytes (str is sent as UTF-8)."""
    for chunk in chunks:
        if isinstance(chunk, str):
            yield chunk.encode()
        elif isinstance(chunk, (bytes, bytearray, memoryview)):
            yield bytes(chunk)
        else:
            raise TypeError(f"a streamed answer's chunks are str or bytes, not {type(chunk).__name__}")

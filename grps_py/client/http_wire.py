"""The grps HTTP API on the wire, without I/O: requests to send, answers and streams to read.

Both HTTP transports (blocking `http.client`, asyncio streams) build requests and read answers here,
so they differ only in how bytes move.
"""

from __future__ import annotations

import time
import urllib.parse
from dataclasses import dataclass, field

import orjson

from grps_py.client.errors import GrpsClientError, answer_unreadable, deadline_exceeded
from grps_py.client.values import Request
from grps_py.codecs import grps_json
from grps_py.core.errors import InvalidInput
from grps_py.core.types import Payload, PayloadKind

__all__ = [
    "ChunkedDecoder",
    "Deadline",
    "HttpCall",
    "HttpUrl",
    "StreamDecoder",
    "error_of",
    "predict_call",
    "read_answer",
]

API = "/grps/v1"
OCTET_STREAM = "application/octet-stream"
JSON = "application/json"
TIMEOUT_HEADER = "Grps-Timeout-Us"
# Every JSON document the server writes starts with its status envelope.
_JSON_START = b'{"status"'
_MAX_CHUNK_LINE = 4096


@dataclass(frozen=True)
class HttpUrl:
    scheme: str
    host: str
    port: int
    base_path: str = ""

    @classmethod
    def parse(cls, url: str) -> HttpUrl:
        """`host:port`, `http://host:port` or `https://host[:port]/prefix`."""
        parts = urllib.parse.urlsplit(url if "://" in url else f"http://{url}")
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an HTTP URL: {url!r}; expected host:port or http://host:port")
        port = parts.port or (443 if parts.scheme == "https" else 80)
        return cls(parts.scheme, parts.hostname, port, parts.path.rstrip("/"))

    @property
    def netloc(self) -> str:
        """`host:port` as a Host header writes it (an IPv6 address in brackets)."""
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    def __str__(self) -> str:
        return f"{self.scheme}://{self.netloc}{self.base_path}"

    @property
    def where(self) -> str:
        """The server as messages name it: `127.0.0.1:7080 (HTTP)`."""
        return f"{self.netloc}{self.base_path} ({self.scheme.upper()})"


@dataclass(frozen=True)
class HttpCall:
    """One request: method, path with query, headers and body."""

    method: str
    target: str
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)


class Deadline:
    """A call's whole time budget, spent across connect, send and every read."""

    def __init__(self, timeout_s: float | None, where: str) -> None:
        self.timeout_s = timeout_s
        self.where = where
        self._end = None if timeout_s is None else time.monotonic() + timeout_s

    def remaining(self) -> float | None:
        """Seconds left (None: no limit); raises 504 once none are."""
        if self._end is None:
            return None
        left = self._end - time.monotonic()
        if left <= 0:
            raise self.exceeded()
        return left

    def exceeded(self) -> GrpsClientError:
        return deadline_exceeded(self.where, self.timeout_s)


# --- requests -----------------------------------------------------------------------------------


def predict_call(url: HttpUrl, request: Request, timeout_s: float | None, streaming: bool) -> HttpCall:
    """bin_data goes raw as octet-stream, anything else as grps JSON; the model goes in `?model=`.

    The server reads the request's own timeout from `Grps-Timeout-Us`, so it can drop a request whose
    caller has stopped waiting instead of running it.
    """
    payload = request.payload()
    if payload.kind is PayloadKind.BYTES:
        body, content_type = bytes(payload.value), OCTET_STREAM
    else:  # grps_json writes answers: the request carries a status envelope, which the server ignores
        body, content_type = grps_json.encode_response(payload, 0, ""), JSON
    query = {"model": request.model} if request.model else {}
    if streaming:
        query["streaming"] = "true"
    target = f"{url.base_path}{API}/infer/predict"
    if query:
        target += "?" + urllib.parse.urlencode(query)
    headers = {"Content-Type": content_type}
    if timeout_s is not None:
        headers[TIMEOUT_HEADER] = str(max(1, int(timeout_s * 1e6)))
    return HttpCall("POST", target, body, headers)


def health_call(url: HttpUrl, action: str) -> HttpCall:
    return HttpCall("GET", f"{url.base_path}{API}/health/{action}")


def metadata_call(url: HttpUrl, model: str | None) -> HttpCall:
    if model is None:
        return HttpCall("GET", f"{url.base_path}{API}/metadata/server")
    body = orjson.dumps({"str_data": model})
    return HttpCall("POST", f"{url.base_path}{API}/metadata/model", body, {"Content-Type": JSON})


# --- answers ------------------------------------------------------------------------------------


def read_answer(http_status: int, reason: str, content_type: str, body: bytes) -> Payload:
    """A unary answer: raw bytes when it is octet-stream, else grps JSON; an error status raises."""
    if http_status != 200:
        raise error_of(http_status, reason, body)
    if content_type.split(";")[0].strip().lower() == OCTET_STREAM:
        return Payload.of_bytes(body)
    return decode_json(body)


def decode_json(document: bytes) -> Payload:
    """One grps JSON answer. A status-only document that says FAILURE raises its error."""
    try:
        payload, _ = grps_json.decode_request(document)
    except InvalidInput as exc:
        raise answer_unreadable(f"the server's answer cannot be read: {exc.public_message}") from exc
    if payload.kind is PayloadKind.EMPTY:
        status = envelope(document)
        if status is not None and not status[2]:
            raise GrpsClientError.from_status(status[0] or 500, status[1])
    return payload


def envelope(body: bytes) -> tuple[int, str, bool] | None:
    """(code, msg, ok) of a grps status envelope; None when the body is not one."""
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    status = document.get("status") if isinstance(document, dict) else None
    if not isinstance(status, dict):
        return None
    code, msg = status.get("code", 0), status.get("msg", "")
    ok = status.get("status") in ("SUCCESS", 1)
    return (code if isinstance(code, int) else 0), str(msg), ok


def error_of(http_status: int, reason: str, body: bytes) -> GrpsClientError:
    """The error of a non-200 answer: the envelope's message, or what a non-grps server sent."""
    status = envelope(body)
    if status is not None and status[1]:
        return GrpsClientError.from_status(http_status, status[1])
    text = body[:200].decode("utf-8", "replace").strip()
    return GrpsClientError.from_status(
        http_status, f"HTTP {http_status} {reason}" + (f": {text}" if text else "")
    )


class ChunkedDecoder:
    """`Transfer-Encoding: chunked`, fed bytes as they arrive; gives back each chunk whole.

    Whole chunks matter: the server writes one streamed message per chunk, and a raw `bin_data`
    message has no other framing.
    """

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._size: int | None = None  # of the chunk being read; None while reading a size line
        self._trailers = False
        self.done = False

    def feed(self, data: bytes) -> list[bytes]:
        self._buffer += data
        chunks: list[bytes] = []
        while not self.done:
            if self._size is not None:
                if len(self._buffer) < self._size + 2:
                    break
                if self._buffer[self._size : self._size + 2] != b"\r\n":
                    raise answer_unreadable("malformed chunked answer: a chunk does not end with CRLF")
                chunks.append(bytes(self._buffer[: self._size]))
                del self._buffer[: self._size + 2]
                self._size = None
                continue
            line = self._line()
            if line is None:
                break
            if self._trailers:
                self.done = not line
            else:
                self._size = self._chunk_size(line)
                if self._size == 0:
                    self._size, self._trailers = None, True
        return chunks

    def _line(self) -> bytes | None:
        end = self._buffer.find(b"\r\n")
        if end < 0:
            if len(self._buffer) > _MAX_CHUNK_LINE:
                raise answer_unreadable("malformed chunked answer: a size line is too long")
            return None
        line = bytes(self._buffer[:end])
        del self._buffer[: end + 2]
        return line

    @staticmethod
    def _chunk_size(line: bytes) -> int:
        try:
            return int(line.split(b";")[0].strip(), 16)
        except ValueError:
            raise answer_unreadable(f"malformed chunked answer: bad chunk size {line[:40]!r}") from None


class StreamDecoder:
    """Stream chunks -> one Payload per streamed message.

    The server writes each message as a JSON document and a newline, or a `bin_data` message as its
    raw bytes, all under one configured Content-Type; so a chunk that starts with the status envelope
    is JSON and any other chunk is raw bytes. JSON is split on newlines, so it survives re-chunking.
    An error after the stream began arrives as a FAILURE document, and raises.
    """

    def __init__(self) -> None:
        self._pending = b""

    def feed(self, chunk: bytes) -> list[Payload]:
        if not self._pending and not chunk.startswith(_JSON_START):
            return [Payload.of_bytes(chunk)] if chunk else []
        *lines, self._pending = (self._pending + chunk).split(b"\n")
        return [decode_json(line) for line in lines if line.strip()]

    def finish(self) -> list[Payload]:
        rest, self._pending = self._pending, b""
        return [decode_json(rest)] if rest.strip() else []

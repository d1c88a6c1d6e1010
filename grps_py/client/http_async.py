"""Streaming over the grps HTTP API with asyncio streams, for `predict_stream_async`.

asyncio streams rather than tornado's client: they hand over the bytes as they arrive, so each
chunk (one streamed message) is read whole, and the caller's loop needs nothing set up. One
connection per stream, closed when the stream ends or is left, which stops the model.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable
from typing import TypeVar

from grps_py.client.errors import GrpsClientError, unavailable
from grps_py.client.http_wire import ChunkedDecoder, Deadline, HttpCall, HttpUrl, StreamDecoder, error_of
from grps_py.core.types import Payload

__all__ = ["stream"]

T = TypeVar("T")
_READ_SIZE = 1 << 16
_HEAD_END = b"\r\n\r\n"


async def _within(step: Awaitable[T], deadline: Deadline) -> T:
    try:
        left = deadline.remaining()
    except GrpsClientError:
        if asyncio.iscoroutine(step):
            step.close()  # never started: close it so it is not reported as never awaited
        raise
    try:
        return await asyncio.wait_for(step, left)
    except asyncio.TimeoutError:
        raise deadline.exceeded() from None


def request_bytes(url: HttpUrl, call: HttpCall) -> bytes:
    headers = {
        "Host": url.netloc,
        "Content-Length": str(len(call.body)),
        "Connection": "close",
        **call.headers,
    }
    head = f"{call.method} {call.target} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    return (head + "\r\n").encode("latin-1") + call.body


def parse_head(head: bytes) -> tuple[int, str, dict[str, str]]:
    """Status, reason and headers (names lower-cased) of a response head."""
    status_line, *lines = head.decode("latin-1").split("\r\n")
    parts = status_line.split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
        raise ValueError(f"not an HTTP response: {status_line[:60]!r}")
    headers = {}
    for line in lines:
        name, _, value = line.partition(":")
        if name:
            headers[name.strip().lower()] = value.strip()
    return int(parts[1]), parts[2] if len(parts) > 2 else "", headers


async def _body(
    reader: asyncio.StreamReader, headers: dict[str, str], deadline: Deadline
) -> AsyncIterator[bytes]:
    """The body chunk by chunk when chunked; else in one piece (by Content-Length, or up to EOF)."""
    if headers.get("transfer-encoding", "").lower() != "chunked":
        length = headers.get("content-length")
        yield await _within(reader.readexactly(int(length)) if length else reader.read(), deadline)
        return
    decoder = ChunkedDecoder()
    while not decoder.done:
        data = await _within(reader.read(_READ_SIZE), deadline)
        if not data:
            raise ConnectionError("the server closed the connection in the middle of the answer")
        for chunk in decoder.feed(data):
            yield chunk


async def stream(url: HttpUrl, call: HttpCall, timeout_s: float | None) -> AsyncGenerator[Payload, None]:
    """Send one streaming predict and yield each message the model streams."""
    deadline = Deadline(timeout_s, url.where)
    try:
        reader, writer = await _within(
            asyncio.open_connection(url.host, url.port, ssl=url.scheme == "https" or None), deadline
        )
    except OSError as exc:  # several addresses tried (localhost: ::1 and 127.0.0.1) leave no errno
        raise unavailable(url.where, exc, connecting=True) from exc
    try:
        writer.write(request_bytes(url, call))
        await _within(writer.drain(), deadline)
        status, reason, headers = parse_head(await _within(reader.readuntil(_HEAD_END), deadline))
        body = _body(reader, headers, deadline)
        if status != 200:
            raise error_of(status, reason, b"".join([part async for part in body]))
        decoder = StreamDecoder()
        async for chunk in body:
            for payload in decoder.feed(chunk):
                yield payload
        for payload in decoder.finish():
            yield payload
    except (OSError, ValueError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as exc:
        raise unavailable(url.where, exc) from exc
    finally:
        writer.close()

"""The Tornado HTTPServer of a port, with server.yml's transport limits.

- `limits.header_bytes`: Tornado's max_header_size. Headers over it are not answered: Tornado closes the
  connection (the client sees it closed without a response).
- `limits.idle_timeout_s`: how long a connection may wait for (the headers of) its next request.
- `limits.body_timeout_s`: how long a request's body may take to arrive; then the connection is closed.
- `max_connections`: connections beyond it are answered 503 and closed at once.
- the body size limit is enforced by the handlers (413 with the route's error body, http/base.py).

The two timeouts are enforced by one sweep over the connections' deadlines, a few times per timeout,
rather than by Tornado's own: Tornado wraps the headers and the body of every request in a timeout of its
own (two timers and a chain of futures per request, about 6% of a small request's CPU).
"""

from __future__ import annotations

import logging
import ssl
import time
from typing import Any

import tornado.httpserver
import tornado.ioloop
import tornado.web
from tornado import httputil
from tornado.iostream import IOStream, StreamClosedError

from grps_py.codecs import grps_json
from grps_py.core.config import ServerSettings

log = logging.getLogger("grps_py.http")
# Tornado's own body limit answers a bare 400 and closes; the handlers answer 413 instead, before
# reading an over-long body, so Tornado's is set out of the way.
TORNADO_BODY_LIMIT = 1 << 62
REFUSE_GRACE_S = 1.0  # a refused connection is closed after its 503 is written, or after this at most


class CappedHTTPServer(tornado.httpserver.HTTPServer):
    """An HTTPServer holding at most `max_connections` connections (0: no cap), that closes a connection
    idle for `idle_timeout_s` or still receiving a request body after `body_timeout_s`."""

    max_connections = 0
    open_connections = 0
    refused = 0  # since the last warning (at most one a second: a flood must not flood the log too)
    _warned_at = 0.0
    idle_timeout_s: float | None = None
    body_timeout_s: float | None = None
    _sweeper: tornado.ioloop.PeriodicCallback | None = None
    _waiting: set[Deadline]

    def set_timeouts(self, idle_timeout_s: float, body_timeout_s: float) -> None:
        """Take the timeouts over from Tornado (see the module's docstring)."""
        self.idle_timeout_s, self.body_timeout_s = idle_timeout_s, body_timeout_s
        self.conn_params.header_timeout = None
        self.conn_params.body_timeout = None
        self._waiting: set[Deadline] = set()

    def start_request(self, server_conn: object, request_conn: httputil.HTTPConnection) -> Any:
        """Called as each request begins, before its headers are read."""
        delegate = super().start_request(server_conn, request_conn)
        if self.idle_timeout_s is None:
            return delegate
        if self._sweeper is None:
            period_ms = min(1.0, self.idle_timeout_s / 4, (self.body_timeout_s or 1.0) / 4) * 1e3
            self._sweeper = tornado.ioloop.PeriodicCallback(self._sweep, period_ms)
            self._sweeper.start()
        return Deadline(delegate, request_conn, self._waiting, self.idle_timeout_s, self.body_timeout_s)

    def _sweep(self) -> None:
        """Close what is overdue; forget connections that closed while waiting for their next request
        (Tornado tells a request's delegate nothing when its connection closes before its headers)."""
        now = time.monotonic()
        for deadline in list(self._waiting):
            if deadline.closed():
                self._waiting.discard(deadline)
            elif deadline.due <= now:
                deadline.expire()

    async def close_all_connections(self) -> None:
        if self._sweeper is not None:
            self._sweeper.stop()
        await super().close_all_connections()

    def handle_stream(self, stream: IOStream, address: Any) -> None:
        if self.max_connections and self.open_connections >= self.max_connections:
            refuse_connection(stream, self.max_connections)
            self._warn_refused()
            return
        self.open_connections += 1
        super().handle_stream(stream, address)

    def on_close(self, server_conn: object) -> None:
        self.open_connections -= 1
        super().on_close(server_conn)

    def _warn_refused(self) -> None:
        self.refused += 1
        now = time.monotonic()
        if now - self._warned_at >= 1.0:
            limit = self.max_connections
            log.warning("refused %d HTTP connection(s): max_connections (%d) open", self.refused, limit)
            self.refused, self._warned_at = 0, now


class Deadline(httputil.HTTPMessageDelegate):
    """A request's delegate, watched until its body is in: its headers are due `idle_s` after it began
    (the connection's previous request finished, or it opened), and its body `body_s` after its headers.
    Past that, the connection is closed (as Tornado's own timeouts do)."""

    def __init__(
        self,
        delegate: httputil.HTTPMessageDelegate,
        connection: httputil.HTTPConnection,
        waiting: set[Deadline],
        idle_s: float,
        body_s: float | None,
    ) -> None:
        self._delegate, self._connection, self._waiting = delegate, connection, waiting
        self.body_s = body_s
        self.due = time.monotonic() + idle_s
        waiting.add(self)

    def headers_received(self, start_line: Any, headers: httputil.HTTPHeaders) -> Any:
        if self.body_s is None:
            self._waiting.discard(self)
        else:
            self.due = time.monotonic() + self.body_s
        return self._delegate.headers_received(start_line, headers)

    def data_received(self, chunk: bytes) -> Any:
        return self._delegate.data_received(chunk)

    def finish(self) -> None:
        self._waiting.discard(self)
        self._delegate.finish()

    def on_connection_close(self) -> None:
        self._waiting.discard(self)
        self._delegate.on_connection_close()

    def closed(self) -> bool:
        stream = getattr(self._connection, "stream", None)
        return stream is None or stream.closed()

    def expire(self) -> None:
        self._waiting.discard(self)
        self._connection.close()  # type: ignore[attr-defined]  # HTTP1Connection's


def refuse_connection(stream: IOStream, limit: int) -> None:
    """Answer 503 (the grps envelope, Retry-After) without reading the request, and close."""
    msg = f"too many connections (max_connections: {limit}); retry later"
    body = grps_json.encode_status(503, msg, False)
    head = (
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
        f"Connection: close\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    try:
        written = stream.write(head.encode("ascii") + body)
    except StreamClosedError:  # the client is already gone
        return
    written.add_done_callback(lambda future: future.exception() if not future.cancelled() else None)
    written.add_done_callback(lambda _: stream.close())
    stream.io_loop.call_later(REFUSE_GRACE_S, stream.close)  # a client that never reads (or handshakes)


def build_http_server(
    app: tornado.web.Application, settings: ServerSettings, tls: ssl.SSLContext | None
) -> CappedHTTPServer:
    limits = settings.limits
    server = CappedHTTPServer(
        app,
        ssl_options=tls,
        max_header_size=limits.header_bytes,
        max_body_size=TORNADO_BODY_LIMIT,
    )
    server.set_timeouts(limits.idle_timeout_s, limits.body_timeout_s)
    server.max_connections = settings.max_connections
    return server

"""The Tornado HTTPServer of a port, with server.yml's transport limits.

- `limits.header_bytes`: Tornado's max_header_size. Headers over it are not answered: Tornado closes the
  connection (the client sees it closed without a response).
- `limits.idle_timeout_s`: how long a connection may wait for (the headers of) its next request.
- `limits.body_timeout_s`: how long a request's body may take to arrive; then the connection is closed.
- `max_connections`: connections beyond it are answered 503 and closed at once.
- the body size limit is enforced by the handlers (413 with the route's error body, http/base.py).
"""

from __future__ import annotations

import logging
import ssl
import time
from typing import Any

import tornado.httpserver
import tornado.web
from tornado.iostream import IOStream, StreamClosedError

from grps_py.codecs import grps_json
from grps_py.core.config import ServerSettings

log = logging.getLogger("grps_py.http")
# Tornado's own body limit answers a bare 400 and closes; the handlers answer 413 instead, before
# reading an over-long body, so Tornado's is set out of the way.
TORNADO_BODY_LIMIT = 1 << 62
REFUSE_GRACE_S = 1.0  # a refused connection is closed after its 503 is written, or after this at most


class CappedHTTPServer(tornado.httpserver.HTTPServer):
    """An HTTPServer holding at most `max_connections` connections (0: no cap)."""

    max_connections = 0
    open_connections = 0
    refused = 0  # since the last warning (at most one a second: a flood must not flood the log too)
    _warned_at = 0.0

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
        idle_connection_timeout=limits.idle_timeout_s,
        body_timeout=limits.body_timeout_s,
        max_body_size=TORNADO_BODY_LIMIT,
    )
    server.max_connections = settings.max_connections
    return server

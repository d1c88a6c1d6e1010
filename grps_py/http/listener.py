"""The HTTP listener of a port: accepts connections (http/connection.py) under server.yml's limits.

- `limits.header_bytes`: a request head (with its chunked trailers) over it is not answered: the
  connection is closed once the requests ahead of it are answered (as Tornado does; the client sees it
  closed without a response).
- `limits.idle_timeout_s`: how long a connection may wait for (the head of) its next request; also how
  long its client may take none of the answers written to it before the connection is aborted.
- `limits.write_buffer_bytes`: answers unsent past it stop the connection's reading until they drain.
- `limits.body_timeout_s`: how long a request's body may take to arrive; then the connection is closed.
- `max_connections`: connections beyond it are answered 503 and closed at once.
- the body size limit is enforced by the handlers (413 with the route's error body, http/base.py).

The timeouts are enforced by one sweep over the connections (their deadlines, their write buffers), a
few times per timeout, rather than by timers per request.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
import time

from tornado import httputil

from grps_py.codecs import grps_json
from grps_py.core.config import ServerSettings
from grps_py.http.connection import HttpConnection
from grps_py.http.direct import DirectRoutes

log = logging.getLogger("grps_py.http")
REFUSE_GRACE_S = 1.0  # a refused connection is closed after its 503 is written, or after this at most
CLOSE_WAIT_S = 1.0  # how long closing every connection waits for them to be gone


class HttpListener:
    """Serves the `direct` routes and `app` (a Tornado Application) on the sockets given to `listen`; holds
    at most `max_connections` connections (0: no cap); closes a connection idle for `idle_timeout_s` or
    still receiving a request body after `body_timeout_s`; aborts one whose client takes nothing of its
    answers for `idle_timeout_s`."""

    def __init__(
        self,
        app: httputil.HTTPServerConnectionDelegate,
        settings: ServerSettings,
        tls: ssl.SSLContext | None,
        direct: DirectRoutes | None = None,
    ) -> None:
        limits = settings.limits
        self.app = app
        self.direct = direct  # the routes answered without the app (http/direct.py)
        self.tls = tls
        self.scheme = "https" if tls is not None else "http"
        self.header_bytes = limits.header_bytes
        self.idle_timeout_s = limits.idle_timeout_s
        self.body_timeout_s = limits.body_timeout_s
        self.write_buffer_bytes = limits.write_buffer_bytes
        self.max_connections = settings.max_connections
        self.no_keep_alive = False  # set by the drain: every answer from then on closes its connection
        self.connections: set[HttpConnection] = set()
        self.refused = 0  # since the last warning (at most one a second: a flood must not flood the log too)
        self._warned_at = 0.0
        self._sockets: list[socket.socket] = []
        self._servers: list[asyncio.AbstractServer] = []
        self._accepting: set[asyncio.Future[tuple[asyncio.Transport, HttpConnection]]] = (
            set()
        )  # backlog connections being set up
        self._sweeper: asyncio.Task[None] | None = None

    async def listen(self, sockets: list[socket.socket]) -> None:
        loop = asyncio.get_running_loop()
        for sock in sockets:
            server = await loop.create_server(
                self._connection, sock=sock, ssl=self.tls, ssl_handshake_timeout=self._handshake_s()
            )
            self._sockets.append(sock)
            self._servers.append(server)
        if self._sweeper is None:
            self._sweeper = asyncio.ensure_future(self._sweep_every(self._sweep_period_s()))

    def _connection(self) -> HttpConnection:
        return HttpConnection(self)

    def _handshake_s(self) -> float | None:
        return self.idle_timeout_s if self.tls is not None else None

    # -- connections ---------------------------------------------------------------------------
    def admit(self, connection: HttpConnection) -> bool:
        """Take a new connection in, or refuse it (503) when `max_connections` are open."""
        if self.max_connections and len(self.connections) >= self.max_connections:
            connection.refuse(refusal(self.max_connections), REFUSE_GRACE_S)
            self._warn_refused()
            return False
        self.connections.add(connection)
        return True

    def forget(self, connection: HttpConnection) -> None:
        self.connections.discard(connection)

    def idle_due(self) -> float:
        return time.monotonic() + self.idle_timeout_s

    def body_due(self) -> float | None:
        return None if self.body_timeout_s is None else time.monotonic() + self.body_timeout_s

    def _sweep_period_s(self) -> float:
        return min(1.0, self.idle_timeout_s / 4, (self.body_timeout_s or 1.0) / 4)

    async def _sweep_every(self, period_s: float) -> None:
        while True:
            await asyncio.sleep(period_s)
            now = time.monotonic()
            for connection in list(self.connections):
                connection.sweep(now)

    def _warn_refused(self) -> None:
        self.refused += 1
        now = time.monotonic()
        if now - self._warned_at >= 1.0:
            limit = self.max_connections
            log.warning("refused %d HTTP connection(s): max_connections (%d) open", self.refused, limit)
            self.refused, self._warned_at = 0, now

    # -- the drain -----------------------------------------------------------------------------
    def all_idle(self) -> bool:
        """Every connection waits for its next request with nothing buffered either way."""
        return not self._accepting and all(connection.idle() for connection in self.connections)

    def stop(self) -> None:
        """Stop listening. The connections the kernel has already accepted are taken in first, so that
        closing the listener (right after, with no await between) refuses only new ones instead of
        resetting these."""
        loop = asyncio.get_running_loop()
        for sock in self._sockets:
            while True:
                try:
                    accepted, _address = sock.accept()
                except OSError:  # none left (BlockingIOError), or the socket is gone
                    break
                accepted.setblocking(False)
                setup = asyncio.ensure_future(
                    loop.connect_accepted_socket(
                        self._connection, accepted, ssl=self.tls, ssl_handshake_timeout=self._handshake_s()
                    )
                )
                self._accepting.add(setup)
                setup.add_done_callback(self._accepted)
        for server in self._servers:
            server.close()
        self._servers = []
        self._sockets = []

    def _accepted(self, setup: asyncio.Future[tuple[asyncio.Transport, HttpConnection]]) -> None:
        self._accepting.discard(setup)
        if not setup.cancelled() and setup.exception() is not None:
            log.debug("a connection from the backlog failed: %s", setup.exception())

    async def close_all_connections(self) -> None:
        """Close every connection (what was written is sent first) and wait for them to be gone."""
        if self._accepting:
            await asyncio.wait(set(self._accepting), timeout=CLOSE_WAIT_S)
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        connections = list(self.connections)
        for connection in connections:
            connection.close()
        if connections:
            waits = [asyncio.ensure_future(connection.wait_closed()) for connection in connections]
            _done, pending = await asyncio.wait(waits, timeout=CLOSE_WAIT_S)
            for wait in pending:
                wait.cancel()
            for connection in connections:  # still there: a client that does not read what is left
                if connection.transport is not None and not connection.closed_for_good():
                    with contextlib.suppress(Exception):
                        connection.transport.abort()


def refusal(limit: int) -> bytes:
    """503 (the grps envelope, Retry-After), sent without reading the request."""
    msg = f"too many connections (max_connections: {limit}); retry later"
    body = grps_json.encode_status(503, msg, False)
    head = (
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
        f"Connection: close\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode("ascii") + body

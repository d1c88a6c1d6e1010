"""The grps HTTP API with the standard library's `http.client`.

Unary calls share one keep-alive connection, opened on first use; when the server has dropped it
while idle, the request is sent once more on a fresh one. Each stream gets a connection of its own,
closed when the stream ends, so leaving a stream early stops the model (the server sees the client
go) and never disturbs other calls. Not thread-safe: use one client per thread.
"""

from __future__ import annotations

import dataclasses
import http.client
from collections.abc import AsyncGenerator, Generator, Iterator
from contextlib import contextmanager

from grps_py.client import http_async, repository_wire
from grps_py.client.auth import authorization
from grps_py.client.errors import unavailable
from grps_py.client.http_wire import (
    ChunkedDecoder,
    Deadline,
    HttpCall,
    HttpUrl,
    StreamDecoder,
    error_of,
    health_call,
    metadata_call,
    predict_call,
    read_answer,
)
from grps_py.client.values import Reply, Request
from grps_py.core.types import PayloadKind

__all__ = ["HttpTransport"]

# How a keep-alive connection the server closed while idle shows itself when it is used again.
_STALE = (ConnectionResetError, BrokenPipeError, ConnectionAbortedError, http.client.RemoteDisconnected)
_READ_SIZE = 1 << 16
ADMIN_ACTIONS = ("online", "offline")  # health actions that are admin calls


class HttpTransport:
    def __init__(self, url: HttpUrl, token: str | None = None) -> None:
        self.url = url
        self._conn: http.client.HTTPConnection | None = None
        bearer = authorization(token)
        self._admin_headers = {} if bearer is None else {"Authorization": bearer}

    def _admin(self, call: HttpCall) -> HttpCall:
        """An admin call carries the admin token, when the client has one."""
        return dataclasses.replace(call, headers={**call.headers, **self._admin_headers})

    def _new_connection(self) -> http.client.HTTPConnection:
        if self.url.scheme == "https":
            return http.client.HTTPSConnection(self.url.host, self.url.port)
        return http.client.HTTPConnection(self.url.host, self.url.port)

    @contextmanager
    def _io(self, conn: http.client.HTTPConnection, deadline: Deadline) -> Iterator[None]:
        """Socket failures become GrpsClientError; the connection is closed, its state being unknown."""
        try:
            yield
        except TimeoutError:
            conn.close()
            raise deadline.exceeded() from None
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            raise unavailable(self.url.where, exc) from exc
        except BaseException:  # out of time between two steps: a response may be left unread
            conn.close()
            raise

    @staticmethod
    def _arm(conn: http.client.HTTPConnection, deadline: Deadline) -> None:
        """Bound the next socket operation by what is left of the deadline."""
        left = deadline.remaining()
        conn.timeout = left
        if conn.sock is not None:
            conn.sock.settimeout(left)

    def _send(
        self, conn: http.client.HTTPConnection, call: HttpCall, deadline: Deadline
    ) -> http.client.HTTPResponse:
        self._arm(conn, deadline)
        conn.request(call.method, call.target, call.body, call.headers)
        self._arm(conn, deadline)
        return conn.getresponse()

    def _exchange(self, call: HttpCall, deadline: Deadline) -> tuple[int, str, str, bytes]:
        """Status, reason, Content-Type and body of one unary call on the keep-alive connection."""
        conn = self._conn = self._conn or self._new_connection()
        reused = conn.sock is not None
        with self._io(conn, deadline):
            try:
                response = self._send(conn, call, deadline)
            except _STALE:
                if not reused:
                    raise
                conn.close()  # http.client opens a new connection for the next request
                response = self._send(conn, call, deadline)
            self._arm(conn, deadline)
            body = response.read()
        return response.status, response.reason, response.getheader("Content-Type") or "", body

    # --- the calls ---

    def predict(self, request: Request, timeout_s: float | None) -> Reply:
        deadline = Deadline(timeout_s, self.url.where)
        return read_answer(*self._exchange(predict_call(self.url, request, timeout_s, False), deadline))

    def predict_stream(self, request: Request, timeout_s: float | None) -> Generator[Reply, None, None]:
        call = predict_call(self.url, request, timeout_s, True)
        deadline = Deadline(timeout_s, self.url.where)
        conn = self._new_connection()
        try:
            with self._io(conn, deadline):
                response = self._send(conn, call, deadline)
            if response.status != 200:
                with self._io(conn, deadline):
                    body = response.read()
                raise error_of(response.status, response.reason, body)
            decoder = StreamDecoder()
            for chunk in self._chunks(conn, response, deadline):
                yield from decoder.feed(chunk)
            yield from decoder.finish()
        finally:
            conn.close()

    def _chunks(
        self, conn: http.client.HTTPConnection, response: http.client.HTTPResponse, deadline: Deadline
    ) -> Iterator[bytes]:
        """The body chunk by chunk as the server flushed them (http.client would merge or split them)."""
        if not response.chunked:
            with self._io(conn, deadline):
                body = response.read()
            yield body
            return
        decoder = ChunkedDecoder()
        while not decoder.done:
            with self._io(conn, deadline):
                self._arm(conn, deadline)
                data = response.fp.read1(_READ_SIZE)
                if not data:
                    raise ConnectionError("the server closed the connection in the middle of the answer")
            yield from decoder.feed(data)

    def predict_stream_async(self, request: Request, timeout_s: float | None) -> AsyncGenerator[Reply, None]:
        return http_async.stream(self.url, predict_call(self.url, request, timeout_s, True), timeout_s)

    def health(self, action: str, timeout_s: float | None) -> tuple[bool, int, str]:
        """(ok, status, message): a 503 answer is "not ready", an answer, not an error."""
        call = health_call(self.url, action)
        if action in ADMIN_ACTIONS:
            call = self._admin(call)
        status, reason, content_type, body = self._exchange(call, Deadline(timeout_s, self.url.where))
        if status == 503:
            return False, status, error_of(status, reason, body).message
        read_answer(status, reason, content_type, body)
        return True, status, "OK"

    def metadata(self, model: str | None, timeout_s: float | None) -> str:
        answer = read_answer(
            *self._exchange(metadata_call(self.url, model), Deadline(timeout_s, self.url.where))
        )
        return str(answer.value) if answer.kind is PayloadKind.TEXT else ""

    def repository_index(self, ready: bool, timeout_s: float | None) -> list[dict[str, str]]:
        call = repository_wire.index_call(self.url, ready)
        return repository_wire.read_index(*self._admin_call(call, timeout_s))

    def load_model(self, name: str, config: str | None, timeout_s: float | None) -> None:
        call = repository_wire.load_call(self.url, name, config)
        repository_wire.read_done(*self._admin_call(call, timeout_s))

    def unload_model(self, name: str, unload_dependents: bool, timeout_s: float | None) -> None:
        call = repository_wire.unload_call(self.url, name, unload_dependents)
        repository_wire.read_done(*self._admin_call(call, timeout_s))

    def _admin_call(self, call: HttpCall, timeout_s: float | None) -> tuple[int, str, bytes]:
        """Status, reason and body of an admin call (a model load may take its whole timeout)."""
        status, reason, _, body = self._exchange(self._admin(call), Deadline(timeout_s, self.url.where))
        return status, reason, body

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

"""The HTTP/1.1 connection (grps_py/http/connection.py) spoken to byte by byte over raw sockets:
pipelining (also cut at any points, with hypothesis), keep-alive rules, 100-continue, chunked bodies
both ways, malformed requests."""

from __future__ import annotations

import gc
import itertools
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tornado.httputil import HTTPServerRequest

from grps_py.http.direct import DirectCall
from support import BASIC, LIGHT_INFERENCE, ServerThread, start_project

ECHO = "/grps/v1/infer/predict?model=echo"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    folder: Path = tmp_path_factory.mktemp("connection")
    (folder / "server.yml").write_text("interface:\n  host: 127.0.0.1\n  port: 0,0\n")
    (folder / "inference.yml").write_text(LIGHT_INFERENCE)
    running = start_project(BASIC, folder / "inference.yml", folder / "server.yml")
    yield running
    running.stop()


def connect(server: ServerThread) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.server.http_port), timeout=10)


def echo_request(body: bytes, version: str = "HTTP/1.1", headers: str = "", path: str = ECHO) -> bytes:
    head = f"POST {path} {version}\r\nHost: x\r\nContent-Type: application/octet-stream\r\n{headers}"
    return f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body


class Reader:
    """Reads whole HTTP responses (Content-Length or chunked) off a socket."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.buffer = sock, b""

    def _fill(self) -> bool:
        chunk = self.sock.recv(65536)
        self.buffer += chunk
        return bool(chunk)

    def _take_until(self, marker: bytes) -> bytes:
        while marker not in self.buffer:
            assert self._fill(), f"closed before {marker!r}: {self.buffer!r}"
        taken, self.buffer = self.buffer.split(marker, 1)
        return taken

    def _take(self, size: int) -> bytes:
        while len(self.buffer) < size:
            assert self._fill(), "closed inside a body"
        taken, self.buffer = self.buffer[:size], self.buffer[size:]
        return taken

    def response(self) -> tuple[int, dict[str, str], bytes]:
        head = self._take_until(b"\r\n\r\n").decode("latin1").split("\r\n")
        status = int(head[0].split()[1])
        headers = {k.lower(): v.strip() for k, v in (line.split(":", 1) for line in head[1:])}
        if "content-length" in headers:
            return status, headers, self._take(int(headers["content-length"]))
        if headers.get("transfer-encoding") == "chunked":
            body = b""
            while size := int(self._take_until(b"\r\n"), 16):
                body += self._take(size)
                self._take(2)
            self._take(2)
            return status, headers, body
        return status, headers, b""

    def closed(self) -> bool:
        """True once the server closed the connection (waits for it, up to the socket's timeout)."""
        try:
            return not self._fill() and not self.buffer
        except ConnectionResetError:
            return True


def test_pipelined_requests_are_answered_in_order(server: ServerThread) -> None:
    bodies = [f"request {n}".encode() * (n + 1) for n in range(5)]
    with connect(server) as sock:
        sock.sendall(b"".join(echo_request(body) for body in bodies))  # all at once, before any answer
        reader = Reader(sock)
        for body in bodies:
            status, _headers, answer = reader.response()
            assert (status, answer) == (200, body)


def test_a_request_arriving_a_byte_at_a_time_is_answered(server: ServerThread) -> None:
    with connect(server) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for byte in echo_request(b"slow"):
            sock.send(bytes([byte]))
        assert Reader(sock).response()[::2] == (200, b"slow")


def test_keep_alive_follows_the_http_version_and_connection_header(server: ServerThread) -> None:
    with connect(server) as sock:  # HTTP/1.1: kept open for the next request
        reader = Reader(sock)
        for _ in range(3):
            sock.sendall(echo_request(b"again"))
            status, headers, _ = reader.response()
            assert status == 200 and "connection" not in headers
    with connect(server) as sock:  # HTTP/1.1 with Connection: close
        sock.sendall(echo_request(b"bye", headers="Connection: close\r\n"))
        reader = Reader(sock)
        assert reader.response()[1]["connection"] == "close"
        assert reader.closed()
    with connect(server) as sock:  # HTTP/1.0: closed unless keep-alive was asked for
        sock.sendall(echo_request(b"old", version="HTTP/1.0"))
        reader = Reader(sock)
        assert reader.response()[::2] == (200, b"old")
        assert reader.closed()
    with connect(server) as sock:
        sock.sendall(echo_request(b"old", version="HTTP/1.0", headers="Connection: keep-alive\r\n"))
        reader = Reader(sock)
        assert reader.response()[1]["connection"] == "Keep-Alive"
        sock.sendall(echo_request(b"still", version="HTTP/1.0", headers="Connection: keep-alive\r\n"))
        assert reader.response()[::2] == (200, b"still")


def test_expect_100_continue_is_answered_before_the_body_is_sent(server: ServerThread) -> None:
    with connect(server) as sock:
        head = echo_request(b"", headers="Expect: 100-continue\r\n").replace(
            b"Content-Length: 0", b"Content-Length: 4"
        )
        sock.sendall(head)
        assert sock.recv(100) == b"HTTP/1.1 100 (Continue)\r\n\r\n"
        sock.sendall(b"body")
        assert Reader(sock).response()[::2] == (200, b"body")


def test_a_chunked_request_body_is_joined(server: ServerThread) -> None:
    head = f"POST {ECHO} HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\n"
    with connect(server) as sock:
        sock.sendall(head.encode() + b"Transfer-Encoding: chunked\r\n\r\n")
        for piece in (b"one ", b"two ", b"three"):
            sock.sendall(b"%x\r\n%b\r\n" % (len(piece), piece))
            time.sleep(0.01)
        sock.sendall(b"0\r\n\r\n")
        assert Reader(sock).response()[::2] == (200, b"one two three")


def test_an_answer_without_a_length_is_chunked(server: ServerThread) -> None:
    """The grps streaming predict answers as it goes: chunked, ending with the zero-length chunk."""
    with connect(server) as sock:
        body = b'{"str_data": "hello"}'
        sock.sendall(
            f"POST /grps/v1/infer/predict?streaming=true HTTP/1.1\r\nHost: x\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        status, headers, answer = Reader(sock).response()
        assert status == 200 and headers["transfer-encoding"] == "chunked"
        assert b"hello" in answer


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"GARBAGE\r\n\r\n",
        b"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n",
        b"GET /grps/v1/health/live HTTP/9.9\r\nHost: x\r\n\r\n",
        b"GET /grps/v1/health/live HTTP/1.1\r\nBad Header\r\n\r\n",
    ],
)
def test_a_malformed_request_is_answered_400_and_closed(server: ServerThread, request_bytes: bytes) -> None:
    with connect(server) as sock:
        sock.sendall(request_bytes)
        reader = Reader(sock)
        assert reader.response()[0] == 400
        assert reader.closed()
    with connect(server) as sock:  # and the server goes on serving
        sock.sendall(echo_request(b"fine"))
        assert Reader(sock).response()[::2] == (200, b"fine")


def test_a_request_without_host_is_400(server: ServerThread) -> None:
    with connect(server) as sock:
        sock.sendall(b"GET /grps/v1/health/live HTTP/1.1\r\n\r\n")
        assert Reader(sock).response()[0] == 400


def test_a_client_gone_mid_body_leaves_the_server_serving(server: ServerThread) -> None:
    with connect(server) as sock:
        sock.sendall(echo_request(b"x" * 100)[:-50])  # half the body, then away
    with connect(server) as sock:
        sock.sendall(echo_request(b"next"))
        assert Reader(sock).response()[::2] == (200, b"next")


def test_an_answered_request_is_freed_without_the_cyclic_gc(server: ServerThread) -> None:
    """Nothing of an answered request stays in a reference cycle: its body (megabytes, maybe) is freed at
    once, not when the cyclic GC next comes by."""
    marker = b"freed-at-once " * 10_000
    gc.collect()
    gc.disable()
    try:
        with connect(server) as sock:
            reader = Reader(sock)
            for _ in range(3):
                sock.sendall(echo_request(marker))  # a direct call (http/direct.py)
                assert reader.response()[::2] == (200, marker)
                sock.sendall(echo_request(marker, path=ECHO + "&streaming=true"))  # the Tornado app
                assert reader.response()[::2] == (200, marker)
        time.sleep(0.2)
        kinds = (HTTPServerRequest, DirectCall)  # what holds a body: Tornado's request, or a direct call
        kept = [o for o in gc.get_objects() if isinstance(o, kinds) and o.body == marker]
    finally:
        gc.enable()
    assert kept == []


def chunked_request(body: bytes, sizes: list[int]) -> bytes:
    """`body` sent with Transfer-Encoding: chunked, in pieces of the given sizes (the rest in one)."""
    head = f"POST {ECHO} HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\n"
    framed, at = b"", 0
    for size in [*sizes, len(body)]:
        piece = body[at : at + max(1, size)]
        if piece:
            framed += b"%x\r\n%b\r\n" % (len(piece), piece)
        at += len(piece)
    return head.encode() + b"Transfer-Encoding: chunked\r\n\r\n" + framed + b"0\r\n\r\n"


@settings(max_examples=40, deadline=None, database=None)
@given(
    requests=st.lists(
        st.tuples(
            st.binary(min_size=1, max_size=3000), st.none() | st.lists(st.integers(1, 700), max_size=4)
        ),
        min_size=1,
        max_size=5,
    ),
    cuts=st.lists(st.integers(0, 20_000), max_size=6),
)
def test_any_requests_pipelined_and_split_anywhere_are_answered_in_order(
    server: ServerThread, requests: list[tuple[bytes, list[int] | None]], cuts: list[int]
) -> None:
    """Requests (with a Content-Length or chunked) sent back to back, the bytes cut at any points:
    each is answered, in order, with its own body."""
    stream = b"".join(
        echo_request(body) if sizes is None else chunked_request(body, sizes) for body, sizes in requests
    )
    points = sorted({0, len(stream), *(cut % (len(stream) + 1) for cut in cuts)})
    with connect(server) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for start, end in itertools.pairwise(points):
            sock.sendall(stream[start:end])
            time.sleep(0.001)
        reader = Reader(sock)
        for body, _sizes in requests:
            assert reader.response()[::2] == (200, body)

"""Transport limits against real servers: body and message sizes, header size, connections, timeouts."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import pytest

from grps_py.protos import grps_pb2, grps_pb2_grpc, open_inference_pb2, open_inference_pb2_grpc
from support import BASIC, LIGHT_INFERENCE, ServerThread, start_project

Msg = grps_pb2.GrpsMessage
OCTET = {"Content-Type": "application/octet-stream"}
PREDICT = "/grps/v1/infer/predict?model=echo"


def start(tmp_path: Path, extra: str) -> ServerThread:
    """The basic project's light models with `extra` appended to a server.yml on free ports."""
    server_conf = tmp_path / "server.yml"
    server_conf.write_text("interface:\n  host: 127.0.0.1\n  port: 0,0\n" + extra)
    inference_conf = tmp_path / "inference.yml"
    inference_conf.write_text(LIGHT_INFERENCE)
    return start_project(BASIC, inference_conf=inference_conf, server_conf=server_conf)


@pytest.fixture
def limited(tmp_path: Path) -> Iterator[ServerThread]:
    server = start(
        tmp_path,
        "  max_message_bytes: 1000000\n"
        "limits:\n  http_body_bytes: 4096\n  grpc_message_bytes: 8192\n  header_bytes: 2048\n",
    )
    yield server
    server.stop()


def connect(server: ServerThread) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.server.http_port), timeout=10)


def read_until_closed(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (a reset also ends it)."""
    data = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            return data
        if not chunk:
            return data
        data += chunk


def request_head(server: ServerThread, path: str, headers: str) -> bytes:
    return f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{server.server.http_port}\r\n{headers}\r\n".encode()


# --- request body size (HTTP) ----------------------------------------------------------------------


def test_http_body_over_the_limit_is_413_with_the_route_error_body(limited: ServerThread) -> None:
    with httpx.Client(base_url=limited.http_url, timeout=30) as http:
        assert http.post(PREDICT, content=b"x" * 4096, headers=OCTET).content == b"x" * 4096
        refused = http.post(PREDICT, content=b"x" * 4097, headers=OCTET)
        assert refused.status_code == 413
        assert refused.headers["Connection"] == "close"
        assert refused.headers["X-Request-Id"]
        status = refused.json()["status"]
        assert status["code"] == 413 and status["status"] == "FAILURE"
        assert "limits.http_body_bytes (4096 bytes)" in status["msg"]
        # OIP routes answer their own error form.
        doc = {"inputs": [{"name": "x", "datatype": "BYTES", "shape": [1], "data": ["y" * 5000]}]}
        oip = http.post("/v2/models/identity/infer", json=doc)
        assert oip.status_code == 413
        assert "limits.http_body_bytes (4096 bytes)" in oip.json()["error"]
        # The server still serves (a new connection: the refused one was closed).
        assert http.post(PREDICT, content=b"ok", headers=OCTET).content == b"ok"


def test_http_body_over_the_limit_is_refused_before_it_is_sent(limited: ServerThread) -> None:
    """The answer comes from the headers alone: the client never sends its (announced) gigabyte."""
    with connect(limited) as sock:
        sock.sendall(request_head(limited, PREDICT, "Content-Length: 1000000000\r\n"))
        answer = read_until_closed(sock)
    assert answer.startswith(b"HTTP/1.1 413 ")
    assert b"limits.http_body_bytes" in answer
    # With Expect: 100-continue the client is not invited to send the body either.
    with connect(limited) as sock:
        sock.sendall(request_head(limited, PREDICT, "Content-Length: 5000\r\nExpect: 100-continue\r\n"))
        answer = read_until_closed(sock)
    assert answer.startswith(b"HTTP/1.1 413 ")
    assert b"100" not in answer.split(b"\r\n", 1)[0]
    # A Content-Length that is a list (even of one value repeated) and one with Transfer-Encoding are
    # malformed framing (RFC 9112 6.3): the parser alone answers, 400, and closes (one answer, not a 413
    # followed by its 400).
    with connect(limited) as sock:
        sock.sendall(request_head(limited, PREDICT, "Content-Length: 5000, 5000\r\n"))
        answer = read_until_closed(sock)
    assert answer.startswith(b"HTTP/1.1 400 ") and answer.count(b"HTTP/1.1") == 1
    with connect(limited) as sock:
        headers = "Content-Length: 5000\r\nTransfer-Encoding: chunked\r\n"
        sock.sendall(request_head(limited, PREDICT, headers))
        answer = read_until_closed(sock)
    assert answer.startswith(b"HTTP/1.1 400 ") and answer.count(b"HTTP/1.1") == 1


def test_http_chunked_body_is_cut_off_at_the_limit(limited: ServerThread) -> None:
    with connect(limited) as sock:
        sock.sendall(request_head(limited, PREDICT, "Transfer-Encoding: chunked\r\n"))
        for _ in range(5):  # 5 KiB over a 4 KiB limit, and the body never ends
            sock.sendall(b"400\r\n" + b"x" * 1024 + b"\r\n")
        answer = read_until_closed(sock)  # the server answers and closes without the rest
    assert answer.startswith(b"HTTP/1.1 413 ")
    assert b"limits.http_body_bytes (4096 bytes)" in answer

    def chunks(total: int) -> Iterator[bytes]:
        for _ in range(total // 1024):
            yield b"y" * 1024

    with httpx.Client(base_url=limited.http_url, timeout=30) as http:
        assert http.post(PREDICT, content=chunks(4096), headers=OCTET).content == b"y" * 4096
        assert http.post(PREDICT, content=chunks(64 * 1024), headers=OCTET).status_code == 413


def test_a_large_refused_body_still_gets_its_answer(limited: ServerThread) -> None:
    """A client that writes its whole (large) body before reading still reads the 413."""
    with httpx.Client(base_url=limited.http_url, timeout=30) as http:
        for _ in range(3):
            assert http.post(PREDICT, content=b"z" * (4 << 20), headers=OCTET).status_code == 413


# --- gRPC message size -----------------------------------------------------------------------------


def test_grpc_message_over_the_limit_is_resource_exhausted(limited: ServerThread) -> None:
    with grpc.insecure_channel(limited.grpc_target) as channel:
        stub = grps_pb2_grpc.GrpsServiceStub(channel)
        assert stub.Predict(Msg(model="echo", bin_data=b"x" * 8000)).bin_data == b"x" * 8000
        with pytest.raises(grpc.RpcError) as err:
            stub.Predict(Msg(model="echo", bin_data=b"x" * 9000))
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "larger than max" in (err.value.details() or "")
        assert "8192" in (err.value.details() or "")
        oip = open_inference_pb2_grpc.GRPCInferenceServiceStub(channel)
        request = open_inference_pb2.ModelInferRequest(model_name="identity")
        request.raw_input_contents.append(b"x" * 9000)
        with pytest.raises(grpc.RpcError) as err:
            oip.ModelInfer(request)
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED


# --- header size -----------------------------------------------------------------------------------


def test_headers_over_header_bytes_close_the_connection(limited: ServerThread) -> None:
    """Tornado does not answer headers over max_header_size: it closes the connection."""
    with httpx.Client(base_url=limited.http_url, timeout=30) as http:
        with pytest.raises(httpx.TransportError):
            http.get("/grps/v1/health/live", headers={"X-Big": "b" * 4096})
        assert http.get("/grps/v1/health/live", headers={"X-Small": "s" * 512}).status_code == 200


# --- connections -----------------------------------------------------------------------------------


def test_http_connections_over_max_connections_are_answered_503_and_closed(tmp_path: Path) -> None:
    server = start(tmp_path, "max_connections: 2\n")
    live = b"GET /grps/v1/health/live HTTP/1.1\r\nHost: x\r\n\r\n"
    try:
        held = [connect(server), connect(server)]
        for sock in held:  # each is accepted and served (kept alive)
            sock.sendall(live)
            assert sock.recv(65536).startswith(b"HTTP/1.1 200 ")
        with connect(server) as extra:
            extra.sendall(live)
            answer = read_until_closed(extra)
        assert answer.startswith(b"HTTP/1.1 503 ")
        assert b"max_connections: 2" in answer
        held.pop().close()
        deadline = time.monotonic() + 10
        while True:  # the server notices the close on its next loop turn
            with connect(server) as again:
                again.sendall(live)
                answer = again.recv(65536)
            if answer.startswith(b"HTTP/1.1 200 ") or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert answer.startswith(b"HTTP/1.1 200 ")
        held[0].sendall(live)
        assert held[0].recv(65536).startswith(b"HTTP/1.1 200 ")
        held[0].close()
    finally:
        server.stop()


# --- idle and body timeouts ------------------------------------------------------------------------


def test_slow_body_is_cut_off_after_body_timeout_while_others_are_served(tmp_path: Path) -> None:
    server = start(tmp_path, "limits:\n  body_timeout_s: 0.5\n")
    try:
        sent = 0
        closed = threading.Event()
        with connect(server) as slow:
            slow.sendall(request_head(server, PREDICT, "Content-Length: 200\r\n" + "Content-Type: a/b\r\n"))

            def watch() -> None:
                read_until_closed(slow)
                closed.set()

            threading.Thread(target=watch, daemon=True).start()
            with httpx.Client(base_url=server.http_url, timeout=30) as http:
                while not closed.is_set() and sent < 200:  # one byte every 50 ms: 10 s for the body
                    try:
                        slow.sendall(b"x")
                    except OSError:
                        break
                    sent += 1
                    assert http.post(PREDICT, content=b"fast", headers=OCTET).content == b"fast"
                    time.sleep(0.05)
            assert closed.wait(10)
        assert sent < 200  # cut off before the body was complete
    finally:
        server.stop()


def test_idle_connection_is_closed_after_idle_timeout(tmp_path: Path) -> None:
    server = start(tmp_path, "limits:\n  idle_timeout_s: 0.3\n")
    try:
        with connect(server) as idle:
            idle.sendall(b"GET /grps/v1/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
            assert idle.recv(65536).startswith(b"HTTP/1.1 200 ")
            assert read_until_closed(idle) == b""  # no next request: the server closes it
    finally:
        server.stop()


def test_a_head_that_never_ends_is_closed_after_idle_timeout(tmp_path: Path) -> None:
    """A client sending its headers a little at a time and never finishing (slowloris) is closed at the
    idle timeout, counted from when the connection opened, not from its last byte."""
    server = start(tmp_path, "limits:\n  idle_timeout_s: 0.5\n")
    try:
        with connect(server) as slow:
            began = time.monotonic()
            slow.sendall(b"GET /grps/v1/health/live HTTP/1.1\r\n")
            with pytest.raises(OSError):
                while time.monotonic() - began < 10:
                    slow.sendall(b"X-Slow: 1\r\n")
                    time.sleep(0.1)
            assert time.monotonic() - began < 5
    finally:
        server.stop()


def test_connections_that_close_between_requests_are_forgotten(tmp_path: Path) -> None:
    """The listener keeps no closed connection (under Tornado's connection, nobody was told when a
    connection closed while waiting for its next request's headers; held until the idle timeout, they
    piled up)."""
    server = start(tmp_path, "")
    try:
        with httpx.Client(base_url=server.http_url, timeout=30) as http:
            assert http.post(PREDICT, content=b"warm", headers=OCTET).content == b"warm"
        for _ in range(20):
            with connect(server) as sock:  # one request, then the client closes its connection
                sock.sendall(
                    request_head(server, PREDICT, "Content-Length: 2\r\nContent-Type: a/b\r\n") + b"hi"
                )
                assert sock.recv(65536).startswith(b"HTTP/1.1 ")  # answered; the client then leaves
        waiting = server.server._http.connections  # type: ignore[union-attr]
        deadline = time.monotonic() + 5
        while len(waiting) > 0 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(waiting) == 0
    finally:
        server.stop()

"""The routes answered on the connection itself (grps_py/http/direct.py): OIP infer and unary grps
predict keep every rule the Tornado routes keep, and the requests they do not take still reach Tornado."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from support import BASIC, LIGHT_INFERENCE, Recorder, ServerThread, start_project

INFER = "/v2/models/identity/infer"
PREDICT = "/grps/v1/infer/predict"
TENSOR = {"inputs": [{"name": "x", "shape": [1, 2], "datatype": "FP32", "data": [1.5, 2.5]}]}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    folder: Path = tmp_path_factory.mktemp("direct")
    (folder / "server.yml").write_text(
        "interface:\n  host: 127.0.0.1\n  port: 0,0\nlimits:\n  body_timeout_s: 0.5\n"
    )
    (folder / "inference.yml").write_text(LIGHT_INFERENCE)
    running = start_project(BASIC, folder / "inference.yml", folder / "server.yml")
    yield running
    running.stop()


@pytest.fixture
def records(server: ServerThread) -> Iterator[Recorder]:
    telemetry = server.server.executor.telemetry
    kept = Recorder()
    telemetry.add(kept)
    yield kept
    telemetry.observers[:] = [o for o in telemetry.observers if o is not kept]


@pytest.fixture
def http(server: ServerThread) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.http_url, timeout=30) as client:
        yield client


def test_an_infer_answer_carries_length_date_and_request_id(http: httpx.Client, records: Recorder) -> None:
    reply = http.post(INFER, json=TENSOR, headers={"X-Request-Id": "rid-direct"})
    assert reply.status_code == 200, reply.text
    assert reply.json()["outputs"][0]["data"] == [1.5, 2.5]
    assert reply.headers["content-length"] == str(len(reply.content))
    assert reply.headers["x-request-id"] == "rid-direct"
    assert abs(parsedate_to_datetime(reply.headers["date"]).timestamp() - time.time()) < 5
    record = records.record("rid-direct")
    assert (record.protocol, record.model, record.status, record.reason) == (
        "oip-http",
        "identity-1",
        200,
        None,
    )
    assert record.route == f"POST {INFER}" and record.bytes_out == len(reply.content)


def test_the_oip_id_names_the_request_when_no_header_does(http: httpx.Client) -> None:
    reply = http.post(INFER, json={**TENSOR, "id": "from-the-body"})
    assert reply.headers["x-request-id"] == "from-the-body" and reply.json()["id"] == "from-the-body"


def test_errors_keep_each_route_s_error_body(http: httpx.Client, records: Recorder) -> None:
    unknown = http.post("/v2/models/nope/infer", json=TENSOR, headers={"X-Request-Id": "rid-404"})
    assert unknown.status_code == 404 and "nope" in unknown.json()["error"]
    assert "rid-404" in unknown.json()["error"]
    record = records.record("rid-404")
    assert (record.status, record.reason, record.model) == (404, "not_found", "")
    bad = http.post(PREDICT, content=b"{not json", headers={"Content-Type": "application/json"})
    assert bad.status_code == 400 and bad.json()["status"]["code"] == 400
    negative = http.post(PREDICT + "?model=echo&timeout_us=-1", json={"str_data": "x"})
    assert negative.status_code == 400 and "timeout_us" in negative.json()["status"]["msg"]


def test_predict_reads_the_query_as_tornado_did(http: httpx.Client) -> None:
    reply = http.post(PREDICT + "?model=%20echo%20&priority=&timeout_us=5000000", json={"str_data": "hi"})
    assert reply.status_code == 200 and reply.json()["str_data"] == "hi"
    raw = http.post(
        PREDICT + "?model=echo", content=b"\x00\x01", headers={"Content-Type": "application/octet-stream"}
    )
    assert raw.content == b"\x00\x01" and raw.headers["content-type"] == "application/octet-stream"


def test_other_methods_and_streams_still_reach_tornado(http: httpx.Client) -> None:
    assert http.get(INFER).status_code == 405
    assert "error" in http.get(INFER).json()
    assert http.put(PREDICT).status_code == 405
    with http.stream("POST", PREDICT + "?streaming=true", json={"str_data": "s"}) as stream:
        assert stream.headers.get("transfer-encoding") == "chunked"
        assert b"s" in stream.read()


def request_bytes(path: str, doc: dict[str, Any]) -> bytes:
    body = json.dumps(doc).encode()
    head = f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    return f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body


def test_pipelined_infers_and_predicts_are_answered_in_order(server: ServerThread) -> None:
    wire = b"".join(
        request_bytes(INFER, {**TENSOR, "id": f"p{i}"})
        if i % 2 == 0
        else request_bytes(PREDICT + "?model=echo", {"str_data": f"p{i}"})
        for i in range(6)
    )
    with socket.create_connection(("127.0.0.1", server.server.http_port), timeout=10) as sock:
        sock.sendall(wire)
        answers = read_answers(sock, 6)
    assert [status for status, _ in answers] == [200] * 6
    assert [doc.get("id") or doc.get("str_data") for _, doc in answers] == [f"p{i}" for i in range(6)]


def test_a_body_that_stops_arriving_is_recorded_408(server: ServerThread, records: Recorder) -> None:
    with socket.create_connection(("127.0.0.1", server.server.http_port), timeout=10) as sock:
        head = f"POST {INFER} HTTP/1.1\r\nHost: x\r\nX-Request-Id: rid-slow\r\nContent-Length: 100\r\n"
        sock.sendall(head.encode() + b"\r\n{")
        assert sock.recv(100) == b""  # closed at the body timeout, unanswered
    record = records.record("rid-slow")
    assert (record.status, record.reason, record.model, record.bytes_in) == (408, "invalid", "identity-1", 1)


def read_answers(sock: socket.socket, count: int) -> list[tuple[int, Any]]:
    buffer, answers = b"", []
    while len(answers) < count:
        while b"\r\n\r\n" not in buffer:
            buffer += sock.recv(65536)
        head, buffer = buffer.split(b"\r\n\r\n", 1)
        lines = head.decode().split("\r\n")
        length = int(next(line.split(":")[1] for line in lines if line.lower().startswith("content-length")))
        while len(buffer) < length:
            buffer += sock.recv(65536)
        answers.append((int(lines[0].split()[1]), json.loads(buffer[:length])))
        buffer = buffer[length:]
    return answers


def test_path_and_query_that_are_not_utf8_are_400_as_on_tornado(http: httpx.Client) -> None:
    path = http.post("/v2/models/%FF/infer", json=TENSOR)
    assert path.status_code == 400 and "unicode" in path.text.lower()
    query = http.post(PREDICT + "?model=%FF", json={"str_data": "x"})
    assert query.status_code == 400 and "unicode" in query.json()["status"]["msg"]
    unread = http.post(PREDICT + "?model=echo&other=%FF", json={"str_data": "ok"})  # never decoded
    assert unread.status_code == 200 and unread.json()["str_data"] == "ok"
    named = http.post(PREDICT + "?model=%65cho", json={"str_data": "escaped"})  # %65 is "e"
    assert named.status_code == 200 and named.json()["str_data"] == "escaped"

"""The grps HTTP API against a real server: every route, content types, streaming, errors."""

from __future__ import annotations

import socket
import sys
import time

import httpx
import orjson
import yaml

from support import ServerThread

PREDICT = "/grps/v1/infer/predict"


def stream_log() -> dict[str, object]:
    return sys.modules["serving_models"].STREAM_LOG  # type: ignore[no-any-return]


def test_health_routes_answer_the_envelope(http: httpx.Client) -> None:
    for action in ("live", "ready"):
        for method in ("GET", "POST"):
            reply = http.request(method, f"/grps/v1/health/{action}")
            assert reply.status_code == 200
            assert reply.json() == {"status": {"code": 200, "msg": "OK", "status": "SUCCESS"}}


def test_json_with_charset_and_model_in_query(http: httpx.Client) -> None:
    reply = http.post(
        f"{PREDICT}?model=echo-1.0",
        content=b'{"str_data": "hi"}',
        headers={"Content-Type": "application/json; charset=utf-8"},
    )
    assert reply.status_code == 200
    assert reply.json()["str_data"] == "hi"


def test_model_in_body_beats_query(http: httpx.Client) -> None:
    reply = http.post(f"{PREDICT}?model=raiser-1.0", json={"model": "upper-1.0", "str_data": "body"})
    assert reply.status_code == 200 and reply.json()["str_data"] == "BODY"


def test_octet_stream_in_and_out(http: httpx.Client) -> None:
    data = bytes(range(256)) * 4
    reply = http.post(
        f"{PREDICT}?model=echo-1.0", content=data, headers={"Content-Type": "application/octet-stream"}
    )
    assert reply.status_code == 200
    assert reply.headers["content-type"] == "application/octet-stream"
    assert reply.content == data


def test_ndarray_in_and_return_ndarray_out(http: httpx.Client) -> None:
    reply = http.post(f"{PREDICT}?return-ndarray=true", json={"ndarray": [[1, 2], [3, 4]]})
    assert reply.status_code == 200
    assert reply.json()["ndarray"] == [[3.0, 5.0], [7.0, 9.0]]
    plain = http.post(PREDICT, json={"ndarray": [[1, 2], [3, 4]]}).json()
    assert plain["gtensors"]["tensors"][0]["shape"] == [2, 2]


def test_enum_number_and_camel_case_names_are_accepted(http: httpx.Client) -> None:
    doc = {"gtensors": {"tensors": [{"name": "x", "dtype": 7, "shape": [2], "flatFloat32": [1, 2]}]}}
    reply = http.post(PREDICT, json=doc)
    assert reply.status_code == 200
    assert reply.json()["gtensors"]["tensors"][0]["flat_float32"] == [3.0, 5.0]


def test_malformed_json_and_empty_body_are_400(http: httpx.Client) -> None:
    for body in (b'{"str_data": ', b"", b"[1, 2]", b'{"no_such_field": 1}'):
        reply = http.post(PREDICT, content=body, headers={"Content-Type": "application/json"})
        assert reply.status_code == 400, body
        status = reply.json()["status"]
        assert status["status"] == "FAILURE" and status["code"] == 400
        assert "Traceback" not in status["msg"]
        assert reply.headers["X-Request-Id"] in status["msg"]


def test_request_id_is_echoed(http: httpx.Client) -> None:
    reply = http.post(PREDICT, json={"model": "nope"}, headers={"X-Request-Id": "abc-123"})
    assert reply.status_code == 404
    assert reply.headers["X-Request-Id"] == "abc-123"
    assert "request_id=abc-123" in reply.json()["status"]["msg"]


def test_unknown_route_and_wrong_method_use_the_envelope(http: httpx.Client) -> None:
    missing = http.get("/grps/v1/nothing")
    assert missing.status_code == 404 and missing.json()["status"]["status"] == "FAILURE"
    wrong = http.get(PREDICT)
    assert wrong.status_code == 405 and wrong.json()["status"]["code"] == 405


def test_server_and_model_metadata(http: httpx.Client) -> None:
    server = yaml.safe_load(http.get("/grps/v1/metadata/server").json()["str_data"])
    assert server["server"] == "grps-py"
    assert "classifier-1.0.0" in server["models"]
    assert server["dag"]["nodes"] == ["double", "add_one"]
    model = yaml.safe_load(
        http.post("/grps/v1/metadata/model", json={"str_data": "classifier-1.0.0"}).json()["str_data"]
    )
    assert model["name"] == "classifier" and model["inferer_type"] == "onnx"
    assert http.post("/grps/v1/metadata/model", json={"str_data": "nope-1"}).status_code == 404
    assert http.post("/grps/v1/metadata/model", json={}).status_code == 400


def test_streaming_sends_one_json_document_per_line(http: httpx.Client) -> None:
    with http.stream(
        "POST", f"{PREDICT}?streaming=true", json={"model": "stream-1.0", "str_data": "5"}
    ) as reply:
        assert reply.status_code == 200
        assert reply.headers["content-type"] == "application/octet-stream"
        assert reply.headers.get("transfer-encoding") == "chunked"
        lines = [orjson.loads(line) for line in reply.iter_lines() if line]
    assert [doc["str_data"] for doc in lines] == [f"chunk {i}" for i in range(5)]
    assert all(doc["status"]["status"] == "SUCCESS" for doc in lines)


def test_streaming_flag_false_answers_unary(http: httpx.Client) -> None:
    reply = http.post(f"{PREDICT}?streaming=false", json={"model": "stream-1.0", "str_data": "4"})
    assert reply.json()["str_data"] == "unary 4"


def test_streaming_error_before_first_chunk_has_real_status(http: httpx.Client) -> None:
    reply = http.post(f"{PREDICT}?streaming=true", json={"model": "raiser-1.0", "str_data": "x"})
    assert reply.status_code == 500 and "boom" in reply.json()["status"]["msg"]


def test_client_disconnect_mid_stream_stops_the_model(basic_server: ServerThread, http: httpx.Client) -> None:
    body = orjson.dumps({"model": "stream-1.0", "str_data": "500"})
    request = (
        f"POST {PREDICT}?streaming=true HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    with socket.create_connection(("127.0.0.1", basic_server.server.http_port), timeout=10) as sock:
        sock.sendall(request)
        received = b""
        while received.count(b"chunk") < 2:
            received += sock.recv(4096)
    deadline = time.monotonic() + 10
    while not stream_log()["disconnected"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert stream_log()["disconnected"] is True
    assert int(stream_log()["sent"]) < 500  # type: ignore[call-overload]
    assert http.post(PREDICT, json={"model": "echo-1.0", "str_data": "ok"}).status_code == 200


def test_model_metadata_shows_the_declared_signature(http: httpx.Client) -> None:
    """A TorchScript file records no dtypes or shapes: what inference.yml declares is shown instead."""
    reply = http.post("/grps/v1/metadata/model", json={"str_data": "classifier_pt-1"})
    meta = yaml.safe_load(reply.json()["str_data"])
    assert meta["inputs"] == [{"name": "INPUT__0", "dtype": "float32", "shape": [-1, 4]}]
    assert meta["outputs"] == [{"name": "OUTPUT__0", "dtype": "float32", "shape": [-1, 3]}]


def test_a_stream_answered_at_its_deadline_frees_its_model(http: httpx.Client) -> None:
    """At a stream's deadline its model is told (`if_disconnected()`) and stops: the next stream to the
    same one-instance model starts at once, not when the abandoned one would have ended (300 x 20 ms),
    although the first client keeps its connection open."""
    stream = f"{PREDICT}?model=stream-1.0&streaming=true"
    late = http.post(stream, json={"str_data": "300"}, headers={"Grps-Timeout-Us": "300000"})
    assert late.status_code in (200, 504)  # some messages then the deadline's error, or only the error
    began = time.monotonic()
    with http.stream("POST", stream, json={"str_data": "2"}) as second:
        assert second.status_code == 200
        next(second.iter_bytes())  # its first message
    assert time.monotonic() - began < 2.0

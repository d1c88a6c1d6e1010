"""Models that fail (raise, hang, answer the wrong type or shape, run out of memory, break a stream):
each answers its own request with the right status over HTTP and gRPC, frees its slot, and the server
keeps serving everything else. A hung instance is reported and new requests go to the other ones.
No answer carries a traceback, a file path or a configured token."""

from __future__ import annotations

import logging
import re
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
import httpx
import numpy as np
import orjson
import pytest
import yaml

from grps_py.protos import grps_pb2, grps_pb2_grpc
from oip_clients import OipClient
from support import PROJECTS, ServerThread, start_project

FAULTS = PROJECTS / "faults"
SECRETS = ("infer-SECRET-91c2", "admin-SECRET-7f3a")  # conf/server_secrets.yml's tokens
LEAKS = ("Traceback", "/home/alice", "/etc/app", "/srv/app", "weights.pt", ".py")
Msg = grps_pb2.GrpsMessage
ROWS = {"ndarray": [[1.0, 2.0]]}

# model, its request body, HTTP status, gRPC code, words the message must hold
FAULT_CASES = [
    ("raiser", {"str_data": "x"}, 500, grpc.StatusCode.INTERNAL, "RuntimeError: cannot open <path>"),
    ("memory", {"str_data": "x"}, 500, grpc.StatusCode.INTERNAL, "MemoryError: cannot allocate"),
    ("wrong_type", ROWS, 500, grpc.StatusCode.INTERNAL, "output 'y' holding object values; expected numbers"),
    ("wrong_shape", ROWS, 500, grpc.StatusCode.INTERNAL, "shape [1, 5]; its declared shape is [-1, 3]"),
    ("wrong_dtype", ROWS, 500, grpc.StatusCode.INTERNAL, "as INT64; its declared datatype is FP32"),
    ("reporter", {"str_data": "x"}, 500, grpc.StatusCode.INTERNAL, "bad config in <path>"),
    ("hang", {"str_data": "x"}, 504, grpc.StatusCode.DEADLINE_EXCEEDED, "did not answer within"),
]


def release_hung_models() -> None:
    sys.modules["fault_models"].RELEASE.set()  # imported from the project's src/ by the server


@pytest.fixture(scope="module")
def faults() -> Iterator[ServerThread]:
    server = start_project(FAULTS)
    yield server
    release_hung_models()
    server.stop()


@pytest.fixture(scope="module")
def stub(faults: ServerThread) -> Iterator[grps_pb2_grpc.GrpsServiceStub]:
    with grpc.insecure_channel(faults.grpc_target) as channel:
        yield grps_pb2_grpc.GrpsServiceStub(channel)


def predict(server: ServerThread, model: str, body: dict[str, Any], **headers: str) -> httpx.Response:
    url = f"{server.http_url}/grps/v1/infer/predict"
    return httpx.post(url, json={"model": model, **body}, headers=headers, timeout=30)


def grpc_message(model: str, body: dict[str, Any]) -> Any:
    if "ndarray" in body:
        msg = Msg(model=model)
        msg.gtensors.tensors.add(dtype=grps_pb2.DT_FLOAT32, shape=[1, 2], flat_float32=[1.0, 2.0])
        return msg
    return Msg(model=model, str_data=body["str_data"])


def assert_healthy(server: ServerThread, stub: grps_pb2_grpc.GrpsServiceStub) -> None:
    """A healthy model on the same server answers both protocols (within a deadline: a server still busy
    with the fault would answer 504)."""
    reply = predict(server, "healthy", {"str_data": "still here"}, **{"Grps-Timeout-Us": "2000000"})
    assert reply.status_code == 200 and reply.json()["str_data"] == "still here"
    assert stub.Predict(Msg(model="healthy", str_data="grpc too"), timeout=2).str_data == "grpc too"


def assert_clean(text: str, secrets: tuple[str, ...] = ()) -> None:
    for leak in (*LEAKS, *secrets):
        assert leak not in text, f"{leak!r} in {text!r}"


@pytest.mark.parametrize(("model", "body", "http_status", "code", "words"), FAULT_CASES)
def test_a_fault_answers_its_own_request_over_http(
    faults: ServerThread,
    stub: grps_pb2_grpc.GrpsServiceStub,
    model: str,
    body: dict[str, Any],
    http_status: int,
    code: grpc.StatusCode,
    words: str,
) -> None:
    reply = predict(faults, model, body)
    assert reply.status_code == http_status
    msg = reply.json()["status"]["msg"]
    assert words in msg and "[request_id=" in msg
    assert_clean(reply.text)
    assert len(msg) < 500  # the raiser's 2000 characters were cut
    assert_healthy(faults, stub)


@pytest.mark.parametrize(("model", "body", "http_status", "code", "words"), FAULT_CASES)
def test_a_fault_answers_its_own_request_over_grpc(
    faults: ServerThread,
    stub: grps_pb2_grpc.GrpsServiceStub,
    model: str,
    body: dict[str, Any],
    http_status: int,
    code: grpc.StatusCode,
    words: str,
) -> None:
    # A gRPC deadline replaces the model's default timeout: the hung model is answered at the call's
    # (and the client may report its own deadline first, in its own words).
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:  # the client's own deadline keeps its gRPC code
        with pytest.raises(grpc.RpcError) as err:
            stub.Predict(grpc_message(model, body), timeout=1.0)
        assert err.value.code() == code
        assert_clean(err.value.details())
    else:  # a failure is an answer, as grps gives it: status OK, the HTTP status in the envelope
        answer = stub.Predict(grpc_message(model, body), timeout=30)
        assert (answer.status.code, answer.status.status) == (http_status, grps_pb2.Status.FAILURE)
        assert words in answer.status.msg
        assert_clean(answer.status.msg)
    assert_healthy(faults, stub)


def test_open_inference_protocol_says_what_output_was_expected(faults: ServerThread) -> None:
    for protocol in ("http", "grpc"):
        client = OipClient(protocol, faults)
        try:
            answer = client.infer("wrong_shape", {"x": np.ones((2, 2), np.float32)})
            assert answer.error == "internal"
            assert "answered output 'y' with shape [2, 5]; its declared shape is [-1, 3]" in answer.message
        finally:
            client.close()


def test_a_stream_that_fails_ends_with_its_error(
    faults: ServerThread, stub: grps_pb2_grpc.GrpsServiceStub
) -> None:
    url = f"{faults.http_url}/grps/v1/infer/predict?streaming=true"
    with httpx.stream("POST", url, json={"model": "stream_fail", "str_data": "x"}, timeout=30) as reply:
        lines = [orjson.loads(line) for line in reply.iter_lines() if line]
    assert [line.get("str_data") for line in lines[:3]] == ["part 0", "part 1", "part 2"]
    assert lines[3]["status"]["code"] == 500 and "ValueError: the stream broke at <path>" in str(lines[3])
    assert len(lines) == 4
    call = stub.PredictStreaming(Msg(model="stream_fail", str_data="x"), timeout=30)
    *parts, failure = list(call)  # grps's stream: the parts sent, one FAILURE message, then status OK
    assert call.code() == grpc.StatusCode.OK
    assert [part.str_data for part in parts] == ["part 0", "part 1", "part 2"]
    assert (failure.status.code, failure.status.status) == (500, grps_pb2.Status.FAILURE)
    assert "ValueError" in failure.status.msg
    assert_clean(failure.status.msg)
    assert_healthy(faults, stub)


def test_hung_requests_free_their_slots_and_healthy_traffic_keeps_flowing(
    faults: ServerThread, stub: grps_pb2_grpc.GrpsServiceStub
) -> None:
    """More hung requests than max_concurrency (4): each is answered 504 at its deadline, and healthy
    requests sent meanwhile, and after, are all answered."""
    with ThreadPoolExecutor(8) as pool:
        hung = [pool.submit(predict, faults, "hang", {"str_data": "x"}) for _ in range(6)]
        healthy = [pool.submit(predict, faults, "healthy", {"str_data": str(i)}) for i in range(40)]
        assert [f.result().status_code for f in hung] == [504] * 6
        assert [f.result().json()["str_data"] for f in healthy] == [str(i) for i in range(40)]
    assert_healthy(faults, stub)


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def metric(server: ServerThread, name: str, model: str) -> float:
    text = httpx.get(f"{server.http_url}/metrics").text
    prefix = f'{name}{{model="{model}",version="1"}} '
    return float(next(line for line in text.splitlines() if line.startswith(prefix))[len(prefix) :])


def test_a_hung_instance_is_reported_and_its_sibling_takes_the_work(faults: ServerThread) -> None:
    """hang2 has two instances. One hangs (answered 504 at its 300 ms deadline); a request that was
    prefetched behind it goes back to the queue and is served by the other instance, as are the
    requests that follow (with the model's 300 ms timeout: none waits for the hung one)."""
    records = Records()
    logging.getLogger("grps_py.model").addHandler(records)
    slow_timeout = {"Grps-Timeout-Us": "5000000"}
    try:
        with ThreadPoolExecutor(3) as pool:
            hung = pool.submit(predict, faults, "hang2", {"str_data": "hang"})
            time.sleep(0.1)  # running on instance 0
            slow = pool.submit(predict, faults, "hang2", {"str_data": "slow"}, **slow_timeout)
            time.sleep(0.1)  # running on instance 1 for 0.6 s
            behind = pool.submit(predict, faults, "hang2", {"str_data": "fast behind"}, **slow_timeout)
            assert hung.result().status_code == 504
            assert slow.result().status_code == 200
            assert behind.result().json()["str_data"] == "done fast behind"
        for i in range(5):
            assert predict(faults, "hang2", {"str_data": f"fast {i}"}).json()["str_data"] == f"done fast {i}"
        assert metric(faults, "grps_hung_instances", "hang2") == 1
        assert metric(faults, "grps_instance_hangs_total", "hang2") >= 1
        meta = httpx.post(f"{faults.http_url}/grps/v1/metadata/model", json={"str_data": "hang2-1"}).json()
        assert yaml.safe_load(meta["str_data"])["scheduler"]["hung_instances"] == 1
        assert any(re.match(r"model 'hang2-1' instance \d is hung", line) for line in records.lines)
        release_hung_models()
        for _ in range(100):
            if metric(faults, "grps_hung_instances", "hang2") == 0:
                break
            time.sleep(0.05)
        assert metric(faults, "grps_hung_instances", "hang2") == 0
        assert any(re.match(r"model 'hang2-1' instance \d recovered", line) for line in records.lines)
    finally:
        logging.getLogger("grps_py.model").removeHandler(records)
        sys.modules["fault_models"].RELEASE.clear()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_request_answered_at_its_deadline_tells_its_model(
    faults: ServerThread, stub: grps_pb2_grpc.GrpsServiceStub, protocol: str
) -> None:
    """`patient` would wait 10 s; its deadline is 0.3 s (its default timeout over HTTP, the call's over
    gRPC, where the client's cancel may come first): answered at the deadline, it sees if_disconnected()
    and stops, so its instance is free again (over HTTP the client's connection stays open)."""
    log = sys.modules["fault_models"].PATIENT_LOG
    log.clear()
    if protocol == "http":
        assert predict(faults, "patient", {"str_data": "10"}).status_code == 504
    else:
        with pytest.raises(grpc.RpcError) as err:
            stub.Predict(Msg(model="patient", str_data="10"), timeout=0.3)
        assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    until = time.monotonic() + 5
    while "waited_s" not in log and time.monotonic() < until:
        time.sleep(0.05)
    assert log.get("waited_s", 99.0) < 2.0


def test_no_answer_shows_a_path_a_traceback_or_a_token() -> None:
    """With access tokens configured, every kind of answer (model failures, reported errors, metadata,
    unknown routes and models, refused callers) is free of them."""
    server = start_project(FAULTS, server_conf=FAULTS / "conf" / "server_secrets.yml")
    auth = {"Authorization": f"Bearer {SECRETS[0]}"}
    try:
        texts: list[str] = []
        for model in ("raiser", "reporter", "stream_fail", "wrong_type", "nope"):
            reply = predict(server, model, {"str_data": "x"}, **auth)
            assert reply.status_code in (404, 500), reply.text
            texts.append(reply.text)
        texts.append(predict(server, "raiser", {"str_data": "x"}, Authorization="Bearer wrong").text)
        for path in (
            "/grps/v1/metadata/server",
            "/v2",
            "/v2/models/raiser",
            "/v2/models/raiser/config",
            "/x",
        ):
            texts.append(httpx.get(f"{server.http_url}{path}", headers=auth).text)
        texts.append(httpx.get(f"{server.http_url}/grps/v1/health/offline").text)
        with grpc.insecure_channel(server.grpc_target) as channel:
            stub = grps_pb2_grpc.GrpsServiceStub(channel)
            metadata = (("authorization", auth["Authorization"]),)
            for model in ("raiser", "reporter"):
                answer = stub.Predict(Msg(model=model, str_data="x"), metadata=metadata, timeout=30)
                assert answer.status.status == grps_pb2.Status.FAILURE
                texts.append(answer.status.msg)
            texts.append(str(stub.ServerMetadata(Msg(), metadata=metadata)))
        assert any("<path>" in text for text in texts)
        for text in texts:
            assert_clean(text, SECRETS)
    finally:
        server.stop()

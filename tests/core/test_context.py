"""What model code sees through its context, and the custom HTTP route and streaming controls."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import orjson
import pytest

from grps_py.protos import grps_pb2, grps_pb2_grpc
from support import BASIC, ServerThread, start_project

PREDICT = "/grps/v1/infer/predict"


def probe(http: httpx.Client, sleep_s: float = 0.0) -> dict[str, dict[str, object]]:
    reply = http.post(PREDICT, json={"model": "probe-1.0", "str_data": str(sleep_s)})
    assert reply.status_code == 200
    return reply.json()["gmap"]  # type: ignore[no-any-return]


def test_model_code_runs_on_a_worker_thread(http: httpx.Client) -> None:
    assert str(probe(http)["s_s"]["thread"]).startswith("model-probe-1.0")


def test_grpc_deadline_reaches_the_context(grps_stub: grps_pb2_grpc.GrpsServiceStub) -> None:
    reply = grps_stub.Predict(grps_pb2.GrpsMessage(model="probe-1.0", str_data="0"), timeout=5)
    # grpc's own deadline arithmetic may round the propagated timeout up by a few milliseconds
    # (5.009 s was seen once on this machine): the point is that it arrived, not its last digit.
    assert 0 < reply.gmap.s_d["remaining_s"] <= 5.1
    untimed = grps_stub.Predict(grps_pb2.GrpsMessage(model="probe-1.0", str_data="0"))
    assert untimed.gmap.s_d["remaining_s"] == -1.0


def test_concurrent_predictions_are_bounded_by_max_concurrency(basic_server: ServerThread) -> None:
    probe_cls = sys.modules["serving_models"].ContextProbe
    probe_cls.peak = 0

    def one(_: int) -> int:
        with httpx.Client(base_url=basic_server.http_url, timeout=30) as client:
            return client.post(PREDICT, json={"model": "probe-1.0", "str_data": "0.2"}).status_code

    with ThreadPoolExecutor(12) as pool:
        assert set(pool.map(one, range(12))) == {200}
    # probe has 12 instances and server.yml sets max_concurrency 8: several ran at once, never more than 8.
    assert 1 < probe_cls.peak <= 8


def test_stream_respond_with_postprocess(grps_stub: grps_pb2_grpc.GrpsServiceStub) -> None:
    msg = grps_pb2.GrpsMessage(model="postprocess_streamer-1.0")
    tensor = msg.gtensors.tensors.add(name="x", dtype=grps_pb2.DT_FLOAT32, shape=[3, 1])
    tensor.flat_float32.extend([1, 2, 3])
    rows = [list(r.gtensors.tensors[0].flat_float32) for r in grps_stub.PredictStreaming(msg)]
    assert rows == [[10.0], [20.0], [30.0]]


def test_grpc_stream_of_a_missing_model_is_not_found(grps_stub: grps_pb2_grpc.GrpsServiceStub) -> None:
    (answer,) = list(grps_stub.PredictStreaming(grps_pb2.GrpsMessage(model="ghost")))
    assert (answer.status.code, answer.status.status) == (404, grps_pb2.Status.FAILURE)


@pytest.fixture(scope="module")
def custom_server() -> Iterator[ServerThread]:
    server = start_project(BASIC, server_conf=BASIC / "conf" / "server_custom.yml")
    yield server
    server.stop()


def test_customized_body_route_answers_what_the_model_set(custom_server: ServerThread) -> None:
    reply = httpx.post(
        f"{custom_server.http_url}/custom_predict?model=custom_http-1.0&name=bob", content=b"raw body"
    )
    assert reply.status_code == 201
    assert reply.headers["content-type"] == "text/plain"
    assert reply.headers["x-custom"] == "1"
    assert reply.text == "POST bob raw body"


def test_customized_body_route_streams_raw_chunks_on_header_control(custom_server: ServerThread) -> None:
    url = f"{custom_server.http_url}/custom_predict?model=custom_http-1.0"
    with httpx.stream("POST", url, content=b"one two three", headers={"x-stream": "true"}) as reply:
        assert reply.headers["content-type"] == "text/plain"
        assert reply.read() == b"ONE\nTWO\nTHREE\n"
    assert custom_server.server.grpc_port is None  # framework: http


def test_body_param_streaming_control_on_an_alias_route() -> None:
    server = start_project(BASIC, server_conf=BASIC / "conf" / "server_body_ctrl.yml")
    try:
        url = f"{server.http_url}/my/predict"
        doc = {"model": "stream-1.0", "str_data": "3", "stream": True}
        with httpx.stream("POST", url, json=doc) as reply:
            assert reply.headers["content-type"] == "application/x-ndjson"
            lines = [orjson.loads(line)["str_data"] for line in reply.iter_lines() if line]
        assert lines == ["chunk 0", "chunk 1", "chunk 2"]
        unary = httpx.post(url, json={"model": "stream-1.0", "str_data": "3"})
        assert unary.json()["str_data"] == "unary 3"
    finally:
        server.stop()

"""GrpsService answers a failed request as grps does: gRPC status OK and the message's
`status {status: FAILURE, code, msg}`, `code` being the HTTP status our error table gives (HTTP
answers the same request with that status) and `msg` our short message. The failure is still recorded
as one (the request record, the access log, the metrics). What is not a grps request's failure keeps
its gRPC code: a client's own deadline.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from google.protobuf import json_format
from prometheus_client.parser import text_string_to_metric_families

from grps_py.core.config import LogSettings
from grps_py.logs import flush_access_log
from grps_py.protos import grps_pb2, grps_pb2_grpc
from support import BASIC, Recorder, ServerThread, logging_to, start_project

Msg = grps_pb2.GrpsMessage
PREDICT = "/grps/v1/infer/predict"
REQUEST_ID = re.compile(r" \[request_id=[^\]]*\]")
# The basic project's models (tests/projects/basic/src): probe sleeps str_data seconds.
INFERENCE = """\
models:
  - {name: echo, version: "1.0", inferer_type: customized, inferer_name: echo, converter_type: none}
  - {name: raiser, version: "1.0", inferer_type: customized, inferer_name: raiser, converter_type: none}
  - {name: slow, version: "1", inferer_type: customized, inferer_name: probe, converter_type: none,
     default_timeout_us: 300000, instances: 2}
  - {name: narrow, version: "1", inferer_type: customized, inferer_name: probe, converter_type: none,
     batching: {type: none, max_queue_size: 1}}
dag:
  name: echo_dag
  nodes: [{name: echo, type: model, model: echo-1.0}]
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    root = tmp_path_factory.mktemp("failure_answers")
    (root / "server.yml").write_text("interface:\n  host: 127.0.0.1\n  port: 0,0\n")
    (root / "inference.yml").write_text(INFERENCE)
    running = start_project(BASIC, inference_conf=root / "inference.yml", server_conf=root / "server.yml")
    yield running
    running.stop()


@pytest.fixture
def stub(server: ServerThread) -> Iterator[grps_pb2_grpc.GrpsServiceStub]:
    with grpc.insecure_channel(server.grpc_target) as channel:
        yield grps_pb2_grpc.GrpsServiceStub(channel)


@pytest.fixture
def recorder(server: ServerThread) -> Iterator[Recorder]:
    telemetry = server.server.executor.telemetry
    recorder = Recorder()
    telemetry.add(recorder)
    yield recorder
    telemetry.observers[:] = [o for o in telemetry.observers if o is not recorder]


def said(msg: str) -> str:
    """A message without its request id, and without what names the control (a header and a query
    parameter over HTTP, metadata over gRPC)."""
    return REQUEST_ID.sub("", msg).split(" must be ")[-1]


def bad_tensor() -> dict[str, Any]:
    x = {"name": "x", "dtype": "DT_INT32", "shape": [2], "flat_float32": [1.0, 2.0]}
    return {"gtensors": {"tensors": [x]}}


# (request as JSON, priority metadata, HTTP status, failure reason, words in the message)
FAILURES = [
    pytest.param({"model": "echo-1.0", **bad_tensor()}, "", 400, "invalid", "flat_float32", id="bad-input"),
    pytest.param({"model": "nope-9", "str_data": "x"}, "", 404, "not_found", "unknown model", id="unknown"),
    pytest.param({"model": "raiser-1.0", "str_data": "x"}, "", 500, "model_error", "boom", id="model-error"),
    pytest.param(
        {"model": "slow-1", "str_data": "2"}, "", 504, "timeout", "did not answer", id="model-timeout"
    ),
    pytest.param(
        {"model": "echo-1.0", "str_data": "x"}, "x1", 400, "invalid", "grps-priority", id="priority"
    ),
]


@pytest.mark.parametrize(("doc", "priority", "code", "reason", "words"), FAILURES)
def test_a_failure_is_an_ok_answer_with_the_http_status_in_its_envelope(
    server: ServerThread,
    stub: grps_pb2_grpc.GrpsServiceStub,
    recorder: Recorder,
    doc: dict[str, Any],
    priority: str,
    code: int,
    reason: str,
    words: str,
) -> None:
    metadata = [("x-request-id", f"rid-{code}-{reason}")] + (
        [("grps-priority", priority)] if priority else []
    )
    request = json_format.ParseDict(doc, Msg())
    answer, call = stub.Predict.with_call(request, metadata=metadata)  # no deadline of the client's
    assert call.code() == grpc.StatusCode.OK
    assert (answer.status.code, answer.status.status) == (code, grps_pb2.Status.FAILURE)
    assert answer.WhichOneof("data_oneof") is None
    assert words in answer.status.msg and f"[request_id=rid-{code}-{reason}]" in answer.status.msg
    assert "Traceback" not in answer.status.msg and len(answer.status.msg) < 500
    # HTTP answers the same request with that status and the same message.
    headers = {"Grps-Priority": priority} if priority else {}
    reply = httpx.post(f"{server.http_url}{PREDICT}", json=doc, headers=headers, timeout=30)
    assert reply.status_code == code
    assert said(reply.json()["status"]["msg"]) == said(answer.status.msg)
    record = recorder.record(f"rid-{code}-{reason}")
    assert (record.status, record.reason, record.inference) == (code, reason, True)
    assert record.bytes_out == answer.ByteSize()


def test_a_full_queue_is_a_503_answer(stub: grps_pb2_grpc.GrpsServiceStub, recorder: Recorder) -> None:
    """narrow: one instance, one request handed to its thread behind the running one, a queue of one."""

    def predict(index: int) -> Msg:
        time.sleep(index * 0.05)
        return stub.Predict(Msg(model="narrow-1", str_data="0.8"), timeout=30)

    with ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(predict, range(6)))
    refused = [a for a in answers if a.status.status == grps_pb2.Status.FAILURE]
    assert refused and all(a.status.code == 503 and "queue is full" in a.status.msg for a in refused)
    assert len(refused) < len(answers)
    rejected = [r for r in recorder.records if r.model == "narrow-1" and r.reason == "rejected"]
    assert len(rejected) == len(refused) and all(r.status == 503 for r in rejected)


def test_a_failure_on_a_stream_is_its_last_message(stub: grps_pb2_grpc.GrpsServiceStub) -> None:
    call = stub.PredictStreaming(Msg(model="nope-9", str_data="x"), metadata=[("x-request-id", "rid-gs")])
    (answer,) = list(call)
    assert call.code() == grpc.StatusCode.OK
    assert (answer.status.code, answer.status.status) == (404, grps_pb2.Status.FAILURE)
    assert "unknown model 'nope-9'" in answer.status.msg and "request_id=rid-gs" in answer.status.msg


def test_the_clients_own_deadline_keeps_its_grpc_code(stub: grps_pb2_grpc.GrpsServiceStub) -> None:
    with pytest.raises(grpc.RpcError) as late:
        stub.Predict(Msg(model="narrow-1", str_data="1"), timeout=0.3)
    assert late.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED


def failures_counted(server: ServerThread) -> dict[str, float]:
    text = httpx.get(f"{server.http_url}/metrics").text
    counts: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = sample.labels
            wanted = (labels.get("protocol"), labels.get("outcome")) == ("grps-grpc", "failure")
            if family.name == "grps_requests" and sample.name.endswith("_total") and wanted:
                counts[labels["reason"]] = counts.get(labels["reason"], 0) + sample.value
    return counts


def test_the_metrics_and_the_access_log_count_the_failure(
    server: ServerThread, stub: grps_pb2_grpc.GrpsServiceStub, recorder: Recorder, tmp_path: Path
) -> None:
    before = failures_counted(server)
    with logging_to(LogSettings(log_dir=tmp_path)) as log_file:
        answer = stub.Predict(
            Msg(model="raiser-1.0", str_data="x"), metadata=[("x-request-id", "rid-logged")]
        )
        assert answer.status.code == 500
        recorder.record("rid-logged")
        flush_access_log()
        lines = [line for line in log_file.read_text().splitlines() if "[rid-logged] grps_py.access" in line]
    assert len(lines) == 1 and " status=500 " in lines[0] and lines[0].endswith(" reason=model_error")
    assert failures_counted(server).get("model_error", 0) == before.get("model_error", 0) + 1

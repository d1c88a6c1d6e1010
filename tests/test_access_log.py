"""The access log and request ids end to end: one record and one access line per request on every
protocol, ids returned to clients and written on every line of their request (tracebacks and model code
in worker threads included), `log.access: false`, the JSON format, and capped lines."""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest

from grps_py.access_log import AccessLog, install_access_log
from grps_py.core.config import LogSettings
from grps_py.core.telemetry import RequestRecord
from grps_py.logs import MAX_MESSAGE_CHARS, flush_access_log
from grps_py.protos import grps_pb2, grps_pb2_grpc, open_inference_pb2, open_inference_pb2_grpc
from support import Recorder, ServerThread, logging_to, start_project, wait_for

PREDICT = "/grps/v1/infer/predict"
MODELS = '''
import logging
import time

from grps_py import GrpsContext, GrpsMessage, ModelInferer, inferer_register

user_log = logging.getLogger("grps_py.user")


class Talker(ModelInferer):
    """Logs from its worker thread; streams `str_data` messages (a number) when asked to."""

    def infer(self, inp: GrpsMessage, context: GrpsContext) -> GrpsMessage:
        user_log.info("talker got a request")
        if context.if_streaming():
            for i in range(int(inp.str_data or "2")):
                if context.if_disconnected():
                    break
                context.stream_respond(GrpsMessage(str_data=f"part {i}"))
                time.sleep(0.05)
            return GrpsMessage()
        return GrpsMessage(str_data=inp.str_data.upper())


class Raiser(ModelInferer):
    def infer(self, inp: GrpsMessage, context: GrpsContext) -> GrpsMessage:
        raise ValueError("boom in model code")


class Identity(ModelInferer):
    def infer(self, inp: object, context: GrpsContext) -> object:
        return inp


class Batched(ModelInferer):
    def infer(self, inp: GrpsMessage, context: GrpsContext) -> GrpsMessage:
        user_log.info("batched: one request")
        return GrpsMessage(str_data=inp.str_data + "!")

    def batch_infer(self, inps: list, contexts: list) -> list:
        user_log.info("batched: a batch of %d", len(inps))
        return [self.infer(inp, ctx) for inp, ctx in zip(inps, contexts)]


inferer_register.register("al_talker", Talker())
inferer_register.register("al_raiser", Raiser())
inferer_register.register("al_identity", Identity())
inferer_register.register("al_batched", Batched())
'''
INFERENCE = """
models:
  - {name: talker, version: "1", inferer_type: customized, inferer_name: al_talker, converter_type: none}
  - {name: raiser, version: "1", inferer_type: customized, inferer_name: al_raiser, converter_type: none}
  - {name: tensors, version: "1", inferer_type: customized, inferer_name: al_identity, converter_type: numpy}
  - {name: batched, version: "1", inferer_type: customized, inferer_name: al_batched, converter_type: none,
     batching: {type: dynamic, max_batch_size: 4, batch_timeout_us: 100000}}
dag:
  type: sequential
  name: talk
  nodes:
    - {name: talker, type: model, model: talker-1}
"""
SERVER = """
interface:
  framework: http+grpc
  host: 127.0.0.1
  port: 0,0
  customized_predict_http:
    - {path: /custom/raw, customized_body: true, model: talker-1}
    - {path: /custom/alias, model: talker-1}
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    root = tmp_path_factory.mktemp("access_project")
    (root / "conf").mkdir()
    (root / "src").mkdir()
    (root / "conf" / "inference.yml").write_text(INFERENCE)
    (root / "conf" / "server.yml").write_text(SERVER)
    (root / "src" / "access_log_models.py").write_text(MODELS)
    running = start_project(root)
    yield running
    running.stop()
    sys.modules.pop("access_log_models", None)


@pytest.fixture
def recorder(server: ServerThread) -> Iterator[Recorder]:
    telemetry = server.server.executor.telemetry
    recorder = Recorder()
    telemetry.add(recorder)
    install_access_log(server.server.executor, LogSettings())
    yield recorder
    telemetry.observers[:] = [o for o in telemetry.observers if o is not recorder]


@pytest.fixture
def http(server: ServerThread) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.http_url, timeout=30) as client:
        yield client


@pytest.fixture
def channel(server: ServerThread) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(server.grpc_target) as chan:
        yield chan


@pytest.fixture
def log_file(tmp_path: Path) -> Iterator[Path]:
    with logging_to(LogSettings(log_dir=tmp_path)) as path:
        yield path


def lines_of(path: Path, needle: str = "") -> list[str]:
    flush_access_log()
    return [line for line in path.read_text().splitlines() if needle in line]


def wait_line(path: Path, needle: str) -> str:
    return str(wait_for(lambda: next(iter(lines_of(path, needle)), None)))


def access_lines(path: Path, request_id: str) -> list[str]:
    return lines_of(path, f" INFO [{request_id}] grps_py.access: ")


# -- one record and one access line per request, each protocol --------------------------------------


def test_grps_http_request_id_in_the_answer_record_and_access_line(
    http: httpx.Client, recorder: Recorder, log_file: Path
) -> None:
    body = json.dumps({"model": "talker-1", "str_data": "hi"}).encode()
    reply = http.post(PREDICT, content=body, headers={"X-Request-Id": "rid-grps-http"})
    assert reply.status_code == 200 and reply.headers["X-Request-Id"] == "rid-grps-http"
    record = recorder.record("rid-grps-http")
    assert (record.protocol, record.route, record.model, record.inference) == (
        "grps-http",
        f"POST {PREDICT}",
        "talker-1",
        True,
    )
    assert (record.status, record.reason, record.bytes_in, record.bytes_out) == (
        200,
        None,
        len(body),
        len(reply.content),
    )
    line = wait_line(log_file, "[rid-grps-http] grps_py.access: grps-http")
    assert f"grps-http POST {PREDICT} model=talker-1 status=200 " in line
    assert line.endswith(f"ms in={len(body)} out={len(reply.content)}")
    assert len(access_lines(log_file, "rid-grps-http")) == 1
    assert "tornado.access" not in log_file.read_text()


def test_a_generated_request_id_is_returned_and_logged(
    http: httpx.Client, recorder: Recorder, log_file: Path
) -> None:
    reply = http.get("/grps/v1/health/live")
    rid = reply.headers["X-Request-Id"]
    assert len(rid) >= 8
    record = recorder.record(rid)
    assert (record.protocol, record.route, record.inference, record.model) == (
        "http",
        "GET /grps/v1/health/live",
        False,
        "",
    )
    assert "http GET /grps/v1/health/live model=- status=200" in wait_line(
        log_file, f"[{rid}] grps_py.access: http"
    )


def test_grps_grpc_request_id_in_trailing_metadata_and_record(
    channel: grpc.Channel, recorder: Recorder
) -> None:
    stub = grps_pb2_grpc.GrpsServiceStub(channel)
    request = grps_pb2.GrpsMessage(model="talker-1", str_data="hello")
    reply, call = stub.Predict.with_call(request, metadata=(("x-request-id", "rid-grpc"),))
    assert dict(call.trailing_metadata())["x-request-id"] == "rid-grpc"
    record = recorder.record("rid-grpc")
    assert (record.protocol, record.route, record.model, record.status) == (
        "grps-grpc",
        "/grps.protos.v1.GrpsService/Predict",
        "talker-1",
        200,
    )
    assert (record.bytes_in, record.bytes_out) == (request.ByteSize(), reply.ByteSize())
    _, call = stub.CheckLiveness.with_call(grps_pb2.GrpsMessage())
    generated = dict(call.trailing_metadata())["x-request-id"]
    assert recorder.record(generated).protocol == "grpc"


def test_grpc_errors_carry_the_request_id_too(channel: grpc.Channel, recorder: Recorder) -> None:
    stub = grps_pb2_grpc.GrpsServiceStub(channel)
    answer, call = stub.Predict.with_call(
        grps_pb2.GrpsMessage(model="nope-1"), metadata=(("x-request-id", "rid-404"),)
    )
    assert (answer.status.code, answer.status.status) == (404, grps_pb2.Status.FAILURE)  # grps's answer
    assert dict(call.trailing_metadata())["x-request-id"] == "rid-404"
    assert "request_id=rid-404" in answer.status.msg
    record = recorder.record("rid-404")
    assert (record.status, record.reason, record.model, record.inference) == (404, "not_found", "", True)


def test_grps_grpc_streaming_counts_every_message(channel: grpc.Channel, recorder: Recorder) -> None:
    stub = grps_pb2_grpc.GrpsServiceStub(channel)
    call = stub.PredictStreaming(
        grps_pb2.GrpsMessage(model="talker-1", str_data="3"), metadata=(("x-request-id", "rid-gs"),)
    )
    parts = list(call)
    assert [p.str_data for p in parts] == ["part 0", "part 1", "part 2"]
    record = recorder.record("rid-gs")
    assert record.route == "/grps.protos.v1.GrpsService/PredictStreaming" and record.status == 200
    assert record.bytes_out == sum(p.ByteSize() for p in parts)


def oip_infer_doc(request_id: str) -> dict[str, Any]:
    return {"id": request_id, "inputs": [{"name": "x", "datatype": "FP32", "shape": [2], "data": [1, 2]}]}


def test_oip_http_uses_the_request_id_field(http: httpx.Client, recorder: Recorder, log_file: Path) -> None:
    reply = http.post("/v2/models/tensors/infer", json=oip_infer_doc("oip-7"))
    assert reply.status_code == 200, reply.text
    assert reply.headers["X-Request-Id"] == "oip-7" and reply.json()["id"] == "oip-7"
    record = recorder.record("oip-7")
    assert (record.protocol, record.route, record.model) == (
        "oip-http",
        "POST /v2/models/tensors/infer",
        "tensors-1",
    )
    assert "oip-http POST /v2/models/tensors/infer model=tensors-1 status=200" in wait_line(
        log_file, "[oip-7] grps_py.access"
    )
    # An X-Request-Id header names the request before the body's id does.
    reply = http.post(
        "/v2/models/tensors/infer", json=oip_infer_doc("oip-8"), headers={"X-Request-Id": "hdr-8"}
    )
    assert reply.headers["X-Request-Id"] == "hdr-8" and reply.json()["id"] == "oip-8"
    assert recorder.record("hdr-8").protocol == "oip-http"


def oip_request(request_id: str = "") -> open_inference_pb2.ModelInferRequest:
    tensor = open_inference_pb2.ModelInferRequest.InferInputTensor(
        name="x",
        datatype="FP32",
        shape=[2],
        contents=open_inference_pb2.InferTensorContents(fp32_contents=[1, 2]),
    )
    return open_inference_pb2.ModelInferRequest(model_name="tensors", id=request_id, inputs=[tensor])


def test_oip_grpc_unary_and_stream(channel: grpc.Channel, recorder: Recorder) -> None:
    stub = open_inference_pb2_grpc.GRPCInferenceServiceStub(channel)
    request = oip_request("oipg-1")
    reply, call = stub.ModelInfer.with_call(request)
    assert dict(call.trailing_metadata())["x-request-id"] == "oipg-1"
    record = recorder.record("oipg-1")
    assert (record.protocol, record.route, record.model) == (
        "oip-grpc",
        "/inference.GRPCInferenceService/ModelInfer",
        "tensors-1",
    )
    assert (record.bytes_in, record.bytes_out) == (request.ByteSize(), reply.ByteSize())

    # A stream: one record per request on it, named by its id or the stream's id and its position.
    stream = stub.ModelStreamInfer(
        iter([oip_request("m-1"), oip_request()]), metadata=(("x-request-id", "s"),)
    )
    responses = list(stream)
    assert len(responses) == 2 and not any(r.error_message for r in responses)
    first, second = recorder.record("m-1"), recorder.record("s.2")
    for rec in (first, second):
        assert (rec.protocol, rec.route, rec.model, rec.status) == (
            "oip-grpc",
            "/inference.GRPCInferenceService/ModelStreamInfer",
            "tensors-1",
            200,
        )
    assert first.bytes_in == oip_request("m-1").ByteSize()
    assert first.bytes_out + second.bytes_out == sum(r.ByteSize() for r in responses)


@pytest.mark.parametrize(
    ("path", "body"), [("/custom/raw", b"raw words"), ("/custom/alias", b'{"str_data": "a"}')]
)
def test_custom_routes(http: httpx.Client, recorder: Recorder, path: str, body: bytes) -> None:
    rid = "rid" + path.replace("/", "-")  # request ids take letters, digits and . _ : - only
    reply = http.post(path, content=body, headers={"X-Request-Id": rid})
    assert reply.status_code == 200, reply.text
    record = recorder.record(rid)
    assert (record.protocol, record.route, record.model, record.inference) == (
        "custom",
        f"POST {path}",
        "talker-1",
        True,
    )
    assert (record.bytes_in, record.bytes_out) == (len(body), len(reply.content))


def test_every_started_request_finishes_once(
    http: httpx.Client, channel: grpc.Channel, recorder: Recorder
) -> None:
    http.post(PREDICT, content=b"{not json")  # fails before its model is known
    http.post(PREDICT, json={"model": "raiser-1"})
    http.post("/v2/models/nope/infer", json=oip_infer_doc("x"))
    http.post(PREDICT + "?streaming=true", json={"model": "talker-1", "str_data": "2"})
    failed = grps_pb2_grpc.GrpsServiceStub(channel).Predict(grps_pb2.GrpsMessage(model="raiser-1"))
    assert failed.status.status == grps_pb2.Status.FAILURE
    wait_for(lambda: len([r for r in recorder.records if r.inference]) == 5)
    time.sleep(0.1)
    inference = [r for r in recorder.records if r.inference]
    assert sorted(recorder.started) == sorted((r.protocol, r.model) for r in inference)
    assert [(r.status, r.reason) for r in inference] == [
        (400, "invalid"),
        (500, "model_error"),
        (404, "not_found"),
        (200, None),
        (500, "model_error"),
    ]


def test_a_client_that_leaves_a_stream_is_recorded_once_as_cancelled(
    server: ServerThread, channel: grpc.Channel, recorder: Recorder
) -> None:
    with (
        httpx.Client(base_url=server.http_url, timeout=30) as client,
        client.stream(
            "POST",
            PREDICT + "?streaming=true",
            json={"model": "talker-1", "str_data": "40"},
            headers={"X-Request-Id": "rid-leaves"},
        ) as reply,
    ):
        next(reply.iter_raw())
    record = recorder.record("rid-leaves")
    assert (record.status, record.reason) == (499, "cancelled")

    call = grps_pb2_grpc.GrpsServiceStub(channel).PredictStreaming(
        grps_pb2.GrpsMessage(model="talker-1", str_data="40"), metadata=(("x-request-id", "rid-cancels"),)
    )
    next(call)
    call.cancel()
    record = recorder.record("rid-cancels")
    assert (record.status, record.reason) == (499, "cancelled")
    time.sleep(0.2)
    assert [r.request_id for r in recorder.records].count("rid-cancels") == 1
    assert len(recorder.started) == len([r for r in recorder.records if r.inference])


# -- request ids on every line of a request ------------------------------------------------------------


def test_a_model_error_traceback_is_logged_under_the_request_id(
    http: httpx.Client, recorder: Recorder, log_file: Path
) -> None:
    reply = http.post(PREDICT, json={"model": "raiser-1"}, headers={"X-Request-Id": "rid-boom"})
    assert reply.status_code == 500 and "Traceback" not in reply.text
    assert "request_id=rid-boom" in reply.json()["status"]["msg"]
    wait_line(log_file, "[rid-boom] grps_py.access: grps-http")
    lines = lines_of(log_file)
    start = next(
        i for i, line in enumerate(lines) if "ERROR [rid-boom] grps_py.model: model 'raiser-1' raised" in line
    )
    traceback = lines[
        start + 1 : next(
            i for i in range(start + 1, len(lines)) if lines[i].startswith("[rid-boom] ValueError")
        )
        + 1
    ]
    assert traceback[0] == "[rid-boom] Traceback (most recent call last):"
    assert all(line.startswith("[rid-boom] ") for line in traceback)
    assert traceback[-1] == "[rid-boom] ValueError: boom in model code"
    access = access_lines(log_file, "rid-boom")
    assert len(access) == 1 and " status=500 " in access[0] and access[0].endswith(" reason=model_error")


def test_model_code_in_worker_threads_logs_under_the_request_id(
    http: httpx.Client, recorder: Recorder, log_file: Path
) -> None:
    http.post(PREDICT, json={"model": "talker-1", "str_data": "x"}, headers={"X-Request-Id": "rid-thread"})
    assert wait_line(log_file, "INFO [rid-thread] grps_py.user: talker got a request")

    def send(rid: str) -> int:
        doc = {"model": "batched-1", "str_data": rid}
        return http.post(PREDICT, json=doc, headers={"X-Request-Id": rid}).status_code

    with ThreadPoolExecutor(2) as pool:
        assert list(pool.map(send, ["rid-b1", "rid-b2"])) == [200, 200]
    # Lines about a batch carry all its requests' ids; batched together or not, each id is on a line.
    wait_line(log_file, "[rid-b2] grps_py.access: grps-http")
    ids = [
        line.split("[", 1)[1].split("]", 1)[0].split(",")
        for line in lines_of(log_file, "] grps_py.user: batched: ")
    ]
    assert {rid for line_ids in ids for rid in line_ids} == {"rid-b1", "rid-b2"}


# -- settings -------------------------------------------------------------------------------------


def test_access_off_writes_no_line_per_request(
    server: ServerThread, http: httpx.Client, recorder: Recorder, tmp_path: Path
) -> None:
    assert install_access_log(server.server.executor, LogSettings(access=False)) is None
    with logging_to(LogSettings(log_dir=tmp_path, access=False)) as path:
        http.post(PREDICT, json={"model": "talker-1", "str_data": "x"}, headers={"X-Request-Id": "rid-quiet"})
        http.post(PREDICT, json={"model": "nope-1"}, headers={"X-Request-Id": "rid-quiet-404"})
        recorder.record("rid-quiet-404")
        time.sleep(0.1)
        server_info = [line for line in lines_of(path, " INFO ") if "grps_py.user" not in line]
        assert not [line for line in server_info if "rid-quiet" in line]
        assert lines_of(path, "[rid-quiet] grps_py.user: talker got a request")  # the model's own lines stay


def test_json_lines_parse_and_carry_the_request_id(
    http: httpx.Client, recorder: Recorder, tmp_path: Path
) -> None:
    with logging_to(LogSettings(log_dir=tmp_path, format="json")) as path:
        http.post(PREDICT, json={"model": "raiser-1"}, headers={"X-Request-Id": "rid-json"})
        recorder.record("rid-json")
        access = wait_for(
            lambda: [d for d in map(json.loads, lines_of(path)) if d["logger"] == "grps_py.access"]
        )
        docs = [json.loads(line) for line in lines_of(path)]
    mine = [d for d in docs if d["request_id"] == "rid-json"]
    assert {d["logger"] for d in mine} >= {"grps_py.model", "grps_py.access"}
    error = next(d for d in mine if d["logger"] == "grps_py.model")
    assert (
        error["level"] == "ERROR" and "Traceback" in error["exc_info"] and "ValueError" in error["exc_info"]
    )
    line = next(d for d in access if d["request_id"] == "rid-json")
    assert {k: line[k] for k in ("protocol", "route", "model", "status", "reason")} == {
        "protocol": "grps-http",
        "route": f"POST {PREDICT}",
        "model": "raiser-1",
        "status": 500,
        "reason": "model_error",
    }
    assert isinstance(line["latency_ms"], float) and line["bytes_in"] > 0 and "time" in line


def test_a_huge_body_does_not_flood_the_log(http: httpx.Client, recorder: Recorder, log_file: Path) -> None:
    body = b'{"model": "nope-1", "str_data": "' + b"\xff\x00" * 500_000 + b'"}'
    reply = http.post(PREDICT, content=body, headers={"X-Request-Id": "rid-huge"})
    assert reply.status_code == 400
    assert recorder.record("rid-huge").bytes_in == len(body)
    wait_line(log_file, "[rid-huge] grps_py.access: grps-http")
    logging.getLogger("grps_py.test").info("a body: %s", body)
    assert all(len(line) < MAX_MESSAGE_CHARS + 200 for line in lines_of(log_file))
    capped = lines_of(log_file, "a body: b'")[0]
    assert "\\xff\\x00" in capped and capped.endswith("more chars]")


def test_access_log_is_installed_once(server: ServerThread) -> None:
    executor = server.server.executor
    first = install_access_log(executor, LogSettings())
    assert install_access_log(executor, LogSettings()) is first
    assert sum(isinstance(o, AccessLog) for o in executor.telemetry.observers) == 1


def test_a_handler_someone_else_attached_gets_each_line_as_a_record() -> None:
    """The fast path serves our handlers; any other handler still gets LogRecords, at its level."""
    logger = logging.getLogger("grps_py.access.test_fast_path")
    logger.setLevel(logging.INFO)
    logger.propagate = False
    seen: list[logging.LogRecord] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record)

    quiet = Collect(level=logging.WARNING)
    logger.addHandler(Collect())
    logger.addHandler(quiet)
    try:
        record = RequestRecord(
            "rid-7", "oip-http", "POST /v2/models/m/infer", "m-1", True, 200, None, 0.0, 0.002, 10, 20
        )
        AccessLog(logger).request_finished(record)
    finally:
        logger.handlers.clear()
    assert len(seen) == 1  # once: the WARNING handler got nothing
    (line,) = seen
    assert line.request_id == "rid-7"  # type: ignore[attr-defined]
    assert line.getMessage().startswith("oip-http POST /v2/models/m/infer model=m-1 status=200")
    assert line.fields["bytes_out"] == 20  # type: ignore[attr-defined]

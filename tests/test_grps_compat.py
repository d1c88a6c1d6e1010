"""A project written to grps's Python template layout, importing only `grps_framework.*`, runs unchanged.

tests/projects/grps_template has grps's conf/server.yml, conf/inference.yml (customized inferers and
converters by name), src/customized_{converter,inferer}.py (greeter, the default DAG),
src/stacking_{converter,inferer}.py (stacker, batched the grps way) and grps's test.py; it is served as
a real server and called over grps HTTP (JSON) and gRPC, once with `grps-py serve` as a user starts
it, and its test.py is run as a user runs it.
"""

from __future__ import annotations

import logging
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import httpx
import orjson
import pytest

import grps_py
from grps_py.app_metrics import app_monitor
from grps_py.core import model
from grps_py.protos import grps_pb2, grps_pb2_grpc
from support import HTTP_CATEGORY, PROJECTS, ServerThread, run_project_test_py, start_project

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = PROJECTS / "grps_template"
STACKER = "stacker-1.0.0"
PREDICT = "/grps/v1/infer/predict"
LISTENING = re.compile(r"listening: http \S+:(\d+) grpc (\S+)")


@pytest.fixture(scope="module")
def server() -> Iterator[ServerThread]:
    running = start_project(TEMPLATE)
    yield running
    running.stop()


@pytest.fixture
def http(server: ServerThread) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.http_url, timeout=30) as client:
        yield client


@pytest.fixture
def stub(server: ServerThread) -> Iterator[grps_pb2_grpc.GrpsServiceStub]:
    with grpc.insecure_channel(server.grpc_target) as channel:
        yield grps_pb2_grpc.GrpsServiceStub(channel)


def test_aliases_are_grps_py_objects() -> None:
    from grps_framework.apis import grps_pb2 as alias_pb2
    from grps_framework.context.context import GrpsContext
    from grps_framework.converter.converter import Converter, converter_register
    from grps_framework.logger.logger import clogger
    from grps_framework.model_infer.inferer import ModelInferer, inferer_register
    from grps_framework.monitor.monitor import app_monitor as alias_monitor

    assert Converter is grps_py.Converter and converter_register is model.converter_register
    assert ModelInferer is grps_py.ModelInferer and inferer_register is model.inferer_register
    assert GrpsContext is grps_py.GrpsContext
    assert alias_pb2.GrpsMessage is grps_pb2.GrpsMessage and alias_pb2.DataType is grps_pb2.DataType
    assert alias_pb2.GenericTensor is grps_pb2.GenericTensor and alias_pb2.Status is grps_pb2.Status
    assert alias_monitor is app_monitor
    assert isinstance(clogger, logging.Logger) and clogger.name == "grps_py.user"


def test_template_code_imports_only_grps_framework() -> None:
    for path in [*(TEMPLATE / "src").glob("*.py"), TEMPLATE / "test.py"]:
        imports = re.findall(r"^(?:from|import) (\S+)", path.read_text(), re.MULTILINE)
        assert "grps_framework" in {name.split(".")[0] for name in imports}, path
        assert not any(name.startswith("grps_py") for name in imports), path


def test_template_models_are_registered_by_name(server: ServerThread) -> None:
    assert isinstance(model.inferer_register.get("greeter_inferer"), grps_py.ModelInferer)
    assert isinstance(model.converter_register.get("greeter_converter"), grps_py.Converter)
    # grps's lookups; the stacking inferer read its factor from grps's `_args`.
    stacking = model.inferer_register.get_model_inferer("stacking_inferer")
    assert stacking._args == {"factor": 10} and stacking._device == "cpu" and stacking._path is None
    assert "stacking_converter" in model.converter_register.converter_dict


def test_http_json_text_goes_through_converter_and_inferer(http: httpx.Client) -> None:
    reply = http.post(PREDICT, json={"str_data": "grps"})
    assert reply.status_code == 200
    assert reply.json() == {
        "status": {"code": 200, "msg": "OK", "status": "SUCCESS"},
        "str_data": "hello grps",
    }


def test_http_json_tensor_is_scaled_by_inferer_args(http: httpx.Client) -> None:
    x = {"name": "x", "dtype": "DT_FLOAT32", "shape": [2, 2], "flat_float32": [1, 2, 3, 4]}
    reply = http.post(PREDICT, json={"gtensors": {"tensors": [x]}})
    assert reply.status_code == 200
    (y,) = reply.json()["gtensors"]["tensors"]
    assert y == {"name": "y", "dtype": "DT_FLOAT32", "shape": [2, 2], "flat_float32": [2.0, 4.0, 6.0, 8.0]}


def test_grpc_predict_and_tensor(stub: grps_pb2_grpc.GrpsServiceStub) -> None:
    reply = stub.Predict(grps_pb2.GrpsMessage(str_data="rpc"), timeout=30)
    assert reply.str_data == "hello rpc" and reply.status.status == grps_pb2.Status.SUCCESS
    msg = grps_pb2.GrpsMessage()
    msg.gtensors.tensors.add(name="x", dtype=grps_pb2.DT_FLOAT32, shape=[1, 3], flat_float32=[1, 0.5, -2])
    (y,) = stub.Predict(msg, timeout=30).gtensors.tensors
    assert list(y.shape) == [1, 3] and list(y.flat_float32) == [2.0, 1.0, -4.0]


def test_streaming_over_http_and_grpc(http: httpx.Client, stub: grps_pb2_grpc.GrpsServiceStub) -> None:
    reply = http.post(PREDICT, params={"streaming": "true"}, json={"str_data": "s"})
    assert reply.status_code == 200
    parts = [orjson.loads(line)["str_data"] for line in reply.content.splitlines()]
    assert parts == ["hello", "s"]
    streamed = stub.PredictStreaming(grps_pb2.GrpsMessage(str_data="g"), timeout=30)
    assert [m.str_data for m in streamed] == ["hello", "g"]


def test_set_err_msg_reaches_the_client(http: httpx.Client, stub: grps_pb2_grpc.GrpsServiceStub) -> None:
    reply = http.post(PREDICT, json={"str_data": "fail"})
    assert reply.status_code == 500
    status = reply.json()["status"]
    assert status["status"] == "FAILURE" and "greeter cannot greet 'fail'" in status["msg"]
    answer, call = stub.Predict.with_call(grps_pb2.GrpsMessage(str_data="fail"), timeout=30)
    assert call.code() == grpc.StatusCode.OK  # as grps answers: the failure is in the envelope
    assert (answer.status.code, answer.status.status) == (500, grps_pb2.Status.FAILURE)
    assert "greeter cannot greet 'fail'" in answer.status.msg


def test_a_stream_that_fails_late_sends_its_messages_then_the_failure(
    http: httpx.Client, stub: grps_pb2_grpc.GrpsServiceStub
) -> None:
    """grps's PredictStreaming: the parts already sent, then one FAILURE message, then status OK."""
    call = stub.PredictStreaming(grps_pb2.GrpsMessage(str_data="fail late"), timeout=30)
    *parts, failure = list(call)
    assert call.code() == grpc.StatusCode.OK
    assert [m.str_data for m in parts] == ["hello", "fail late"]
    assert all(m.status.status == grps_pb2.Status.SUCCESS for m in parts)
    assert (failure.status.code, failure.status.status) == (500, grps_pb2.Status.FAILURE)
    assert "greeter failed after streaming" in failure.status.msg
    reply = http.post(PREDICT, params={"streaming": "true"}, json={"str_data": "fail late"})
    *chunks, last = [orjson.loads(line) for line in reply.content.splitlines()]
    assert [chunk["str_data"] for chunk in chunks] == ["hello", "fail late"]
    assert (last["status"]["code"], last["status"]["status"]) == (500, "FAILURE")


def test_context_knows_the_converter_and_inferer_running_the_request(
    http: httpx.Client, stub: grps_pb2_grpc.GrpsServiceStub
) -> None:
    """grps's `context.converter` / `context.inferer`, read by the greeter's own inferer."""
    expected = "converter GreeterConverter, inferer is me: True"
    assert http.post(PREDICT, json={"str_data": "whoami"}).json()["str_data"] == expected
    assert stub.Predict(grps_pb2.GrpsMessage(str_data="whoami"), timeout=30).str_data == expected


def test_context_converter_and_inferer_as_grps_sets_them() -> None:
    from grps_framework.context.context import GrpsContext

    ctx = GrpsContext()
    assert ctx.converter is None and ctx.inferer is None  # no model runs it (grps: None too)
    converter, inferer = grps_py.Converter(), grps_py.ModelInferer()
    ctx.set_converter(converter)
    ctx.set_inferer(inferer)
    assert ctx.converter is converter and ctx.inferer is inferer
    # converter_type none: grps has no converter either, so the instance that runs the request says None
    from grps_py.core.instance import ModelInstance

    class Echo(grps_py.ModelInferer):
        def infer(self, inp: Any, context: Any) -> Any:
            return inp

    echo = Echo()
    instance = ModelInstance("m-1", 0, "cpu", echo, model.NoneConverter(), lambda out: out)
    instance.run_one(grps_py.GrpsMessage(str_data="x"), ctx)
    assert ctx.converter is None and ctx.inferer is echo
    instance.close()


def test_an_error_set_in_preprocess_stops_the_request(
    http: httpx.Client, stub: grps_pb2_grpc.GrpsServiceStub
) -> None:
    """The converter sets an error and returns None: infer never runs, the client gets the message."""
    reply = http.post(PREDICT, json={"str_data": "refuse"})
    assert reply.status_code == 500
    assert reply.json()["status"]["msg"].startswith("greeter converter refuses 'refuse' [request_id=")
    answer = stub.Predict(grps_pb2.GrpsMessage(str_data="refuse"), timeout=30)
    assert (answer.status.code, answer.status.status) == (500, grps_pb2.Status.FAILURE)
    assert answer.status.msg.startswith("greeter converter refuses 'refuse' [request_id=")


def _stacker_message(rows: list[list[float]]) -> grps_pb2.GrpsMessage:
    msg = grps_pb2.GrpsMessage(model=STACKER)
    tensor = msg.gtensors.tensors.add(name="x", dtype=grps_pb2.DT_FLOAT32, shape=[len(rows), len(rows[0])])
    tensor.flat_float32.extend(v for row in rows for v in row)
    return msg


def _rows(tensor: dict[str, Any]) -> list[list[float]]:
    cols = tensor["shape"][1]
    flat = tensor["flat_float32"]
    return [flat[i : i + cols] for i in range(0, len(flat), cols)]


def _stack_over_http(server: ServerThread, rows: list[list[float]]) -> tuple[str, Any]:
    flat = [v for row in rows for v in row]
    tensor = {"name": "x", "dtype": "DT_FLOAT32", "shape": [len(rows), len(rows[0])], "flat_float32": flat}
    doc = {"model": STACKER, "gtensors": {"tensors": [tensor]}}
    reply = httpx.post(f"{server.http_url}{PREDICT}", json=doc, timeout=30)
    if reply.status_code != 200:
        return HTTP_CATEGORY[reply.status_code], reply.json()["status"]["msg"]
    return "ok", _rows(reply.json()["gtensors"]["tensors"][0])


def _stack_over_grpc(stub: grps_pb2_grpc.GrpsServiceStub, rows: list[list[float]]) -> tuple[str, Any]:
    answer = stub.Predict(_stacker_message(rows), timeout=30)
    if answer.status.status == grps_pb2.Status.FAILURE:  # grps's failure answer: its HTTP status
        return HTTP_CATEGORY[answer.status.code], answer.status.msg
    (y,) = answer.gtensors.tensors
    return "ok", _rows({"shape": list(y.shape), "flat_float32": list(y.flat_float32)})


def _stack_concurrently(
    server: ServerThread, stub: grps_pb2_grpc.GrpsServiceStub, inputs: list[list[list[float]]]
) -> list[tuple[str, Any]]:
    """Four requests at once: the first two over HTTP, the last two over gRPC."""
    with ThreadPoolExecutor(len(inputs)) as pool:
        futures = [pool.submit(_stack_over_http, server, rows) for rows in inputs[:2]]
        futures += [pool.submit(_stack_over_grpc, stub, rows) for rows in inputs[2:]]
        return [future.result() for future in futures]


def test_grps_style_batching_merges_concurrent_requests(
    server: ServerThread, stub: grps_pb2_grpc.GrpsServiceStub
) -> None:
    """batch_preprocess stacks four 2-row requests (HTTP and gRPC) into one array of 8 rows, batch_infer
    runs it once, batch_postprocess gives each request its own rows back."""
    batches = sys.modules["stacking_inferer"].BATCHES
    batches.clear()
    inputs = [[[i, i + 0.5, -0.0], [2 * i, 1, 3]] for i in range(4)]
    answers = _stack_concurrently(server, stub, inputs)
    assert answers == [("ok", [[v * 10 for v in row] for row in rows]) for rows in inputs]
    assert batches == [(4, 8)]  # max_batch_size 4 counts requests: four requests of two rows fill one batch


def test_a_request_refused_in_batch_preprocess_fails_alone(
    server: ServerThread, stub: grps_pb2_grpc.GrpsServiceStub
) -> None:
    batches = sys.modules["stacking_inferer"].BATCHES
    batches.clear()
    good, bad = [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], [[1.0, -1.0, 0.0], [0.0, 0.0, 0.0]]
    answers = _stack_concurrently(server, stub, [good, bad, good, bad])
    expected = ("ok", [[10.0, 20.0, 30.0], [40.0, 50.0, 60.0]])
    assert answers[0] == answers[2] == expected
    for category, message in (answers[1], answers[3]):
        assert category == "internal" and "stacker refuses negative values" in message
    assert batches == [(4, 4)]  # the refused requests added no rows


def test_the_projects_own_test_py_passes(tmp_path: Path) -> None:
    """grps's template test.py (GrpsTest: project loaded in-process) runs as a user runs it."""
    done = run_project_test_py(TEMPLATE, tmp_path / "my_grps")
    assert done.returncode == 0, done.stderr
    assert "Ran 2 tests" in done.stderr and done.stderr.rstrip().endswith("OK")


def _counts(snapshot: dict[str, dict[str, Any]]) -> dict[str, int]:
    return {name: int(entry["count"]) for name, entry in snapshot.items() if name.startswith("greeter_")}


def test_user_metrics_are_recorded(http: httpx.Client, stub: grps_pb2_grpc.GrpsServiceStub) -> None:
    before = _counts(app_monitor.snapshot())
    assert http.post(PREDICT, json={"str_data": "abcdefgh"}).status_code == 200
    assert stub.Predict(grps_pb2.GrpsMessage(str_data="z"), timeout=30).str_data == "hello z"
    x = {"name": "x", "dtype": "DT_FLOAT32", "shape": [3, 1], "flat_float32": [1, 2, 3]}
    assert http.post(PREDICT, json={"gtensors": {"tensors": [x]}}).status_code == 200
    snapshot = app_monitor.snapshot()
    after = _counts(snapshot)
    grew = {name: after[name] - before.get(name, 0) for name in after}
    assert grew == {
        "greeter_requests": 3,
        "greeter_infer_ms": 3,
        "greeter_text_len_max": 2,
        "greeter_text_len_min": 2,
        "greeter_rows": 1,
    }
    assert snapshot["greeter_requests"]["kind"] == "inc"
    assert snapshot["greeter_text_len_max"]["value"] >= 8 and snapshot["greeter_text_len_min"]["value"] <= 1
    assert snapshot["greeter_rows"]["kind"] == "avg"
    cdf = snapshot["greeter_infer_ms"]
    assert cdf["kind"] == "cdf" and cdf["percentiles"]["p50"] >= 0 and "p99.9" in cdf["percentiles"]


def test_clogger_lines_reach_the_server_log_handlers() -> None:
    """grps-py configures the `grps_py` logger; clogger is its child, so user lines share its handlers."""
    from grps_framework.logger.logger import clogger

    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    server_logger = logging.getLogger("grps_py")
    level = server_logger.level
    server_logger.addHandler(handler)
    server_logger.setLevel(logging.INFO)
    try:
        clogger.info("user line %d", 7)
    finally:
        server_logger.removeHandler(handler)
        server_logger.setLevel(level)
    assert [(r.name, r.getMessage()) for r in records] == [("grps_py.user", "user line 7")]


def test_grps_py_serve_runs_the_project_unchanged(tmp_path: Path) -> None:
    """As a user runs it: `grps-py serve PROJECT`; clogger's lines land in log_dir/grps_usr.log (and in
    grps_server.log)."""
    project = tmp_path / "my_grps"
    shutil.copytree(TEMPLATE / "conf", project / "conf")
    shutil.copytree(TEMPLATE / "src", project / "src", ignore=shutil.ignore_patterns("__pycache__"))
    proc = subprocess.Popen(
        [sys.executable, "-m", "grps_py.cli", "serve", str(project)], stderr=subprocess.PIPE, text=True
    )
    try:
        port = _listening_port(proc)
        base = f"http://127.0.0.1:{port}"
        for _ in range(300):
            if httpx.get(f"{base}/grps/v1/health/ready").status_code == 200:
                break
            threading.Event().wait(0.1)
        else:
            pytest.fail("grps-py serve never became ready")
        reply = httpx.post(f"{base}{PREDICT}", json={"str_data": "user"}, timeout=30)
        assert reply.status_code == 200 and reply.json()["str_data"] == "hello user"
    finally:
        proc.kill()
        proc.wait(10)
    log = (project / "logs" / "grps_server.log").read_text()
    assert "grps_py.user: greeter inferer load" in log
    assert "grps_py.user: greeter converter init" in log
    user_log = (project / "logs" / "grps_usr.log").read_text()  # grps's own file for clogger's lines
    assert "grps_py.user: greeter inferer load" in user_log and "grps_py.access" not in user_log


def _listening_port(proc: subprocess.Popen[str]) -> int:
    assert proc.stderr is not None
    for line in proc.stderr:
        match = LISTENING.search(line)
        if match:
            # Keep draining stderr so the server never blocks on a full pipe.
            threading.Thread(target=lambda: [None for _ in proc.stderr or ()], daemon=True).start()
            return int(match.group(1))
    proc.wait(30)
    pytest.fail(f"grps-py serve did not start (exit {proc.returncode})")


def test_a_lone_request_takes_the_batch_methods(stub: grps_pb2_grpc.GrpsServiceStub) -> None:
    """grps runs a batching model's batch methods for a batch of one too (after batch_timeout_us)."""
    batches = sys.modules["stacking_inferer"].BATCHES
    batches.clear()
    assert _stack_over_grpc(stub, [[1.0, 2.0, 3.0]]) == ("ok", [[10.0, 20.0, 30.0]])
    assert batches == [(1, 1)]

"""Values from a request in log lines and error messages: escaped (a line break cannot start a fake log
line) and capped (a 100 KB model name still gets NOT_FOUND, with a short message), over HTTP and gRPC;
and the text log formats, which keep every message on one line whatever it holds."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import grpc
import httpx
import pytest

from grps_py import status
from grps_py.codecs import grps_json
from grps_py.core import errors
from grps_py.core.config import LogSettings
from grps_py.core.untrusted import MAX_SHOWN_CHARS, one_line, shown
from grps_py.logs import (
    DeferredStreamHandler,
    TextFormatter,
    flush_access_log,
    write_access_line,
)
from grps_py.protos import grps_pb2, grps_pb2_grpc, open_inference_pb2, open_inference_pb2_grpc
from support import light_server_fixtures, logging_to

Msg = grps_pb2.GrpsMessage
FORGED = "2026-01-01 00:00:00,000 INFO [-] grps_py.access: POST /admin/grant 200"
# Each character Python's splitlines (and so many a log reader) takes for a line break.
BREAKS = ["\n", "\r", "\r\n", "\v", "\f", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]
INFER = "/v2/models/identity/infer"


def oip_input(name: str = "x", datatype: str = "FP32") -> dict[str, object]:
    return {"name": name, "datatype": datatype, "shape": [1], "data": [1.5]}


server, http, channel = light_server_fixtures("forging")


@pytest.fixture
def log_file(tmp_path: Path) -> Iterator[Path]:
    with logging_to(LogSettings(log_dir=tmp_path)) as path:
        yield path


def log_lines(path: Path) -> list[str]:
    flush_access_log()
    return path.read_bytes().decode("utf-8").splitlines()  # every line break Python knows, \r too


def assert_not_forged(path: Path, expected_escaped: int) -> None:
    """No line of the log starts with the forged text; it is there, escaped (and maybe cut), inside our
    own lines."""
    lines = log_lines(path)
    assert not [line for line in lines if line.startswith(FORGED[:20])]
    assert len([line for line in lines if FORGED[:32] in line]) >= expected_escaped


# -- the one escaping function ----------------------------------------------------------------------


def test_shown_escapes_what_is_not_printable_and_caps_the_length() -> None:
    ordinary = "resnet50-1.0 模型"
    assert shown(ordinary) is ordinary  # the usual value: one scan, no copy
    assert shown("x\n" + FORGED) == "x\\n" + FORGED
    assert shown("a\r\tb\x1b[31m\x00") == "a\\r\\tb\\x1b[31m\\x00"
    assert shown("\u202eevil\u2028\x85") == "\\u202eevil\\u2028\\x85"  # bidi override, separators
    assert shown("back\\slash") == "back\\\\slash"  # so an escape reads one way only
    long = shown("m" * 100_000)
    assert long == "m" * MAX_SHOWN_CHARS + f"... [{100_000 - MAX_SHOWN_CHARS} more chars]"
    assert len(shown("\x00" * 100_000)) < MAX_SHOWN_CHARS + 40
    assert shown(b"x\n") == "b'x\\\\n'"  # not a str: its str(), escaped the same way
    assert one_line("a\\n\nb") == "a\\n\\nb"  # the net leaves backslashes alone (messages quote shown text)
    for brk in BREAKS:
        assert len(shown(f"a{brk}b").splitlines()) == 1
        assert len(one_line(f"a{brk}b").splitlines()) == 1


def test_a_public_message_is_one_capped_line() -> None:
    exc = errors.InvalidInput("input 'a\nb' is bad" + "!" * 10_000)
    message = status.public_message(exc)
    assert "\n" not in message and message.startswith("input 'a\\nb' is bad")
    assert len(message) < status.MAX_PUBLIC_MESSAGE_CHARS + 40


def test_text_lines_keep_a_message_on_one_line_but_tracebacks_keep_theirs() -> None:
    record = logging.LogRecord("grps_py.t", logging.INFO, __file__, 1, "model %s", ("x\n" + FORGED,), None)
    record.request_id = "rid-1"
    line = TextFormatter().format(record)
    assert line.splitlines() == [line] and line.endswith("model x\\n" + FORGED)
    try:
        raise ValueError("boom")
    except ValueError as exc:
        record = logging.LogRecord(
            "grps_py.t", logging.ERROR, __file__, 1, "a\nb", (), (ValueError, exc, None)
        )
    lines = TextFormatter().format(record).splitlines()
    assert lines[0].endswith(": a\\nb") and lines[-1].endswith("ValueError: boom") and len(lines) >= 2
    # A traceback outside any request: its lines start with "[-]", whatever the exception's message holds.
    try:
        raise ValueError("bad name x\n" + FORGED)
    except ValueError as exc:
        record = logging.LogRecord(
            "grps_py.t", logging.ERROR, __file__, 1, "failed", (), (ValueError, exc, None)
        )
    lines = TextFormatter().format(record).splitlines()
    assert all(line.startswith("[-] ") for line in lines[1:]) and lines[-1] == "[-] " + FORGED


def test_access_lines_are_one_line() -> None:
    stream = io.StringIO()
    handler = DeferredStreamHandler(stream)
    handler.setFormatter(TextFormatter())
    logger = logging.getLogger("grps_py.test_forged_access")
    logger.addHandler(handler)
    try:
        for brk in BREAKS:
            write_access_line(logger, "rid-a", f"POST /x{brk}{FORGED}", {})
        handler.flush_now()
    finally:
        logger.removeHandler(handler)
    lines = stream.getvalue().splitlines()
    assert len(lines) == len(BREAKS) and not [line for line in lines if line.startswith(FORGED)]


# -- forged names against a server -----------------------------------------------------------------


def test_a_line_break_in_an_oip_model_name_cannot_forge_a_log_line(
    http: httpx.Client, channel: grpc.Channel, log_file: Path
) -> None:
    name = "x\n" + FORGED
    reply = http.post(f"/v2/models/{quote(name, safe='')}/infer", json={"inputs": [oip_input()]})
    assert reply.status_code == 404
    assert f"unknown model 'x\\n{FORGED}'" in reply.json()["error"]
    reply = http.get(f"/v2/models/{quote(name, safe='')}/versions/{quote(name, safe='')}")
    assert reply.status_code == 404 and "\n" not in reply.json()["error"]
    stub = open_inference_pb2_grpc.GRPCInferenceServiceStub(channel)
    with pytest.raises(grpc.RpcError) as err:
        stub.ModelInfer(open_inference_pb2.ModelInferRequest(model_name=name), timeout=10)
    assert err.value.code() is grpc.StatusCode.NOT_FOUND
    assert f"unknown model 'x\\n{FORGED}'" in (err.value.details() or "")
    with pytest.raises(grpc.RpcError) as err:
        stub.ModelMetadata(open_inference_pb2.ModelMetadataRequest(name="identity", version=name), timeout=10)
    assert err.value.code() is grpc.StatusCode.NOT_FOUND and "\n" not in (err.value.details() or "")
    assert_not_forged(log_file, 3)


def test_a_line_break_in_a_grps_model_name_cannot_forge_a_log_line(
    http: httpx.Client, channel: grpc.Channel, log_file: Path
) -> None:
    name = "x\r\n" + FORGED
    reply = http.post("/grps/v1/infer/predict", json={"model": name, "str_data": "hi"})
    assert reply.status_code == 404
    assert f"unknown model 'x\\r\\n{FORGED}'" in reply.json()["status"]["msg"]
    answer = grps_pb2_grpc.GrpsServiceStub(channel).Predict(Msg(model=name, str_data="hi"), timeout=10)
    assert (answer.status.code, answer.status.status) == (404, grps_pb2.Status.FAILURE)  # an answer, as grps
    assert f"unknown model 'x\\r\\n{FORGED}'" in answer.status.msg
    assert_not_forged(log_file, 2)


@pytest.mark.parametrize("brk", BREAKS)
def test_line_breaks_in_oip_tensor_names_cannot_forge_a_log_line(
    http: httpx.Client, channel: grpc.Channel, log_file: Path, brk: str
) -> None:
    name = f"x{brk}{FORGED}"
    # An input with a bad datatype, and an output the model does not answer: each names the tensor.
    reply = http.post(INFER, json={"inputs": [oip_input(name, "FP99")]})
    assert reply.status_code == 400 and shown(name, 64) in reply.json()["error"]
    reply = http.post(INFER, json={"inputs": [oip_input()], "outputs": [{"name": name}]})
    assert reply.status_code == 400 and f"unknown output '{shown(name)}'" in reply.json()["error"]
    stub = open_inference_pb2_grpc.GRPCInferenceServiceStub(channel)
    request = open_inference_pb2.ModelInferRequest(model_name="identity")
    request.inputs.add(name=name, datatype="FP99", shape=[1])
    with pytest.raises(grpc.RpcError) as err:
        stub.ModelInfer(request, timeout=10)
    assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert shown(name, 64) in (err.value.details() or "")
    request = open_inference_pb2.ModelInferRequest(model_name="identity")
    request.inputs.add(name="x", datatype="FP32", shape=[1]).contents.fp32_contents.append(1.5)
    request.outputs.add(name=name)
    with pytest.raises(grpc.RpcError) as err:
        stub.ModelInfer(request, timeout=10)
    assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert f"unknown output '{shown(name)}'" in (err.value.details() or "")
    assert_not_forged(log_file, 4)


def test_a_line_break_in_a_grps_tensor_name_or_field_cannot_forge_a_log_line(
    http: httpx.Client, log_file: Path, caplog: pytest.LogCaptureFixture
) -> None:
    tensor = {"name": "t\n" + FORGED, "dtype": "DT_NOPE", "shape": [1], "flatFloat32": [1]}
    reply = http.post("/grps/v1/infer/predict?model=echo-1.0", json={"gtensors": {"tensors": [tensor]}})
    assert reply.status_code == 400 and "tensor 't\\n2026-01-01" in reply.json()["status"]["msg"]
    # An unknown field is ignored (as grps does) and its name logged once, at DEBUG, escaped. (The
    # names remembered are bounded per process: forget those earlier tests sent.)
    grps_json.UNKNOWN_FIELDS.names.clear()
    with caplog.at_level(logging.DEBUG, logger="grps_py.codecs"):
        reply = http.post("/grps/v1/infer/predict?model=echo-1.0", json={"x\n" + FORGED: 1})
    assert reply.status_code == 200
    assert any(r.getMessage().startswith("ignored unknown field 'x\\n2026") for r in caplog.records)
    assert_not_forged(log_file, 1)


# -- a 100 KB model name ------------------------------------------------------------------------


def test_a_huge_model_name_gets_not_found_with_a_short_message_over_grpc(channel: grpc.Channel) -> None:
    name = "m" * 100_000
    answer = grps_pb2_grpc.GrpsServiceStub(channel).Predict(Msg(model=name), timeout=10)
    assert (answer.status.code, answer.status.status) == (404, grps_pb2.Status.FAILURE)  # an answer, as grps
    details = answer.status.msg
    assert details.startswith("unknown model 'mmm") and "more chars]" in details and len(details) < 1000
    with pytest.raises(grpc.RpcError) as err:
        open_inference_pb2_grpc.GRPCInferenceServiceStub(channel).ModelInfer(
            open_inference_pb2.ModelInferRequest(model_name=name), timeout=10
        )
    assert err.value.code() is grpc.StatusCode.NOT_FOUND and len(err.value.details() or "") < 1000


def test_a_huge_model_name_gets_404_with_a_short_message_over_http(http: httpx.Client) -> None:
    reply = http.post("/grps/v1/infer/predict", json={"model": "m" * 100_000, "str_data": "hi"})
    assert reply.status_code == 404
    msg = reply.json()["status"]["msg"]
    assert msg.startswith("unknown model 'mmm") and "more chars]" in msg and len(msg) < 1000
    # In the path, under limits.header_bytes (64 KiB).
    reply = http.post(f"/v2/models/{'m' * 60_000}/infer", json={"inputs": [oip_input()]})
    assert reply.status_code == 404 and len(reply.json()["error"]) < 1000
    reply = http.get(f"/v2/models/{'m' * 60_000}")
    assert reply.status_code == 404 and len(reply.json()["error"]) < 1000


def test_request_ids_in_log_lines_are_ours_or_plain(http: httpx.Client, log_file: Path) -> None:
    """A client's id that would make a line's `[id]` ambiguous never gets into one (test_request_ids.py
    has the rules); what it sent is logged escaped."""
    reply = http.get("/v2/health/live", headers={"X-Request-Id": "[x] grps_py.access: fake"})
    assert reply.status_code == 200
    assert reply.headers["X-Request-Id"] != "[x] grps_py.access: fake"
    assert not [line for line in log_lines(log_file) if "[[x] grps_py.access: fake]" in line]

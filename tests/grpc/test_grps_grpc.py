"""grps.protos.v1.GrpsService against a real server: all 8 rpcs, streaming, failures answered as grps
answers them (status OK, a FAILURE envelope), and the gRPC codes that stay (limits, deadlines)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import grpc
import httpx
import pytest
import yaml

from grps_py.protos import grps_pb2, grps_pb2_grpc
from support import BASIC, ServerThread, start_project

Msg = grps_pb2.GrpsMessage


def test_liveness_readiness_and_metadata(grps_stub: grps_pb2_grpc.GrpsServiceStub) -> None:
    for rpc in (grps_stub.CheckLiveness, grps_stub.CheckReadiness):
        reply = rpc(Msg())
        assert (reply.status.code, reply.status.status) == (200, grps_pb2.Status.SUCCESS)
    server = yaml.safe_load(grps_stub.ServerMetadata(Msg()).str_data)
    assert server["dag"]["name"] == "double_then_add_one"
    model = yaml.safe_load(grps_stub.ModelMetadata(Msg(str_data="classifier_torch-1.0.0")).str_data)
    assert model["inferer_type"] == "torch"


def test_model_metadata_errors_are_failure_answers(grps_stub: grps_pb2_grpc.GrpsServiceStub) -> None:
    """As grps answers them: status OK, the envelope FAILURE with the HTTP status."""
    missing, call = grps_stub.ModelMetadata.with_call(Msg(str_data="nope-1"))
    assert call.code() == grpc.StatusCode.OK
    assert (missing.status.code, missing.status.status) == (404, grps_pb2.Status.FAILURE)
    assert missing.status.msg.startswith("unknown model 'nope-1'") and "request_id=" in missing.status.msg
    assert not missing.HasField("str_data")
    empty = grps_stub.ModelMetadata(Msg())
    assert (empty.status.code, empty.status.status) == (400, grps_pb2.Status.FAILURE)
    assert "model name" in empty.status.msg


def test_bin_data_round_trip(grps_stub: grps_pb2_grpc.GrpsServiceStub) -> None:
    reply = grps_stub.Predict(Msg(model="echo-1.0", bin_data=b"\x00\x01binary"))
    assert reply.bin_data == b"\x00\x01binary"


def test_predict_streaming_yields_each_message(grps_stub: grps_pb2_grpc.GrpsServiceStub) -> None:
    replies = list(grps_stub.PredictStreaming(Msg(model="stream-1.0", str_data="4")))
    assert [r.str_data for r in replies] == [f"chunk {i}" for i in range(4)]
    assert all(r.status.status == grps_pb2.Status.SUCCESS for r in replies)


def test_predict_streaming_of_a_unary_model_yields_its_answer(
    grps_stub: grps_pb2_grpc.GrpsServiceStub,
) -> None:
    replies = list(grps_stub.PredictStreaming(Msg(model="upper-1.0", str_data="one")))
    assert [r.str_data for r in replies] == ["ONE"]


def test_predict_streaming_error_is_one_failure_message(grps_stub: grps_pb2_grpc.GrpsServiceStub) -> None:
    call = grps_stub.PredictStreaming(Msg(model="raiser-1.0", str_data="x"))
    (reply,) = list(call)
    assert call.code() == grpc.StatusCode.OK
    assert (reply.status.code, reply.status.status) == (500, grps_pb2.Status.FAILURE)
    assert "boom" in reply.status.msg and "Traceback" not in reply.status.msg


def test_cancelled_stream_stops_the_model(
    basic_server: ServerThread, grps_stub: grps_pb2_grpc.GrpsServiceStub
) -> None:
    log = sys.modules["serving_models"].STREAM_LOG
    call = grps_stub.PredictStreaming(Msg(model="stream-1.0", str_data="500"))
    assert next(call).str_data == "chunk 0"
    call.cancel()
    deadline = time.monotonic() + 10
    while not log["disconnected"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert log["disconnected"] is True
    assert log["sent"] < 500


def test_message_size_limit_applies_to_both_transports(tmp_path: Path) -> None:
    conf = tmp_path / "server.yml"
    conf.write_text("interface:\n  host: 127.0.0.1\n  port: 0,0\n  max_message_bytes: 4096\n")
    server = start_project(BASIC, server_conf=conf)
    try:
        with grpc.insecure_channel(server.grpc_target) as channel:
            stub = grps_pb2_grpc.GrpsServiceStub(channel)
            assert stub.Predict(Msg(model="echo", bin_data=b"x" * 1000)).bin_data == b"x" * 1000
            with pytest.raises(grpc.RpcError) as err:
                stub.Predict(Msg(model="echo", bin_data=b"x" * 10_000))
            assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "larger than max" in (err.value.details() or "")
        headers = {"Content-Type": "application/octet-stream"}
        url = f"{server.http_url}/grps/v1/infer/predict?model=echo"
        # An oversized Content-Length is answered 413 (the grps envelope) before the body is read.
        refused = httpx.post(url, content=b"x" * 10_000, headers=headers)
        assert refused.status_code == 413
        assert refused.json()["status"]["code"] == 413
        assert "interface.max_message_bytes (4096 bytes)" in refused.json()["status"]["msg"]
        assert httpx.post(url, content=b"x" * 1000, headers=headers).content == b"x" * 1000
    finally:
        server.stop()


def test_a_stream_past_its_deadline_frees_its_model(grps_stub: grps_pb2_grpc.GrpsServiceStub) -> None:
    """The gRPC side of the HTTP test of the same name: whichever comes first at the deadline (the
    server's own timer or the client's cancel), the model is told and the next stream starts at once."""
    for _ in range(3):
        with pytest.raises(grpc.RpcError) as late:
            list(grps_stub.PredictStreaming(Msg(model="stream-1.0", str_data="300"), timeout=0.3))
        assert late.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        began = time.monotonic()
        first = next(iter(grps_stub.PredictStreaming(Msg(model="stream-1.0", str_data="2"), timeout=30)))
        assert first.str_data == "chunk 0"
        assert time.monotonic() - began < 2.0

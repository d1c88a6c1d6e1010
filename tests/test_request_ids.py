"""Request ids a client chooses: 1 to 128 of `A-Z a-z 0-9 . _ : -` name the request (X-Request-Id,
`x-request-id` metadata, an OIP `id`); anything else gets an id of ours, and what was sent is logged once,
escaped. An OIP `id` is still echoed in the answer as sent, whatever it holds."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import pytest

from grps_py.core import request_scope
from grps_py.core.config import LogSettings
from grps_py.core.untrusted import shown
from grps_py.logs import flush_access_log
from grps_py.protos import grps_pb2, grps_pb2_grpc, open_inference_pb2, open_inference_pb2_grpc
from support import light_server_fixtures, logging_to

Msg = grps_pb2.GrpsMessage
OURS = re.compile(r"[0-9a-f]{16,}")  # request_ids.new_request_id
KEPT = ["abc-1.2:3_X", "A" * 128, "0", "urn:uuid:9b2c.f00d"]
REFUSED = ["A" * 129, "[x] grps_py.access: fake", "a b", "a/b", "a]b", "a,b", "%0A", "x\ty"]
PREDICT = "/grps/v1/infer/predict?model=echo-1.0"
INFER = "/v2/models/identity/infer"
OIP_DOC = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1], "data": [1.5]}]}


server, http, channel = light_server_fixtures("request_ids")


@pytest.fixture
def log_file(tmp_path: Path) -> Iterator[Path]:
    with logging_to(LogSettings(log_dir=tmp_path, level="DEBUG")) as path:
        yield path


def lines_with(path: Path, needle: str) -> list[str]:
    flush_access_log()
    return [line for line in path.read_text().splitlines() if needle in line]


def refusal_lines(path: Path, rid: str, source: str, sent: str) -> list[str]:
    return lines_with(path, f"[{rid}] grps_py.access: {source} '{shown(sent)}' refused")


# -- the rule -------------------------------------------------------------------------------------


def test_the_rule() -> None:
    for text in KEPT:
        assert request_scope.client_request_id(text) == text
    for text in [*REFUSED, "", None, 7, b"abc", "é", "١٢", "a\nb"]:
        assert request_scope.client_request_id(text) == ""


# -- HTTP -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("route", ["direct", "tornado"])
def test_x_request_id_kept_or_replaced_over_http(http: httpx.Client, log_file: Path, route: str) -> None:
    def call(rid: str | bytes) -> httpx.Response:
        headers = {"X-Request-Id": rid}
        if route == "direct":  # answered on the connection (http/direct.py)
            return http.post(PREDICT, json={"str_data": "hi"}, headers=headers)
        return http.get("/v2/health/live", headers=headers)  # through Tornado (http/base.py)

    for sent in KEPT:
        reply = call(sent)
        assert reply.status_code == 200 and reply.headers["X-Request-Id"] == sent
    for sent in REFUSED:
        reply = call(sent)
        assert reply.status_code == 200, sent
        rid = reply.headers["X-Request-Id"]
        assert OURS.fullmatch(rid), (sent, rid)
        assert len(refusal_lines(log_file, rid, "X-Request-Id", sent)) == 1, sent
    reply = call("é".encode())  # not ASCII (Tornado reads it as latin-1)
    assert reply.status_code == 200 and OURS.fullmatch(reply.headers["X-Request-Id"])


def test_an_oip_id_is_echoed_as_sent_but_names_the_request_only_when_it_may(
    http: httpx.Client, log_file: Path
) -> None:
    reply = http.post(INFER, json={**OIP_DOC, "id": "oip-ok.1"})
    assert reply.headers["X-Request-Id"] == "oip-ok.1" and reply.json()["id"] == "oip-ok.1"
    for sent in ["my request 1", "[x] grps_py.access: fake", "A" * 129]:
        reply = http.post(INFER, json={**OIP_DOC, "id": sent})
        assert (
            reply.status_code == 200 and reply.json()["id"] == sent
        )  # OIP: the answer's id is the request's
        rid = reply.headers["X-Request-Id"]
        assert OURS.fullmatch(rid)
        found = lines_with(log_file, f"[{rid}] grps_py.request_ids: the request's id '{shown(sent)}' refused")
        assert len(found) == 1 and " DEBUG " in found[0]
    # generate takes its id the same way.
    reply = http.post("/v2/models/identity/generate", json={"x": [1.5], "id": "gen id"})
    assert reply.status_code == 200 and reply.json()["id"] == "gen id"
    assert OURS.fullmatch(reply.headers["X-Request-Id"])


# -- gRPC -----------------------------------------------------------------------------------------


def test_x_request_id_metadata_kept_or_replaced_over_grpc(channel: grpc.Channel, log_file: Path) -> None:
    stub = grps_pb2_grpc.GrpsServiceStub(channel)
    for sent in KEPT:
        _, call = stub.Predict.with_call(Msg(model="echo-1.0"), metadata=(("x-request-id", sent),))
        assert dict(call.trailing_metadata())["x-request-id"] == sent
    for sent in [s for s in REFUSED if s.isprintable()]:  # gRPC metadata is printable ASCII
        _, call = stub.Predict.with_call(Msg(model="echo-1.0"), metadata=(("x-request-id", sent),))
        rid = dict(call.trailing_metadata())["x-request-id"]
        assert OURS.fullmatch(rid), (sent, rid)
        assert len(refusal_lines(log_file, rid, "x-request-id metadata", sent)) == 1, sent
    # A bidirectional stream: named once, for the stream.
    oip = open_inference_pb2_grpc.GRPCInferenceServiceStub(channel)
    stream = oip.ModelStreamInfer(iter([]), metadata=(("x-request-id", "a b"),))
    assert list(stream) == []
    rid = dict(stream.trailing_metadata())["x-request-id"]
    assert OURS.fullmatch(rid) and len(refusal_lines(log_file, rid, "x-request-id metadata", "a b")) == 1


def oip_request(request_id: str) -> open_inference_pb2.ModelInferRequest:
    request = open_inference_pb2.ModelInferRequest(model_name="identity", id=request_id)
    request.inputs.add(name="x", datatype="FP32", shape=[1]).contents.fp32_contents.append(1.5)
    return request


def test_an_oip_id_over_grpc_is_echoed_as_sent(channel: grpc.Channel, log_file: Path) -> None:
    stub = open_inference_pb2_grpc.GRPCInferenceServiceStub(channel)
    reply, call = stub.ModelInfer.with_call(oip_request("oipg-ok"))
    assert reply.id == "oipg-ok" and dict(call.trailing_metadata())["x-request-id"] == "oipg-ok"
    reply, call = stub.ModelInfer.with_call(oip_request("my request\n1"))
    assert reply.id == "my request\n1"
    rid = dict(call.trailing_metadata())["x-request-id"]
    assert OURS.fullmatch(rid)
    assert (
        len(lines_with(log_file, f"[{rid}] grps_py.request_ids: the request's id 'my request\\n1' refused"))
        == 1
    )
    # On a stream, each request answers with its own id, named by it only when it may.
    stream = stub.ModelStreamInfer(
        iter([oip_request("s-ok"), oip_request("s bad")]), metadata=(("x-request-id", "stream-1"),)
    )
    assert sorted(r.infer_response.id for r in stream) == ["s bad", "s-ok"]

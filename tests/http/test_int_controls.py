"""Integer controls (Grps-Timeout-Us / ?timeout_us=, Grps-Priority / ?priority=, `grps-priority` gRPC
metadata, the OIP `timeout` and `priority` parameters): ASCII digits only, at most 18 of them. The other
forms Python's int() takes (`1_000`, `+5`, ` 5 `, `١٢`) answer 400 / INVALID_ARGUMENT naming the control."""

from __future__ import annotations

from urllib.parse import quote

import grpc
import httpx
import pytest

from grps_py.core.errors import InvalidInput
from grps_py.core.untrusted import decimal
from grps_py.http.base import int_control
from grps_py.protos import grps_pb2, grps_pb2_grpc, open_inference_pb2, open_inference_pb2_grpc
from support import light_server_fixtures

Msg = grps_pb2.GrpsMessage
GOOD = ["0", "10000000", "0010000000", "9" * 18]  # as a timeout: none, or 10 s and more
BAD = ["1_000", "+5", " 5 ", "5 ", "-1", "١٢", "²", "0x10", "1e3", "5.0", "9" * 19, "five", "\u0665"]
PREDICT = "/grps/v1/infer/predict?model=echo-1.0"
INFER = "/v2/models/identity/infer"
OIP_DOC = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1], "data": [1.5]}]}


server, http, channel = light_server_fixtures("int_controls")


def test_the_rule() -> None:
    for text in GOOD:
        assert decimal(text) == int(text) and int_control(text, "Grps-Priority", "priority") == int(text)
    assert int_control(None, "Grps-Priority", "priority") is None
    assert int_control("", "Grps-Priority", "priority") is None
    for text in BAD:
        assert decimal(text) is None, text
        with pytest.raises(
            InvalidInput, match=r"^Grps-Priority / \?priority= must be a non-negative integer"
        ):
            int_control(text, "Grps-Priority", "priority")


def http_bad(reply: httpx.Response, control: str) -> None:
    assert reply.status_code == 400, reply.text
    body = reply.json()
    message = body["status"]["msg"] if "status" in body else body["error"]
    assert control in message and "must be a non-negative integer" in message, message


@pytest.mark.parametrize(
    ("header", "query"), [("Grps-Timeout-Us", "timeout_us"), ("Grps-Priority", "priority")]
)
@pytest.mark.parametrize("streaming", [False, True], ids=["direct", "tornado"])
def test_http_controls(http: httpx.Client, header: str, query: str, streaming: bool) -> None:
    path = PREDICT + ("&streaming=true" if streaming else "")
    doc = {"str_data": "hi"}
    for text in GOOD:
        assert http.post(path, json=doc, headers={header: text}).status_code == 200, text
        assert http.post(f"{path}&{query}={text}", json=doc).status_code == 200, text
    for text in BAD:
        if text.isascii() and text == text.strip():  # a header value: ASCII, and HTTP trims its ends
            http_bad(http.post(path, json=doc, headers={header: text}), header)
        http_bad(http.post(f"{path}&{query}={quote(text)}", json=doc), header)


def test_grpc_priority_metadata(channel: grpc.Channel) -> None:
    stub = grps_pb2_grpc.GrpsServiceStub(channel)
    for text in GOOD:
        assert stub.Predict(
            Msg(model="echo-1.0", str_data="hi"), metadata=(("grps-priority", text),)
        ).str_data
    for text in [t for t in BAD if t.isascii() and t == t.strip()]:  # what metadata can carry
        answer = stub.Predict(Msg(model="echo-1.0"), metadata=(("grps-priority", text),))
        assert (answer.status.code, answer.status.status) == (400, grps_pb2.Status.FAILURE)
        assert "grps-priority metadata must be a non-negative integer" in answer.status.msg


@pytest.mark.parametrize("name", ["timeout", "priority"])
def test_oip_parameters(http: httpx.Client, channel: grpc.Channel, name: str) -> None:
    for value in [10_000_000, 10**18 - 1]:
        reply = http.post(INFER, json={**OIP_DOC, "parameters": {name: value}})
        assert reply.status_code == 200, reply.text
    for bad in [10**18, -1, "5", 5.0, True]:
        reply = http.post(INFER, json={**OIP_DOC, "parameters": {name: bad}})
        assert reply.status_code == 400 and f"parameter '{name}' must be a non-negative integer" in reply.text
    stub = open_inference_pb2_grpc.GRPCInferenceServiceStub(channel)
    request = open_inference_pb2.ModelInferRequest(model_name="identity")
    request.inputs.add(name="x", datatype="FP32", shape=[1]).contents.fp32_contents.append(1.5)
    request.parameters[name].int64_param = 10**18
    with pytest.raises(grpc.RpcError) as err:
        stub.ModelInfer(request, timeout=10)
    assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    request.parameters[name].uint64_param = 2**64 - 1
    with pytest.raises(grpc.RpcError) as err:
        stub.ModelInfer(request, timeout=10)
    assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    request.parameters[name].int64_param = 10_000_000
    assert stub.ModelInfer(request, timeout=10).outputs

"""A model that declares tensor inputs and takes them through a tensor converter (numpy, torch) takes
tensors only: `bin_data`, `str_data`, a `gmap` or no data is a 400 / INVALID_ARGUMENT naming the declared
inputs, over HTTP and gRPC alike, before the model runs (it used to reach the model and answer 500).
Models that read the GrpsMessage themselves (converter none), or declare no inputs, get what they got.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterator
from typing import Any

import grpc
import httpx
import numpy as np
import pytest

from grps_py.core.errors import InvalidInput
from grps_py.core.signature import DeclaredInputs, TensorSpec
from grps_py.core.types import Payload, Tensor
from grps_py.protos import grps_pb2, grps_pb2_grpc
from support import PROJECTS, ServerThread, start_project

PROJECT = PROJECTS / "declared_inputs"
Msg = grps_pb2.GrpsMessage
OCTET = {"Content-Type": "application/octet-stream"}
REQUEST_ID = re.compile(r" \[request_id=[^\]]*\]$")
DECLARED = "takes tensors (its declared inputs: a, b)"
TENSORS = {
    "tensors": [
        {"name": "a", "dtype": "DT_FLOAT32", "shape": [1, 3], "flat_float32": [1, 2, 3]},
        {"name": "b", "dtype": "DT_INT64", "shape": [1], "flat_int64": ["10"]},
    ]
}


def test_declared_inputs_refuse_what_is_not_tensors() -> None:
    specs = [TensorSpec("a", "FP32", (-1, 3)), TensorSpec("b", "INT64", (-1,))]
    strict, lenient = DeclaredInputs(specs, tensors_only=True), DeclaredInputs(specs)
    for payload, carried in [
        (Payload.of_bytes(b"\x00"), "bin_data"),
        (Payload.of_text("hi"), "str_data"),
        (Payload.of_map({"s_s": {"k": "v"}}), "a gmap"),
        (Payload.empty(), "no data"),
    ]:
        with pytest.raises(InvalidInput) as refused:
            strict.checked(payload, "summed-1")
        assert refused.value.public_message.startswith(
            f"model 'summed-1' {DECLARED}; the request carries {carried}"
        )
        assert lenient.checked(payload, "summed-1") is payload  # converter none, customized: as before
    tensors = Payload.of_tensors([Tensor("", np.ones((1, 3), np.float32)), Tensor("", np.ones(1, np.int64))])
    named = strict.checked(tensors, "summed-1")
    assert [t.name for t in named.value] == ["a", "b"]
    with pytest.raises(InvalidInput, match="missing input 'b'"):
        strict.checked(Payload.of_tensors([Tensor("a", np.ones((1, 3), np.float32))]), "summed-1")


@pytest.fixture(scope="module")
def server() -> Iterator[ServerThread]:
    server = start_project(PROJECT)
    yield server
    server.stop()


@pytest.fixture
def http(server: ServerThread) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.http_url, timeout=30) as client:
        yield client


@pytest.fixture
def stub(server: ServerThread) -> Iterator[grps_pb2_grpc.GrpsServiceStub]:
    with grpc.insecure_channel(server.grpc_target) as channel:
        yield grps_pb2_grpc.GrpsServiceStub(channel)


NOT_TENSORS: list[tuple[dict[str, Any], str]] = [
    ({"bin_data": base64.b64encode(b"\x00\x01").decode()}, "bin_data"),
    ({"str_data": "hello"}, "str_data"),
    ({"gmap": {"s_s": {"k": "v"}}}, "a gmap"),
    ({}, "no data"),
]


@pytest.mark.parametrize(("fields", "carried"), NOT_TENSORS)
@pytest.mark.parametrize("model", ["summed", "summed-1", ""])  # "": the DAG, whose entry is summed
def test_http_and_grpc_answer_400_naming_the_declared_inputs(
    http: httpx.Client, stub: grps_pb2_grpc.GrpsServiceStub, fields: dict[str, Any], carried: str, model: str
) -> None:
    reply = http.post("/grps/v1/infer/predict", json={"model": model, **fields})
    assert reply.status_code == 400, reply.text
    status = reply.json()["status"]
    assert status["code"] == 400 and status["status"] == "FAILURE"
    assert f"model 'summed-1' {DECLARED}; the request carries {carried}" in status["msg"]
    message = Msg(model=model)
    if fields:
        message.MergeFrom(_message(fields))
    answer = stub.Predict(message)
    assert (answer.status.code, answer.status.status) == (400, grps_pb2.Status.FAILURE)
    assert REQUEST_ID.sub("", answer.status.msg) == REQUEST_ID.sub("", status["msg"])  # parity


def _message(fields: dict[str, Any]) -> grps_pb2.GrpsMessage:
    message = Msg()
    if "bin_data" in fields:
        message.bin_data = base64.b64decode(fields["bin_data"])
    elif "str_data" in fields:
        message.str_data = fields["str_data"]
    else:
        message.gmap.s_s["k"] = "v"
    return message


def test_a_raw_octet_stream_body_is_bin_data_too(http: httpx.Client) -> None:
    reply = http.post("/grps/v1/infer/predict?model=summed", content=b"\x89PNG", headers=OCTET)
    assert reply.status_code == 400
    assert f"{DECLARED}; the request carries bin_data" in reply.json()["status"]["msg"]


def test_tensors_still_reach_the_model(http: httpx.Client, stub: grps_pb2_grpc.GrpsServiceStub) -> None:
    reply = http.post("/grps/v1/infer/predict", json={"model": "summed", "gtensors": TENSORS})
    assert reply.status_code == 200, reply.text
    assert reply.json()["gtensors"]["tensors"][0]["flat_float32"] == [11, 12, 13]
    oip = {
        "inputs": [
            {"name": "a", "datatype": "FP32", "shape": [1, 3], "data": [1, 2, 3]},
            {"name": "b", "datatype": "INT64", "shape": [1], "data": [10]},
        ]
    }
    assert http.post("/v2/models/summed/infer", json=oip).json()["outputs"][0]["data"] == [11, 12, 13]


def test_models_reading_messages_or_declaring_nothing_are_unchanged(
    http: httpx.Client, stub: grps_pb2_grpc.GrpsServiceStub
) -> None:
    for model in ("message_echo", "bytes_echo"):
        reply = http.post(f"/grps/v1/infer/predict?model={model}", content=b"raw", headers=OCTET)
        assert reply.status_code == 200 and reply.content == b"raw", reply.text
        assert stub.Predict(Msg(model=model, bin_data=b"raw")).bin_data == b"raw"
    reply = http.post("/grps/v1/infer/predict", json={"model": "message_echo", "str_data": "hi"})
    assert reply.json()["str_data"] == "hi"

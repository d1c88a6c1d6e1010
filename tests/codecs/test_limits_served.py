"""server.yml's `limits` reach the codecs on every transport: a real server with small limits refuses
what its codecs would otherwise accept, with 400 / INVALID_ARGUMENT naming the limit."""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import orjson
import pytest

from grps_py.protos import grps_pb2, grps_pb2_grpc
from grps_py.protos import open_inference_pb2 as pb
from grps_py.protos import open_inference_pb2_grpc as pb_grpc
from support import BASIC, ServerThread, start_project

SERVER_YML = """
interface: {framework: http+grpc, host: 127.0.0.1, port: "0,0"}
limits: {tensors: 2, elements: 10, json_depth: 6, string_bytes: 8, http_body_bytes: 65536}
"""
INFERENCE_YML = """
models:
  - {name: echo, version: "1.0", inferer_type: customized, inferer_name: echo, converter_type: none}
  - {name: identity, version: "1", inferer_type: customized, inferer_name: identity, converter_type: numpy}
dag:
  type: sequential
  name: just_echo
  nodes: [{name: echo, type: model, model: echo-1.0}]
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    conf: Path = tmp_path_factory.mktemp("limits")
    (conf / "server.yml").write_text(SERVER_YML)
    (conf / "inference.yml").write_text(INFERENCE_YML)
    thread = start_project(BASIC, conf / "inference.yml", conf / "server.yml")
    yield thread
    thread.stop()


@pytest.fixture
def http(server: ServerThread) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.http_url, timeout=30) as client:
        yield client


def grps_tensors(count: int) -> dict[str, object]:
    tensors = [{"name": f"t{i}", "dtype": "DT_INT32", "shape": [1], "flat_int32": [i]} for i in range(count)]
    return {"model": "echo-1.0", "gtensors": {"tensors": tensors}}


def oip_inputs(count: int, shape: list[int]) -> dict[str, object]:
    size = 1
    for dim in shape:
        size *= dim
    return {
        "inputs": [
            {"name": f"i{i}", "datatype": "INT32", "shape": shape, "data": [1] * size} for i in range(count)
        ]
    }


def refused(response: httpx.Response, message: str) -> None:
    assert response.status_code == 400, response.text
    assert message in response.text


def test_grps_http_json(http: httpx.Client) -> None:
    assert http.post("/grps/v1/infer/predict", json=grps_tensors(2)).status_code == 200
    refused(
        http.post("/grps/v1/infer/predict", json=grps_tensors(3)),
        "the request has 3 tensors; limits.tensors is 2",
    )
    refused(http.post("/grps/v1/infer/predict", json={"str_data": "x" * 9}), "limits.string_bytes (8)")
    deep = b'{"ndarray": ' + b"[" * 6 + b"1" + b"]" * 6 + b"}"
    refused(
        http.post("/grps/v1/infer/predict", content=deep),
        "the JSON nests 7 levels deep; limits.json_depth is 6",
    )


def test_grps_http_octet_stream(http: httpx.Client) -> None:
    headers = {"Content-Type": "application/octet-stream"}
    ok = http.post("/grps/v1/infer/predict?model=echo-1.0", content=bytes(8), headers=headers)
    assert ok.status_code == 200 and ok.content == bytes(8)
    refused(
        http.post("/grps/v1/infer/predict?model=echo-1.0", content=bytes(9), headers=headers),
        "bin_data: a value of 9 bytes exceeds limits.string_bytes (8)",
    )


def test_oip_http_json_and_binary(http: httpx.Client) -> None:
    assert http.post("/v2/models/identity/infer", json=oip_inputs(2, [5])).status_code == 200
    refused(http.post("/v2/models/identity/infer", json=oip_inputs(3, [1])), "3 inputs; limits.tensors is 2")
    refused(
        http.post("/v2/models/identity/infer", json=oip_inputs(1, [11])),
        "11 elements exceed limits.elements (10)",
    )
    header = orjson.dumps(
        {
            "inputs": [
                {"name": "x", "datatype": "INT8", "shape": [2**40], "parameters": {"binary_data_size": 4}}
            ]
        }
    )
    response = http.post(
        "/v2/models/identity/infer",
        content=header + bytes(4),
        headers={"Inference-Header-Content-Length": str(len(header))},
    )
    refused(response, "input 'x': 1099511627776 elements exceed limits.elements (10)")


def test_oip_http_decompressed_body_is_held_to_the_body_limit(http: httpx.Client) -> None:
    """A small gzip body that inflates past limits.http_body_bytes is refused, not inflated."""
    body = gzip.compress(b" " * 70000 + orjson.dumps(oip_inputs(1, [1])))
    response = http.post("/v2/models/identity/infer", content=body, headers={"Content-Encoding": "gzip"})
    assert response.status_code == 413, response.text
    assert "the decompressed body exceeds 65536 bytes" in response.text
    small = gzip.compress(orjson.dumps(oip_inputs(1, [1])))
    ok = http.post("/v2/models/identity/infer", content=small, headers={"Content-Encoding": "gzip"})
    assert ok.status_code == 200


def test_oip_http_generate(http: httpx.Client) -> None:
    refused(http.post("/v2/models/identity/generate", json={"a": 1, "b": 2, "c": 3}), "limits.tensors is 2")
    refused(http.post("/v2/models/identity/generate", json={"a": ["x" * 9]}), "limits.string_bytes (8)")


def test_grps_grpc(server: ServerThread) -> None:
    with grpc.insecure_channel(server.grpc_target) as channel:
        stub = grps_pb2_grpc.GrpsServiceStub(channel)
        msg = grps_pb2.GrpsMessage(model="echo-1.0", bin_data=bytes(9))
        answer = stub.Predict(msg)
        assert (answer.status.code, answer.status.status) == (400, grps_pb2.Status.FAILURE)
        assert "limits.string_bytes (8)" in answer.status.msg
        assert stub.Predict(grps_pb2.GrpsMessage(model="echo-1.0", bin_data=bytes(8))).bin_data == bytes(8)


def test_oip_grpc(server: ServerThread) -> None:
    with grpc.insecure_channel(server.grpc_target) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        request = pb.ModelInferRequest(model_name="identity")
        request.inputs.add(name="x", datatype="INT32", shape=[2**40])
        request.raw_input_contents.append(bytes(4))
        with pytest.raises(grpc.RpcError) as caught:
            stub.ModelInfer(request)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "1099511627776 elements exceed limits.elements (10)" in (caught.value.details() or "")
        stream = stub.ModelStreamInfer(iter([request]))
        assert "limits.elements (10)" in next(iter(stream)).error_message

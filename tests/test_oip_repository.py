"""Triton's repository index over HTTP and gRPC on a server whose models load at start-up only
(model_control: none; tests/test_model_lifecycle*.py change them), and the OIP error body of a /v2
path no route serves."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
import tritonclient.grpc as tgrpc
import tritonclient.http as thttp
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from support import PROJECTS, ServerThread, start_project

OIP_EXT = PROJECTS / "oip_ext"
EVERY_MODEL = [("identity", "1"), ("pipeline", "1"), ("rows", "2"), ("scores", "1")]


@pytest.fixture(scope="module")
def server() -> Iterator[ServerThread]:
    running = start_project(OIP_EXT)
    yield running
    running.stop()


@pytest.fixture
def stub(server: ServerThread) -> Iterator[service_pb2_grpc.GRPCInferenceServiceStub]:
    with grpc.insecure_channel(server.grpc_target) as channel:
        yield service_pb2_grpc.GRPCInferenceServiceStub(channel)


def indexes(server: ServerThread) -> list[list[dict[str, Any]]]:
    """The index as tritonclient reads it over HTTP and over gRPC."""
    with thttp.InferenceServerClient(server.http_url.removeprefix("http://")) as http:
        over_http = http.get_model_repository_index()
    with tgrpc.InferenceServerClient(server.grpc_target) as client:
        over_grpc = client.get_model_repository_index(as_json=True)["models"]
    return [over_http, over_grpc]


def test_every_model_and_the_dag_are_listed_ready(server: ServerThread) -> None:
    for index in indexes(server):
        assert [(m["name"], m["version"]) for m in index] == EVERY_MODEL
        assert {m["state"] for m in index} == {"READY"}
        assert {m.get("reason", "") for m in index} == {""}


def test_an_offline_server_lists_them_unavailable(server: ServerThread, stub: Any) -> None:
    server.server.executor.offline()
    try:
        for index in indexes(server):
            assert {(m["state"], m["reason"]) for m in index} == {("UNAVAILABLE", "the server is offline")}
        reply = httpx.post(f"{server.http_url}/v2/repository/index", json={"ready": True})
        assert reply.status_code == 200 and reply.json() == []
        assert not stub.RepositoryIndex(service_pb2.RepositoryIndexRequest(ready=True)).models
    finally:
        server.server.executor.online()
    assert len(stub.RepositoryIndex(service_pb2.RepositoryIndexRequest(ready=True)).models) == 4


def test_index_requests_are_checked(server: ServerThread, stub: Any) -> None:
    url = f"{server.http_url}/v2/repository/index"
    for body in (b'{"ready": "yes"}', b"[true]", b"{"):
        reply = httpx.post(url, content=body)
        assert reply.status_code == 400 and "error" in reply.json(), body
    assert httpx.post(url, content=b"").status_code == 200  # the body is optional
    assert httpx.get(url).status_code == 405
    with pytest.raises(grpc.RpcError) as caught:
        stub.RepositoryIndex(service_pb2.RepositoryIndexRequest(repository_name="other"))
    assert caught.value.code() == grpc.StatusCode.UNIMPLEMENTED


def test_load_and_unload_need_model_control_explicit(server: ServerThread) -> None:
    """model_control: none (the default): the models of inference.yml stay as loaded at start-up."""
    with thttp.InferenceServerClient(server.http_url.removeprefix("http://")) as http:
        for call in (lambda: http.load_model("identity"), lambda: http.unload_model("identity")):
            with pytest.raises(InferenceServerException) as caught:
                call()
            assert caught.value.status() == "501"
            assert "model_control is 'none'" in caught.value.message()
    with tgrpc.InferenceServerClient(server.grpc_target) as client:
        for grpc_call in (lambda: client.load_model("identity"), lambda: client.unload_model("identity")):
            with pytest.raises(InferenceServerException) as caught:
                grpc_call()
            assert caught.value.status() == "StatusCode.UNIMPLEMENTED"
            assert "needs model_control: explicit" in caught.value.message()


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v2/nope"),
        ("POST", "/v2/models/identity/nope"),
        ("POST", "/v2/repository/models/identity/reload"),
        ("GET", "/v2/systemsharedmemory/nope"),
        ("DELETE", "/v2/models/identity/versions/1/stats/x"),
    ],
)
def test_an_unknown_v2_path_answers_the_oip_error_body(server: ServerThread, method: str, path: str) -> None:
    """(An unknown /grps/v1 path keeps the grps envelope.)"""
    reply = httpx.request(method, server.http_url + path)
    assert reply.status_code == 404
    body = reply.json()
    assert list(body) == ["error"] and "no route" in body["error"]
    grps = httpx.request(method, server.http_url + path.replace("/v2/", "/grps/v1/", 1))
    assert grps.status_code == 404 and grps.json()["status"]["code"] == 404


def test_the_index_is_open_like_metadata_on_a_token_server(tmp_path: Path) -> None:
    conf = tmp_path / "server.yml"
    conf.write_text(
        "interface: {host: 127.0.0.1, port: '0,0'}\n"
        "security: {admin_token: admin-secret, inference_tokens: [infer-secret]}\n"
    )
    guarded = start_project(OIP_EXT, server_conf=conf)
    try:
        assert [len(index) for index in indexes(guarded)] == [4, 4]
        doc = {"inputs": [{"name": "x", "shape": [1], "datatype": "INT32", "data": [1]}]}
        assert httpx.post(f"{guarded.http_url}/v2/models/identity/infer", json=doc).status_code == 401
    finally:
        guarded.stop()

"""GrpsClient's model management (Triton's repository extension) against real servers, over HTTP and
gRPC alike; and the requests it builds, without a server."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable, Iterator

import orjson
import pytest

from grps_py.client import GrpsClient, GrpsClientError, GrpsConnectionError
from grps_py.client.auth import authorization
from grps_py.client.http_wire import HttpUrl
from grps_py.client.repository_wire import (
    config_json,
    index_call,
    index_rows,
    load_call,
    load_request,
    read_done,
    read_index,
    unload_call,
    unload_request,
)
from grps_py.protos import open_inference_pb2 as oip_pb2
from support import PROJECTS, ServerThread, start_project

PROJECT = PROJECTS / "lifecycle_cli"
PROTOCOLS = ("http", "grpc")
ADMIN_TOKEN = "lifecycle-cli-admin"  # conf/server_token.yml
SPARE_V2 = {  # a new version of a model the DAG does not use (a config replaces the model's versions)
    "name": "spare",
    "version": "2",
    "inferer_type": "customized",
    "inferer_name": "lifecycle_cli_spare_v2",
    "converter_type": "none",
}


def serve(server_conf: str) -> Iterator[ServerThread]:
    running = start_project(PROJECT, server_conf=PROJECT / "conf" / server_conf)
    yield running
    running.stop()


@pytest.fixture(scope="module")
def server() -> Iterator[ServerThread]:
    yield from serve("server.yml")


@pytest.fixture(scope="module")
def token_server() -> Iterator[ServerThread]:
    yield from serve("server_token.yml")


@pytest.fixture(scope="module")
def static_server() -> Iterator[ServerThread]:
    yield from serve("server_static.yml")


def connect(server: ServerThread, protocol: str, token: str | None = None) -> GrpsClient:
    url = server.http_url if protocol == "http" else server.grpc_target
    return GrpsClient(url, protocol=protocol, timeout=60, token=token)


@pytest.fixture(params=PROTOCOLS)
def client(request: pytest.FixtureRequest, server: ServerThread) -> Iterator[GrpsClient]:
    with connect(server, request.param) as c:
        yield c


def states(client: GrpsClient, ready: bool = False) -> dict[tuple[str, str], tuple[str, str]]:
    return {(m["name"], m["version"]): (m["state"], m["reason"]) for m in client.repository_index(ready)}


def refused(call: Callable[[], object]) -> GrpsClientError:
    with pytest.raises(GrpsClientError) as caught:
        call()
    return caught.value


# --- against a server with model_control: explicit ----------------------------------------------


def test_the_index_lists_every_model_and_the_dag_ready(client: GrpsClient) -> None:
    for ready in (False, True):
        index = states(client, ready)
        for key in (("greeter", "1"), ("spare", "1"), ("main", "1")):
            assert index[key] == ("READY", ""), (key, index)
    assert all(set(row) == {"name", "version", "state", "reason"} for row in client.repository_index())


def test_unload_then_load_again(client: GrpsClient) -> None:
    client.unload_model("spare")
    state, reason = states(client)[("spare", "1")]
    assert state == "UNAVAILABLE" and reason
    assert ("spare", "1") not in states(client, ready=True)
    refused(lambda: client.predict("hi", model="spare-1"))
    client.load_model("spare")  # no config: inference.yml's entry again
    assert states(client)[("spare", "1")] == ("READY", "")
    assert client.predict("hi", model="spare-1") == "spare v1: hi"


def test_load_a_new_version_from_a_config(client: GrpsClient) -> None:
    try:
        client.load_model("spare", SPARE_V2)
        assert states(client, ready=True)[("spare", "2")] == ("READY", "")
        assert client.predict("hi", model="spare-2") == "spare v2: hi"
    finally:
        client.load_model("spare")  # as inference.yml says again
    assert client.predict("hi", model="spare-1") == "spare v1: hi"


def test_a_failed_load_leaves_the_old_version_serving(client: GrpsClient) -> None:
    broken = {**SPARE_V2, "name": "greeter", "version": "1", "inferer_name": "lifecycle_cli_no_such_inferer"}
    error = refused(lambda: client.load_model("greeter", broken))
    assert (error.status, error.code) == (400, "INVALID_ARGUMENT")
    assert "lifecycle_cli_no_such_inferer" in error.message
    assert client.predict("hi", model="greeter-1") == "greeter v1: hi"
    state, reason = states(client)[("greeter", "1")]
    assert state == "READY" and "lifecycle_cli_no_such_inferer" in reason  # why the new one is not
    client.load_model("greeter")
    assert states(client)[("greeter", "1")] == ("READY", "")


def test_a_model_the_dag_uses_is_unloaded_only_with_its_dependents(client: GrpsClient) -> None:
    error = refused(lambda: client.unload_model("greeter"))
    assert (error.status, error.code) == (400, "INVALID_ARGUMENT")
    assert states(client)[("greeter", "1")] == ("READY", "")


def test_unknown_models_are_not_found(client: GrpsClient) -> None:
    for call in (lambda: client.load_model("ghost"), lambda: client.unload_model("ghost")):
        error = refused(call)
        assert (error.status, error.code) == (404, "NOT_FOUND")
        assert "request_id=" in error.message


def test_an_empty_name_or_a_config_json_cannot_hold_is_refused_before_sending(client: GrpsClient) -> None:
    with pytest.raises(ValueError, match="model name"):
        client.load_model("")
    with pytest.raises(ValueError, match="JSON"):
        client.load_model("spare", {"name": "spare", "inferer_args": {"x": float("nan")}})
    with pytest.raises(ValueError, match="JSON"):
        client.load_model("spare", {"name": "spare", "inferer_args": {"x": object()}})


# --- access, and a server that has no model control ---------------------------------------------


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_admin_calls_need_the_admin_token(token_server: ServerThread, protocol: str) -> None:
    for token in (None, "not-the-token"):
        with connect(token_server, protocol, token) as client:
            for call in (
                lambda: client.load_model("spare"),
                lambda: client.unload_model("spare"),
                client.offline,
            ):
                error = refused(call)  # loopback is not enough once a token is configured
                assert (error.status, error.code) == (401, "UNAUTHENTICATED"), token
    with connect(token_server, protocol, ADMIN_TOKEN) as client:
        client.load_model("spare")
        client.offline()  # online/offline are admin calls too: the token goes with them
        client.online()
        assert states(client)[("spare", "1")] == ("READY", "")


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_without_model_control_loads_are_not_implemented(static_server: ServerThread, protocol: str) -> None:
    with connect(static_server, protocol) as client:
        for call in (lambda: client.load_model("greeter"), lambda: client.unload_model("spare")):
            error = refused(call)
            assert (error.status, error.code) == (501, "UNIMPLEMENTED")
        assert states(client)[("spare", "1")] == ("READY", "")  # the index still answers


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_no_server_is_a_connection_error(protocol: str) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, never listening: refused
        with GrpsClient(f"127.0.0.1:{port}", protocol=protocol, timeout=10) as client:
            for call in (client.repository_index, lambda: client.load_model("m")):
                with pytest.raises(GrpsConnectionError) as caught:
                    call()
                assert caught.value.connecting


# --- the requests, without a server -------------------------------------------------------------


def test_http_requests_are_tritons() -> None:
    url = HttpUrl.parse("http://127.0.0.1:1/prefix")
    call = index_call(url, True)
    assert (call.method, call.target, orjson.loads(call.body)) == (
        "POST",
        "/prefix/v2/repository/index",
        {"ready": True},
    )
    config = config_json(SPARE_V2)
    assert config is not None
    call = load_call(url, "a/b c", config)
    assert call.target == "/prefix/v2/repository/models/a%2Fb%20c/load"  # a name is one path segment
    sent = orjson.loads(call.body)["parameters"]["config"]
    assert isinstance(sent, str) and json.loads(sent) == SPARE_V2  # a JSON string, as Triton sends it
    assert orjson.loads(load_call(url, "m", None).body) == {}
    call = unload_call(url, "m", True)
    assert call.target == "/prefix/v2/repository/models/m/unload"
    assert orjson.loads(call.body) == {"parameters": {"unload_dependents": True}}


def test_grpc_requests_are_tritons() -> None:
    request = load_request("m", '{"name": "m"}')
    assert request.model_name == "m" and request.parameters["config"].string_param == '{"name": "m"}'
    assert not load_request("m", None).parameters
    request = unload_request("m", True)
    assert request.parameters["unload_dependents"].bool_param is True
    answer = oip_pb2.RepositoryIndexResponse(
        models=[oip_pb2.RepositoryIndexResponse.ModelIndex(name="m", version="1", state="READY")]
    )
    assert index_rows(answer) == [{"name": "m", "version": "1", "state": "READY", "reason": ""}]


def test_answers_are_read_as_oip_errors() -> None:
    assert read_index(200, "OK", b'[{"name": "m", "version": "1", "state": "READY"}]') == [
        {"name": "m", "version": "1", "state": "READY", "reason": ""}
    ]
    read_done(200, "OK", b"")
    with pytest.raises(GrpsClientError) as caught:
        read_done(501, "Not Implemented", b'{"error": "model control is not enabled"}')
    assert (caught.value.status, caught.value.code, caught.value.message) == (
        501,
        "UNIMPLEMENTED",
        "model control is not enabled",
    )
    with pytest.raises(GrpsClientError, match="502 UNAVAILABLE: HTTP 502 Bad Gateway: <html>"):
        read_done(502, "Bad Gateway", b"<html>")
    for body in (b"{", b'{"name": "m"}', b'[{"name": 1}]', b"[1]"):
        with pytest.raises(GrpsClientError) as caught:
            read_index(200, "OK", body)
        assert caught.value.status == 500, body


def test_a_token_must_fit_a_header() -> None:
    assert authorization(None) is None
    assert authorization("abc.DEF-123") == "Bearer abc.DEF-123"
    for token in ("", "two words", "line\nbreak", "é"):
        with pytest.raises(ValueError, match="token"):
            authorization(token)
        with pytest.raises(ValueError, match="token"):
            GrpsClient("127.0.0.1:1", protocol="grpc", token=token)

"""grps's template clients, unchanged in what they send, against a grps-py server.

grps's project template ships template/py_template/client/python/{http_client,grpc_client}.py: a user
points them at a grps server and reads what they print. Their calls are written out below in the same
order with the same requests (HTTP with httpx instead of requests; gRPC through `grps_apis`, the stub
package grps's client imports), against tests/projects/grps_template served for real. The HTTP client's
`gmap` has an `s_t` map the proto does not have (grps ignores unknown JSON fields), and both clients ask
for the metadata of `your_model`, which no server has: grps answers that with a FAILURE envelope, also
over gRPC, where an aborted call would end the client's script with an exception.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import grpc
import httpx
import orjson
import pytest
import yaml

from support import PROJECTS, ServerThread, start_project

TEMPLATE = PROJECTS / "grps_template"


@pytest.fixture(scope="module")
def server() -> Iterator[ServerThread]:
    running = start_project(TEMPLATE)
    yield running
    running.stop()


# -- the HTTP client ------------------------------------------------------------------------------


def http_client_calls(server: str) -> dict[str, Any]:
    """grps's http_client.py, call by call; each answer kept under the step's name."""
    url = f"http://{server}"
    got: dict[str, Any] = {}
    got["live"] = httpx.get(url + "/grps/v1/health/live").json()
    got["online"] = httpx.get(url + "/grps/v1/health/online").json()
    got["ready"] = httpx.get(url + "/grps/v1/health/ready").json()
    got["str_data"] = httpx.post(url + "/grps/v1/infer/predict", json={"str_data": "hello grps."}).json()
    with httpx.stream(
        "POST", url + "/grps/v1/infer/predict?streaming=true", json={"str_data": "hello grps."}
    ) as response:
        got["streaming"] = b"".join(response.iter_raw())
    g_tensors = {
        "tensors": [
            {"name": "inp", "dtype": "DT_FLOAT32", "shape": [2, 3], "flat_float32": [1, 2, 3, 4, 5, 6]}
        ]
    }
    got["gtensors"] = httpx.post(url + "/grps/v1/infer/predict", json={"gtensors": g_tensors}).json()
    gmap = {
        "s_s": {"key": "value"},
        "s_b": {"key": base64.b64encode(b"hello grps.").decode("utf-8")},
        "s_i32": {"key": 1},
        "s_i64": {"key": 1},
        "s_f": {"key": 1.0},
        "s_d": {"key": 1.0},
        "s_t": {"key": {"dtype": "DT_FLOAT32", "shape": [2, 3], "flat_float32": [1, 2, 3, 4, 5, 6]}},
    }
    got["gmap"] = httpx.post(url + "/grps/v1/infer/predict", json={"gmap": gmap}).json()
    got["ndarray"] = httpx.post(
        url + "/grps/v1/infer/predict?return-ndarray=true", json={"ndarray": [[1, 2, 3], [4, 5, 6]]}
    ).json()
    got["bin_data"] = httpx.post(
        url + "/grps/v1/infer/predict",
        content=b"hello grps.",
        headers={"content-type": "application/octet-stream"},
    ).content
    got["server_metadata"] = httpx.get(url + "/grps/v1/metadata/server").json()
    got["your_model"] = httpx.post(url + "/grps/v1/metadata/model", json={"str_data": "your_model"}).json()
    got["model_metadata"] = httpx.post(
        url + "/grps/v1/metadata/model", json={"str_data": "greeter-1.0.0"}
    ).json()
    got["offline"] = httpx.get(url + "/grps/v1/health/offline").json()
    got["ready_after_offline"] = httpx.get(url + "/grps/v1/health/ready").json()
    return got


OK = {"code": 200, "msg": "OK", "status": "SUCCESS"}


def test_grps_http_template_client(server: ServerThread) -> None:
    got = http_client_calls(server.http_url.removeprefix("http://"))
    for step in ("live", "online", "ready", "offline"):
        assert got[step] == {"status": OK}, step
    assert got["str_data"] == {"status": OK, "str_data": "hello hello grps."}
    streamed = [orjson.loads(line)["str_data"] for line in got["streaming"].splitlines()]
    assert streamed == ["hello", "hello grps."]
    (y,) = got["gtensors"]["gtensors"]["tensors"]  # the greeter scales float tensors by 2
    assert (y["shape"], y["flat_float32"]) == ([2, 3], [2.0, 4.0, 6.0, 8.0, 10.0, 12.0])
    assert got["gmap"]["status"] == OK  # the unknown `s_t` map is ignored, as grps ignores it
    assert got["ndarray"] == {"status": OK, "ndarray": [[2.0, 4.0, 6.0], [8.0, 10.0, 12.0]]}
    assert orjson.loads(got["bin_data"])["status"] == OK
    assert "greeter-1.0.0" in yaml.safe_load(got["server_metadata"]["str_data"])["models"]
    assert got["your_model"]["status"]["code"] == 404 and got["your_model"]["status"]["status"] == "FAILURE"
    assert yaml.safe_load(got["model_metadata"]["str_data"])["name"] == "greeter"
    assert got["ready_after_offline"]["status"]["status"] == "FAILURE"
    httpx.get(f"{server.http_url}/grps/v1/health/online")  # as the next test expects it


# -- the gRPC client ------------------------------------------------------------------------------


def grpc_client_calls(server: str) -> dict[str, Any]:
    """grps's grpc_client.py, call by call, importing what it imports (`grps_apis`)."""
    from grps_apis.grps_pb2 import DataType, GenericTensor, GrpsMessage
    from grps_apis.grps_pb2_grpc import GrpsServiceStub

    got: dict[str, Any] = {}
    with grpc.insecure_channel(server) as conn:
        client = GrpsServiceStub(channel=conn)
        got["live"] = client.CheckLiveness(GrpsMessage())
        got["online"] = client.Online(GrpsMessage())
        got["ready"] = client.CheckReadiness(GrpsMessage())
        got["str_data"] = client.Predict(GrpsMessage(str_data="hello grps."))
        request = GrpsMessage()
        gtensor = GenericTensor(
            name="inp", dtype=DataType.DT_FLOAT32, shape=[2, 3], flat_float32=[1, 2, 3, 4, 5, 6]
        )
        request.gtensors.tensors.append(gtensor)
        got["gtensors"] = client.Predict(request)
        got["bin_data"] = client.Predict(GrpsMessage(bin_data=b"hello grps."))
        request = GrpsMessage()
        request.gmap.s_s["key"] = "hello grps."
        request.gmap.s_b["key"] = b"hello grps."
        request.gmap.s_i32["key"] = 1
        request.gmap.s_i64["key"] = 1
        request.gmap.s_f["key"] = 1.0
        request.gmap.s_d["key"] = 1.0
        got["gmap"] = client.Predict(request)
        got["streaming"] = list(client.PredictStreaming(GrpsMessage(str_data="hello grps.")))
        got["server_metadata"] = client.ServerMetadata(GrpsMessage())
        got["your_model"] = client.ModelMetadata(GrpsMessage(str_data="your_model"))
        got["model_metadata"] = client.ModelMetadata(GrpsMessage(str_data="greeter-1.0.0"))
        got["offline"] = client.Offline(GrpsMessage())
        got["ready_after_offline"] = client.CheckReadiness(GrpsMessage())
        client.Online(GrpsMessage())
    return got


def test_grps_grpc_template_client(server: ServerThread) -> None:
    from grps_apis.grps_pb2 import Status

    got = grpc_client_calls(server.grpc_target)
    for step in ("live", "online", "ready", "str_data", "gtensors", "bin_data", "gmap", "offline"):
        status = got[step].status
        assert (status.code, status.msg, status.status) == (200, "OK", Status.SUCCESS), step
    assert got["str_data"].str_data == "hello hello grps."
    assert list(got["gtensors"].gtensors.tensors[0].flat_float32) == [2.0, 4.0, 6.0, 8.0, 10.0, 12.0]
    assert [m.str_data for m in got["streaming"]] == ["hello", "hello grps."]
    assert "greeter-1.0.0" in yaml.safe_load(got["server_metadata"].str_data)["models"]
    missing = got["your_model"].status
    assert (missing.code, missing.status) == (404, Status.FAILURE) and "your_model" in missing.msg
    assert yaml.safe_load(got["model_metadata"].str_data)["name"] == "greeter"
    assert got["ready_after_offline"].status.status == Status.FAILURE

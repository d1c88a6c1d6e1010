"""One online flag shared by HTTP and gRPC; offline drains load balancers but still serves."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from grps_py.protos import grps_pb2, grps_pb2_grpc

Msg = grps_pb2.GrpsMessage


@pytest.fixture
def restore_online(http: httpx.Client) -> Iterator[None]:
    yield
    http.get("/grps/v1/health/online")


def test_offline_over_http_is_seen_over_grpc(
    http: httpx.Client, grps_stub: grps_pb2_grpc.GrpsServiceStub, restore_online: None
) -> None:
    assert http.get("/grps/v1/health/offline").json()["status"]["status"] == "SUCCESS"
    ready = http.get("/grps/v1/health/ready")
    assert ready.status_code == 503
    assert ready.json()["status"]["status"] == "FAILURE"
    reply = grps_stub.CheckReadiness(Msg())  # status OK on the wire, FAILURE in the envelope
    assert (reply.status.code, reply.status.status) == (503, grps_pb2.Status.FAILURE)
    assert http.get("/grps/v1/health/live").status_code == 200
    # Predictions are still served while offline.
    assert http.post("/grps/v1/infer/predict", json={"model": "echo", "str_data": "x"}).status_code == 200
    assert grps_stub.Predict(Msg(model="echo", str_data="y")).str_data == "y"


def test_online_over_grpc_is_seen_over_http(
    http: httpx.Client, grps_stub: grps_pb2_grpc.GrpsServiceStub, restore_online: None
) -> None:
    grps_stub.Offline(Msg())
    assert http.get("/grps/v1/health/ready").status_code == 503
    assert grps_stub.Online(Msg()).status.status == grps_pb2.Status.SUCCESS
    assert http.get("/grps/v1/health/ready").status_code == 200
    assert grps_stub.CheckReadiness(Msg()).status.code == 200

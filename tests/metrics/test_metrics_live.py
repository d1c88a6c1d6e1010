"""Request counters move per protocol and outcome on a live server: grps HTTP and gRPC, OIP HTTP
and gRPC (tritonclient), and custom routes, each with successes and failures of several reasons."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import httpx
import numpy as np
import pytest
import tritonclient.grpc as triton_grpc
import tritonclient.http as triton_http
from prometheus_client.parser import text_string_to_metric_families
from tritonclient.utils import InferenceServerException

from grps_py.protos import grps_pb2, grps_pb2_grpc
from support import PROJECTS, ServerThread, start_project

PREDICT = "/grps/v1/infer/predict"
Counts = dict[tuple[str, str, str, str], float]


@pytest.fixture(scope="module")
def server() -> Iterator[ServerThread]:
    running = start_project(PROJECTS / "custom_http")
    yield running
    running.stop()


def request_counts(server: ServerThread) -> Counts:
    text = httpx.get(f"{server.http_url}/metrics").text
    counts: Counts = {}
    for family in text_string_to_metric_families(text):
        if family.name != "grps_requests":
            continue
        for sample in family.samples:
            if sample.name.endswith("_total"):
                labels = sample.labels
                key = (labels["protocol"], labels["model"], labels["outcome"], labels["reason"])
                counts[key] = counts.get(key, 0) + sample.value
    return counts


def oip_bytes_input(module: object, name: str = "text") -> object:
    tensor = module.InferInput(name, [1], "BYTES")  # type: ignore[attr-defined]
    tensor.set_data_from_numpy(np.array([b"x"], dtype=object))
    return tensor


def send_mixed_traffic(server: ServerThread) -> None:
    with httpx.Client(base_url=server.http_url, timeout=30) as http:
        assert http.post(PREDICT, json={"model": "upper-1", "str_data": "a"}).status_code == 200
        assert http.post(PREDICT, json={"model": "ghost-1", "str_data": "a"}).status_code == 404
        assert http.post(PREDICT, content=b"{not json").status_code == 400
        assert http.post("/raw?form=str", content=b"x").status_code == 200
        assert http.post("/raw?form=raise", content=b"x").status_code == 500
        assert http.post("/v2/models/upper/infer", content=b"{not json").status_code == 400
    with grpc.insecure_channel(server.grpc_target) as channel:
        stub = grps_pb2_grpc.GrpsServiceStub(channel)
        assert stub.Predict(grps_pb2.GrpsMessage(model="upper-1", str_data="a")).str_data == "A"
        # No HTTP request: the model fails (grps answers a failure in the message, with status OK).
        failed = stub.Predict(grps_pb2.GrpsMessage(model="inspect-1"))
        assert failed.status.status == grps_pb2.Status.FAILURE
    oip_http = triton_http.InferenceServerClient(server.http_url.removeprefix("http://"))
    with pytest.raises(InferenceServerException):
        oip_http.infer("ghost", [oip_bytes_input(triton_http)])
    oip_grpc = triton_grpc.InferenceServerClient(server.grpc_target)
    with pytest.raises(InferenceServerException):
        oip_grpc.infer("ghost", [oip_bytes_input(triton_grpc)])


def test_counters_move_per_protocol_and_outcome(server: ServerThread) -> None:
    before = request_counts(server)
    send_mixed_traffic(server)
    after = request_counts(server)
    moved = {key for key, value in after.items() if value > before.get(key, 0)}
    expected = {
        ("grps-http", "upper", "success", ""),
        ("grps-http", "unknown", "failure", "not_found"),
        ("grps-http", "unknown", "failure", "invalid"),
        ("custom", "inspect", "success", ""),
        ("custom", "inspect", "failure", "model_error"),
        ("oip-http", "upper", "failure", "invalid"),  # the URL names the model
        ("grps-grpc", "upper", "success", ""),
        ("grps-grpc", "inspect", "failure", "model_error"),
        ("oip-http", "unknown", "failure", "not_found"),
        ("oip-grpc", "unknown", "failure", "not_found"),
    }
    assert expected <= moved, sorted(expected - moved)

"""The same cases through every way a predict can be reached: same answers, same error categories, and
the server keeps serving.

- `http`: POST /grps/v1/infer/predict, a unary route answered on the connection (http/direct.py);
- `http-tornado`: the same route on a server whose streaming switch is a body key (`ctrl_mode:
  body_param`), which Tornado's web layer answers (`PredictHandler`, http/grps.py);
- `http-alias`: a custom route that is the predict API under another path (`customized_body: false`);
- `grpc`: GrpsService.Predict, whose failures are answers (status OK) carrying HTTP's status in their
  envelope, as grps answers: so the categories compared are HTTP statuses on every transport.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

import grpc
import httpx
import numpy as np
import pytest
from google.protobuf import json_format

from grps_py.protos import grps_pb2, grps_pb2_grpc
from support import BASIC, HTTP_CATEGORY, ServerThread, start_project


class Transport(Protocol):
    def predict(self, doc: dict[str, Any]) -> tuple[str, dict[str, Any] | str]: ...


class HttpTransport:
    def __init__(self, client: httpx.Client, path: str = "/grps/v1/infer/predict") -> None:
        self.client = client
        self.path = path

    def predict(self, doc: dict[str, Any]) -> tuple[str, dict[str, Any] | str]:
        reply = self.client.post(self.path, json=doc)
        body = reply.json()
        category = HTTP_CATEGORY[reply.status_code]
        assert body["status"]["status"] == ("SUCCESS" if category == "ok" else "FAILURE")
        assert body["status"]["code"] == reply.status_code
        if category != "ok":
            return category, body["status"]["msg"]
        body.pop("status")
        return category, body


class GrpcTransport:
    def __init__(self, stub: grps_pb2_grpc.GrpsServiceStub) -> None:
        self.stub = stub

    def predict(self, doc: dict[str, Any]) -> tuple[str, dict[str, Any] | str]:
        """A failure is answered as grps answers it: status OK, its HTTP status in the envelope."""
        request = json_format.ParseDict(doc, grps_pb2.GrpsMessage())
        reply, call = self.stub.Predict.with_call(request, timeout=30)
        assert call.code() == grpc.StatusCode.OK
        category = HTTP_CATEGORY[reply.status.code]
        ok = category == "ok"
        assert reply.status.status == (grps_pb2.Status.SUCCESS if ok else grps_pb2.Status.FAILURE)
        if not ok:
            assert reply.WhichOneof("data_oneof") is None
            return category, reply.status.msg
        body = json_format.MessageToDict(reply, preserving_proto_field_name=True)
        body.pop("status")
        return "ok", body


@pytest.fixture(scope="module")
def tornado_server() -> Iterator[ServerThread]:
    """The basic project with `ctrl_mode: body_param` (every predict through Tornado) and an alias route."""
    running = start_project(BASIC, server_conf=BASIC / "conf" / "server_body_ctrl.yml")
    yield running
    running.stop()


@pytest.fixture(scope="module")
def tornado_http(tornado_server: ServerThread) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=tornado_server.http_url, timeout=30) as client:
        yield client


@pytest.fixture(params=["http", "http-tornado", "http-alias", "grpc"])
def transport(request: pytest.FixtureRequest, http: httpx.Client, grps_stub: Any) -> Transport:
    if request.param == "http":
        return HttpTransport(http)
    if request.param == "grpc":
        return GrpcTransport(grps_stub)
    client = request.getfixturevalue("tornado_http")
    return HttpTransport(
        client, "/grps/v1/infer/predict" if request.param == "http-tornado" else "/my/predict"
    )


def tensor(name: str, dtype: str, shape: list[int], field: str, values: list[Any]) -> dict[str, Any]:
    return {"name": name, "dtype": dtype, "shape": shape, field: values}


def test_str_data_round_trips_through_converter_none(transport: Transport) -> None:
    assert transport.predict({"model": "echo-1.0", "str_data": "hello grps"}) == (
        "ok",
        {"str_data": "hello grps"},
    )


def test_gmap_round_trips(transport: Transport) -> None:
    gmap = {"s_s": {"k": "v"}, "s_i32": {"a": 7}, "s_i64": {"b": "9000000000"}, "s_d": {"c": 0.25}}
    category, body = transport.predict({"model": "echo-1.0", "gmap": gmap})
    assert category == "ok"
    assert body == {"gmap": gmap}


def test_default_dag_runs_nodes_in_sequence(transport: Transport) -> None:
    x = tensor("x", "DT_FLOAT32", [3], "flat_float32", [1.0, 2.0, 3.0])
    category, body = transport.predict({"gtensors": {"tensors": [x]}})
    assert category == "ok"
    (out,) = body["gtensors"]["tensors"]  # type: ignore[index]
    assert out["name"] == "y" and out["dtype"] == "DT_FLOAT32" and out["shape"] == [3]
    assert out["flat_float32"] == [3.0, 5.0, 7.0]  # double then add one


@pytest.mark.parametrize("model", ["classifier-1.0.0", "classifier_torch-1.0.0"])
def test_bundled_classifier_on_both_backends(transport: Transport, model: str) -> None:
    x = tensor("x", "DT_FLOAT32", [2, 4], "flat_float32", [0.1, 0.2, 0.3, 0.4, -1.0, 0.5, 2.0, 0.0])
    category, body = transport.predict({"model": model, "gtensors": {"tensors": [x]}})
    assert category == "ok"
    (out,) = body["gtensors"]["tensors"]  # type: ignore[index]
    assert out["shape"] == [2, 3]
    probs = np.array(out["flat_float32"]).reshape(2, 3)
    np.testing.assert_allclose(probs.sum(axis=1), [1.0, 1.0], rtol=1e-5)


def test_backends_agree(transport: Transport) -> None:
    x = tensor("x", "DT_FLOAT32", [1, 4], "flat_float32", [0.5, -0.5, 1.5, 3.0])
    outs = [
        transport.predict({"model": m, "gtensors": {"tensors": [x]}})[1]
        for m in ("classifier", "classifier_torch")
    ]
    values = [np.array(o["gtensors"]["tensors"][0]["flat_float32"]) for o in outs]  # type: ignore[index]
    np.testing.assert_allclose(values[0], values[1], rtol=1e-5, atol=1e-6)


def test_async_infer_and_customized_converter(transport: Transport) -> None:
    assert transport.predict({"model": "upper-1.0", "str_data": "abc"}) == ("ok", {"str_data": "ABC"})
    assert transport.predict({"model": "prefix-1.0", "str_data": "hi"}) == ("ok", {"str_data": "got: hi"})


def test_plain_name_selects_the_only_version(transport: Transport) -> None:
    assert transport.predict({"model": "echo", "str_data": "x"}) == ("ok", {"str_data": "x"})


BAD_CASES = [
    pytest.param({"model": "nope-9", "str_data": "x"}, "not_found", "nope-9", id="unknown-model"),
    pytest.param({"model": "raiser-1.0", "str_data": "x"}, "internal", "boom", id="model-raises"),
    pytest.param(
        {"model": "reporter-1.0", "str_data": "x"}, "internal", "reporter refused", id="model-reports"
    ),
    pytest.param(
        {"gtensors": {"tensors": [tensor("x", "DT_INT32", [2], "flat_float32", [1.0, 2.0])]}},
        "invalid",
        "flat_float32",
        id="dtype-mismatch",
    ),
    pytest.param(
        {"gtensors": {"tensors": [tensor("x", "DT_FLOAT32", [2, 3], "flat_float32", [1.0, 2.0])]}},
        "invalid",
        "shape",
        id="flat-length-mismatch",
    ),
    pytest.param(
        {
            "model": "classifier",
            "gtensors": {"tensors": [tensor("x", "DT_FLOAT32", [1, 3], "flat_float32", [1, 2, 3])]},
        },
        "invalid",
        "",
        id="wrong-shape-for-onnx",
    ),
    pytest.param(
        {
            "model": "classifier_torch",
            "gtensors": {"tensors": [tensor("x", "DT_FLOAT32", [1, 3], "flat_float32", [1, 2, 3])]},
        },
        "invalid",
        "",
        id="wrong-shape-for-torch",
    ),
    pytest.param(
        {
            "model": "classifier",
            "gtensors": {"tensors": [tensor("x", "DT_INT64", [1, 4], "flat_int64", [1, 2, 3, 4])]},
        },
        "invalid",
        "",
        id="wrong-dtype-for-onnx",
    ),
    pytest.param(
        {"model": "classifier", "str_data": "not tensors"}, "invalid", "", id="text-to-a-tensor-model"
    ),
]


@pytest.mark.parametrize(("doc", "category", "fragment"), BAD_CASES)
def test_bad_input_gets_a_clear_error_and_the_server_keeps_serving(
    transport: Transport, doc: dict[str, Any], category: str, fragment: str
) -> None:
    got_category, message = transport.predict(doc)
    assert got_category == category
    assert isinstance(message, str) and fragment in message
    assert "Traceback" not in message and 'File "' not in message
    assert "request_id=" in message
    assert len(message) < 500
    assert transport.predict({"model": "echo-1.0", "str_data": "still up"}) == (
        "ok",
        {"str_data": "still up"},
    )

"""Triton's classification extension through tritonclient, over HTTP (binary and JSON) and gRPC: a
requested output's top K classes as "value:index[:label]" strings, exactly as Triton writes them."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc
import httpx
import numpy as np
import pytest
from tritonclient.grpc import service_pb2, service_pb2_grpc

from oip_clients import OipClient
from support import PROJECTS, ServerThread, start_project

MODES = ["http-binary", "http-json", "grpc"]
SCORES = np.array([[0.1, 0.9, 0.3, 0.2], [5.0, 1.0, 2.0, 3.0]], np.float32)


@pytest.fixture(scope="module")
def server() -> Iterator[ServerThread]:
    running = start_project(PROJECTS / "oip_ext")
    yield running
    running.stop()


@pytest.fixture(params=MODES)
def oip(request: pytest.FixtureRequest, server: ServerThread) -> Iterator[OipClient]:
    protocol, _, encoding = request.param.partition("-")
    client = OipClient(protocol, server, binary=encoding != "json")
    yield client
    client.close()


def texts(array: np.ndarray) -> list[Any]:
    """The classes as str, whichever way they came (JSON answers BYTES as str, binary as bytes)."""
    flat = [v.decode() if isinstance(v, bytes) else v for v in array.reshape(-1).tolist()]
    return np.array(flat, dtype=object).reshape(array.shape).tolist()


def test_a_batched_model_answers_each_rows_top_classes_with_labels(oip: OipClient) -> None:
    """labels/scores.txt is "cat", "", "dog": index 1 has an empty label and index 3 none, so
    neither carries one."""
    answer = oip.infer("scores", {"probs": SCORES}, outputs=["probs"], class_count=3)
    assert not answer.error, answer.message
    assert texts(answer.outputs["probs"]) == [
        ["0.900000:1", "0.300000:2:dog", "0.200000:3"],
        ["5.000000:0:cat", "3.000000:3", "2.000000:2:dog"],
    ]


def test_more_classes_than_values_answers_every_value(oip: OipClient) -> None:
    answer = oip.infer("scores", {"probs": SCORES[:1]}, outputs=["probs"], class_count=10)
    assert answer.outputs["probs"].shape == (1, 4)
    assert texts(answer.outputs["probs"])[0][-1] == "0.100000:0:cat"


def test_an_unbatched_model_classifies_the_whole_tensor(oip: OipClient) -> None:
    """Integers are written as their digits; equal values keep their index order."""
    x = np.array([[1, 5, 10], [4, 5, -3]], np.int32)
    answer = oip.infer("identity", {"x": x}, outputs=["x"], class_count=4)
    assert answer.outputs["x"].shape == (4,)
    assert texts(answer.outputs["x"]) == ["10:2", "5:1", "5:4", "4:3"]


def test_float_values_are_written_as_cpp_to_string_writes_them(oip: OipClient) -> None:
    x = np.array([0.1, 1e20, -2.5, 1.0 / 3], np.float64)
    answer = oip.infer("identity", {"x": x}, outputs=["x"], class_count=4)
    assert texts(answer.outputs["x"]) == [
        "100000000000000000000.000000:1",
        "0.333333:3",
        "0.100000:0",
        "-2.500000:2",
    ]


def test_only_the_outputs_that_ask_are_classified(oip: OipClient) -> None:
    x, y = np.array([3, 1, 2], np.uint8), np.array([1.5], np.float32)
    answer = oip.infer("identity", {"x": x, "y": y}, outputs=["x"], class_count=1)
    assert texts(answer.outputs["x"]) == ["3:0"]
    plain = oip.infer("identity", {"x": x, "y": y}, outputs=["x", "y"])
    np.testing.assert_array_equal(plain.outputs["x"], x)


@pytest.mark.parametrize(
    ("arrays", "datatype"),
    [
        ({"x": np.array([b"a", b"b"], dtype=object)}, "BYTES"),
        ({"x": np.array([0.5, 1.5], np.float16)}, "FP16"),
        ({"x": np.array([True, False])}, "BOOL"),
    ],
)
def test_outputs_that_are_not_numbers_cannot_be_classified(
    oip: OipClient, arrays: dict[str, np.ndarray], datatype: str
) -> None:
    if datatype == "FP16" and not oip.binary:
        pytest.skip("FP16 goes as binary data here")
    answer = oip.infer("identity", arrays, outputs=["x"], class_count=2)
    assert answer.error == "invalid", answer
    assert "class results are not available" in answer.message and datatype in answer.message


# --- what tritonclient will not send: through plain HTTP and the gRPC stub ---------------------


def http_infer(server: ServerThread, outputs: list[dict[str, Any]]) -> httpx.Response:
    doc = {
        "inputs": [{"name": "x", "shape": [3], "datatype": "INT32", "data": [1, 2, 3]}],
        "outputs": outputs,
    }
    return httpx.post(f"{server.http_url}/v2/models/identity/infer", json=doc, timeout=30)


def grpc_infer(server: ServerThread, parameters: dict[str, service_pb2.InferParameter]) -> grpc.RpcError:
    msg = service_pb2.ModelInferRequest(model_name="identity")
    msg.inputs.add(name="x", datatype="INT32", shape=[3]).contents.int_contents.extend([1, 2, 3])
    output = msg.outputs.add(name="x")
    for key, value in parameters.items():
        output.parameters[key].CopyFrom(value)
    with grpc.insecure_channel(server.grpc_target) as channel, pytest.raises(grpc.RpcError) as caught:
        service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelInfer(msg)
    return caught.value


@pytest.mark.parametrize("count", [0, -1])
def test_fewer_than_one_class_is_invalid(server: ServerThread, count: int) -> None:
    reply = http_infer(server, [{"name": "x", "parameters": {"classification": count}}])
    assert reply.status_code == 400 and "'classification' must be" in reply.json()["error"]
    error = grpc_infer(server, {"classification": service_pb2.InferParameter(int64_param=count)})
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and "'classification' must be" in error.details()


def test_a_class_count_that_is_no_integer_is_invalid(server: ServerThread) -> None:
    for value in (2.5, "2", True):
        reply = http_infer(server, [{"name": "x", "parameters": {"classification": value}}])
        assert reply.status_code == 400 and "'classification' must be" in reply.json()["error"]
    error = grpc_infer(server, {"classification": service_pb2.InferParameter(string_param="2")})
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_classification_and_shared_memory_together_are_invalid(server: ServerThread) -> None:
    both = {"classification": 2, "shared_memory_region": "r", "shared_memory_byte_size": 8}
    reply = http_infer(server, [{"name": "x", "parameters": both}])
    assert reply.status_code == 400 and "can't set both" in reply.json()["error"]
    error = grpc_infer(
        server,
        {
            "classification": service_pb2.InferParameter(int64_param=2),
            "shared_memory_region": service_pb2.InferParameter(string_param="r"),
            "shared_memory_byte_size": service_pb2.InferParameter(int64_param=8),
        },
    )
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and "can't set both" in error.details()


def test_the_label_file_shows_in_the_model_config(server: ServerThread, oip: OipClient) -> None:
    options = {"as_json": True} if oip.protocol == "grpc" else {}
    config = oip.client.get_model_config("scores", **options)
    (output,) = config.get("config", config)["output"]
    assert output["label_filename"] == "labels/scores.txt"

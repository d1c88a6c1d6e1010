"""/v2 over HTTP: the JSON forms, the binary extension, errors as {"error": msg}, generate, aio."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import orjson
import pytest
import tritonclient.http as thttp
import tritonclient.http.aio as thttp_aio

from support import ServerThread

HEADER = "Inference-Header-Content-Length"


@pytest.fixture
def v2(basic_server: ServerThread) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=basic_server.http_url + "/v2", timeout=30) as client:
        yield client


def infer_doc(*inputs: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"inputs": list(inputs), **extra}


def test_nested_or_flat_json_data_answers_json(v2: httpx.Client) -> None:
    for data in ([[1, 2], [3, 4]], [1, 2, 3, 4]):
        doc = infer_doc({"name": "x", "shape": [2, 2], "datatype": "INT64", "data": data}, id="7")
        reply = v2.post("/models/identity/infer", json=doc)
        assert reply.status_code == 200 and reply.headers["content-type"] == "application/json"
        body = reply.json()
        assert body["id"] == "7" and body["model_name"] == "identity" and body["model_version"] == "1"
        assert body["outputs"] == [{"name": "x", "datatype": "INT64", "shape": [2, 2], "data": [1, 2, 3, 4]}]


def test_json_numbers_are_exact(v2: httpx.Client) -> None:
    doc = infer_doc(
        {"name": "big", "shape": [2], "datatype": "INT64", "data": [2**53 + 1, -(2**63)]},
        {"name": "f", "shape": [1], "datatype": "FP32", "data": [0.1]},
    )
    text = v2.post("/models/identity/infer", json=doc).text
    assert "9007199254740993" in text and "-9223372036854775808" in text
    assert orjson.loads(text)["outputs"][1]["data"] == [0.1]


@pytest.mark.parametrize(
    ("tensor", "fragment"),
    [
        ({"name": "x", "shape": [3], "datatype": "INT32", "data": [1, 2]}, "x"),
        ({"name": "x", "shape": [1], "datatype": "UINT8", "data": [300]}, "300"),
        ({"name": "x", "shape": [1], "datatype": "INT32", "data": [1.5]}, "x"),
        ({"name": "x", "shape": [1], "datatype": "BOOL", "data": [1]}, "x"),
        ({"name": "x", "shape": [1], "datatype": "FP99", "data": [1]}, "FP99"),
        ({"name": "x", "shape": [1], "datatype": "BF16", "data": [1.0]}, "BF16"),
    ],
)
def test_bad_tensors_are_400_with_an_error_message(
    v2: httpx.Client, tensor: dict[str, Any], fragment: str
) -> None:
    reply = v2.post("/models/identity/infer", json=infer_doc(tensor))
    assert reply.status_code == 400
    assert fragment in reply.json()["error"]


def test_malformed_bodies_and_unknown_models(v2: httpx.Client) -> None:
    reply = v2.post("/models/identity/infer", content=b"{not json")
    assert reply.status_code == 400 and "JSON" in reply.json()["error"]
    reply = v2.post(
        "/models/nope/infer", json=infer_doc({"name": "x", "shape": [1], "datatype": "INT32", "data": [1]})
    )
    assert reply.status_code == 404 and "nope" in reply.json()["error"]
    assert v2.get("/models/nope").status_code == 404
    assert v2.get("/models/nope/ready").status_code == 404
    assert v2.get("/models/identity/versions/5/config").status_code == 404


def test_binary_extension_by_hand(v2: httpx.Client) -> None:
    x = np.arange(6, dtype=np.float32)
    header = orjson.dumps(
        infer_doc(
            {"name": "x", "shape": [2, 3], "datatype": "FP32", "parameters": {"binary_data_size": 24}},
            parameters={"binary_data_output": True},
        )
    )
    reply = v2.post(
        "/models/identity/infer",
        content=header + x.tobytes(),
        headers={HEADER: str(len(header)), "Content-Type": "application/octet-stream"},
    )
    assert reply.status_code == 200 and reply.headers["content-type"] == "application/octet-stream"
    length = int(reply.headers[HEADER])
    meta = orjson.loads(reply.content[:length])
    assert meta["outputs"][0]["parameters"] == {"binary_data_size": 24}
    np.testing.assert_array_equal(np.frombuffer(reply.content[length:], np.float32), x)


def test_json_sent_as_octet_stream_is_read(v2: httpx.Client) -> None:
    body = orjson.dumps(infer_doc({"name": "x", "shape": [1], "datatype": "INT32", "data": [5]}))
    reply = v2.post(
        "/models/identity/infer", content=body, headers={"Content-Type": "application/octet-stream"}
    )
    assert reply.status_code == 200 and reply.json()["outputs"][0]["data"] == [5]


def test_each_requested_output_picks_binary_or_json(basic_server: ServerThread) -> None:
    client = thttp.InferenceServerClient(basic_server.http_url.removeprefix("http://"))
    a, b = np.array([1.5, 2.5], np.float32), np.array([b"x", b"yz"], dtype=object)
    inputs = [thttp.InferInput("a", [2], "FP32"), thttp.InferInput("b", [2], "BYTES")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b, binary_data=False)
    outputs = [
        thttp.InferRequestedOutput("a", binary_data=True),
        thttp.InferRequestedOutput("b", binary_data=False),
    ]
    result = client.infer("identity", inputs, outputs=outputs)
    by_name = {o["name"]: o for o in result.get_response()["outputs"]}
    assert by_name["a"]["parameters"] == {"binary_data_size": 8} and "data" not in by_name["a"]
    assert by_name["b"]["data"] == ["x", "yz"]
    np.testing.assert_array_equal(result.as_numpy("a"), a)
    client.close()


def test_readiness_follows_the_online_flag(basic_server: ServerThread, v2: httpx.Client) -> None:
    assert v2.get("/health/ready").json() == {"ready": True}
    basic_server.server.executor.offline()
    try:
        assert v2.get("/health/ready").status_code == 503
        assert v2.get("/models/identity/ready").status_code == 503
        assert v2.get("/health/live").json() == {"live": True}
    finally:
        basic_server.server.executor.online()
    assert v2.get("/models/identity/ready").json() == {"name": "identity", "ready": True}


def test_server_metadata_and_config_over_plain_http(v2: httpx.Client) -> None:
    meta = v2.get("").json()
    assert meta["name"] == "grps-py" and set(meta["extensions"]) >= {
        "binary_tensor_data",
        "model_configuration",
    }
    config = v2.get("/models/classifier/config").json()
    assert config["name"] == "classifier" and config["platform"] == "onnxruntime_onnx"
    assert config["input"] == [{"name": "x", "data_type": "TYPE_FP32", "dims": [-1, 4]}]


def test_compressed_requests_and_responses(basic_server: ServerThread) -> None:
    client = thttp.InferenceServerClient(basic_server.http_url.removeprefix("http://"))
    x = np.arange(1000, dtype=np.int32)
    for algorithm in ("gzip", "deflate"):
        item = thttp.InferInput("x", [1000], "INT32")
        item.set_data_from_numpy(x)
        result = client.infer(
            "identity",
            [item],
            request_compression_algorithm=algorithm,
            response_compression_algorithm=algorithm,
        )
        np.testing.assert_array_equal(result.as_numpy("x"), x)
    client.close()


def test_aio_client(basic_server: ServerThread) -> None:
    async def run() -> np.ndarray:
        client = thttp_aio.InferenceServerClient(basic_server.http_url.removeprefix("http://"))
        try:
            assert await client.is_server_live() and await client.is_server_ready()
            assert await client.is_model_ready("identity")
            assert (await client.get_server_metadata())["name"] == "grps-py"
            assert (await client.get_model_metadata("typed"))["inputs"][1] == {
                "name": "b",
                "datatype": "INT64",
                "shape": [-1],
            }
            assert (await client.get_model_config("classifier_pt"))["max_batch_size"] == 8
            item = thttp_aio.InferInput("x", [2], "FP64")
            item.set_data_from_numpy(np.array([1.5, 2.5]))
            result = await client.infer("identity", [item])
            return result.as_numpy("x")
        finally:
            await client.close()

    np.testing.assert_array_equal(asyncio.run(run()), [1.5, 2.5])


def test_generate(v2: httpx.Client) -> None:
    reply = v2.post("/models/tokens/generate", json={"text_input": "hello big world", "id": "g1"})
    assert reply.status_code == 200, reply.text
    assert reply.json() == {
        "model_name": "tokens",
        "model_version": "1",
        "id": "g1",
        "text_output": "hello big world",
    }


def test_generate_stream_sends_one_event_per_message(v2: httpx.Client) -> None:
    with v2.stream("POST", "/models/tokens/generate_stream", json={"text_input": "hello big world"}) as reply:
        assert reply.status_code == 200
        assert reply.headers["content-type"].startswith("text/event-stream")
        events = [line for line in reply.iter_lines() if line]
    words = [orjson.loads(event.removeprefix("data: "))["text_output"] for event in events]
    assert words == ["hello", "big", "world"]


def test_generate_errors(v2: httpx.Client) -> None:
    assert v2.post("/models/nope/generate_stream", json={"text_input": "x"}).status_code == 404
    reply = v2.post("/models/tokens/generate", content=b"[1, 2]")
    assert reply.status_code == 400 and "error" in reply.json()


@pytest.mark.parametrize(
    ("parameters", "fragment"),
    [
        ({"sequence_start": True}, "'sequence_start'"),
        ({"sequence_end": False}, "'sequence_end'"),
        ({"sequence_id": 0}, "'sequence_id'"),
        ({"triton_enable_anything": True}, "reserved"),
    ],
)
def test_parameters_the_server_cannot_honour_are_400(
    v2: httpx.Client, parameters: dict[str, Any], fragment: str
) -> None:
    doc = infer_doc({"name": "x", "shape": [1], "datatype": "INT32", "data": [1]}, parameters=parameters)
    reply = v2.post("/models/identity/infer", json=doc)
    assert reply.status_code == 400 and fragment in reply.json()["error"]

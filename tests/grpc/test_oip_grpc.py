"""inference.GRPCInferenceService: typed contents, raw size checks, ModelStreamInfer, the aio client."""

from __future__ import annotations

import asyncio
import queue
import sys
import time
from collections.abc import Iterator
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as tgrpc
import tritonclient.grpc.aio as tgrpc_aio
from tritonclient.grpc import service_pb2, service_pb2_grpc

from support import ServerThread

TYPED: dict[str, tuple[str, list[Any], np.ndarray]] = {
    "BOOL": ("bool_contents", [True, False], np.array([True, False])),
    "UINT8": ("uint_contents", [0, 255], np.array([0, 255], np.uint8)),
    "UINT16": ("uint_contents", [0, 65535], np.array([0, 65535], np.uint16)),
    "UINT32": ("uint_contents", [0, 2**32 - 1], np.array([0, 2**32 - 1], np.uint32)),
    "UINT64": ("uint64_contents", [0, 2**64 - 1], np.array([0, 2**64 - 1], np.uint64)),
    "INT8": ("int_contents", [-128, 127], np.array([-128, 127], np.int8)),
    "INT16": ("int_contents", [-(2**15), 2**15 - 1], np.array([-(2**15), 2**15 - 1], np.int16)),
    "INT32": ("int_contents", [-(2**31), 2**31 - 1], np.array([-(2**31), 2**31 - 1], np.int32)),
    "INT64": ("int64_contents", [-(2**63), 2**63 - 1], np.array([-(2**63), 2**63 - 1], np.int64)),
    "FP32": ("fp32_contents", [0.5, -2.0], np.array([0.5, -2.0], np.float32)),
    "FP64": ("fp64_contents", [0.1, 1e300], np.array([0.1, 1e300])),
    "BYTES": ("bytes_contents", [b"a", b"\xff"], np.array([b"a", b"\xff"], dtype=object)),
}


@pytest.fixture
def stub(basic_server: ServerThread) -> Iterator[service_pb2_grpc.GRPCInferenceServiceStub]:
    with grpc.insecure_channel(basic_server.grpc_target) as channel:
        yield service_pb2_grpc.GRPCInferenceServiceStub(channel)


@pytest.fixture
def client(basic_server: ServerThread) -> Iterator[tgrpc.InferenceServerClient]:
    triton = tgrpc.InferenceServerClient(basic_server.grpc_target)
    yield triton
    triton.close()


def request(
    model: str, *inputs: service_pb2.ModelInferRequest.InferInputTensor
) -> service_pb2.ModelInferRequest:
    msg = service_pb2.ModelInferRequest(model_name=model)
    msg.inputs.extend(inputs)
    return msg


@pytest.mark.parametrize("datatype", list(TYPED))
def test_typed_contents_are_read(stub: Any, datatype: str) -> None:
    field, values, want = TYPED[datatype]
    tensor = service_pb2.ModelInferRequest.InferInputTensor(name="x", datatype=datatype, shape=[2])
    getattr(tensor.contents, field).extend(values)
    reply = stub.ModelInfer(request("identity", tensor), timeout=30)
    assert reply.outputs[0].datatype == datatype and list(reply.outputs[0].shape) == [2]
    assert len(reply.raw_output_contents) == 1 and not reply.outputs[0].HasField("contents")
    result = tgrpc.InferResult(reply).as_numpy("x")
    assert result.tolist() == want.tolist()


@pytest.mark.parametrize(
    ("build", "fragment"),
    [
        (lambda m: m.raw_input_contents.append(b"\0" * 7), "x"),  # 7 bytes for two INT32
        (lambda m: m.raw_input_contents.extend([b"\0" * 8, b"\0" * 8]), "raw"),  # one input, two raw
        (lambda m: m.inputs[0].contents.int_contents.extend([1, 2, 3]), "x"),  # three values, shape [2]
        (lambda m: m.inputs[0].contents.fp32_contents.extend([1, 2]), "x"),  # wrong field for INT32
        (lambda m: None, "x"),  # no data at all
    ],
)
def test_size_and_count_mismatches_are_invalid_argument(stub: Any, build: Any, fragment: str) -> None:
    msg = request(
        "identity", service_pb2.ModelInferRequest.InferInputTensor(name="x", datatype="INT32", shape=[2])
    )
    build(msg)
    with pytest.raises(grpc.RpcError) as err:
        stub.ModelInfer(msg, timeout=30)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert fragment in err.value.details()


def test_not_ready_and_unknown_models(basic_server: ServerThread, stub: Any) -> None:
    with pytest.raises(grpc.RpcError) as err:
        stub.ModelReady(service_pb2.ModelReadyRequest(name="nope"), timeout=30)
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    basic_server.server.executor.offline()
    try:
        assert not stub.ServerReady(service_pb2.ServerReadyRequest(), timeout=30).ready
        assert not stub.ModelReady(service_pb2.ModelReadyRequest(name="identity"), timeout=30).ready
    finally:
        basic_server.server.executor.online()
    assert stub.ModelReady(service_pb2.ModelReadyRequest(name="identity"), timeout=30).ready


def text_input(words: str, client_mod: Any = tgrpc) -> Any:
    item = client_mod.InferInput("text_input", [1], "BYTES")
    item.set_data_from_numpy(np.array([words.encode()], dtype=object))
    return item


def collect(client: tgrpc.InferenceServerClient, send: Any, count: int, timeout: float = 20) -> list[Any]:
    """Start a stream, let `send` issue requests, and gather `count` (result, error) pairs."""
    got: queue.Queue[Any] = queue.Queue()
    client.start_stream(callback=lambda result, error: got.put((result, error)))
    try:
        send()
        return [got.get(timeout=timeout) for _ in range(count)]
    finally:
        client.stop_stream()


def words_and_flags(items: list[Any]) -> list[tuple[str | None, bool]]:
    out = []
    for result, error in items:
        assert error is None, error
        response = result.get_response()
        flag = response.parameters["triton_final_response"].bool_param
        data = result.as_numpy("text_output")
        out.append((None if data is None else data.reshape(-1)[0].decode(), flag))
    return out


def test_stream_infer_streams_every_message_and_flags_the_last(client: tgrpc.InferenceServerClient) -> None:
    items = collect(client, lambda: client.async_stream_infer("tokens", [text_input("one two three")]), 3)
    assert words_and_flags(items) == [("one", False), ("two", False), ("three", True)]


def test_stream_infer_with_an_empty_final_response(client: tgrpc.InferenceServerClient) -> None:
    send = lambda: client.async_stream_infer(  # noqa: E731
        "tokens", [text_input("one two")], request_id="s1", enable_empty_final_response=True
    )
    items = collect(client, send, 3)
    assert words_and_flags(items) == [("one", False), ("two", False), (None, True)]
    assert all(result.get_response().id == "s1" for result, _ in items)


def test_grps_message_streams_become_bytes_outputs(client: tgrpc.InferenceServerClient) -> None:
    """A converter-none model streams GrpsMessages (str_data here): each is one BYTES output."""
    x = tgrpc.InferInput("n", [1], "INT32")
    x.set_data_from_numpy(np.array([0], np.int32))
    items = collect(client, lambda: client.async_stream_infer("stream", [x]), 3)
    chunks = [result.as_numpy("output").reshape(-1)[0].decode() for result, _ in items]
    assert chunks == ["chunk 0", "chunk 1", "chunk 2"]


def test_stream_errors_are_messages_and_the_stream_goes_on(client: tgrpc.InferenceServerClient) -> None:
    def send() -> None:
        client.async_stream_infer("nope", [text_input("x")])
        time.sleep(0.2)  # the error comes first
        x = tgrpc.InferInput("x", [1], "INT32")
        x.set_data_from_numpy(np.array([3], np.int32))
        client.async_stream_infer("identity", [x])

    (first, second) = collect(client, send, 2)
    assert first[0] is None and "nope" in first[1].message()
    result, error = second
    assert error is None and result.as_numpy("x").tolist() == [3]
    assert result.get_response().parameters["triton_final_response"].bool_param


def test_closing_the_stream_cancels_the_model(client: tgrpc.InferenceServerClient) -> None:
    token_log = sys.modules["serving_models"].TOKEN_LOG  # the project's src/, imported by the server
    got: queue.Queue[Any] = queue.Queue()
    client.start_stream(callback=lambda result, error: got.put((result, error)))
    words = " ".join(f"w{i}" for i in range(50))
    client.async_stream_infer("tokens", [text_input(words)], parameters={"delay_s": 0.05})
    got.get(timeout=20)
    client.stop_stream(cancel_requests=True)
    deadline = time.monotonic() + 10
    while not token_log["disconnected"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert token_log["disconnected"] and int(token_log["sent"]) < 50  # type: ignore[call-overload]


def test_aio_client_infer_and_stream(basic_server: ServerThread) -> None:
    async def run() -> tuple[list[int], list[str]]:
        client = tgrpc_aio.InferenceServerClient(basic_server.grpc_target)
        try:
            assert await client.is_server_live() and await client.is_model_ready("identity")
            assert (await client.get_server_metadata()).name == "grps-py"
            assert (await client.get_model_metadata("versioned")).versions == ["9", "10"]
            assert (await client.get_model_config("classifier_pt")).config.max_batch_size == 8
            x = tgrpc_aio.InferInput("x", [3], "INT16")
            x.set_data_from_numpy(np.array([1, 2, 3], np.int16))
            unary = (await client.infer("identity", [x])).as_numpy("x").tolist()

            async def requests() -> Any:
                yield {"model_name": "tokens", "inputs": [text_input("a b", tgrpc_aio)]}

            words = []
            async for result, error in client.stream_infer(requests()):
                assert error is None
                words.append(result.as_numpy("text_output").reshape(-1)[0].decode())
                if result.get_response().parameters["triton_final_response"].bool_param:
                    break
            return unary, words
        finally:
            await client.close()

    unary, words = asyncio.run(run())
    assert unary == [1, 2, 3] and words == ["a", "b"]


@pytest.mark.parametrize(
    ("key", "value", "fragment"),
    [
        ("sequence_start", service_pb2.InferParameter(bool_param=True), "'sequence_start'"),
        ("sequence_end", service_pb2.InferParameter(bool_param=False), "'sequence_end'"),
        ("triton_anything", service_pb2.InferParameter(int64_param=1), "reserved"),
        ("triton_final_response", service_pb2.InferParameter(bool_param=True), "reserved"),
    ],
)
def test_parameters_the_server_cannot_honour_are_invalid(
    stub: Any, key: str, value: Any, fragment: str
) -> None:
    tensor = service_pb2.ModelInferRequest.InferInputTensor(name="x", datatype="INT32", shape=[1])
    tensor.contents.int_contents.append(1)
    msg = request("identity", tensor)
    msg.parameters[key].CopyFrom(value)
    with pytest.raises(grpc.RpcError) as err:
        stub.ModelInfer(msg, timeout=30)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and fragment in err.value.details()


def test_a_stream_request_with_a_reserved_key_answers_an_error_message(stub: Any) -> None:
    """`triton_enable_empty_final_response` is the one reserved key a client sends (tested above); any
    other is refused (tritonclient itself refuses to send one: the stub sends it here)."""
    tensor = service_pb2.ModelInferRequest.InferInputTensor(name="x", datatype="INT32", shape=[1])
    tensor.contents.int_contents.append(1)
    msg = request("identity", tensor)
    msg.parameters["triton_other"].int64_param = 1
    (reply,) = list(stub.ModelStreamInfer(iter([msg]), timeout=30))
    assert "reserved" in reply.error_message

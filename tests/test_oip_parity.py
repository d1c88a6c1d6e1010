"""The Open Inference Protocol through tritonclient: the same cases over HTTP (binary extension and
JSON) and gRPC, with the same answers and the same error categories."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import ml_dtypes
import numpy as np
import onnxruntime as ort
import pytest
import torch

from oip_clients import Answer, OipClient
from support import BASIC, ServerThread

MODES = ["http-binary", "http-json", "grpc"]

EVERY_DATATYPE: dict[str, np.ndarray] = {
    "BOOL": np.array([[True, False, True]]),
    "UINT8": np.array([[0, 255, 7]], np.uint8),
    "UINT16": np.array([[0, 65535, 7]], np.uint16),
    "UINT32": np.array([[0, 2**32 - 1, 7]], np.uint32),
    "UINT64": np.array([[0, 2**64 - 1, 2**53 + 1]], np.uint64),
    "INT8": np.array([[-128, 127, 0]], np.int8),
    "INT16": np.array([[-(2**15), 2**15 - 1, 0]], np.int16),
    "INT32": np.array([[-(2**31), 2**31 - 1, 0]], np.int32),
    "INT64": np.array([[-(2**63), 2**63 - 1, 2**53 + 1]], np.int64),
    "FP16": np.array([[0.5, -2.25, 65504]], np.float16),
    "FP32": np.array([[0.1, -1e30, 3.4e38]], np.float32),
    "FP64": np.array([[0.1, 1e300, -5e-324]], np.float64),
    "BYTES": np.array([[b"abc", b"", "h\u00e9llo".encode()]], dtype=object),
    "BF16": np.array([[1.5, -2.0, 3.0]], dtype=ml_dtypes.bfloat16),
}


@pytest.fixture(params=MODES)
def oip(request: pytest.FixtureRequest, basic_server: ServerThread) -> Iterator[OipClient]:
    protocol, _, encoding = request.param.partition("-")
    client = OipClient(protocol, basic_server, binary=encoding != "json")
    yield client
    client.close()


def same(got: np.ndarray, want: np.ndarray) -> bool:
    if want.dtype == object:  # JSON answers BYTES as str
        got = np.array([v.encode() if isinstance(v, str) else v for v in got.reshape(-1)], dtype=object)
        return got.tolist() == want.reshape(-1).tolist()
    return got.dtype == want.dtype and got.shape == want.shape and np.array_equal(got, want)


@pytest.mark.parametrize("model", ["identity", "identity_torch"])  # numpy and torch converters
@pytest.mark.parametrize("datatype", list(EVERY_DATATYPE))
def test_every_datatype_round_trips(oip: OipClient, datatype: str, model: str) -> None:
    array = EVERY_DATATYPE[datatype]
    if datatype == "BF16" and not oip.binary:
        pytest.skip("BF16 travels only as binary data")
    answer = oip.infer(model, {"x": array}, datatypes={"x": datatype}, outputs=["x"])
    assert not answer.error, answer.message
    assert same(answer.outputs["x"], array)


@pytest.mark.parametrize("model", ["identity", "identity_torch"])
def test_large_tensors_round_trip(oip: OipClient, model: str) -> None:
    """Over 64 KiB a gRPC request's tensor bytes are cut out of the message rather than parsed into it,
    and the reply's appended to its serialization (codecs/pb_wire.py): two inputs, 4 MB and 256 KiB."""
    big = np.arange(1 << 20, dtype=np.float32).reshape(1, -1)
    other = np.arange(1 << 16, dtype=np.int32).reshape(2, -1)
    answer = oip.infer(model, {"x": big, "y": other}, outputs=["x", "y"])
    assert same(answer.outputs["x"], big) and same(answer.outputs["y"], other)


def test_several_inputs_and_a_requested_subset(oip: OipClient) -> None:
    a, b = np.arange(6, dtype=np.float32).reshape(2, 3), np.array([7, 8], np.int64)
    everything = oip.infer("identity", {"a": a, "b": b})
    assert set(everything.outputs) == {"a", "b"}
    only_b = oip.infer("identity", {"a": a, "b": b}, outputs=["b"])
    assert list(only_b.outputs) == ["b"] and same(only_b.outputs["b"], b)


def test_unknown_requested_output_is_invalid(oip: OipClient) -> None:
    answer = oip.infer("identity", {"a": np.ones(2, np.float32)}, outputs=["nope"])
    assert answer.error == "invalid" and "nope" in answer.message


def test_request_id_is_echoed(oip: OipClient) -> None:
    assert oip.infer("identity", {"a": np.ones(1, np.int32)}, request_id="req-42").id == "req-42"


def test_parameters_reach_the_model(oip: OipClient) -> None:
    params = {"temperature": 0.5, "top_k": 3, "greedy": True, "style": "terse"}
    answer = oip.infer("params", {"a": np.ones(1, np.int32)}, parameters=params)
    received = json.loads(answer.outputs["params"].reshape(-1)[0])
    assert {key: received[key] for key in params} == params


def test_newest_version_unless_one_is_named(oip: OipClient) -> None:
    def version_of(answer: Answer) -> Any:
        value = answer.outputs["version"].reshape(-1)[0]
        return value.decode() if isinstance(value, bytes) else value

    assert version_of(oip.infer("versioned", {"a": np.ones(1, np.int32)})) == "10"
    assert version_of(oip.infer("versioned", {"a": np.ones(1, np.int32)}, version="9")) == "9"
    missing = oip.infer("versioned", {"a": np.ones(1, np.int32)}, version="8")
    assert missing.error == "not_found" and "8" in missing.message


def test_unknown_model_is_not_found(oip: OipClient) -> None:
    answer = oip.infer("no_such_model", {"a": np.ones(1, np.int32)})
    assert answer.error == "not_found" and "no_such_model" in answer.message


def test_declared_inputs_are_checked_and_outputs_named(oip: OipClient) -> None:
    a, b = np.ones((2, 3), np.float32), np.array([1, 2], np.int64)
    good = oip.infer("typed", {"a": a, "b": b})
    np.testing.assert_array_equal(good.outputs["sum"], a + b[:, None])
    cases = {
        "unknown input 'c'": {"a": a, "b": b, "c": b},
        "missing input 'b'": {"a": a},
        "input 'b' expects datatype INT64, got INT32": {"a": a, "b": b.astype(np.int32)},
        "input 'a' expects shape [-1, 3], got [6]": {"a": a.reshape(6), "b": b},
        "input 'a' expects shape [-1, 3], got [3, 2]": {"a": a.reshape(3, 2), "b": b},
    }
    for fragment, arrays in cases.items():
        answer = oip.infer("typed", arrays)
        assert answer.error == "invalid" and fragment in answer.message, (fragment, answer)


def test_a_model_that_raises_is_internal_and_the_server_keeps_serving(oip: OipClient) -> None:
    answer = oip.infer("raiser", {"a": np.ones(1, np.int32)})
    assert answer.error == "internal" and "boom" in answer.message and "Traceback" not in answer.message
    assert not oip.infer("identity", {"a": np.ones(1, np.int32)}).error


def test_converter_none_models_get_a_grps_message(oip: OipClient) -> None:
    x = np.arange(4, dtype=np.float32).reshape(2, 2)
    np.testing.assert_array_equal(oip.infer("echo", {"x": x}).outputs["x"], x)
    refused = oip.infer("echo", {"flags": np.array([True, False])})
    assert refused.error == "invalid" and "BOOL" in refused.message and "GrpsMessage" in refused.message


def test_the_default_dag_is_a_model(oip: OipClient) -> None:
    x = np.array([[1.0, 2.0]], np.float32)
    answer = oip.infer("double_then_add_one", {"x": x})
    np.testing.assert_allclose(answer.outputs["y"], x * 2 + 1)


def test_onnx_model_matches_onnxruntime(oip: OipClient) -> None:
    x = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)
    session = ort.InferenceSession(
        str(BASIC / "../../../models/default.onnx"), providers=["CPUExecutionProvider"]
    )
    (want,) = session.run(None, {"x": x})
    answer = oip.infer("classifier", {"x": x})
    np.testing.assert_allclose(answer.outputs["probs"], want, rtol=1e-6, atol=1e-7)


def test_torchscript_takes_declared_inputs_positionally(oip: OipClient) -> None:
    x = np.random.default_rng(1).normal(size=(3, 4)).astype(np.float32)
    module = torch.jit.load(str(BASIC / "../../../models/default.pt"))
    want = module(torch.from_numpy(x)).detach().numpy()
    answer = oip.infer("classifier_pt", {"INPUT__0": x})
    np.testing.assert_allclose(answer.outputs["OUTPUT__0"], want, rtol=1e-6, atol=1e-7)


def test_health_and_metadata(oip: OipClient) -> None:
    client = oip.client
    assert client.is_server_live() and client.is_server_ready()
    assert client.is_model_ready("identity") and client.is_model_ready("versioned", "9")
    meta = client.get_server_metadata(**as_json(oip))
    assert meta["name"] == "grps-py" and "binary_tensor_data" in meta["extensions"]
    model = client.get_model_metadata("classifier", **as_json(oip))
    assert model["platform"] == "onnxruntime_onnx"
    assert model["inputs"] == [
        {"name": "x", "datatype": "FP32", "shape": ["-1", "4"] if grpc(oip) else [-1, 4]}
    ]
    versions = client.get_model_metadata("versioned", **as_json(oip))["versions"]
    assert versions == ["9", "10"]
    assert client.get_model_metadata("double_then_add_one", **as_json(oip))["platform"] == "ensemble"
    assert client.get_model_metadata("echo", **as_json(oip))["platform"] == "python"


def test_model_config(oip: OipClient) -> None:
    config = oip.client.get_model_config("classifier_pt", **as_json(oip))
    config = config.get("config", config)
    assert config["platform"] == "pytorch_libtorch" and int(config["max_batch_size"]) == 8
    (declared,) = config["input"]
    assert declared["name"] == "INPUT__0" and declared["data_type"] == "TYPE_FP32"
    assert [int(d) for d in declared["dims"]] == [4]


def as_json(oip: OipClient) -> dict[str, Any]:
    return {"as_json": True} if grpc(oip) else {}


def grpc(oip: OipClient) -> bool:
    return oip.protocol == "grpc"


# --- options the server cannot honour are refused, not ignored ----------------------------------


@pytest.mark.parametrize(
    "options",
    [
        {"sequence_id": 42},
        {"sequence_id": "session-1", "sequence_start": True},
        {"sequence_id": 9, "sequence_end": True},
    ],
)
def test_a_sequence_sent_to_a_model_without_sequence_batching_is_invalid(
    oip: OipClient, options: dict[str, Any]
) -> None:
    """Its answers would silently lose the sequence's state: refused, naming the parameter."""
    answer = oip.infer("identity", {"a": np.ones(1, np.int32)}, **options)
    assert answer.error == "invalid" and "'sequence_id'" in answer.message
    assert "no sequence batching" in answer.message

"""The onnx backend against the bundled ONNX model, a numpy reference and the TorchScript twin."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import grps_py.backends.onnxruntime as onnx_backend
from grps_py.backends import short_error
from grps_py.backends.onnxruntime import CUDA_EP, OnnxInferer, concat_feeds, split_outputs
from grps_py.core.context import GrpsContext
from grps_py.core.errors import InvalidInput, ModelLoadError
from support import reference, start_project

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

MODELS = Path(__file__).resolve().parents[2] / "models"
MODEL_ONNX = MODELS / "default.onnx"


def torch_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


gpu = pytest.mark.skipif(not torch_cuda(), reason="no CUDA GPU")


def make_inferer(
    device: str | None = "cpu", args: dict[str, Any] | None = None, path: Path = MODEL_ONNX
) -> OnnxInferer:
    inferer = OnnxInferer()
    inferer.init(str(path), device, args or {})
    assert inferer.load() is True
    return inferer


@pytest.fixture(scope="module")
def inferer() -> OnnxInferer:
    return make_inferer()


@pytest.fixture
def x() -> np.ndarray:
    return np.random.default_rng(11).normal(size=(6, 4)).astype(np.float32)


def write_model(path: Path, nodes: list, inputs: list, outputs: list) -> Path:
    graph = helper.make_graph(nodes, "test", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    path.write_bytes(model.SerializeToString())
    return path


def identity_model(tmp_path: Path, shape: list) -> Path:
    return write_model(
        tmp_path / "identity.onnx",
        [helper.make_node("Identity", ["a"], ["b"])],
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("b", TensorProto.FLOAT, shape)],
    )


def adder_model(tmp_path: Path) -> Path:
    """Two inputs of independent dynamic length: only ONNX Runtime itself can reject a mismatch."""
    return write_model(
        tmp_path / "adder.onnx",
        [helper.make_node("Add", ["a", "b"], ["sum"])],
        [
            helper.make_tensor_value_info("a", TensorProto.FLOAT, ["n"]),
            helper.make_tensor_value_info("b", TensorProto.FLOAT, ["m"]),
        ],
        [helper.make_tensor_value_info("sum", TensorProto.FLOAT, ["k"])],
    )


# -- loading and metadata ----------------------------------------------------------------------


def test_load_on_cpu_and_describe(inferer: OnnxInferer) -> None:
    assert inferer.run_device == "cpu"
    assert inferer.session is not None and inferer.session.get_providers() == ["CPUExecutionProvider"]
    assert inferer.describe() == {
        "inputs": [{"name": "x", "dtype": "float32", "shape": [-1, 4]}],
        "outputs": [{"name": "probs", "dtype": "float32", "shape": [-1, 3]}],
        "execution_providers": ["CPUExecutionProvider"],
    }
    assert OnnxInferer().describe() == {"inputs": [], "outputs": []}


def test_missing_file_is_a_load_error(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match=r"cannot load ONNX model .*nope\.onnx") as raised:
        make_inferer(path=tmp_path / "nope.onnx")
    assert "\n" not in str(raised.value) and "[ONNXRuntimeError]" not in str(raised.value)


def test_corrupt_file_is_a_load_error(tmp_path: Path) -> None:
    corrupt = tmp_path / "corrupt.onnx"
    corrupt.write_bytes(b"\x08\x07garbage that is not a model")
    with pytest.raises(ModelLoadError, match=r"corrupt\.onnx"):
        make_inferer(path=corrupt)


def test_no_path_is_a_load_error() -> None:
    inferer = OnnxInferer()
    inferer.init(None, "cpu", {})
    with pytest.raises(ModelLoadError, match="inferer_path"):
        inferer.load()


def test_session_options_from_args(x: np.ndarray, weights: dict) -> None:
    args = {"intra_op_num_threads": 1, "inter_op_num_threads": 1, "graph_optimization_level": "basic"}
    out = make_inferer(args=args).infer(x, GrpsContext())
    np.testing.assert_allclose(out["probs"], reference(x, weights), rtol=1e-5, atol=1e-7)
    options = onnx_backend.session_options(args)
    assert options.intra_op_num_threads == 1
    assert options.graph_optimization_level == onnx_backend.ort.GraphOptimizationLevel.ORT_ENABLE_BASIC


@pytest.mark.parametrize("args", [{"graph_optimization_level": "max"}, {"intra_op_num_threads": "many"}])
def test_bad_session_args_are_a_load_error(args: dict) -> None:
    with pytest.raises(ModelLoadError, match="invalid onnx inferer args"):
        make_inferer(args=args)


@pytest.mark.skipif(torch_cuda(), reason="checks the CPU fallback")
@pytest.mark.parametrize("device", ["cuda", "gpu:0", "auto", "original", None])
def test_gpu_device_without_gpu_runs_on_cpu(device: str | None, x: np.ndarray, weights: dict) -> None:
    inferer = make_inferer(device)
    assert inferer.run_device == "cpu"
    np.testing.assert_allclose(inferer.infer(x, GrpsContext())["probs"], reference(x, weights), rtol=1e-5)


def test_cuda_provider_that_cannot_start_falls_back_to_cpu(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, x: np.ndarray, weights: dict
) -> None:
    # Device count unknown (as on WSL2): the session is built with the CUDA provider and asked what it got.
    monkeypatch.setattr(onnx_backend, "_nvidia_device_nodes", lambda: None)
    if CUDA_EP not in onnx_backend.ort.get_available_providers():
        pytest.skip("this onnxruntime has no CUDA provider")
    with caplog.at_level(logging.WARNING, logger="grps_py.backends.onnxruntime"):
        inferer = make_inferer("cuda")
    assert inferer.session is not None
    got_cuda = CUDA_EP in inferer.session.get_providers()
    assert inferer.run_device == ("cuda:0" if got_cuda else "cpu")
    assert got_cuda or any("CUDAExecutionProvider unavailable" in r.getMessage() for r in caplog.records)
    np.testing.assert_allclose(inferer.infer(x, GrpsContext())["probs"], reference(x, weights), rtol=1e-5)


def test_cuda_device_count_reads_device_nodes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        onnx_backend.ort, "get_available_providers", lambda: [CUDA_EP, "CPUExecutionProvider"]
    )
    monkeypatch.setattr(onnx_backend, "_nvidia_device_nodes", lambda: 2)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert onnx_backend.cuda_device_count() == 1
    monkeypatch.setattr(onnx_backend.ort, "get_available_providers", lambda: ["CPUExecutionProvider"])
    assert onnx_backend.cuda_device_count() == 0


def test_out_of_range_gpu_is_a_load_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(onnx_backend, "cuda_device_count", lambda: 1)
    with pytest.raises(ModelLoadError, match="1 CUDA device"):
        make_inferer("cuda:1")


# -- inference ---------------------------------------------------------------------------------


@pytest.mark.parametrize("form", ["single", "dict", "list"])
def test_infer_input_forms_match_reference_and_torch(
    inferer: OnnxInferer, x: np.ndarray, weights: dict, form: str
) -> None:
    inp = {"single": x, "dict": {"x": x}, "list": [x]}[form]
    out = inferer.infer(inp, GrpsContext())
    assert list(out) == ["probs"]
    assert out["probs"].shape == (6, 3) and out["probs"].dtype == np.float32
    np.testing.assert_allclose(out["probs"], reference(x, weights), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(out["probs"].sum(axis=1), np.ones(6), rtol=1e-6)


def test_onnx_and_torch_models_agree(inferer: OnnxInferer, x: np.ndarray) -> None:
    torch = pytest.importorskip("torch")
    from grps_py.backends.torch import TorchInferer

    torch_inferer = TorchInferer()
    torch_inferer.init(str(MODELS / "default.pt"), "cpu", {})
    torch_inferer.load()
    torch_out = torch_inferer.infer(x, GrpsContext()).numpy()
    np.testing.assert_allclose(inferer.infer(x, GrpsContext())["probs"], torch_out, rtol=1e-5, atol=1e-6)
    # A torch tensor from an upstream DAG node is accepted too.
    from_tensor = inferer.infer({"x": torch.from_numpy(x)}, GrpsContext())["probs"]
    np.testing.assert_allclose(from_tensor, torch_out, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    ("inp", "message"),
    [
        ({"y": np.zeros((1, 4), np.float32)}, "unknown input(s) ['y']; the model expects: x"),
        ({}, "missing input(s) ['x']; the model expects: x"),
        ([np.zeros((1, 4), np.float32)] * 2, "the model takes 1 input(s) (x), got 2"),
        (np.zeros((1, 4), np.int64), "input 'x' expects float32, got int64"),
        (np.zeros((1, 4), np.float64), "input 'x' expects float32, got float64"),
        (np.zeros(4, np.float32), "input 'x' expects rank 2 [batch, 4], got shape [4]"),
        (np.zeros((2, 3), np.float32), "input 'x' expects shape [batch, 4], got [2, 3]"),
        (np.array(["a"]), "input 'x' expects float32, got string"),
    ],
)
def test_mismatched_inputs_are_invalid_input(inferer: OnnxInferer, inp: Any, message: str) -> None:
    with pytest.raises(InvalidInput) as raised:
        inferer.infer(inp, GrpsContext())
    assert raised.value.public_message == message


def test_single_array_needs_a_one_input_model(tmp_path: Path) -> None:
    inferer = make_inferer(path=adder_model(tmp_path))
    with pytest.raises(InvalidInput, match=r"takes 2 inputs \(a, b\)"):
        inferer.infer(np.zeros(2, np.float32), GrpsContext())
    out = inferer.infer([np.ones(2, np.float32), np.full(2, 2.0, np.float32)], GrpsContext())
    np.testing.assert_array_equal(out["sum"], [3.0, 3.0])


def test_runtime_rejection_is_a_short_invalid_input(tmp_path: Path) -> None:
    inferer = make_inferer(path=adder_model(tmp_path))
    with pytest.raises(InvalidInput) as raised:
        inferer.infer({"a": np.ones(2, np.float32), "b": np.ones(3, np.float32)}, GrpsContext())
    message = raised.value.public_message
    assert message.startswith("model rejected the input: ")
    assert message.startswith("model rejected the input: Add node: ")
    assert "broadcast" in message
    assert "\n" not in message and "[ONNXRuntimeError]" not in message and "onnxruntime_src" not in message


def test_short_error_strips_the_onnxruntime_prefix() -> None:
    text = "[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : Got invalid dimensions for input: x\n index: 1"
    assert short_error(RuntimeError(text)) == "Got invalid dimensions for input: x"
    kernel = (
        "[ONNXRuntimeError] : 1 : FAIL : Non-zero status code returned while running Gather node. "
        "Name:'embed' Status Message: /src/onnxruntime/core/providers/cpu/tensor/gather.cc:81 "
        "onnxruntime::common::Status onnxruntime::GatherCommon(const int64_t*) "
        "indices element out of data bounds"
    )
    assert short_error(RuntimeError(kernel)) == "Gather node embed: indices element out of data bounds"
    plain = "/src/foo.cc:12 axis mismatch (2 vs 3) in input"
    assert short_error(RuntimeError(plain)) == "axis mismatch (2 vs 3) in input"


# -- batching ----------------------------------------------------------------------------------


def count_runs(monkeypatch: pytest.MonkeyPatch, inferer: OnnxInferer) -> list[dict]:
    calls: list[dict] = []
    run = inferer._run

    def counting(feed: dict) -> dict:
        calls.append({name: array.shape for name, array in feed.items()})
        return run(feed)

    monkeypatch.setattr(inferer, "_run", counting)
    return calls


def test_batch_infer_runs_once_and_equals_per_item(monkeypatch: pytest.MonkeyPatch, weights: dict) -> None:
    inferer = make_inferer()
    rng = np.random.default_rng(5)
    arrays = [rng.normal(size=(n, 4)).astype(np.float32) for n in (1, 3, 2)]
    singles = [inferer.infer(a, GrpsContext()) for a in arrays]
    calls = count_runs(monkeypatch, inferer)
    outs = inferer.batch_infer([arrays[0], {"x": arrays[1]}, [arrays[2]]], [GrpsContext()] * 3)
    assert calls == [{"x": (6, 4)}]
    for out, single, array in zip(outs, singles, arrays, strict=True):
        assert out["probs"].shape == (len(array), 3)
        np.testing.assert_allclose(out["probs"], single["probs"], rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(out["probs"], reference(array, weights), rtol=1e-5, atol=1e-7)


def test_batch_infer_per_item_for_static_batch_dim(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    inferer = make_inferer(path=identity_model(tmp_path, [1, 2]))
    calls = count_runs(monkeypatch, inferer)
    items = [np.full((1, 2), float(i), np.float32) for i in range(3)]
    outs = inferer.batch_infer(items, [GrpsContext()] * 3)
    assert len(calls) == 3
    assert [float(out["b"][0, 0]) for out in outs] == [0.0, 1.0, 2.0]


def test_batch_infer_per_item_for_different_trailing_dims(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    inferer = make_inferer(path=identity_model(tmp_path, ["n", "m"]))
    calls = count_runs(monkeypatch, inferer)
    items = [np.ones((1, 2), np.float32), np.ones((1, 3), np.float32)]
    outs = inferer.batch_infer(items, [GrpsContext()] * 2)
    assert len(calls) == 2
    assert [out["b"].shape for out in outs] == [(1, 2), (1, 3)]


def test_batch_infer_rejects_a_bad_item(inferer: OnnxInferer) -> None:
    with pytest.raises(InvalidInput, match="expects shape"):
        inferer.batch_infer([np.zeros((1, 4), np.float32), np.zeros((1, 5), np.float32)], [GrpsContext()] * 2)


def test_concat_and_split_helpers() -> None:
    merged = concat_feeds([{"a": np.zeros((1, 2))}, {"a": np.ones((2, 2))}])
    assert merged is not None
    assert merged[0]["a"].shape == (3, 2) and merged[1] == [1, 2]
    assert (
        concat_feeds([{"a": np.zeros((1, 2)), "b": np.zeros(2)}, {"a": np.zeros((1, 2)), "b": np.zeros(1)}])
        is None
    )
    parts = split_outputs({"y": np.arange(3)}, [1, 2])
    assert parts is not None and parts[1]["y"].tolist() == [1, 2]
    assert split_outputs({"y": np.arange(4)}, [1, 2]) is None


# -- GPU ---------------------------------------------------------------------------------------


@pytest.mark.gpu
@gpu
def test_cuda_provider_used_when_available(x: np.ndarray, weights: dict) -> None:
    inferer = make_inferer("cuda:0")
    assert inferer.session is not None
    assert inferer.session.get_providers()[0] == CUDA_EP
    assert inferer.run_device == "cuda:0"
    out = inferer.infer({"x": x}, GrpsContext())
    np.testing.assert_allclose(out["probs"], reference(x, weights), rtol=1e-4, atol=1e-6)
    outs = inferer.batch_infer([x[:2], x[2:]], [GrpsContext()] * 2)
    np.testing.assert_allclose(np.concatenate([o["probs"] for o in outs]), out["probs"], rtol=1e-5, atol=1e-7)


def test_warmup_builds_samples_from_the_inputs_the_file_states(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """No declared inputs: the ONNX file's `x` [batch, 4] float32 gives the samples."""
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "inference.yml").write_text(
        f"""models:
  - name: clf
    version: "1"
    inferer_type: onnx
    inferer_path: {MODEL_ONNX}
    device: cpu
    warmup: {{kind: random, batch_size: 3, count: 2}}
dag: {{name: d, nodes: [{{name: clf, type: model, model: clf-1}}]}}
"""
    )
    (tmp_path / "conf" / "server.yml").write_text(
        'interface: {framework: http+grpc, host: 127.0.0.1, port: "0,0"}\n'
    )
    with caplog.at_level(logging.INFO, logger="grps_py.warmup"):
        server = start_project(
            tmp_path, tmp_path / "conf" / "inference.yml", tmp_path / "conf" / "server.yml"
        )
    server.stop()
    assert "model 'clf-1' warmed up: 2 run(s)" in caplog.text

"""Write the model files of examples/torch_batching and examples/onnx_model, from fixed seeds.

    examples/torch_batching/models/regressor.pt   TorchScript
        x: float32 [batch, 8] -> y: float32 [batch, 2]
        y = tanh(x @ W1 + b1) @ W2 + b2, hidden size 16
    examples/onnx_model/models/weather.onnx        ONNX (opset 17)
        features: float32 [batch, 6] -> probs: float32 [batch, 3], label: int64 [batch]
        probs = softmax(relu(features @ W1 + b1) @ W2 + b2), label = argmax(probs), hidden size 12

Usage: python scripts/make_example_models.py [EXAMPLES_DIR]   (default: examples/ of this repo)

Nothing is trained: the weights are seeded random numbers, enough to show serving. Running the
script again writes the same bytes (tests/test_examples.py checks that), each file written to a
temporary name and then renamed so a server never reads half a file.
"""

from __future__ import annotations

import io
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper, numpy_helper

Weights = dict[str, np.ndarray[Any, Any]]

DEFAULT_EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
TORCH_FILE = Path("torch_batching/models/regressor.pt")
ONNX_FILE = Path("onnx_model/models/weather.onnx")
TORCH_SEED, ONNX_SEED = 20240701, 20240702
TORCH_IN, TORCH_HIDDEN, TORCH_OUT = 8, 16, 2
ONNX_IN, ONNX_HIDDEN, ONNX_CLASSES = 6, 12, 3
OPSET = 17
IR_VERSION = 8  # the lowest IR version opset 17 allows, so any onnxruntime >= 1.13 reads the file


def _layers(seed: int, sizes: tuple[int, int, int]) -> Weights:
    """Two dense layers; PCG64 draws are stable across numpy versions, so the bytes are too."""
    rng = np.random.default_rng(seed)
    n_in, hidden, n_out = sizes
    return {
        "W1": rng.normal(0.0, 1.0 / np.sqrt(n_in), (n_in, hidden)).astype(np.float32),
        "b1": rng.normal(0.0, 0.1, (hidden,)).astype(np.float32),
        "W2": rng.normal(0.0, 1.0 / np.sqrt(hidden), (hidden, n_out)).astype(np.float32),
        "b2": rng.normal(0.0, 0.1, (n_out,)).astype(np.float32),
    }


def torch_weights() -> Weights:
    return _layers(TORCH_SEED, (TORCH_IN, TORCH_HIDDEN, TORCH_OUT))


def onnx_weights() -> Weights:
    return _layers(ONNX_SEED, (ONNX_IN, ONNX_HIDDEN, ONNX_CLASSES))


def regressor_reference(x: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """What the TorchScript regressor answers, computed in float64 numpy."""
    w = torch_weights()
    hidden = np.tanh(x.astype(np.float64) @ w["W1"] + w["b1"])
    return hidden @ w["W2"] + w["b2"]


def weather_reference(features: np.ndarray[Any, Any]) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """What the ONNX classifier answers (probs, label), computed in float64 numpy."""
    w = onnx_weights()
    hidden = np.maximum(features.astype(np.float64) @ w["W1"] + w["b1"], 0.0)
    logits = hidden @ w["W2"] + w["b2"]
    exp = np.exp(logits - logits.max(axis=1, keepdims=True))
    probs = exp / exp.sum(axis=1, keepdims=True)
    return probs, probs.argmax(axis=1)


# TorchScript from source text: torch.jit.script(<class>) would record this file's absolute path in
# the archive's debug info, and the bytes would then differ from one checkout to another.
REGRESSOR_FORWARD = """
def forward(self, x):
    hidden = torch.tanh(torch.addmm(self.b1, x, self.W1))
    return torch.addmm(self.b2, hidden, self.W2)
"""


class Regressor(torch.jit.ScriptModule):
    """The TorchScript regressor; weights are buffers as nothing here is trained."""

    # The archive names the class by its module; a fixed one keeps the bytes the same whether this
    # file runs as a script (__main__) or is imported (make_example_models).
    __module__ = "grps_examples"

    def __init__(self, weights: Weights) -> None:
        super().__init__()
        for name, value in weights.items():
            self.register_buffer(name, torch.from_numpy(value.copy()))
        self.define(REGRESSOR_FORWARD)


def torchscript_bytes() -> bytes:
    buffer = io.BytesIO()
    torch.jit.save(Regressor(torch_weights()).eval(), buffer)
    return buffer.getvalue()


def onnx_bytes() -> bytes:
    nodes = [
        helper.make_node("Gemm", ["features", "W1", "b1"], ["h_pre"]),
        helper.make_node("Relu", ["h_pre"], ["h"]),
        helper.make_node("Gemm", ["h", "W2", "b2"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["probs"], axis=-1),
        helper.make_node("ArgMax", ["probs"], ["label"], axis=1, keepdims=0),
    ]
    graph = helper.make_graph(
        nodes,
        "weather_classifier",
        inputs=[helper.make_tensor_value_info("features", TensorProto.FLOAT, ["batch", ONNX_IN])],
        outputs=[
            helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["batch", ONNX_CLASSES]),
            helper.make_tensor_value_info("label", TensorProto.INT64, ["batch"]),
        ],
        initializer=[numpy_helper.from_array(value, name) for name, value in onnx_weights().items()],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="grps-py", ir_version=IR_VERSION
    )
    onnx.checker.check_model(model)
    data: bytes = model.SerializeToString()
    return data


def write_atomically(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def check(torch_path: Path, onnx_path: Path) -> None:
    """The written files must answer what the numpy references say."""
    import onnxruntime as ort

    rng = np.random.default_rng(0)
    x = rng.normal(size=(5, TORCH_IN)).astype(np.float32)
    load: Any = torch.jit.load  # untyped in torch: called through Any for mypy's strict mode
    with torch.inference_mode():
        got = load(str(torch_path), map_location="cpu")(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(got, regressor_reference(x), rtol=1e-4, atol=1e-5)
    features = rng.normal(size=(5, ONNX_IN)).astype(np.float32)
    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    probs, label = session.run(["probs", "label"], {"features": features})
    want_probs, want_label = weather_reference(features)
    np.testing.assert_allclose(probs, want_probs, rtol=1e-4, atol=1e-6)
    np.testing.assert_array_equal(label, want_label)


def make_models(examples: Path = DEFAULT_EXAMPLES) -> list[Path]:
    """Write both files under `examples` (creating their folders) and return their paths."""
    torch_path, onnx_path = examples / TORCH_FILE, examples / ONNX_FILE
    write_atomically(torch_path, torchscript_bytes())
    write_atomically(onnx_path, onnx_bytes())
    check(torch_path, onnx_path)
    return [torch_path, onnx_path]


def main(argv: list[str]) -> int:
    for path in make_models(Path(argv[1]) if len(argv) > 1 else DEFAULT_EXAMPLES):
        print(f"wrote {path} ({path.stat().st_size} bytes)")
    print("both files checked against numpy")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

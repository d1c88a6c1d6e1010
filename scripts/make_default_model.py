"""Write the bundled default model: a tiny deterministic classifier, as ONNX and as TorchScript.

    x: float32 [batch, 4]  ->  probs: float32 [batch, 3]
    probs = softmax(relu(x @ W1 + b1) @ W2 + b2), hidden size 8, weights from a fixed seed.

Usage: python scripts/make_default_model.py [OUT_DIR]   (default: models/ beside this script's repo)
Both files hold the same weights, so the two backends give the same answer for the same input.
"""

from __future__ import annotations

import io
import sys
from pathlib import Path

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper, numpy_helper

SEED = 20240611
IN_FEATURES, HIDDEN, CLASSES = 4, 8, 3
OPSET = 17
IR_VERSION = 8  # the lowest IR version opset 17 allows: any onnxruntime >= 1.13 reads it


def make_weights() -> dict[str, np.ndarray]:
    """Seeded weights; PCG64 draws are stable across numpy versions."""
    rng = np.random.default_rng(SEED)
    return {
        "W1": rng.normal(0.0, 0.5, (IN_FEATURES, HIDDEN)).astype(np.float32),
        "b1": rng.normal(0.0, 0.1, (HIDDEN,)).astype(np.float32),
        "W2": rng.normal(0.0, 0.5, (HIDDEN, CLASSES)).astype(np.float32),
        "b2": rng.normal(0.0, 0.1, (CLASSES,)).astype(np.float32),
    }


def numpy_forward(x: np.ndarray, w: dict[str, np.ndarray]) -> np.ndarray:
    """The reference forward pass the exported models must match."""
    hidden = np.maximum(x @ w["W1"] + w["b1"], 0.0)
    logits = hidden @ w["W2"] + w["b2"]
    exp = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return (exp / exp.sum(axis=-1, keepdims=True)).astype(np.float32)


def build_onnx(w: dict[str, np.ndarray]) -> onnx.ModelProto:
    nodes = [
        helper.make_node("MatMul", ["x", "W1"], ["xw1"]),
        helper.make_node("Add", ["xw1", "b1"], ["h_pre"]),
        helper.make_node("Relu", ["h_pre"], ["h"]),
        helper.make_node("MatMul", ["h", "W2"], ["hw2"]),
        helper.make_node("Add", ["hw2", "b2"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["probs"], axis=-1),
    ]
    graph = helper.make_graph(
        nodes,
        "grps_default_classifier",
        inputs=[helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", IN_FEATURES])],
        outputs=[helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["batch", CLASSES])],
        initializer=[numpy_helper.from_array(value, name) for name, value in w.items()],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="grps-py", ir_version=IR_VERSION
    )
    onnx.checker.check_model(model)
    return model


# TorchScript from source text rather than torch.jit.script(<class>): a scripted class records the
# absolute path of this file in the archive's debug info, so the bytes would differ per checkout.
TORCH_FORWARD = """
def forward(self, x):
    hidden = torch.relu(torch.matmul(x, self.W1) + self.b1)
    return torch.softmax(torch.matmul(hidden, self.W2) + self.b2, dim=-1)
"""


class TinyClassifier(torch.jit.ScriptModule):
    """The same network in torch; weights are buffers, as nothing here is trained."""

    def __init__(self, w: dict[str, np.ndarray]) -> None:
        super().__init__()
        for name, value in w.items():
            self.register_buffer(name, torch.from_numpy(value.copy()))
        self.define(TORCH_FORWARD)


def torchscript_bytes(w: dict[str, np.ndarray]) -> bytes:
    module = TinyClassifier(w).eval()
    buffer = io.BytesIO()
    torch.jit.save(module, buffer)
    return buffer.getvalue()


def check_outputs(onnx_path: Path, pt_path: Path, w: dict[str, np.ndarray]) -> None:
    """Both written files must agree with the numpy reference before we call them done."""
    import onnxruntime as ort

    x = np.random.default_rng(0).normal(size=(5, IN_FEATURES)).astype(np.float32)
    expected = numpy_forward(x, w)
    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    got_onnx = session.run(["probs"], {"x": x})[0]
    got_torch = torch.jit.load(str(pt_path), map_location="cpu")(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(got_onnx, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got_torch, expected, rtol=1e-5, atol=1e-6)


def main(argv: list[str]) -> int:
    out_dir = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parent.parent / "models"
    out_dir.mkdir(parents=True, exist_ok=True)
    weights = make_weights()
    onnx_path, pt_path = out_dir / "default.onnx", out_dir / "default.pt"
    onnx_path.write_bytes(build_onnx(weights).SerializeToString())
    pt_path.write_bytes(torchscript_bytes(weights))
    check_outputs(onnx_path, pt_path, weights)
    for path in (onnx_path, pt_path):
        print(f"wrote {path} ({path.stat().st_size} bytes)")
    print("x: float32 [batch, 4] -> probs: float32 [batch, 3]; outputs checked against numpy")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

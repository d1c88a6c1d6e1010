"""Write the batching benchmark's model: a deterministic TorchScript MLP big enough that batching pays.

    x: float32 [batch, 512]  ->  y: float32 [batch, 512]
    y = relu(relu(x @ W1 + b1) @ W2 + b2) @ W3 + b3, hidden size 2048, weights from a fixed seed.

Usage: python scripts/make_mlp_model.py [OUT]   (default: bench/projects/mlp/models/mlp.pt)

The sizes were picked on a 2-core CPU with torch's default threads: one forward takes about 1.5 ms
at batch 1 and about 4.5 ms at batch 16 (about 5x the rows per second), because at small batches
the 25 MB of weights are read from memory once per call whatever the batch size. Running the script
again writes the same bytes (written to a temporary file, then renamed, so a reader never sees half).
"""

from __future__ import annotations

import io
import itertools
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch

SEED = 20240612
SIZES = (512, 2048, 2048, 512)  # input, hidden, hidden, output
DEFAULT_OUT = Path(__file__).resolve().parent.parent / "bench/projects/mlp/models/mlp.pt"

# TorchScript from source text rather than torch.jit.script(<class>): a scripted class records the
# absolute path of this file in the archive's debug info, so the bytes would differ per checkout.
TORCH_FORWARD = """
def forward(self, x):
    h = torch.relu(torch.addmm(self.b1, x, self.W1))
    h = torch.relu(torch.addmm(self.b2, h, self.W2))
    return torch.addmm(self.b3, h, self.W3)
"""


def make_weights() -> dict[str, np.ndarray]:
    """He-scaled normal weights (activations keep their scale through the ReLUs); PCG64 is stable."""
    rng = np.random.default_rng(SEED)
    weights: dict[str, np.ndarray] = {}
    for i, (fan_in, fan_out) in enumerate(itertools.pairwise(SIZES), start=1):
        w = rng.standard_normal((fan_in, fan_out), dtype=np.float32)
        weights[f"W{i}"] = w * np.float32(np.sqrt(2.0 / fan_in))
        weights[f"b{i}"] = np.zeros(fan_out, dtype=np.float32)
    return weights


class Mlp(torch.jit.ScriptModule):
    """The network; weights are buffers, as nothing here is trained."""

    def __init__(self, weights: dict[str, np.ndarray]) -> None:
        super().__init__()
        for name, value in weights.items():
            self.register_buffer(name, torch.from_numpy(value))
        self.define(TORCH_FORWARD)


def make_model(out: Path = DEFAULT_OUT) -> Path:
    """Write the TorchScript file to `out` (creating its folder) and return the path."""
    weights = make_weights()
    buffer = io.BytesIO()
    torch.jit.save(Mlp(weights).eval(), buffer)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    tmp.write_bytes(buffer.getvalue())
    os.replace(tmp, out)
    check(out, weights)
    return out


def check(path: Path, weights: dict[str, np.ndarray]) -> None:
    """The written file must agree with a numpy forward pass."""
    x = np.random.default_rng(0).standard_normal((3, SIZES[0]), dtype=np.float32)
    h = np.maximum(x @ weights["W1"] + weights["b1"], 0.0)
    h = np.maximum(h @ weights["W2"] + weights["b2"], 0.0)
    expected = h @ weights["W3"] + weights["b3"]
    load: Any = torch.jit.load  # untyped: called through Any to keep mypy's untyped-call check quiet
    module = load(str(path), map_location="cpu")
    with torch.inference_mode():
        got = module(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


def main(argv: list[str]) -> int:
    out = make_model(Path(argv[1]) if len(argv) > 1 else DEFAULT_OUT)
    print(f"wrote {out} ({out.stat().st_size} bytes)")
    print(f"x: float32 [batch, {SIZES[0]}] -> y: float32 [batch, {SIZES[-1]}]; output checked against numpy")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

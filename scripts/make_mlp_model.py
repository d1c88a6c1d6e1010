"""Write the batching benchmark's model: a deterministic TorchScript MLP for which batching pays.

    x: float32 [batch, 512]  ->  y: float32 [batch, 512]
    LAYERS layers of 512 x 512: h = relu(h @ W[i] + b[i]), no ReLU after the last; a fixed seed.

Usage: python scripts/make_mlp_model.py [OUT]   (default: bench/projects/mlp/models/mlp.pt)

Why deep and narrow: on the 2-core AMD machine this was measured on, one torch thread (MKL)
computes a batch of 16 rows through wide layers (512-4096-4096-512) only about 3.5x faster per row
than one row at a time, because its gemm reaches only ~30 GFLOPS there. A narrow layer's cost at
small batches is mostly reading its 1 MB of weights and the per-call overhead, which a batch
shares, so this network runs 16 rows about 6x faster per row than 1 (about 13 ms at batch 1 and
about 34 ms at batch 16 for 128 layers). A forward pass of tens of milliseconds is also what real
CPU models cost. Running the script again writes the same bytes (written to a temporary file,
then renamed, so a reader never sees half).
"""

from __future__ import annotations

import io
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch

SEED = 20240612
WIDTH = 512
LAYERS = 160
DEFAULT_OUT = Path(__file__).resolve().parent.parent / "bench/projects/mlp/models/mlp.pt"

# TorchScript from source text rather than torch.jit.script(<class>): a scripted class records the
# absolute path of this file in the archive's debug info, so the bytes would differ per checkout.
TORCH_FORWARD = """
def forward(self, x):
    last = self.W.shape[0] - 1
    for i in range(last):
        x = torch.relu(torch.addmm(self.b[i], x, self.W[i]))
    return torch.addmm(self.b[last], x, self.W[last])
"""


def make_weights() -> dict[str, np.ndarray]:
    """He-scaled normal weights (activations keep their scale through the ReLUs); PCG64 is stable."""
    rng = np.random.default_rng(SEED)
    w = rng.standard_normal((LAYERS, WIDTH, WIDTH), dtype=np.float32) * np.float32(np.sqrt(2.0 / WIDTH))
    return {"W": w, "b": np.zeros((LAYERS, WIDTH), dtype=np.float32)}


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


def is_current(path: Path) -> bool:
    """Whether `path` holds this script's network (an older run may have left other sizes there)."""
    if not path.exists():
        return False
    load: Any = torch.jit.load  # untyped: called through Any to keep mypy's untyped-call check quiet
    weights = load(str(path), map_location="cpu").W
    return tuple(weights.shape) == (LAYERS, WIDTH, WIDTH)


def check(path: Path, weights: dict[str, np.ndarray]) -> None:
    """The written file must agree with a numpy forward pass."""
    x = np.random.default_rng(0).standard_normal((3, WIDTH), dtype=np.float32)
    h = x
    for i in range(LAYERS):
        h = h @ weights["W"][i] + weights["b"][i]
        if i < LAYERS - 1:
            h = np.maximum(h, 0.0)
    load: Any = torch.jit.load
    module = load(str(path), map_location="cpu")
    with torch.inference_mode():
        got = module(torch.from_numpy(x)).numpy()
    scale = float(np.abs(h).max())
    np.testing.assert_allclose(got, h, rtol=1e-3, atol=1e-3 * scale)


def main(argv: list[str]) -> int:
    out = make_model(Path(argv[1]) if len(argv) > 1 else DEFAULT_OUT)
    print(f"wrote {out} ({out.stat().st_size} bytes)")
    print(f"x: float32 [batch, {WIDTH}] -> y: float32 [batch, {WIDTH}], {LAYERS} layers; checked")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

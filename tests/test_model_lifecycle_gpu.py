"""The GPU side of the model lifecycle: loading and unloading a torch model on CUDA many times gives its
memory back (the unloaded model's tensors freed, torch's cache emptied). Skipped without a CUDA GPU."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import httpx
import numpy as np
import pytest

from support import PROJECTS, REPO, ServerThread, start_project

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU"),
]

GPU_MODEL = {
    "name": "mlp",
    "version": "1",
    "device": "cuda:0",
    "inferer_type": "torch",
    "inferer_path": str(REPO / "models" / "default.pt"),
    "converter_type": "torch",
    "inputs": [{"name": "x", "datatype": "FP32", "shape": [-1, 4]}],
    "outputs": [{"name": "probs", "datatype": "FP32", "shape": [-1, 3]}],
    "warmup": {"kind": "random", "batch_size": 4},
}
X = np.random.default_rng(0).standard_normal((4, 4)).astype(np.float32)


@pytest.fixture
def server() -> Iterator[ServerThread]:
    running = start_project(PROJECTS / "lifecycle")
    yield running
    running.stop()


def cycle(server: ServerThread) -> None:
    body = {"parameters": {"config": json.dumps(GPU_MODEL)}}
    loaded = httpx.post(f"{server.http_url}/v2/repository/models/mlp/load", json=body, timeout=120)
    assert loaded.status_code == 200, loaded.text
    infer = {"inputs": [{"name": "x", "shape": [4, 4], "datatype": "FP32", "data": X.ravel().tolist()}]}
    answer = httpx.post(f"{server.http_url}/v2/models/mlp/infer", json=infer, timeout=30)
    assert answer.status_code == 200, answer.text
    unloaded = httpx.post(f"{server.http_url}/v2/repository/models/mlp/unload", timeout=60)
    assert unloaded.status_code == 200, unloaded.text


def settled_allocated() -> int:
    """CUDA memory held by tensors once the last unload's release has run (it runs in a thread)."""
    deadline = time.monotonic() + 10
    allocated = torch.cuda.memory_allocated()
    while time.monotonic() < deadline:
        time.sleep(0.2)
        now = torch.cuda.memory_allocated()
        if now == allocated:
            return int(now)
        allocated = now
    return int(allocated)


def test_loading_and_unloading_a_cuda_model_returns_its_gpu_memory(server: ServerThread) -> None:
    cycle(server)  # warm: CUDA context, kernels, cuBLAS workspaces
    start_allocated = settled_allocated()
    start_reserved = torch.cuda.memory_reserved()
    for _ in range(20):
        cycle(server)
    end_allocated = settled_allocated()
    assert end_allocated <= start_allocated, (start_allocated, end_allocated)
    # torch's cache was emptied after each unload: nothing reserved beyond what the start had
    assert torch.cuda.memory_reserved() <= start_reserved + (2 << 20), (
        start_reserved,
        torch.cuda.memory_reserved(),
    )

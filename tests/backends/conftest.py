"""Shared by the backend tests: the bundled model's weights, read from its ONNX file."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import numpy_helper  # noqa: E402

MODEL_ONNX = Path(__file__).resolve().parents[2] / "models" / "default.onnx"


@pytest.fixture(scope="module")
def weights() -> dict[str, np.ndarray]:
    """An independent source for the reference forward of both the ONNX and the TorchScript files."""
    model = onnx.load(str(MODEL_ONNX))
    return {init.name: numpy_helper.to_array(init) for init in model.graph.initializer}

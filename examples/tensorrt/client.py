"""Call the tensorrt example over HTTP and gRPC and print its answers.

Build the engine and serve it first (see README.md), then in another shell run
`python examples/tensorrt/client.py [--url HOST:PORT] [--grpc HOST:PORT]`. When the ONNX model the engine
was built from is at hand (models/mlp.onnx, written by build_engine.py), the answers are compared with
ONNX Runtime's.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from grps_py.client import GrpsClient, GrpsClientError

ONNX_MODEL = Path(__file__).resolve().parent / "models" / "mlp.onnx"
ROWS = np.array([[0.5, -1.0, 0.25, 2.0], [1.5, 0.0, -0.5, -1.0], [0.0, 0.3, 0.9, -0.2]], dtype=np.float32)
TOO_MANY = 64  # rows: more than the engine's profile takes (build_engine.py --max, 32 by default)


def onnx_runtime_answer(x: np.ndarray) -> np.ndarray | None:
    """The ONNX model's own answer on the CPU, when the file is there."""
    if not ONNX_MODEL.is_file():
        return None
    import onnxruntime as ort

    session = ort.InferenceSession(str(ONNX_MODEL), providers=["CPUExecutionProvider"])
    return np.asarray(session.run(["y"], {"x": x})[0])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--url", default="127.0.0.1:7080", help="the HTTP address (default %(default)s)")
    parser.add_argument("--grpc", default="127.0.0.1:7081", help="the gRPC address (default %(default)s)")
    args = parser.parse_args()
    reference = onnx_runtime_answer(ROWS)
    for protocol, url in (("http", args.url), ("grpc", args.grpc)):
        print(f"{protocol} {url}:")
        with GrpsClient(url, protocol=protocol, timeout=30.0) as client:
            y = client.predict({"x": ROWS}, model="mlp-1")["y"]
            for row, out in zip(ROWS, y, strict=True):
                print(f"  [{' '.join(f'{v:+.2f}' for v in row)}] -> [{' '.join(f'{v:+.3f}' for v in out)}]")
            if reference is not None:
                print(f"  largest difference from ONNX Runtime: {float(np.abs(y - reference).max()):.1e}")
            try:
                client.predict({"x": np.zeros((TOO_MANY, 4), dtype=np.float32)}, model="mlp-1")
            except GrpsClientError as refused:
                print(f"  {TOO_MANY} rows -> error {refused.status}: {refused.message}")


if __name__ == "__main__":
    main()

"""Call the onnx_model example over HTTP and gRPC and print its answers.

Serve it first (`grps-py serve examples/onnx_model`), then in another shell run
`python examples/onnx_model/client.py [--url HOST:PORT] [--grpc HOST:PORT]`.
"""

from __future__ import annotations

import argparse

import numpy as np

from grps_py.client import GrpsClient

# Three made-up weather readings, six features each (the model's weights are seeded, not trained).
FEATURES = np.array(
    [
        [1.2, -0.3, 0.8, 0.1, -1.0, 0.5],
        [-0.7, 1.5, -0.2, 0.9, 0.3, -1.1],
        [0.0, 0.4, -1.3, -0.6, 1.8, 0.2],
    ],
    dtype=np.float32,
)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--url", default="127.0.0.1:7080", help="the HTTP address (default %(default)s)")
    parser.add_argument("--grpc", default="127.0.0.1:7081", help="the gRPC address (default %(default)s)")
    args = parser.parse_args()
    for protocol, url in (("http", args.url), ("grpc", args.grpc)):
        print(f"{protocol} {url}:")
        with GrpsClient(url, protocol=protocol, timeout=10.0) as client:
            answer = client.predict({"features": FEATURES}, model="weather-1")
            for row, probs, label, name in zip(
                FEATURES, answer["probs"], answer["label"], answer["class_name"], strict=True
            ):
                name = name.decode() if isinstance(name, bytes) else str(name)
                readings = " ".join(f"{v:+.1f}" for v in row)
                shares = " ".join(f"{p:.3f}" for p in probs)
                print(f"  [{readings}] -> {name} (label {int(label)}, probs {shares})")


if __name__ == "__main__":
    main()

"""Call the tensorflow_model example over HTTP and gRPC and print its answers.

Serve it first (`grps-py serve examples/tensorflow_model`), then in another shell run
`python examples/tensorflow_model/client.py [--url HOST:PORT] [--grpc HOST:PORT]`.
"""

from __future__ import annotations

import argparse

import numpy as np

from grps_py.client import GrpsClient

SPECIES = ("setosa", "versicolor", "virginica")
# Three made-up flowers: sepal length and width, petal length and width (cm).
FEATURES = np.array([[5.1, 3.5, 1.4, 0.2], [6.2, 2.9, 4.3, 1.3], [7.7, 3.0, 6.1, 2.3]], dtype=np.float32)
NAMES = np.array(["grps", "TensorFlow"], dtype=object)


def text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


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
            answer = client.predict({"features": FEATURES}, model="iris-1")
            for row, probs, label in zip(FEATURES, answer["probabilities"], answer["label"], strict=True):
                shares = " ".join(f"{p:.3f}" for p in probs)
                flower = " ".join(f"{v:.1f}" for v in row)
                print(f"  [{flower}] -> {SPECIES[int(label)]} (probabilities {shares})")
            greeted = client.predict({"name": NAMES}, model="greeter-1")
            for greeting, length in zip(greeted["greeting"], greeted["length"], strict=True):
                print(f"  {text(greeting)} ({int(length)} characters)")


if __name__ == "__main__":
    main()

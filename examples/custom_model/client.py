"""Call the custom_model example over HTTP and gRPC and print its answers.

Serve it first (`grps-py serve examples/custom_model`), then in another shell run
`python examples/custom_model/client.py [--url HOST:PORT] [--grpc HOST:PORT]`.
"""

from __future__ import annotations

import argparse

import numpy as np

from grps_py.client import GrpsClient, GrpsClientError

REVIEWS = [
    "Great screen and fast delivery, I love it",
    "The box arrived broken and support was useless",
    "It is not bad",
]


def show(client: GrpsClient) -> None:
    # One text as str_data through the default DAG: the answer is text too.
    print(f"  {REVIEWS[0]!r} -> {client.predict(REVIEWS[0])}")
    # Several texts as a string tensor, naming the model: a label and a score per text come back.
    answer = client.predict({"text": np.array(REVIEWS)}, model="sentiment-1.0.0")
    for text, label, score in zip(REVIEWS, answer["label"], answer["score"], strict=True):
        label = label.decode() if isinstance(label, bytes) else str(label)
        print(f"  {text!r} -> {label} {score:+.2f}")
    # The converter refuses what it cannot read with a 400 and says why.
    try:
        client.predict(np.array([1.0, 2.0], dtype=np.float32))
    except GrpsClientError as err:
        print(f"  a float tensor -> error {err.status} {err.code}: {err.message}")


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
            show(client)


if __name__ == "__main__":
    main()

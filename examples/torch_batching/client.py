"""Send concurrent requests to the torch_batching example and print the batches the server formed.

Serve it first (`grps-py serve examples/torch_batching`), then in another shell run
`python examples/torch_batching/client.py [--url HOST:PORT] [--grpc HOST:PORT]`
(`--requests N` and `--concurrency N` change the load).
"""

from __future__ import annotations

import argparse
import threading
from typing import Any

import numpy as np

from grps_py.client import GrpsClient

MODEL = "regressor-1"


def burst(url: str, protocol: str, requests: int, concurrency: int) -> list[np.ndarray]:
    """`requests` one-row requests from `concurrency` threads that start together, one client each."""
    rows = np.random.default_rng(7).normal(size=(requests, 1, 8)).astype(np.float32)
    answers: list[np.ndarray] = [np.empty(0)] * requests
    clients = [GrpsClient(url, protocol=protocol, timeout=30.0) for _ in range(concurrency)]
    start = threading.Barrier(concurrency)
    errors: list[Exception] = []

    def worker(k: int) -> None:
        start.wait()  # released together, so requests arrive while a batch is still open
        try:
            for i in range(k, requests, concurrency):
                answers[i] = clients[k].predict({"x": rows[i]}, model=MODEL)["y"]
        except Exception as exc:  # re-raised in the main thread below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for client in clients:
        client.close()
    if errors:
        raise errors[0]
    return answers


def scheduler(client: GrpsClient) -> dict[str, Any]:
    """The model's batching totals, from its grps model metadata."""
    totals: dict[str, Any] = client.model_metadata(MODEL)["scheduler"]
    return totals


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--url", default="127.0.0.1:7080", help="the HTTP address (default %(default)s)")
    parser.add_argument("--grpc", default="127.0.0.1:7081", help="the gRPC address (default %(default)s)")
    parser.add_argument(
        "--requests", type=int, default=64, help="requests per protocol (default %(default)s)"
    )
    parser.add_argument("--concurrency", type=int, default=16, help="threads sending (default %(default)s)")
    args = parser.parse_args()
    for protocol, url in (("http", args.url), ("grpc", args.grpc)):
        with GrpsClient(url, protocol=protocol, timeout=30.0) as client:
            three = client.predict(np.ones((3, 8), dtype=np.float32), model=MODEL)
            print(f"{protocol} {url}: one request of 3 rows -> y of shape {three.shape}: {three[0].round(4)}")
            before = scheduler(client)
            answers = burst(url, protocol, args.requests, args.concurrency)
            after = scheduler(client)
        batches = after["batches_run"] - before["batches_run"]
        rows = after["rows_run"] - before["rows_run"]
        recent = after["recent_batch_rows"]
        print(
            f"  {len(answers)} concurrent one-row requests ran as {batches} batches "
            f"({rows / max(batches, 1):.1f} rows per batch); recent batches: "
            f"largest {recent['max']} rows, median {recent['median']}"
        )


if __name__ == "__main__":
    main()

"""Run interleaved sequences through the sequence_accumulator example and print their running sums.

Serve it first (`grps-py serve examples/sequence_accumulator`), then in another shell run
`python examples/sequence_accumulator/client.py [--url HOST:PORT] [--grpc HOST:PORT]`.

It uses tritonclient (`pip install 'tritonclient[http,grpc]'`): over HTTP one `infer` per request
with `sequence_id`, `sequence_start` and `sequence_end`; over gRPC one `ModelStreamInfer` stream
(`start_stream` / `async_stream_infer`) carrying the requests of all the sequences, interleaved.
"""

from __future__ import annotations

import argparse
import queue
import sys
from typing import Any

import numpy as np

try:
    import tritonclient.grpc as tgrpc
    import tritonclient.http as thttp
    from tritonclient.utils import InferenceServerException
except ImportError:
    sys.exit("this client needs tritonclient: pip install 'tritonclient[http,grpc]'")

MODEL = "accumulator"
# The inputs of three sequences; each request is one step of every sequence in turn.
VALUES = [[1, 2, 3, 4], [10, 20, 30, 40], [100, -50, 25, 5]]


def one_value(module: Any, value: int) -> Any:
    item = module.InferInput("INPUT", [1, 1], "INT32")
    item.set_data_from_numpy(np.array([[value]], dtype=np.int32))
    return item


def sent(step: int, values: list[int]) -> dict[str, bool]:
    """The sequence flags of a sequence's request number `step`."""
    return {"sequence_start": step == 0, "sequence_end": step == len(values) - 1}


def over_http(url: str, first_id: int) -> None:
    """One `infer` per request, the sequences' requests interleaved; then a request after an END."""
    ids = [first_id + n for n in range(len(VALUES))]
    sums: dict[int, list[int]] = {sid: [] for sid in ids}
    client = thttp.InferenceServerClient(url)
    try:
        for step in range(len(VALUES[0])):
            for sid, values in zip(ids, VALUES, strict=True):
                result = client.infer(
                    MODEL, [one_value(thttp, values[step])], sequence_id=sid, **sent(step, values)
                )
                sums[sid].append(int(result.as_numpy("OUTPUT").reshape(-1)[0]))
        show(f"http {url} (infer, interleaved)", ids, sums)
        try:  # the sequence ended with its END: the server refuses it until a new START
            client.infer(MODEL, [one_value(thttp, 1)], sequence_id=ids[0])
        except InferenceServerException as refused:
            reason = refused.message().split(" (")[0]  # the rest says why a sequence is not running
            print(f"  sequence {ids[0]} after its end: error {refused.status()}: {reason}")
    finally:
        client.close()


def over_grpc_stream(url: str, first_id: int) -> None:
    """All the sequences' requests on one ModelStreamInfer stream, sent without waiting for answers;
    each answer is matched to its request by the request id."""
    ids = [first_id + n for n in range(len(VALUES))]
    answers: queue.Queue[Any] = queue.Queue()
    client = tgrpc.InferenceServerClient(url)
    client.start_stream(callback=lambda result, error: answers.put(error or result))
    got: dict[str, int] = {}
    try:
        for step in range(len(VALUES[0])):
            for sid, values in zip(ids, VALUES, strict=True):
                client.async_stream_infer(
                    MODEL,
                    [one_value(tgrpc, values[step])],
                    request_id=f"{sid}-{step}",
                    sequence_id=sid,
                    **sent(step, values),
                )
        for _ in range(len(ids) * len(VALUES[0])):
            answer = answers.get(timeout=30)
            if isinstance(answer, InferenceServerException):
                raise answer
            got[answer.get_response().id] = int(answer.as_numpy("OUTPUT").reshape(-1)[0])
    finally:
        client.stop_stream()
        client.close()
    sums = {sid: [got[f"{sid}-{step}"] for step in range(len(VALUES[0]))] for sid in ids}
    show(f"grpc {url} (one ModelStreamInfer stream, interleaved)", ids, sums)


def show(title: str, ids: list[int], sums: dict[int, list[int]]) -> None:
    print(f"{title}:")
    for sid, values in zip(ids, VALUES, strict=True):
        print(f"  sequence {sid}: inputs {values} -> running sums {sums[sid]}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--url", default="127.0.0.1:7080", help="the HTTP address (default %(default)s)")
    parser.add_argument("--grpc", default="127.0.0.1:7081", help="the gRPC address (default %(default)s)")
    args = parser.parse_args()
    over_http(args.url, first_id=101)
    over_grpc_stream(args.grpc, first_id=201)


if __name__ == "__main__":
    main()

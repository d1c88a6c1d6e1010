"""The grps JSON fast path against a protobuf json_format round trip, side by side.

    .venv/bin/python bench/json_codec.py [--sizes 1000 100000 1000000] [--repeats 7]

For each tensor size it times decoding a request and encoding a response both ways and prints
the medians and the ratio (protobuf time / fast-path time).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from functools import partial

import numpy as np
from google.protobuf import json_format

from grps_py.codecs import grps_json, grps_pb
from grps_py.core.types import Payload, Tensor
from grps_py.protos import grps_pb2


def median_s(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def via_protobuf_decode(body: bytes) -> Payload:
    return grps_pb.message_to_payload(json_format.Parse(body, grps_pb2.GrpsMessage()))


def via_protobuf_encode(payload: Payload) -> bytes:
    msg = grps_pb.payload_to_message(payload)
    msg.status.code, msg.status.msg, msg.status.status = 200, "OK", grps_pb2.Status.SUCCESS
    return json_format.MessageToJson(msg, preserving_proto_field_name=True, indent=None).encode()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 100_000, 1_000_000])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    print(f"{'float32 values':>15} {'op':>7} {'fast ms':>10} {'protobuf ms':>12} {'ratio':>7}")
    for size in args.sizes:
        payload = Payload.of_tensors([Tensor("x", rng.standard_normal(size).astype(np.float32))])
        body = grps_json.encode_response(payload)
        rows = [
            ("decode", partial(grps_json.decode_request, body), partial(via_protobuf_decode, body)),
            ("encode", partial(grps_json.encode_response, payload), partial(via_protobuf_encode, payload)),
        ]
        for op, fast, slow in rows:
            fast_s, slow_s = median_s(fast, args.repeats), median_s(slow, args.repeats)
            print(f"{size:>15,} {op:>7} {fast_s * 1e3:>10.2f} {slow_s * 1e3:>12.2f} {slow_s / fast_s:>6.1f}x")


if __name__ == "__main__":
    main()

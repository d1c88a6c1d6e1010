"""Stream tokens from the streaming example over its three streaming APIs, then leave one stream early.

Serve it first (`grps-py serve examples/streaming`), then in another shell run
`python examples/streaming/client.py [--url HOST:PORT] [--grpc HOST:PORT]`.

The Open Inference Protocol part uses tritonclient (`pip install 'tritonclient[grpc]'`).
"""

from __future__ import annotations

import argparse
import queue
from typing import Any

import numpy as np

from grps_py.client import GrpsClient

MODEL = "generator-1"
PROMPT = "streaming answers arrive one token at a time as the model makes them"


def grps_stream(url: str, protocol: str) -> None:
    """grps API: HTTP answers chunked (?streaming=true), gRPC with PredictStreaming."""
    with GrpsClient(url, protocol=protocol, timeout=30.0) as client:
        print(f"grps {protocol} {url}:", end="", flush=True)
        for token in client.predict_stream(PROMPT, model=MODEL):
            print(f" {token}", end="", flush=True)  # each token as it arrives
        print()


def oip_stream(url: str) -> None:
    """Open Inference Protocol: Triton's bidirectional ModelStreamInfer, through tritonclient."""
    try:
        import tritonclient.grpc as triton
    except ImportError:
        print("oip: skipped, tritonclient is not installed (pip install 'tritonclient[grpc]')")
        return
    results: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client = triton.InferenceServerClient(url)
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    try:
        text = triton.InferInput("text_input", [1], "BYTES")
        text.set_data_from_numpy(np.array([PROMPT.encode()], dtype=object))
        # With an empty final response the end of the answer is a response with no outputs.
        client.async_stream_infer("generator", [text], enable_empty_final_response=True)
        print(f"oip ModelStreamInfer {url}:", end="", flush=True)
        while True:
            result, error = results.get(timeout=30)
            if error is not None:
                raise RuntimeError(f"the stream failed: {error}")
            tokens = result.as_numpy("text_output")
            if tokens is not None:
                print(f" {tokens.reshape(-1)[0].decode()}", end="", flush=True)
            if result.get_response().parameters["triton_final_response"].bool_param:
                break
        print()
    finally:
        client.stop_stream()
        client.close()


def leave_early(url: str) -> None:
    """Read three tokens of a long answer, then close the stream: the server stops generating."""
    long_prompt = " ".join(f"token{i}" for i in range(200))  # 200 tokens, 10 s at 0.05 s each
    with GrpsClient(url, protocol="http", timeout=30.0) as client:
        stream = client.predict_stream(long_prompt, model=MODEL)
        got = [next(stream) for _ in range(3)]
        stream.close()  # closes the connection; the model sees context.if_disconnected()
    print(f"left early after {got}: the server stops generating the other {200 - len(got)} tokens")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--url", default="127.0.0.1:7080", help="the HTTP address (default %(default)s)")
    parser.add_argument("--grpc", default="127.0.0.1:7081", help="the gRPC address (default %(default)s)")
    args = parser.parse_args()
    grps_stream(args.url, "http")
    grps_stream(args.grpc, "grpc")
    oip_stream(args.grpc)
    with GrpsClient(args.url, protocol="http", timeout=30.0) as client:
        print(f"unary: {client.predict(PROMPT, model=MODEL)!r}")
    leave_early(args.url)


if __name__ == "__main__":
    main()

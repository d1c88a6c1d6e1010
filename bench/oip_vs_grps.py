"""The Open Inference Protocol against the grps API on the same server and model, side by side.

    .venv/bin/python bench/oip_vs_grps.py [--seconds 2] [--rounds 3] [--concurrency 8]

Starts `grps-py serve tests/projects/basic` on free ports in a subprocess, then drives the identity
model with a [1, 16] FP32 tensor over each protocol with the same bounded async load (pre-built
bodies, no client-side encoding), interleaving the cases round by round. Prints the median
requests/s, p50 and p99 per case, and the OIP / grps ratios over HTTP and gRPC.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import IO

import aiohttp
import grpc
import numpy as np
import orjson

from grps_py.protos import grps_pb2, open_inference_pb2
from load import Load, Send, drive

ROOT = Path(__file__).resolve().parent.parent
X = np.arange(16, dtype=np.float32).reshape(1, 16)


def start_server(workdir: Path) -> tuple[subprocess.Popen[str], int, int]:
    conf = workdir / "server.yml"
    conf.write_text("interface: {framework: http+grpc, host: 127.0.0.1, port: '0,0'}\nmax_concurrency: 64\n")
    cmd = [
        str(ROOT / ".venv/bin/grps-py"),
        "serve",
        str(ROOT / "tests/projects/basic"),
        "--server-conf",
        str(conf),
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        match = re.search(r"listening: http \S+:(\d+) grpc (\d+)", line)
        if match:
            break
    else:
        proc.kill()
        raise SystemExit("the server did not start")
    ports = int(match.group(1)), int(match.group(2))
    while "loaded models" not in line:
        line = proc.stdout.readline()
    threading.Thread(target=drain, args=(proc.stdout,), daemon=True).start()  # the pipe must never fill
    return proc, *ports


def drain(stream: IO[str]) -> None:
    for _line in stream:
        pass


def bodies() -> dict[str, tuple[str, bytes, dict[str, str]]]:
    """HTTP cases: (path, body, headers)."""
    grps_doc = {
        "gtensors": {
            "tensors": [
                {"name": "x", "dtype": "DT_FLOAT32", "shape": [1, 16], "flat_float32": X.ravel().tolist()}
            ]
        }
    }
    oip_doc = {"inputs": [{"name": "x", "shape": [1, 16], "datatype": "FP32", "data": X.ravel().tolist()}]}
    header = orjson.dumps(
        {
            "inputs": [
                {"name": "x", "shape": [1, 16], "datatype": "FP32", "parameters": {"binary_data_size": 64}}
            ],
            "parameters": {"binary_data_output": True},
        }
    )
    json_headers = {"Content-Type": "application/json"}
    return {
        "grps HTTP JSON": ("/grps/v1/infer/predict?model=identity-1", orjson.dumps(grps_doc), json_headers),
        "OIP HTTP JSON": ("/v2/models/identity/infer", orjson.dumps(oip_doc), json_headers),
        "OIP HTTP binary": (
            "/v2/models/identity/infer",
            header + X.tobytes(),
            {"Inference-Header-Content-Length": str(len(header)), "Content-Type": "application/octet-stream"},
        ),
    }


def grpc_requests() -> dict[str, tuple[str, bytes]]:
    grps = grps_pb2.GrpsMessage(model="identity-1")
    tensor = grps.gtensors.tensors.add(name="x", dtype=grps_pb2.DT_FLOAT32, shape=[1, 16])
    tensor.flat_float32.extend(X.ravel().tolist())
    oip = open_inference_pb2.ModelInferRequest(model_name="identity")
    oip.inputs.add(name="x", datatype="FP32", shape=[1, 16])
    oip.raw_input_contents.append(X.tobytes())
    return {
        "grps gRPC": ("/grps.protos.v1.GrpsService/Predict", grps.SerializeToString()),
        "OIP gRPC": ("/inference.GRPCInferenceService/ModelInfer", oip.SerializeToString()),
    }


async def run(http_port: int, grpc_port: int, args: argparse.Namespace) -> dict[str, list[Load]]:
    results: dict[str, list[Load]] = {}
    connector = aiohttp.TCPConnector(limit=args.concurrency)
    async with aiohttp.ClientSession(f"http://127.0.0.1:{http_port}", connector=connector) as session:
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{grpc_port}")
        sends: dict[str, Send] = {}
        for name, (path, body, headers) in bodies().items():

            async def send_http(
                path: str = path, body: bytes = body, headers: dict[str, str] = headers
            ) -> None:
                async with session.post(path, data=body, headers=headers) as reply:
                    assert reply.status == 200, await reply.text()
                    await reply.read()

            sends[name] = send_http
        for name, (method, payload) in grpc_requests().items():
            call = channel.unary_unary(method)  # bytes in, bytes out: no client-side protobuf work

            async def send_grpc(
                call: grpc.aio.UnaryUnaryMultiCallable = call, payload: bytes = payload
            ) -> None:
                await call(payload)

            sends[name] = send_grpc
        for send in sends.values():  # warm up every path
            await drive(send, 0.3, args.concurrency)
        for _ in range(args.rounds):
            for name, send in sends.items():
                results.setdefault(name, []).append(await drive(send, args.seconds, args.concurrency))
        await channel.close()
    return results


def report(results: dict[str, list[Load]]) -> None:
    medians = {
        name: tuple(
            statistics.median(getattr(r, f) for r in runs) for f in ("requests_per_s", "p50_ms", "p99_ms")
        )
        for name, runs in results.items()
    }
    print(f"{'case':<18} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8}")
    for name, (rps, p50, p99) in medians.items():
        print(f"{name:<18} {rps:>8.0f} {p50:>8.2f} {p99:>8.2f}")
    ratios = {
        "OIP HTTP JSON / grps HTTP JSON": ("OIP HTTP JSON", "grps HTTP JSON"),
        "OIP HTTP binary / grps HTTP JSON": ("OIP HTTP binary", "grps HTTP JSON"),
        "OIP gRPC / grps gRPC": ("OIP gRPC", "grps gRPC"),
    }
    for label, (a, b) in ratios.items():
        print(f"{label}: {medians[a][0] / medians[b][0]:.2f}x requests/s")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        proc, http_port, grpc_port = start_server(Path(tmp))
        try:
            report(asyncio.run(run(http_port, grpc_port, args)))
        finally:
            proc.terminate()
            proc.wait(30)


if __name__ == "__main__":
    sys.exit(main())

"""Dynamic batching against none, on the same TorchScript MLP, side by side.

    .venv/bin/python bench/batching.py [--seconds 5] [--protocol http|grpc] [--concurrency 1,4,16,64]

Makes `bench/projects/mlp/models/mlp.pt` if it is missing or stale (scripts/make_mlp_model.py:
160 layers of 512 x 512, float32; its docstring says why deep and narrow), then starts
`grps-py serve bench/projects/mlp` twice on free loopback ports: one with
`conf/inference_unbatched.yml`, one with `conf/inference_batched.yml` (dynamic batching,
max_batch_size 32, one instance). Each server is driven at every concurrency
level for `--seconds` (after a short warm-up) by a bounded async load: C workers, each sending its
next request as soon as its answer came back, all with one pre-built request ([1, 512] FP32) so
that the client does no encoding work. Over HTTP that is the Open Inference Protocol's binary
tensor extension (`Inference-Header-Content-Length`, output `y` as binary data) with a raw
HTTP/1.1 client (bench/load.py) re-sending pre-built bytes; with
`--protocol grpc` it is `inference.GRPCInferenceService/ModelInfer` with `raw_input_contents`, sent
as pre-serialized bytes through a generic `channel.unary_unary`. Before the load, one answer from
each server is checked against the model run in this process.

Batch sizes: around each batched level the bench reads the batched server's scheduler totals
(batches and rows run, in its grps model metadata), so it knows the mean batch the server really
formed at that level. Last, the same TorchScript file is run in this process (inference mode, one
torch thread, as the served model is configured) at those batch sizes: its rows/s is the ceiling a
server could reach if serving cost nothing. A batched/ceiling ratio far below 1 with full batches
says the serving path, not batching, is what limits throughput.

Both servers run at once and are driven in turns (level by level, `--rounds` times, alternating
which goes first); the table shows the median of the rounds. The whole run is bounded (a few minutes
at the defaults), talks to 127.0.0.1 only, and stops every
server it started, also on Ctrl-C or an error.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import json
import os
import platform
import queue
import re
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, NoReturn

import grpc
import numpy as np
import torch
import yaml

from grps_py.protos import open_inference_pb2
from load import Load, RawHttp, Send, drive, oip_binary_request

ROOT = Path(__file__).resolve().parent.parent
TORCH_THREADS = 1  # bench/projects/mlp/conf/*.yml: inferer_args.num_threads
PROJECT = ROOT / "bench/projects/mlp"
MODEL_PATH = PROJECT / "models/mlp.pt"
MODEL_NAME = "mlp"
FEATURES = 512
MAX_BATCH_SIZE = 32  # as in conf/inference_batched.yml
START_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 15.0
X = np.random.default_rng(7).standard_normal((1, FEATURES), dtype=np.float32)


# -- the model ---------------------------------------------------------------------------------------


def ensure_model() -> None:
    """Write the model with scripts/make_mlp_model.py's own function when the file is missing or
    holds a network of other sizes (left by an older checkout)."""
    spec = importlib.util.spec_from_file_location("make_mlp_model", ROOT / "scripts/make_mlp_model.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if module.is_current(MODEL_PATH):
        return
    module.make_model(MODEL_PATH)
    print(f"made {MODEL_PATH.relative_to(ROOT)}")


# torch.jit.load carries no annotations; calling it through Any keeps mypy's untyped-call check quiet.
_jit_load: Any = torch.jit.load


def load_model() -> Any:
    return _jit_load(str(MODEL_PATH), map_location="cpu").eval()


def ceiling(model: Any, sizes: list[int], seconds: float = 0.6) -> dict[int, float]:
    """Rows/s of the model called directly, per batch size."""
    rows_per_s: dict[int, float] = {}
    torch.set_num_threads(TORCH_THREADS)  # as the served model (inferer_args.num_threads)
    with torch.inference_mode():
        for size in sorted(set(sizes)):
            x = torch.from_numpy(np.repeat(X, size, axis=0))
            for _ in range(5):
                model(x)
            calls, began = 0, time.perf_counter()
            while (elapsed := time.perf_counter() - began) < seconds or calls < 20:
                model(x)
                calls += 1
            rows_per_s[size] = size * calls / elapsed
    return rows_per_s


def formed(server: Server) -> tuple[int, int]:
    """Batches and rows the batched server has run so far (its model metadata's scheduler totals)."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{server.http_port}/grps/v1/metadata/model",
        data=json.dumps({"str_data": f"{MODEL_NAME}-1"}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as reply:
        stats = yaml.safe_load(json.loads(reply.read())["str_data"])["scheduler"]
    return int(stats["batches_run"]), int(stats["rows_run"])


# -- the server --------------------------------------------------------------------------------------


class Server:
    """`grps-py serve` in a subprocess; its output is read by a thread so that the pipe never fills."""

    def __init__(self, inference_conf: str) -> None:
        cmd = [
            str(ROOT / ".venv/bin/grps-py"),
            "serve",
            str(PROJECT),
            "--server-conf",
            str(PROJECT / "conf/server.yml"),
            "--inference-conf",
            str(PROJECT / "conf" / inference_conf),
        ]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.tail: deque[str] = deque(maxlen=30)
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._ready = threading.Event()
        assert self.proc.stdout is not None
        threading.Thread(target=self._read, args=(self.proc.stdout,), daemon=True).start()
        self.http_port, self.grpc_port = self._wait_ready()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            self.tail.append(line.rstrip())
            if not self._ready.is_set():
                self._lines.put(line)
        self._lines.put(None)  # end of output: the server exited

    def _wait_ready(self) -> tuple[int, int]:
        deadline = time.monotonic() + START_TIMEOUT_S
        ports: tuple[int, int] | None = None
        while True:
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                self._fail(f"the server was not ready within {START_TIMEOUT_S:.0f} s")
            if line is None:
                self._fail(f"the server exited with status {self.proc.wait()}")
            match = re.search(r"listening: http \S+:(\d+) grpc (\d+)", line)
            if match:
                ports = int(match.group(1)), int(match.group(2))
            if "loaded models" in line and ports is not None:
                self._ready.set()
                return ports

    def _fail(self, why: str) -> NoReturn:
        self.stop()
        raise SystemExit(f"{why}; its last output:\n" + "\n".join(self.tail))

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()  # SIGTERM: the server drains and exits
            try:
                self.proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@contextlib.contextmanager
def serving(inference_conf: str) -> Iterator[Server]:
    server = Server(inference_conf)
    try:
        yield server
    finally:
        server.stop()


# -- the requests ------------------------------------------------------------------------------------


def http_request() -> tuple[bytes, dict[str, str]]:
    """The binary-extension body and headers for one [1, 512] FP32 row."""
    return oip_binary_request(X, "y")


def http_output(body: bytes, header_length: int) -> np.ndarray:
    header = json.loads(body[:header_length])
    (output,) = header["outputs"]
    assert output["name"] == "y" and output["datatype"] == "FP32", output
    return np.frombuffer(body[header_length:], np.float32).reshape(output["shape"])


def grpc_request() -> bytes:
    request = open_inference_pb2.ModelInferRequest(model_name=MODEL_NAME)
    request.inputs.add(name="x", datatype="FP32", shape=list(X.shape))
    request.raw_input_contents.append(X.tobytes())
    payload: bytes = request.SerializeToString()
    return payload


def grpc_output(payload: bytes) -> np.ndarray:
    response = open_inference_pb2.ModelInferResponse.FromString(payload)
    (output,) = response.outputs
    assert output.name == "y" and output.datatype == "FP32", output
    return np.frombuffer(response.raw_output_contents[0], np.float32).reshape(list(output.shape))


# -- the load ----------------------------------------------------------------------------------------


async def load_http(server: Server, levels: list[int], seconds: float, expected: np.ndarray) -> list[Load]:
    body, headers = http_request()
    path = f"/v2/models/{MODEL_NAME}/infer"
    results: list[Load] = []
    for concurrency in levels:
        client = RawHttp("127.0.0.1", server.http_port, path, body, headers)
        try:
            if not results:  # the first answer is checked against the model run here
                answer = await client.send()
                check_output(http_output(answer, len(answer) - X.nbytes), expected)  # y is [1, 512] FP32
            results.append(await measure(client.send, seconds, concurrency))
        finally:
            await client.close()
    return results


async def load_grpc(server: Server, levels: list[int], seconds: float, expected: np.ndarray) -> list[Load]:
    payload = grpc_request()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
        call = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")  # bytes in, bytes out

        async def send() -> bytes:
            answer: bytes = await call(payload)
            return answer

        check_output(grpc_output(await send()), expected)
        return [await measure(send, seconds, concurrency) for concurrency in levels]


async def measure(send: Send, seconds: float, concurrency: int) -> Load:
    await drive(send, min(0.5, seconds / 4), concurrency)  # warm-up: connections, threads, caches
    return await drive(send, seconds, concurrency)


def check_output(got: np.ndarray, expected: np.ndarray) -> None:
    if got.shape != expected.shape or not np.allclose(got, expected, rtol=1e-3, atol=1e-3):
        raise SystemExit(f"the server answered {got.shape} values that differ from the model run here")


# -- the report --------------------------------------------------------------------------------------


def describe_machine(args: argparse.Namespace) -> str:
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        names = re.findall(r"^model name\s*:\s*(.+)$", Path("/proc/cpuinfo").read_text(), re.M)
        cpu = names[0] if names else cpu
    return (
        f"machine: {os.cpu_count()} CPUs ({cpu}), python {platform.python_version()}, "
        f"torch {torch.__version__} with {torch.get_num_threads()} threads; "
        f"protocol: OIP {args.protocol}, {args.seconds:g} s per level"
    )


def report(
    levels: list[int],
    unbatched: list[Load],
    batched: list[Load],
    mean_rows: list[float],
    rows_per_s: dict[int, float],
) -> None:
    print("in-process ceiling rows/s: " + ", ".join(f"batch {s}: {r:.0f}" for s, r in rows_per_s.items()))
    head = (
        f"{'conc':>4} | {'unbatched req/s':>15} {'p50 ms':>7} {'p99 ms':>7} "
        f"| {'batched req/s':>13} {'p50 ms':>7} {'p99 ms':>7} | {'batched/unbatched':>17} "
        f"| {'batch formed':>12} | {'ceiling rows/s':>14} | {'batched/ceiling':>15}"
    )
    print(head)
    print("-" * len(head))
    for concurrency, off, on, rows in zip(levels, unbatched, batched, mean_rows, strict=True):
        top = rows_per_s[max(1, round(rows))]
        print(
            f"{concurrency:>4} | {off.requests_per_s:>15.0f} {off.p50_ms:>7.2f} {off.p99_ms:>7.2f} "
            f"| {on.requests_per_s:>13.0f} {on.p50_ms:>7.2f} {on.p99_ms:>7.2f} "
            f"| {on.requests_per_s / off.requests_per_s:>16.2f}x "
            f"| {rows:>12.1f} | {top:>14.0f} | {on.requests_per_s / top:>15.2f}"
        )


def levels_arg(text: str) -> list[int]:
    levels = [int(part) for part in text.split(",")]
    if not levels or min(levels) < 1:
        raise argparse.ArgumentTypeError("concurrency levels are integers >= 1, comma-separated")
    return levels


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=5.0, help="measured seconds per level (default 5)")
    parser.add_argument("--protocol", choices=("http", "grpc"), default="http")
    parser.add_argument("--concurrency", type=levels_arg, default=[1, 4, 16, 64], help="default 1,4,16,64")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds; medians are reported")
    args = parser.parse_args()
    print(describe_machine(args), flush=True)
    ensure_model()
    model = load_model()
    with torch.inference_mode():
        expected = model(torch.from_numpy(X)).numpy()
    load = load_http if args.protocol == "http" else load_grpc
    runs: dict[str, dict[int, list[Load]]] = {"unbatched": {}, "batched": {}}
    sizes: dict[int, list[float]] = {}  # mean rows per batch the batched server formed, per level
    with serving("inference_unbatched.yml") as unbatched, serving("inference_batched.yml") as batched:
        servers = {"unbatched": unbatched, "batched": batched}
        for label, server in servers.items():
            print(f"{label}: serving on 127.0.0.1:{server.http_port} (gRPC {server.grpc_port})", flush=True)
        # Both servers run at once and take turns, level by level, round by round (the order
        # alternates), so a noisy stretch of the shared machine hits both alike.
        for round_index in range(args.rounds):
            for level in args.concurrency:
                order = list(servers) if round_index % 2 == 0 else list(reversed(servers))
                for label in order:
                    before = formed(batched)
                    (result,) = asyncio.run(load(servers[label], [level], args.seconds, expected))
                    runs[label].setdefault(level, []).append(result)
                    if label == "batched":
                        batches, rows = (
                            now - then for now, then in zip(formed(batched), before, strict=True)
                        )
                        sizes.setdefault(level, []).append(rows / max(batches, 1))
    medians = {
        label: [median_load(by_level[level]) for level in args.concurrency]
        for label, by_level in runs.items()
    }
    mean_rows = [statistics.median(sizes[level]) for level in args.concurrency]
    rows_per_s = ceiling(model, [max(1, round(rows)) for rows in mean_rows])
    report(args.concurrency, medians["unbatched"], medians["batched"], mean_rows, rows_per_s)
    return 0


def median_load(loads: list[Load]) -> Load:
    return Load(
        statistics.median(x.requests_per_s for x in loads),
        statistics.median(x.p50_ms for x in loads),
        statistics.median(x.p99_ms for x in loads),
    )


if __name__ == "__main__":
    sys.exit(main())

"""Soak: serve tests/projects/faults for a while under mixed traffic and check nothing leaks.

    python scripts/soak.py [--seconds N]       (default: $SOAK_S, else 600; `make soak`)

Traffic, one client thread per kind, all at once: grps HTTP and gRPC, OIP HTTP (JSON) and gRPC,
streams read to the end over HTTP and gRPC, streams the client leaves after two messages, models that
fail (an exception, MemoryError, an output unlike its declaration) and bodies over the server's
1 MiB limit. Each answer is checked against what it should be; any other answer is an unexpected
status. Every few seconds the server's RSS (/proc/PID/status), open descriptors (/proc/PID/fd) and
asyncio tasks (`grps_asyncio_tasks` on /metrics) are sampled.

Pass: RSS grows by less than 5% from the end of the warm-up (the first 20% of the run) to the end, and
open descriptors and asyncio tasks do not grow beyond a small tolerance (each compared as the median
of the first three samples after the warm-up and of the last three); no unexpected status; the server
drains and exits 0 on SIGTERM.
Exit 0 on pass, 1 on fail.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import httpx
import numpy as np
import orjson

from grps_py.protos import grps_pb2, grps_pb2_grpc
from grps_py.protos import open_inference_pb2 as oip
from grps_py.protos import open_inference_pb2_grpc as oip_grpc

ROOT = Path(__file__).resolve().parent.parent
PROJECT = ROOT / "tests" / "projects" / "faults"
SERVER_CONF = PROJECT / "conf" / "server_soak.yml"
LIMIT_BYTES = 1 << 20  # limits.http_body_bytes / grpc_message_bytes in SERVER_CONF
LISTENING = re.compile(r"listening: http \S+:(\d+) grpc (\d+)")
WARMUP_SHARE = 0.2
RSS_GROWTH_MAX = 0.05
FD_TOLERANCE = 8
TASK_TOLERANCE = 16
Msg = grps_pb2.GrpsMessage


class Unexpected(Exception):
    """An answer other than the one the request should get."""


@dataclass
class Clients:
    """One thread's clients (neither httpx.Client nor a channel is shared between threads)."""

    http_url: str
    grpc_target: str
    http: httpx.Client = field(init=False)
    channel: grpc.Channel = field(init=False)

    def __post_init__(self) -> None:
        self.http = httpx.Client(base_url=self.http_url, timeout=30)
        self.channel = grpc.insecure_channel(
            self.grpc_target, options=[("grpc.max_send_message_length", 4 * LIMIT_BYTES)]
        )
        self.grps = grps_pb2_grpc.GrpsServiceStub(self.channel)
        self.oip = oip_grpc.GRPCInferenceServiceStub(self.channel)

    def close(self) -> None:
        self.http.close()
        self.channel.close()


def expect(condition: bool, detail: str) -> None:
    if not condition:
        raise Unexpected(detail)


def predict(c: Clients, body: dict[str, Any]) -> httpx.Response:
    return c.http.post("/grps/v1/infer/predict", json=body)


# -- scenarios: one request each; the label of the (expected) outcome --------------------------------
def grps_http(c: Clients) -> str:
    reply = predict(c, {"model": "healthy", "str_data": "soak"})
    expect(reply.status_code == 200 and reply.json()["str_data"] == "soak", f"{reply.status_code}")
    return "ok"


def grps_grpc(c: Clients) -> str:
    expect(c.grps.Predict(Msg(model="healthy", str_data="soak"), timeout=30).str_data == "soak", "wrong")
    return "ok"


X = np.arange(6, dtype=np.float32).reshape(2, 3)


def oip_http(c: Clients) -> str:
    body = {"inputs": [{"name": "x", "shape": [2, 3], "datatype": "FP32", "data": X.ravel().tolist()}]}
    reply = c.http.post("/v2/models/identity/infer", json=body)
    expect(reply.status_code == 200, f"{reply.status_code} {reply.text[:200]}")
    expect(reply.json()["outputs"][0]["data"] == X.ravel().tolist(), "wrong data")
    return "ok"


def oip_grpc_infer(c: Clients) -> str:
    request = oip.ModelInferRequest(model_name="identity")
    request.inputs.add(name="x", datatype="FP32", shape=[2, 3])
    request.raw_input_contents.append(X.tobytes())
    reply = c.oip.ModelInfer(request, timeout=30)
    expect(np.frombuffer(reply.raw_output_contents[0], np.float32).tolist() == X.ravel().tolist(), "wrong")
    return "ok"


PARTS = [f"part {i}" for i in range(6)]


def stream_http(c: Clients) -> str:
    body = {"model": "streamer", "str_data": "6,2"}
    with c.http.stream("POST", "/grps/v1/infer/predict?streaming=true", json=body) as reply:
        parts = [orjson.loads(line)["str_data"] for line in reply.iter_lines() if line]
    expect(reply.status_code == 200 and parts == PARTS, f"{reply.status_code} {parts}")
    return "ok"


def stream_grpc(c: Clients) -> str:
    parts = [m.str_data for m in c.grps.PredictStreaming(Msg(model="streamer", str_data="6,2"), timeout=30)]
    expect(parts == PARTS, f"{parts}")
    return "ok"


def disconnect_http(c: Clients) -> str:
    body = {"model": "streamer", "str_data": "500,5"}
    with c.http.stream("POST", "/grps/v1/infer/predict?streaming=true", json=body) as reply:
        lines = reply.iter_lines()
        got = [next(lines), next(lines)]
    expect(reply.status_code == 200 and len(got) == 2, f"{reply.status_code}")
    return "disconnected"


def disconnect_grpc(c: Clients) -> str:
    call = c.grps.PredictStreaming(Msg(model="streamer", str_data="500,5"), timeout=30)
    got = [next(call).str_data, next(call).str_data]
    call.cancel()
    expect(got == PARTS[:2], f"{got}")
    return "disconnected"


ERROR_MODELS = (
    ("raiser", {"str_data": "x"}),
    ("memory", {"str_data": "x"}),
    ("wrong_shape", {"ndarray": [[1.0, 2.0]]}),
)


def model_error_http(c: Clients) -> str:
    model, body = ERROR_MODELS[int(time.monotonic() * 1000) % len(ERROR_MODELS)]
    reply = predict(c, {"model": model, **body})
    expect(reply.status_code == 500, f"{model} {reply.status_code}")
    return "model_error"


def model_error_grpc(c: Clients) -> str:
    # GrpsService follows grps: a failed request answers gRPC OK with status {FAILURE, code, msg}
    answer = c.grps.Predict(Msg(model="raiser", str_data="x"), timeout=30)
    failure = (answer.status.status, answer.status.code)
    expect(failure == (grps_pb2.Status.FAILURE, 500), f"{failure}")
    expect("/home/alice" not in answer.status.msg and len(answer.status.msg) <= 1024, "message leaks")
    return "model_error"


BIG = b"\0" * (LIMIT_BYTES + 1)


def oversize_http(c: Clients) -> str:
    reply = c.http.post(
        "/grps/v1/infer/predict?model=healthy",
        content=BIG,
        headers={"Content-Type": "application/octet-stream"},
    )
    expect(reply.status_code == 413, f"{reply.status_code}")
    return "too_large"


def oversize_grpc(c: Clients) -> str:
    try:
        c.grps.Predict(Msg(model="healthy", bin_data=BIG), timeout=30)
    except grpc.RpcError as exc:
        expect(exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, f"{exc.code()}")
        return "too_large"
    raise Unexpected("answered OK")


# name -> (scenario, pause between requests): errors and big bodies are a share of the traffic, not most
SCENARIOS: dict[str, tuple[Callable[[Clients], str], float]] = {
    "grps-http": (grps_http, 0.0),
    "grps-grpc": (grps_grpc, 0.0),
    "oip-http": (oip_http, 0.0),
    "oip-grpc": (oip_grpc_infer, 0.0),
    "stream-http": (stream_http, 0.0),
    "stream-grpc": (stream_grpc, 0.0),
    "disconnect-http": (disconnect_http, 0.05),
    "disconnect-grpc": (disconnect_grpc, 0.05),
    "model-error-http": (model_error_http, 0.02),
    "model-error-grpc": (model_error_grpc, 0.02),
    "oversize-http": (oversize_http, 0.1),
    "oversize-grpc": (oversize_grpc, 0.1),
}


@dataclass
class Tally:
    outcomes: Counter[tuple[str, str]] = field(default_factory=Counter)
    unexpected: Counter[tuple[str, str]] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, scenario: str, outcome: str, unexpected: bool) -> None:
        with self.lock:
            (self.unexpected if unexpected else self.outcomes)[(scenario, outcome)] += 1


def drive(name: str, server: tuple[str, str], tally: Tally, stop: threading.Event) -> None:
    scenario, pause = SCENARIOS[name]
    clients = Clients(*server)
    try:
        while not stop.is_set():
            try:
                outcome, bad = scenario(clients), False
            except Unexpected as exc:
                outcome, bad = str(exc)[:120], True
            except grpc.RpcError as exc:
                outcome, bad = f"{exc.code()}: {exc.details()}"[:120], True
            except (httpx.HTTPError, StopIteration) as exc:
                outcome, bad = f"{type(exc).__name__}: {exc}"[:120], True
            tally.add(name, outcome, bad)
            if pause:
                stop.wait(pause)
    finally:
        clients.close()


# -- the server and its samples -----------------------------------------------------------------------
@dataclass
class Sample:
    t_s: float
    rss_kib: int
    fds: int
    tasks: int


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def asyncio_tasks(http_url: str) -> int:
    text = httpx.get(f"{http_url}/metrics", timeout=10).text
    match = re.search(r"^grps_asyncio_tasks (\S+)$", text, re.MULTILINE)
    return int(float(match.group(1))) if match else -1


def sample(pid: int, http_url: str, started: float) -> Sample:
    return Sample(
        time.monotonic() - started, rss_kib(pid), len(os.listdir(f"/proc/{pid}/fd")), asyncio_tasks(http_url)
    )


def start_server(log_path: Path) -> tuple[subprocess.Popen[bytes], str, str]:
    log = log_path.open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "grps_py.cli", "serve", str(PROJECT), "--server-conf", str(SERVER_CONF)],
        stderr=log,
        cwd=ROOT,
    )
    for _ in range(600):
        match = LISTENING.search(log_path.read_text(errors="replace"))
        if match:
            http_url, grpc_target = f"http://127.0.0.1:{match.group(1)}", f"127.0.0.1:{match.group(2)}"
            for _ in range(600):
                try:
                    if httpx.get(f"{http_url}/v2/health/ready", timeout=5).status_code == 200:
                        return proc, http_url, grpc_target
                except httpx.HTTPError:
                    pass
                time.sleep(0.1)
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    proc.kill()
    raise SystemExit(f"soak: the server did not start; its log: {log_path}")


def median(values: list[int]) -> float:
    return statistics.median(values) if values else 0.0


def report(seconds: float, samples: list[Sample], tally: Tally, exit_code: int | None) -> bool:
    """Print the figures and the verdict; True on pass."""
    warm = [s for s in samples if s.t_s >= seconds * WARMUP_SHARE]
    first, last = warm[:3], warm[-3:]
    # RSS moves by a MiB or two between samples (allocator arenas, in-flight bodies): medians of three
    rss_warm, rss_end = median([s.rss_kib for s in first]), median([s.rss_kib for s in last])
    growth = (rss_end - rss_warm) / rss_warm
    fd_growth = median([s.fds for s in last]) - median([s.fds for s in first])
    task_growth = median([s.tasks for s in last]) - median([s.tasks for s in first])
    requests = sum(tally.outcomes.values()) + sum(tally.unexpected.values())
    print(f"soak: {seconds:.0f} s, {requests} requests ({requests / seconds:.0f}/s), {len(samples)} samples")
    for name in SCENARIOS:
        got = {o: n for (s, o), n in tally.outcomes.items() if s == name}
        print(f"  {name:18} {sum(got.values()):7d}  {got}")
    by_kind = Counter()
    for (_, outcome), n in tally.outcomes.items():
        if outcome != "ok":
            by_kind[outcome] += n
    print(f"  expected errors by kind: {dict(by_kind)}")
    print(f"  unexpected statuses: {sum(tally.unexpected.values())} {dict(tally.unexpected)}")
    print(
        f"  RSS: start {samples[0].rss_kib / 1024:.1f} MiB, after warm-up {rss_warm / 1024:.1f} MiB, "
        f"end {rss_end / 1024:.1f} MiB (medians; growth after warm-up {growth * 100:+.2f}%)"
    )
    print(f"  open fds: start {samples[0].fds}, after warm-up {warm[0].fds}, end {samples[-1].fds}")
    print(
        f"  asyncio tasks: start {samples[0].tasks}, after warm-up {warm[0].tasks}, end {samples[-1].tasks}"
    )
    points = [(round(s.t_s), round(s.rss_kib / 1024, 1), s.fds, s.tasks) for s in samples]
    print(f"  samples (t s, RSS MiB, fds, tasks): {points}")
    checks = {
        f"RSS growth after warm-up {growth * 100:+.2f}% < {RSS_GROWTH_MAX * 100:.0f}%": growth
        < RSS_GROWTH_MAX,
        f"open fds growth {fd_growth:+.0f} <= {FD_TOLERANCE}": fd_growth <= FD_TOLERANCE,
        f"asyncio tasks growth {task_growth:+.0f} <= {TASK_TOLERANCE}": task_growth <= TASK_TOLERANCE,
        "no unexpected status": not tally.unexpected,
        f"drained and exited 0 on SIGTERM (exit {exit_code})": exit_code == 0,
    }
    for check, ok in checks.items():
        print(f"  {'PASS' if ok else 'FAIL'}  {check}")
    return all(checks.values())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=float(os.environ.get("SOAK_S") or 600))
    parser.add_argument("--sample-s", type=float, default=None, help="default: 5, or seconds/12 when shorter")
    args = parser.parse_args()
    period = args.sample_s or min(5.0, args.seconds / 12)
    with tempfile.TemporaryDirectory(prefix="grps-soak-") as tmp:
        log_path = Path(tmp) / "server.log"
        proc, http_url, grpc_target = start_server(log_path)
        started = time.monotonic()
        samples = [sample(proc.pid, http_url, started)]
        tally, stop = Tally(), threading.Event()
        threads = [
            threading.Thread(target=drive, args=(name, (http_url, grpc_target), tally, stop), daemon=True)
            for name in SCENARIOS
        ]
        for thread in threads:
            thread.start()
        deadline = started + args.seconds
        while time.monotonic() < deadline:
            time.sleep(min(period, max(0.0, deadline - time.monotonic())))
            samples.append(sample(proc.pid, http_url, started))
        stop.set()
        for thread in threads:
            thread.join(60)
        proc.send_signal(signal.SIGTERM)
        try:
            exit_code: int | None = proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            exit_code = None
        passed = report(args.seconds, samples, tally, exit_code)
        if not passed:
            tail = log_path.read_text(errors="replace").splitlines()[-20:]
            print("  server log (last lines):\n    " + "\n    ".join(tail))
    print(f"soak: {'PASS' if passed else 'FAIL'}")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())

"""Each attack of the hardening review against a real grps-py process, and what it costs the server.

    .venv/bin/python bench/attacks.py [--only NAME ...] [--list]

A fresh `grps-py serve bench/projects/attacks` for each attack (idle and stream-stall timeouts of 5 s,
32 connections, 64 MiB messages); the server's resident memory is sampled every 20 ms while the
attack runs. One row per attack: what the client saw, the server's peak RSS growth over its RSS just
before, and how long until the server ended the attack (closed or aborted the connection, stopped the
stream). The table is printed and written to bench/results/attacks-<time>.md; docs/security.md quotes it.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import gzip
import http.client
import os
import platform
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import numpy as np
import orjson
import proctree

from grps_py.protos import grps_pb2, grps_pb2_grpc, open_inference_pb2, open_inference_pb2_grpc

ROOT = Path(__file__).resolve().parent.parent
PROJECT = "bench/projects/attacks"
RESULTS = ROOT / "bench" / "results"
MIB = 1 << 20
LIVE = b"GET /grps/v1/health/live HTTP/1.1\r\nHost: a\r\n\r\n"
FORGED = "2026-01-01 00:00:00,000 INFO [-] grps_py.access: forged"


@dataclass
class Row:
    attack: str
    client_saw: str
    rss_mib: float = 0.0
    ended_s: float | None = None  # how long until the server ended it; None: not applicable


class Server:
    """One grps-py process on free ports; its RSS sampled (peak) while `watch` is on."""

    def __init__(self, workdir: Path) -> None:
        self.log_path = workdir / "server.log"
        self._log = self.log_path.open("w")
        cmd = [str(Path(sys.executable).parent / "grps-py"), "serve", PROJECT]
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, cwd=ROOT)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            text = self.log_path.read_text(errors="replace")
            if "loaded models" in text and "listening: http" in text:
                line = next(ln for ln in text.splitlines() if "listening: http" in ln)
                words = line.split("listening: http ")[1].split()
                self.http_port = int(words[0].rsplit(":", 1)[1])
                self.grpc_port = int(words[2])
                break
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server did not start:\n{text[-2000:]}")
            time.sleep(0.1)
        else:
            raise RuntimeError("the server did not start within 60 s")
        self._peak = 0
        self._sampling = False
        self._sampler: threading.Thread | None = None

    def rss(self) -> int:
        return proctree.rss_bytes(proctree.tree(self.proc.pid)) if self.alive() else 0

    def alive(self) -> bool:
        return self.proc.poll() is None

    def watch(self) -> None:
        self._peak = self.rss()
        self._sampling = True
        self._sampler = threading.Thread(target=self._sample, daemon=True)
        self._sampler.start()

    def _sample(self) -> None:
        while self._sampling:
            self._peak = max(self._peak, self.rss())
            time.sleep(0.02)

    def peak(self) -> int:
        self._sampling = False
        if self._sampler is not None:
            self._sampler.join()
        return self._peak

    def stop(self) -> None:
        if self.alive():
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()

    def connect(self, rcvbuf: int | None = None) -> socket.socket:
        sock = socket.socket()
        if rcvbuf is not None:  # a client that reads nothing: keep what the kernel takes for it small
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        sock.connect(("127.0.0.1", self.http_port))
        return sock

    def http(self, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None):
        conn = http.client.HTTPConnection("127.0.0.1", self.http_port, timeout=30)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            answer = conn.getresponse()
            return answer.status, answer.read(), dict(answer.getheaders())
        finally:
            conn.close()

    def channel(self) -> grpc.Channel:
        return grpc.insecure_channel(
            f"127.0.0.1:{self.grpc_port}", options=[("grpc.max_send_message_length", -1)]
        )


def served_after(server: Server) -> str:
    """Whether the server still answers a plain request."""
    if not server.alive():
        return f"process died ({server.proc.returncode})"
    try:
        return "serves others" if server.http("GET", "/grps/v1/health/live")[0] == 200 else "live != 200"
    except OSError as exc:
        return f"live failed: {exc}"


def time_until_reset(sock: socket.socket, limit_s: float) -> float | None:
    """Seconds until the server ends a connection the client never reads (a send fails), or None."""
    started = time.monotonic()
    sock.setblocking(False)
    while time.monotonic() - started < limit_s:
        try:
            sock.send(b"\r\n")  # empty lines between requests are allowed (RFC 9112 2.2)
        except BlockingIOError:
            pass
        except OSError:
            return time.monotonic() - started
        time.sleep(0.05)
    return None


def fill(sock: socket.socket, data: bytes, total: int, limit_s: float = 10.0) -> int:
    """Send `data` repeatedly, up to `total` bytes or until the server stops taking it; bytes sent."""
    sock.setblocking(False)
    sent, started = 0, time.monotonic()
    while sent < total and time.monotonic() - started < limit_s:
        try:
            sent += sock.send(data)
        except BlockingIOError:
            time.sleep(0.01)
        except OSError:
            break
    return sent


# -- the attacks ---------------------------------------------------------------------------------


def giant_answer(server: Server) -> Row:
    body = orjson.dumps({"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1]}]})
    status, text, _ = server.http("POST", "/v2/models/giant/infer", body)
    return Row("1. a 4 GiB answer over OIP HTTP JSON", f"{status} {text[:90].decode(errors='replace')}")


def trailers(server: Server) -> Row:
    sock = server.connect()
    head = b"POST /grps/v1/infer/predict HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n"
    sock.sendall(head + b"Content-Type: application/octet-stream\r\n\r\n1\r\na\r\n0\r\n")
    started = time.monotonic()
    sent = fill(sock, b"a:b\r\n" * 20000, 40 * MIB)
    ended = time_until_reset(sock, 10)
    sock.close()
    return Row(
        "2. 40 MB of chunked trailers",
        f"server took {sent / MIB:.1f} MiB, then closed",
        0,
        ended and time.monotonic() - started,
    )


def pipeline_without_reading(server: Server) -> Row:
    sock = server.connect(rcvbuf=4096)
    started = time.monotonic()
    sent = fill(sock, LIVE * 100, 540 * 1024)
    ended = time_until_reset(sock, 10)
    sock.close()
    saw = f"server took {sent // 1024} KiB of requests, answered into a full buffer"
    return Row("3. pipelined requests, answers never read", saw, 0, ended and time.monotonic() - started)


def slots_held(server: Server) -> Row:
    held = []
    for _ in range(32):
        sock = server.connect(rcvbuf=4096)
        fill(sock, LIVE * 100, 16 * 1024, limit_s=1)
        held.append(sock)
    started = time.monotonic()
    first = None
    while time.monotonic() - started < 20:
        try:
            status = server.http("GET", "/grps/v1/health/live")[0]
        except OSError:
            status = 0
        if first is None:
            first = status
        if status == 200:
            break
        time.sleep(0.25)
    waited = time.monotonic() - started
    for sock in held:
        sock.close()
    return Row(
        "3. 32 such connections, 16 KiB of requests each (max_connections: 32)",
        f"a new client got {first} first, 200 after {waited:.1f} s",
        0,
        waited,
    )


def pipelined_burst(server: Server) -> Row:
    """1,500 complete requests (69 KB, over header_bytes' 64 KiB) and half of the next in one write."""
    sock = server.connect()
    sock.settimeout(5)
    sock.sendall(LIVE * 1500 + LIVE[:20])
    time.sleep(0.2)
    sock.sendall(LIVE[20:])
    received = b""
    while received.count(b"HTTP/1.1 200") < 1501:
        try:
            data = sock.recv(65536)
        except OSError:
            break
        if not data:
            break
        received += data
    sock.close()
    answered = received.count(b"HTTP/1.1 200")
    return Row("4. 1,501 pipelined GETs (69 KB), a read ending inside a head", f"{answered} of 1501 answered")


def stream_http(server: Server) -> Row:
    sock = server.connect(rcvbuf=4096)
    body = b'{"str_data": "go"}'
    target = "/grps/v1/infer/predict?streaming=true&model=firehose-1"
    head = f"POST {target} HTTP/1.1\r\nHost: a\r\nContent-Length: {len(body)}\r\n\r\n"
    started = time.monotonic()
    sock.sendall(head.encode() + body)
    ended = time_until_reset(sock, 10)
    sock.close()
    return Row(
        "5. a 16 KiB-message stream over HTTP, never read",
        "stream stopped",
        0,
        ended and time.monotonic() - started,
    )


def stream_grpc(server: Server) -> Row:
    with server.channel() as channel:
        stub = grps_pb2_grpc.GrpsServiceStub(channel)
        started = time.monotonic()
        call = stub.PredictStreaming(grps_pb2.GrpsMessage(model="firehose-1", str_data="go"), timeout=30)
        while not call.done() and time.monotonic() - started < 10:  # never reads a message
            time.sleep(0.1)
        ended = time.monotonic() - started if call.done() else None
        code = (
            call.code().name
            if call.done()
            else "the call stays open (its status waits behind unread messages)"
        )
        call.cancel()
    return Row("5. a 16 KiB-message gRPC PredictStreaming, never read", code, 0, ended)


def model_stream_infer(server: Server) -> Row:
    taken = 0
    stop = threading.Event()

    def requests() -> Iterator[open_inference_pb2.ModelInferRequest]:
        nonlocal taken
        tensor = open_inference_pb2.ModelInferRequest.InferInputTensor(name="x", datatype="BYTES", shape=[1])
        request = open_inference_pb2.ModelInferRequest(model_name="echo", inputs=[tensor])
        request.raw_input_contents.append(b"x" * 16384)
        while not stop.is_set():
            taken += 1
            yield request

    with server.channel() as channel:
        stub = open_inference_pb2_grpc.GRPCInferenceServiceStub(channel)
        call = stub.ModelStreamInfer(requests(), timeout=30)
        time.sleep(10)  # answers never read
        stop.set()
        call.cancel()
    return Row(
        "5. ModelStreamInfer, 16 KiB requests for 10 s, answers never read", f"the client could send {taken}"
    )


def gzip_bomb(server: Server) -> Row:
    with server.channel() as channel:
        stub = grps_pb2_grpc.GrpsServiceStub(channel)
        message = grps_pb2.GrpsMessage(bin_data=bytes(300 * MIB))
        wire = len(gzip.compress(message.SerializeToString(), 1)) / MIB
        try:
            stub.Predict(message, compression=grpc.Compression.Gzip, timeout=60)
            saw = "OK"
        except grpc.RpcError as exc:
            saw = f"{exc.code().name} {exc.details()[:70]}"
    return Row(f"6. gRPC gzip bomb: ~{wire:.1f} MiB on the wire, 300 MiB inflated", saw)


def log_forging(server: Server) -> Row:
    path = "/v2/models/x%0A" + FORGED.replace(" ", "%20") + "/infer"
    status = server.http("POST", path, b"{}")[0]
    with server.channel() as channel:
        stub = open_inference_pb2_grpc.GRPCInferenceServiceStub(channel)
        with contextlib.suppress(grpc.RpcError):
            stub.ModelInfer(open_inference_pb2.ModelInferRequest(model_name="x\n" + FORGED), timeout=10)
    time.sleep(0.5)
    forged = sum(line.startswith(FORGED) for line in server.log_path.read_text(errors="replace").splitlines())
    return Row(
        "7. a newline in OIP model names (HTTP and gRPC)", f"HTTP {status}; forged lines in the log: {forged}"
    )


def cross_site(server: Server) -> Row:
    headers = {"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"}
    status = server.http("GET", "/grps/v1/health/offline", headers=headers)[0]
    ready = server.http("GET", "/v2/health/ready")[0]
    return Row(
        "8. GET /grps/v1/health/offline from a cross-site page", f"{status}; ready afterwards: {ready}"
    )


def http10_stream(server: Server) -> Row:
    sock = server.connect()
    sock.settimeout(5)
    body = b'{"str_data": "hi"}'
    head = (
        "POST /grps/v1/infer/predict?streaming=true HTTP/1.0\r\nConnection: keep-alive\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    started = time.monotonic()
    sock.sendall(head.encode() + body)
    received = b""
    ended = None
    while True:
        try:
            data = sock.recv(65536)
        except OSError:
            break
        if not data:
            ended = time.monotonic() - started
            break
        received += data
    sock.close()
    keep = b"keep-alive" in received.split(b"\r\n\r\n")[0].lower()
    status = received.split(b" ")[1].decode() if received else "nothing"
    saw = f"{status}; keep-alive answered: {keep}; end seen: {ended is not None}"
    return Row("9. HTTP/1.0 keep-alive streaming", saw, 0, ended)


def smaller(server: Server) -> Row:
    seen = []
    status = server.http(
        "POST", "/grps/v1/infer/predict?model=typed-1", b"abc", {"Content-Type": "application/octet-stream"}
    )[0]
    seen.append(f"bin_data to tensors {status}")
    status = server.http("GET", "/grps/v1/health/live", headers={"Expect": "magic"})[0]
    seen.append(f"Expect: magic {status}")
    sock = server.connect()
    sock.settimeout(5)
    head = b"POST /grps/v1/infer/predict HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n"
    sock.sendall(head + b"\r\n0\r\n\r\n")
    try:
        seen.append(f"TE gzip, chunked {sock.recv(100).split(b' ')[1].decode()}")
    except (OSError, IndexError):
        seen.append("TE gzip, chunked: closed")
    sock.close()
    body = b'{"str_data": "x"}'
    status = server.http("POST", "/grps/v1/infer/predict", body, {"Grps-Timeout-Us": "1_000"})[0]
    seen.append(f"Grps-Timeout-Us 1_000 {status}")
    with server.channel() as channel:
        stub = grps_pb2_grpc.GrpsServiceStub(channel)
        try:
            stub.Predict(grps_pb2.GrpsMessage(model="m" * 100_000), timeout=10)
        except grpc.RpcError as exc:
            seen.append(f"100 KB model name {exc.code().name} ({len(exc.details() or '')} chars)")
    headers = server.http(
        "GET", "/grps/v1/health/live", headers={"X-Request-Id": "[x] grps_py.access: fake"}
    )[2]
    kept = headers.get("X-Request-Id") == "[x] grps_py.access: fake"
    seen.append(f"X-Request-Id with spaces kept: {kept}")
    return Row("10. smaller ones", "; ".join(seen))


ATTACKS: dict[str, Callable[[Server], Row]] = {
    "giant-answer": giant_answer,
    "trailers": trailers,
    "pipeline": pipeline_without_reading,
    "slots": slots_held,
    "burst": pipelined_burst,
    "stream-http": stream_http,
    "stream-grpc": stream_grpc,
    "model-stream-infer": model_stream_infer,
    "gzip-bomb": gzip_bomb,
    "log-forging": log_forging,
    "cross-site": cross_site,
    "http10-stream": http10_stream,
    "smaller": smaller,
}


def run(name: str, workdir: Path) -> Row:
    server = Server(workdir)
    try:
        time.sleep(0.5)  # let start-up allocations settle
        before = server.rss()
        server.watch()
        try:
            row = ATTACKS[name](server)
        except Exception as exc:  # an attack the client could not complete is a finding too
            row = Row(name, f"client error: {type(exc).__name__}: {str(exc)[:80]}")
        row.rss_mib = (server.peak() - before) / MIB
        row.client_saw += f"; {served_after(server)}"
        return row
    finally:
        server.stop()


def table(rows: list[Row]) -> str:
    lines = [
        "| attack | what the client saw; the server after | server RSS growth, peak (MiB) "
        "| ended by the server after (s) |",
        "|---|---|---|---|",
    ]
    for row in rows:
        ended = "-" if row.ended_s is None else f"{row.ended_s:.1f}"
        lines.append(f"| {row.attack} | {row.client_saw} | {row.rss_mib:.0f} | {ended} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", nargs="*", choices=list(ATTACKS), help="run these attacks only")
    args = parser.parse_args()
    names = args.only or list(ATTACKS)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            print(f"attack: {name} ...", file=sys.stderr, flush=True)
            rows.append(run(name, Path(tmp)))
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M")
    python = platform.python_version()
    machine = f"{platform.machine()}, {os.cpu_count()} cores, Python {python}, numpy {np.__version__}"
    text = f"# bench/attacks.py, {stamp}\n\nMachine: {machine}.\n\n{table(rows)}\n"
    print(text)
    if not args.only:
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / f"attacks-{stamp}.md").write_text(text)


if __name__ == "__main__":
    main()

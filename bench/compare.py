"""grps-py against Triton, KServe, MLServer and the transport floor, side by side in one run.

    make bench        # = .venv/bin/python bench/compare.py
    .venv/bin/python bench/compare.py [--seconds 2] [--rounds 2] [--concurrency 1 8 32]
                                      [--peers kserve mlserver triton] [--quick]

Every server serves the same identity model (input x, FP32, comes back as y) on 127.0.0.1: grps-py
(bench/projects/identity), the peers of bench/peers.py (each installed into its own virtualenv under
~/.cache/grps-py-bench on first use), and the transport floor (bench/floor.py: Tornado's HTTPServer and
grpc.aio echoing the request bytes, nothing on top); over HTTP also `floor-httptools`, the same echo
carried by grps-py's own connection (httptools), for reference. One bounded async load client
re-sends pre-built request bodies (bench/load.py) to each server in turn, case by case, round by
round, so the servers see the same machine at nearly the same time. Each run lasts `--seconds` (plus
at most REQUEST_TIMEOUT_S for requests in flight).

It prints, per case and concurrency, the median requests/s and p50/p99 of each server and the ratios
grps-py / floor, grps-py / best peer and grps-py / Triton; then the servers' CPU time per request
(whole process tree, small tensors) and their resident memory while serving the 4 MB cases. The memory
goal (peak over idle at C8) is read from one C8 run of each 4 MB case made right after the idle reading,
before any C32 run: the larger heap a C32 run leaves behind would otherwise be counted as C8's. The
tables and the raw figures, with a description of the machine, go to bench/results/.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import numpy as np
import orjson
import proctree

from grps_py import event_loop
from grps_py.protos import grps_pb2, open_inference_pb2
from load import Load, RawGrpc, RawHttp, drive, oip_binary_request

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
SMALL_SHAPE = (1, 16)
BIG_SHAPE = (1, 1 << 20)  # 4 MiB of FP32
REQUEST_TIMEOUT_S = 30.0
MAX_MESSAGE_BYTES = 64 << 20
FLOOR, GRPS = "floor", "grps-py"
# The same echo, its HTTP carried by grps-py's own connection (httptools) instead of Tornado's: what
# grps-py's HTTP stack costs with nothing on top, now that it is not Tornado's HTTPServer. For
# reference; the goals are set against FLOOR, the transport floor as the issue defines it.
OWN_FLOOR = "floor-httptools"


# -- cases ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Case:
    """One kind of request: an API, an encoding and a payload."""

    name: str
    api: str  # "oip" (every server) or "grps" (grps-py and the floor)
    transport: str  # "http" or "grpc"
    shape: tuple[int, int]
    binary: bool = False  # needs the HTTP binary tensor extension

    @property
    def big(self) -> bool:
        return self.shape == BIG_SHAPE


CASES = (
    Case("OIP HTTP JSON [1,16]", "oip", "http", SMALL_SHAPE),
    Case("OIP HTTP binary [1,16]", "oip", "http", SMALL_SHAPE, binary=True),
    Case("OIP gRPC [1,16]", "oip", "grpc", SMALL_SHAPE),
    Case("OIP HTTP binary 4 MB", "oip", "http", BIG_SHAPE, binary=True),
    Case("OIP gRPC 4 MB", "oip", "grpc", BIG_SHAPE),
    Case("grps HTTP JSON [1,16]", "grps", "http", SMALL_SHAPE),
    Case("grps gRPC [1,16]", "grps", "grpc", SMALL_SHAPE),
    Case("grps HTTP octet-stream 4 MB", "grps", "http", BIG_SHAPE),
    Case("grps gRPC bin_data 4 MB", "grps", "grpc", BIG_SHAPE),
)
# The grps API case compared with the OIP case carrying the same payload (target: within 20%).
SAME_PAYLOAD = {
    "grps HTTP JSON [1,16]": "OIP HTTP JSON [1,16]",
    "grps gRPC [1,16]": "OIP gRPC [1,16]",
    "grps HTTP octet-stream 4 MB": "OIP HTTP binary 4 MB",
    "grps gRPC bin_data 4 MB": "OIP gRPC 4 MB",
}


def tensor(shape: tuple[int, int]) -> np.ndarray:
    return np.arange(shape[0] * shape[1], dtype=np.float32).reshape(shape) % 1000


def http_request(case: Case) -> tuple[str, bytes, dict[str, str]]:
    """(path, body, headers) of an HTTP case."""
    x = tensor(case.shape)
    if case.api == "grps" and case.big:
        return "/grps/v1/infer/predict", x.tobytes(), {"Content-Type": "application/octet-stream"}
    if case.api == "grps":
        doc = {
            "gtensors": {
                "tensors": [
                    {
                        "name": "x",
                        "dtype": "DT_FLOAT32",
                        "shape": list(x.shape),
                        "flat_float32": x.ravel().tolist(),
                    }
                ]
            }
        }
        return "/grps/v1/infer/predict", orjson.dumps(doc), {"Content-Type": "application/json"}
    path = "/v2/models/identity/infer"
    if not case.binary:
        doc = {
            "inputs": [{"name": "x", "shape": list(x.shape), "datatype": "FP32", "data": x.ravel().tolist()}]
        }
        return path, orjson.dumps(doc), {"Content-Type": "application/json"}
    body, headers = oip_binary_request(x, "y")
    return path, body, headers


def grpc_request(case: Case) -> tuple[str, bytes]:
    """(method, serialized request) of a gRPC case."""
    x = tensor(case.shape)
    if case.api == "grps":
        message = grps_pb2.GrpsMessage()
        if case.big:
            message.bin_data = x.tobytes()
        else:
            message.gtensors.tensors.add(
                name="x", dtype=grps_pb2.DT_FLOAT32, shape=list(x.shape), flat_float32=x.ravel().tolist()
            )
        return "/grps.protos.v1.GrpsService/Predict", message.SerializeToString()
    request = open_inference_pb2.ModelInferRequest(model_name="identity")
    request.inputs.add(name="x", datatype="FP32", shape=list(x.shape))
    request.raw_input_contents.append(x.tobytes())
    return "/inference.GRPCInferenceService/ModelInfer", request.SerializeToString()


# -- servers -------------------------------------------------------------------------------------
@dataclass
class Server:
    """A started server: where it listens, what it takes, and how to stop it."""

    name: str
    http_port: int
    grpc_port: int
    pid: int
    binary_http: bool
    stop: Callable[[], None]
    apis: tuple[str, ...] = ("oip",)
    version: str = ""
    transports: tuple[str, ...] = ("http", "grpc")

    def takes(self, case: Case) -> bool:
        wanted = case.api in self.apis and case.transport in self.transports
        return wanted and (self.binary_http or not case.binary)

    def pids(self) -> list[int]:
        return proctree.tree(self.pid)


def start_process(
    name: str,
    cmd: list[str],
    workdir: Path,
    pattern: str,
    timeout_s: float = 180,
    env: dict[str, str] | None = None,
) -> tuple:
    """Start `cmd` with its output in a log file; wait for a line matching `pattern` (two port groups)."""
    log_path = workdir / f"{name}.log"
    log = log_path.open("w")
    proc = subprocess.Popen(
        cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, env={**os.environ, **(env or {})}
    )
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        match = re.search(pattern, log_path.read_text(errors="replace"))
        if match:
            return proc, int(match.group(1)), int(match.group(2))
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    proc.kill()
    tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-20:])
    raise RuntimeError(f"{name} did not start:\n{tail}")


def stopper(proc: subprocess.Popen) -> Callable[[], None]:
    def stop() -> None:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    return stop


def start_grps(
    workdir: Path, server_conf: Path | None = None, name: str = GRPS, env: dict[str, str] | None = None
) -> Server:
    cmd = [str(Path(sys.executable).parent / "grps-py"), "serve", "bench/projects/identity"]
    if server_conf:
        cmd += ["--server-conf", str(server_conf)]
    # "listening" comes before the models are warm; "loaded models" after
    proc, http_port, grpc_port = start_process(
        name, cmd, workdir, r"listening: http \S+:(\d+) grpc (\d+)[\s\S]*loaded models", env=env
    )
    return Server(
        name, http_port, grpc_port, proc.pid, True, stopper(proc), ("oip", "grps"), package_version("grps-py")
    )


def start_variant(spec: str, workdir: Path) -> Server:
    """`--variant LABEL=[SERVER_YML][,ENV=VALUE...]`: grps-py once more, with other settings."""
    label, _, rest = spec.partition("=")
    conf, *assignments = rest.split(",")
    env = dict(assignment.split("=", 1) for assignment in assignments)
    return start_grps(workdir, Path(conf) if conf else None, label, env)


def start_floor(workdir: Path, name: str = FLOOR) -> Server:
    own = name == OWN_FLOOR
    cmd = [sys.executable, "bench/floor.py", "--connection", "grps" if own else "tornado"]
    proc, http_port, grpc_port = start_process(name, cmd, workdir, r"listening: http (\d+) grpc (\d+)")
    transports = ("http",) if own else ("http", "grpc")  # its gRPC is the floor's own
    return Server(
        name, http_port, grpc_port, proc.pid, True, stopper(proc), ("oip", "grps"), transports=transports
    )


def start_peer(name: str, workdir: Path) -> Server:
    import peers  # installs on first use; imported here so --peers none needs nothing of it

    peer = peers.start(name, workdir)
    return Server(name, peer.http_port, peer.grpc_port, peer.proc.pid, peer.binary_http, peer.stop)


def package_version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return ""


# -- measuring -----------------------------------------------------------------------------------
@dataclass
class Run:
    load: Load
    cpu_s: float  # the server tree's CPU time during the run
    peak_rss: int  # the server tree's largest resident memory seen during the run

    @property
    def cpu_ms_per_request(self) -> float:
        return self.cpu_s / self.load.requests * 1e3 if self.load.requests else float("nan")


@dataclass
class Results:
    runs: dict[tuple[str, str, int], list[Run]] = field(default_factory=dict)  # (case, server, conc)
    idle_rss: dict[str, int] = field(default_factory=dict)
    # (case, server) -> peak RSS of the 4 MB runs at C8 made right after the idle reading, before any
    # C32 run: the larger heap a C32 run leaves behind is not counted as C8's memory.
    memory_peak: dict[tuple[str, str], int] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)  # server -> why

    def median(self, case: str, server: str, conc: int, attr: str = "requests_per_s") -> float | None:
        runs = self.runs.get((case, server, conc))
        if not runs:
            return None
        if attr == "cpu_ms":
            return statistics.median(r.cpu_ms_per_request for r in runs)
        if attr == "peak_rss":
            return max(r.peak_rss for r in runs)
        if attr == "errors":
            return sum(r.load.errors for r in runs)
        return statistics.median(getattr(r.load, attr) for r in runs)


class RssSampler:
    """The peak resident memory of a process tree, sampled every 20 ms in a thread of its own."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        pids = self.server.pids()
        while not self._stop.is_set():
            self.peak = max(self.peak, proctree.rss_bytes(pids))
            self._stop.wait(0.02)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


class Clients:
    """One pre-built sender per (server, case), kept across rounds so connections stay open."""

    def __init__(self) -> None:
        self._senders: dict[tuple[str, str], RawHttp | RawGrpc] = {}
        self._channels: dict[str, grpc.aio.Channel] = {}

    def sender(self, server: Server, case: Case) -> RawHttp | RawGrpc:
        key = (server.name, case.name)
        if key not in self._senders:
            if case.transport == "http":
                path, body, headers = http_request(case)
                self._senders[key] = RawHttp("127.0.0.1", server.http_port, path, body, headers)
            else:
                method, body = grpc_request(case)
                self._senders[key] = RawGrpc(self._channel(server), method, body)
        return self._senders[key]

    def _channel(self, server: Server) -> grpc.aio.Channel:
        if server.name not in self._channels:
            options = [
                ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ]
            self._channels[server.name] = grpc.aio.insecure_channel(f"127.0.0.1:{server.grpc_port}", options)
        return self._channels[server.name]

    async def close(self) -> None:
        for sender in self._senders.values():
            if isinstance(sender, RawHttp):
                await sender.close()
        for channel in self._channels.values():
            await channel.close()


async def measure(servers: list[Server], args: argparse.Namespace, results: Results) -> None:
    clients = Clients()
    cases = [case for case in CASES if selected(case, args)]
    try:
        for server in servers:  # warm every path once, and check it answers
            for case in cases:
                if server.takes(case):
                    load = await drive(clients.sender(server, case).send, 0.3, 2, REQUEST_TIMEOUT_S)
                    if load.requests == 0:
                        print(f"  warning: {server.name} answered no {case.name} request", file=sys.stderr)
        for server in servers:
            results.idle_rss[server.name] = proctree.rss_bytes(server.pids())
        memory_conc = target_concurrency(args)
        for case in (case for case in cases if case.big):
            for server in servers:
                if server.takes(case):
                    run = await one_run(clients.sender(server, case), server, memory_conc, args.seconds)
                    results.memory_peak[(case.name, server.name)] = run.peak_rss
            print(f"  memory: {case.name} C{memory_conc}", file=sys.stderr, flush=True)
        for round_no in range(args.rounds):
            for case in cases:
                for conc in args.concurrency:
                    for server in servers:
                        if server.takes(case):
                            run = await one_run(clients.sender(server, case), server, conc, args.seconds)
                            results.runs.setdefault((case.name, server.name, conc), []).append(run)
                    print(
                        f"  round {round_no + 1}/{args.rounds}: {case.name} C{conc}",
                        file=sys.stderr,
                        flush=True,
                    )
    finally:
        await clients.close()


def selected(case: Case, args: argparse.Namespace) -> bool:
    if args.quick and case.big and case.api == "grps":
        return False
    return not args.cases or any(part.lower() in case.name.lower() for part in args.cases)


async def one_run(sender: RawHttp | RawGrpc, server: Server, conc: int, seconds: float) -> Run:
    pids = server.pids()
    cpu_before = proctree.cpu_seconds(pids)
    with RssSampler(server) as rss:
        load = await drive(sender.send, seconds, conc, REQUEST_TIMEOUT_S)
    return Run(load, proctree.cpu_seconds(pids) - cpu_before, rss.peak)


# -- reporting -----------------------------------------------------------------------------------
def fmt_ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}x" if a and b else "-"


def report(servers: list[Server], results: Results, args: argparse.Namespace) -> str:
    names = [s.name for s in servers]
    peers = [s.name for s in servers if "grps" not in s.apis]
    lines = ["### Requests/s (median), p50 / p99 ms", ""]
    head = ["case", "C", *names, "grps-py / floor", "grps-py / best peer", "grps-py / triton"]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for case in CASES:
        for conc in args.concurrency:
            cells = []
            for name in names:
                rps = results.median(case.name, name, conc)
                if rps is None:
                    cells.append("n/a")
                    continue
                p50 = results.median(case.name, name, conc, "p50_ms")
                p99 = results.median(case.name, name, conc, "p99_ms")
                errors = results.median(case.name, name, conc, "errors")
                cell = f"{rps:.0f} ({p50:.1f} / {p99:.1f})"
                cells.append(cell + (f" {errors:.0f} err" if errors else ""))
            if all(c == "n/a" for c in cells):
                continue
            ours = results.median(case.name, GRPS, conc)
            peer_rps = [r for r in (results.median(case.name, p, conc) for p in peers) if r]
            row = [case.name, str(conc), *cells]
            row += [
                fmt_ratio(ours, results.median(case.name, FLOOR, conc)),
                fmt_ratio(ours, max(peer_rps) if peer_rps else None),
                fmt_ratio(ours, results.median(case.name, "triton", conc)),
            ]
            lines.append("| " + " | ".join(row) + " |")
    lines += ["", "### Server CPU time per request, ms (whole process tree, median over runs)", ""]
    small = [c for c in CASES if not c.big]
    head = ["case (C8)", *names]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    conc = 8 if 8 in args.concurrency else args.concurrency[0]
    for case in small:
        cells = [results.median(case.name, name, conc, "cpu_ms") for name in names]
        if any(c is not None for c in cells):
            lines.append(
                "| " + " | ".join([case.name, *("n/a" if c is None else f"{c:.3f}" for c in cells)]) + " |"
            )
    lines += ["", "### Resident memory, MiB: idle, and peak during the 4 MB cases", ""]
    head = ["", *names]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines.append("| idle | " + " | ".join(f"{results.idle_rss.get(n, 0) / 2**20:.0f}" for n in names) + " |")
    first = [[p for (_, server), p in results.memory_peak.items() if server == name] for name in names]
    cells = [f"{max(seen) / 2**20:.0f}" if seen else "n/a" for seen in first]
    lines.append(
        f"| peak, 4 MB cases at C{target_concurrency(args)}, before any C32 run | " + " | ".join(cells) + " |"
    )
    for conc in args.concurrency:
        peaks = []
        for name in names:
            seen = [results.median(c.name, name, conc, "peak_rss") for c in CASES if c.big]
            seen = [s for s in seen if s]
            peaks.append(f"{max(seen) / 2**20:.0f}" if seen else "n/a")
        lines.append(f"| peak, 4 MB cases at C{conc} | " + " | ".join(peaks) + " |")
    lines += ["", "### grps API / OIP, same payload (requests/s)", ""]
    lines += ["| grps API case | OIP case | C | grps-py grps / grps-py OIP |", "|---|---|---|---|"]
    for grps_case, oip_case in SAME_PAYLOAD.items():
        for conc in args.concurrency:
            ratio = fmt_ratio(results.median(grps_case, GRPS, conc), results.median(oip_case, GRPS, conc))
            lines.append(f"| {grps_case} | {oip_case} | {conc} | {ratio} |")
    lines += ["", *targets(results, args)]
    for name, why in results.skipped.items():
        lines.append(f"\n{name}: not measured ({why})")
    return "\n".join(lines)


def target_concurrency(args: argparse.Namespace) -> int:
    """The concurrency the issue's goals are set at: 8, when it is measured."""
    return 8 if 8 in args.concurrency else args.concurrency[0]


def targets(results: Results, args: argparse.Namespace) -> list[str]:
    """The performance issue's goals at concurrency 8, each with this run's figure and whether it held."""
    conc = target_concurrency(args)
    rows: list[tuple[str, float | None, float, str]] = []  # (goal, figure, bound, ">=" or "<=")

    def ratio(case: str, other: str, attr: str = "requests_per_s") -> float | None:
        ours, theirs = results.median(case, GRPS, conc, attr), results.median(case, other, conc, attr)
        return ours / theirs if ours and theirs else None

    for case in CASES:
        if not case.big:
            rows.append((f"{case.name}: grps-py / floor", ratio(case.name, FLOOR), 0.6, ">="))
            if case.api == "oip":
                rows.append((f"{case.name}: grps-py / kserve", ratio(case.name, "kserve"), 2.0, ">="))
                cpu = ratio(case.name, "triton", "cpu_ms")
                rows.append((f"{case.name}: CPU per request, grps-py / triton", cpu, 1.5, "<="))
        elif case.api == "oip":
            rows.append((f"{case.name}: grps-py / floor", ratio(case.name, FLOOR), 0.7, ">="))
            rows.append((f"{case.name}: grps-py / triton", ratio(case.name, "triton"), 1.0, ">="))
    peak = max((p for (_, server), p in results.memory_peak.items() if server == GRPS), default=None)
    idle = results.idle_rss.get(GRPS)
    if peak and idle:
        budget = 4 * conc * 4
        grown = (peak - idle) / 2**20
        goal = f"peak RSS over idle in the 4 MB cases before any C32 run, MiB (idle {idle / 2**20:.0f})"
        rows.append((goal, grown, budget, "<="))
    for grps_case, oip_case in SAME_PAYLOAD.items():
        ours, theirs = results.median(grps_case, GRPS, conc), results.median(oip_case, GRPS, conc)
        rows.append((f"{grps_case} / {oip_case}", ours / theirs if ours and theirs else None, 0.8, ">="))
    lines = [f"### Targets at C{conc}", "", "| goal | this run | target | held |", "|---|---|---|---|"]
    for goal, figure, bound, sense in rows:
        if figure is None:
            lines.append(f"| {goal} | n/a | {sense} {bound:g} | - |")
            continue
        held = figure >= bound if sense == ">=" else figure <= bound
        lines.append(f"| {goal} | {figure:.2f} | {sense} {bound:g} | {'yes' if held else 'no'} |")
    return lines


def proc_field(path: str, key: str) -> str:
    """The value of `key` in a /proc file of "key: value" lines ("" when absent)."""
    with contextlib.suppress(OSError):
        for line in Path(path).read_text().splitlines():
            if line.startswith(key):
                return line.split(":", 1)[1].strip()
    return ""


def machine() -> dict[str, object]:
    cpu = proc_field("/proc/cpuinfo", "model name")
    mem_kb = int(proc_field("/proc/meminfo", "MemTotal").split(" ")[0] or 0)
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": round(mem_kb / 2**20, 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "load_average_at_start": os.getloadavg(),
    }


def save(text: str, servers: list[Server], results: Results, args: argparse.Namespace, began: str) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    stem = RESULTS / f"compare-{began}"
    host = machine()
    versions = {s.name: s.version for s in servers if s.version}
    with contextlib.suppress(ImportError):
        import peers

        versions.update({name: " ".join(pins) for name, pins in peers.REQUIREMENTS.items()})
    header = (
        f"## bench/compare.py, {began}\n\n"
        f"Machine: {host['cpu']}, {host['cores']} cores, {host['memory_gib']} GiB, Linux {host['kernel']}, "
        f"Python {host['python']}; load client on the same machine. Versions: "
        + ", ".join(f"{k} {v}" for k, v in versions.items())
        + f". Settings: {args.rounds} rounds of {args.seconds} s per case, server and concurrency, "
        "interleaved.\n\n"
    )
    stem.with_suffix(".md").write_text(header + text + "\n")
    raw = {
        "machine": host,
        "versions": versions,
        "settings": {"seconds": args.seconds, "rounds": args.rounds, "concurrency": args.concurrency},
        "idle_rss": results.idle_rss,
        "memory_peak": [
            {"case": case, "server": server, "peak_rss": peak}
            for (case, server), peak in results.memory_peak.items()
        ],
        "skipped": results.skipped,
        "runs": [
            {
                "case": case,
                "server": server,
                "concurrency": conc,
                **dataclasses.asdict(run.load),
                "cpu_s": run.cpu_s,
                "peak_rss": run.peak_rss,
            }
            for (case, server, conc), runs in results.runs.items()
            for run in runs
        ],
    }
    stem.with_suffix(".json").write_text(json.dumps(raw, indent=1))
    (RESULTS / "latest.md").write_text(header + text + "\n")
    return stem.with_suffix(".md")


@contextlib.contextmanager
def started(args: argparse.Namespace, workdir: Path, results: Results) -> Iterator[list[Server]]:
    servers: list[Server] = []
    try:
        print("starting the floor and grps-py", file=sys.stderr, flush=True)
        servers.append(start_floor(workdir))
        servers.append(start_floor(workdir, OWN_FLOOR))
        servers.append(start_grps(workdir, args.grps_conf))
        for spec in args.variant:
            servers.append(start_variant(spec, workdir))
        for name in args.peers:
            print(
                f"starting {name} (installs into its own virtualenv on first use)",
                file=sys.stderr,
                flush=True,
            )
            try:
                servers.append(start_peer(name, workdir))
            except Exception as exc:  # a peer that cannot run here is reported, not fatal
                results.skipped[name] = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                print(f"  {name}: {results.skipped[name]}", file=sys.stderr)
        yield servers
    finally:
        for server in servers:
            server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=2.0, help="length of each run")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--peers", nargs="*", default=["kserve", "mlserver", "triton"])
    parser.add_argument("--quick", action="store_true", help="leave out the grps API's 4 MB cases")
    parser.add_argument("--cases", nargs="*", help="only the cases whose names contain one of these")
    parser.add_argument("--grps-conf", type=Path, help="serve grps-py with this server.yml")
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="LABEL=[SERVER_YML][,ENV=VALUE...]",
        help="also measure grps-py with another server.yml and/or environment, as server LABEL",
    )
    args = parser.parse_args()
    began = datetime.datetime.now().strftime("%Y%m%d-%H%M")
    results = Results()
    with tempfile.TemporaryDirectory() as tmp, started(args, Path(tmp), results) as servers:
        event_loop.run(measure(servers, args, results))  # the client on uvloop too: less of its CPU
        text = report(servers, results, args)
    print(text)
    print(f"\nsaved {save(text, servers, results, args, began)}")


if __name__ == "__main__":
    main()

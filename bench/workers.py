"""Small-request throughput and server CPU per request of grps-py at 1, 2, ... workers, side by side.

    .venv/bin/python bench/workers.py [--workers 1,2] [--seconds 15] [--rounds 3] [--concurrency 16]
                                      [--server-cpus 0-7] [--client-cpus 8-15] [--client-processes P]

Serves the bundled project (conf/, model `classifier`: x FP32 [1,4] -> probs) once per worker count
(`grps-py serve --workers N --port 0,0`), all started before the first round and kept up to the end.
The load is OIP HTTP JSON infer of one [1,4] tensor, `--concurrency` keep-alive connections re-sending
a pre-built request (bench/load.py's RawHttp), from `--client-processes` processes
(bench/workers_client.py). Each round measures every configuration once, in alternating order; a run
opens new connections, warms up for `--warmup` seconds (not counted) and then counts `--seconds`.

Server CPU per request: the utime+stime (/proc/PID/stat) of the supervisor and all its children over
the measured window, divided by the requests answered in it. Medians over the rounds are printed with
the ratios to 1 worker (or to the first count listed), then every round's raw figures; the report goes
to bench/results/workers-<time>.md.

Without `--server-cpus`/`--client-cpus` nothing is pinned: the load client shares the machine's cores
with the server, and the report says so. On a machine with cores to spare, pin them apart (as `taskset
-c` does; e.g. `--server-cpus 0-7 --client-cpus 8-15`) and give the client several processes (by
default one per client core): one Python client process saturates near a few workers' throughput.
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import proctree
from compare import machine, start_process, stopper
from workers_client import BODY, HEADERS, PATH, ClientPool, ClientRun

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
READY_TIMEOUT_S = 180.0
IDLE_S = 3.0  # the idle CPU reading, per server, before the rounds
SUPERVISOR_LINE = r"supervisor: \d+ workers on ports (\d+),(\d+)"
SINGLE_LINE = r"listening: http \S+:(\d+) grpc (\d+)"


# -- servers -------------------------------------------------------------------------------------
@dataclass
class Server:
    workers: int
    pid: int  # the supervisor's (or, with one worker, the server's own)
    http_port: int
    stop: Callable[[], None] = field(repr=False)

    def pids(self) -> list[int]:
        return proctree.tree(self.pid)

    def cpu_by_pid(self) -> dict[int, float]:
        return {pid: proctree.cpu_seconds([pid]) for pid in self.pids()}


def parse_cpus(text: str) -> frozenset[int]:
    """A CPU list as taskset -c takes it: "0-3,8,10-11"."""
    cpus: set[int] = set()
    for part in text.split(","):
        low, _, high = part.strip().partition("-")
        cpus.update(range(int(low), int(high or low) + 1))
    usable = os.sched_getaffinity(0)
    if not cpus or not cpus <= usable:
        raise argparse.ArgumentTypeError(f"{text!r}: CPUs outside {sorted(usable)}")
    return frozenset(cpus)


def cpu_list(cpus: frozenset[int]) -> str:
    return ",".join(str(cpu) for cpu in sorted(cpus))


def start_server(workers: int, workdir: Path, cpus: frozenset[int] | None) -> Server:
    """`grps-py serve conf/ --workers N --port 0,0`, pinned to `cpus` (workers inherit it); returns once
    it answers ready and, with workers, once every worker serves."""
    cmd = [
        sys.executable,
        "-m",
        "grps_py.cli",
        "serve",
        str(ROOT),
        "--workers",
        str(workers),
        "--port",
        "0,0",
    ]
    if cpus:
        cmd = ["taskset", "-c", cpu_list(cpus), *cmd]  # taskset execs: the pid stays the server's
    pattern = SUPERVISOR_LINE if workers > 1 else SINGLE_LINE
    proc, http_port, _ = start_process(f"workers-{workers}", cmd, workdir, pattern, READY_TIMEOUT_S)
    server = Server(workers, proc.pid, http_port, stopper(proc))
    base = f"http://127.0.0.1:{http_port}"
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not serving(base, workers):
        if proc.poll() is not None or time.monotonic() > deadline:
            stopper(proc)()
            raise RuntimeError(f"{workers} workers: not ready (see {workdir}/workers-{workers}.log)")
        time.sleep(0.2)
    reply = httpx.post(base + PATH, content=BODY, headers=HEADERS, timeout=30)
    if reply.status_code != 200:
        stopper(proc)()
        raise RuntimeError(f"{workers} workers: infer answered {reply.status_code}: {reply.text[:200]}")
    return server


def serving(base: str, workers: int) -> bool:
    try:
        if httpx.get(base + "/v2/health/ready", timeout=10).status_code != 200:
            return False
        return workers == 1 or f"grps_workers_serving {workers}.0" in httpx.get(base + "/metrics").text
    except httpx.TransportError:
        return False


@contextmanager
def started(counts: list[int], workdir: Path, cpus: frozenset[int] | None) -> Iterator[list[Server]]:
    servers: list[Server] = []
    try:
        for count in counts:
            print(f"starting {count} worker(s)", file=sys.stderr, flush=True)
            servers.append(start_server(count, workdir, cpus))
        yield servers
    finally:
        for server in servers:
            server.stop()


# -- measuring -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Run:
    round: int
    workers: int
    seconds: float
    client: ClientRun
    cpu_s: float  # the server tree's CPU time over the window
    supervisor_cpu_s: float  # of which the supervisor's (0 with one worker: it is the server)
    worker_cpu_s: tuple[float, ...]  # each worker's, largest first

    @property
    def requests_per_s(self) -> float:
        return self.client.requests / self.seconds

    @property
    def cpu_ms_per_request(self) -> float:
        return self.cpu_s / self.client.requests * 1e3 if self.client.requests else float("nan")


def measure(server: Server, pool: ClientPool, args: argparse.Namespace, round_no: int) -> Run:
    start_at = time.monotonic() + args.warmup
    pool.start(server.http_port, args.concurrency, start_at, args.seconds)
    time.sleep(max(0.0, start_at - time.monotonic()))
    before = server.cpu_by_pid()
    time.sleep(max(0.0, start_at + args.seconds - time.monotonic()))
    after = server.cpu_by_pid()
    client = pool.collect()
    used = {pid: after[pid] - before.get(pid, 0.0) for pid in after}  # a restarted worker counts from 0
    supervisor = 0.0
    workers: tuple[float, ...] = (sum(used.values()),)
    if server.workers > 1:
        supervisor = used.get(server.pid, 0.0)
        workers = tuple(sorted((cpu for pid, cpu in used.items() if pid != server.pid), reverse=True))
    return Run(round_no, server.workers, args.seconds, client, sum(used.values()), supervisor, workers)


def idle_cpu_ms_per_s(server: Server) -> float:
    before = proctree.cpu_seconds(server.pids())
    time.sleep(IDLE_S)
    return (proctree.cpu_seconds(server.pids()) - before) / IDLE_S * 1e3


# -- reporting -----------------------------------------------------------------------------------
def median(runs: list[Run], attr: str) -> float:
    return float(statistics.median(getattr(run, attr) for run in runs))


def summary(runs: list[Run], counts: list[int]) -> list[str]:
    base = counts[0]
    by_count = {count: [run for run in runs if run.workers == count] for count in counts}
    base_rps = median(by_count[base], "requests_per_s")
    base_cpu = median(by_count[base], "cpu_ms_per_request")
    head = [
        "workers",
        "requests/s (median)",
        "CPU ms/request (median)",
        f"requests/s / {base} worker{'s' * (base > 1)}",
        f"CPU per request / {base} worker{'s' * (base > 1)}",
        "p50 / p99 ms (median)",
        "server cores busy",
        "client cores busy",
        "errors",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for count, done in by_count.items():
        rps, cpu = median(done, "requests_per_s"), median(done, "cpu_ms_per_request")
        p50 = statistics.median(run.client.p50_ms for run in done)
        p99 = statistics.median(run.client.p99_ms for run in done)
        server_busy = statistics.median(run.cpu_s / run.seconds for run in done)
        client_busy = statistics.median(run.client.cpu_s / run.seconds for run in done)
        errors = sum(run.client.errors for run in done)
        row = [
            str(count),
            f"{rps:.0f}",
            f"{cpu:.3f}",
            f"{rps / base_rps:.2f}x",
            f"{cpu / base_cpu:.2f}x",
            f"{p50:.1f} / {p99:.1f}",
            f"{server_busy:.2f}",
            f"{client_busy:.2f}",
            str(errors),
        ]
        lines.append("| " + " | ".join(row) + " |")
    return lines


def raw_rounds(runs: list[Run]) -> list[str]:
    head = [
        "round",
        "workers",
        "requests",
        "requests/s",
        "CPU ms/request",
        "server CPU s",
        "supervisor CPU s",
        "each worker's CPU s",
        "p50 / p99 ms",
        "client CPU s",
        "errors",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for run in runs:
        row = [
            str(run.round),
            str(run.workers),
            str(run.client.requests),
            f"{run.requests_per_s:.0f}",
            f"{run.cpu_ms_per_request:.3f}",
            f"{run.cpu_s:.2f}",
            f"{run.supervisor_cpu_s:.2f}" if run.workers > 1 else "-",
            " / ".join(f"{cpu:.2f}" for cpu in run.worker_cpu_s),
            f"{run.client.p50_ms:.1f} / {run.client.p99_ms:.1f}",
            f"{run.client.cpu_s:.2f}",
            str(run.client.errors),
        ]
        lines.append("| " + " | ".join(row) + " |")
    return lines


def setting_lines(args: argparse.Namespace, pool: ClientPool, idle: dict[int, float]) -> list[str]:
    host = machine()
    load_avg = ", ".join(f"{x:.2f}" for x in host["load_average_at_start"])  # type: ignore[attr-defined]
    lines = [
        f"Machine: {host['cpu']}, {host['cores']} cores, {host['memory_gib']} GiB, Linux {host['kernel']}, "
        f"Python {host['python']}; load average at start {load_avg}.",
        "",
        "Load: OIP HTTP JSON infer of the bundled `classifier` (ONNX, x FP32 [1,4] -> probs [1,3]), "
        f"{args.concurrency} keep-alive connections sending back to back (bench/load.py's RawHttp) from "
        f"{pool.size} client process{'es' * (pool.size > 1)}, new connections each run"
        + (" (p50 / p99: the highest of the client processes' own)." if pool.size > 1 else "."),
    ]
    if args.server_cpus is None and args.client_cpus is None:
        lines.append(
            f"**The load client shares this machine's {host['cores']} cores with the server** "
            "(nothing pinned): the client's CPU (the 'client cores busy' column) is taken from the "
            "same cores the workers would use, so these figures understate what the workers do on a "
            "host where the load comes from elsewhere."
        )
    else:
        server_cpus = cpu_list(args.server_cpus) if args.server_cpus else "any"
        client_cpus = cpu_list(args.client_cpus) if args.client_cpus else "any"
        lines.append(
            f"Pinned: server (supervisor and workers) on CPUs {server_cpus}, client on {client_cpus}."
        )
    lines += [
        "",
        f"Settings: {args.rounds} rounds; each round runs every worker count once (order alternating), "
        f"{args.warmup:g} s of warm-up then {args.seconds:g} s counted. Server CPU: utime+stime of the "
        "supervisor and all its children over the counted window / requests answered in it. All "
        "configurations are up during every run; idle, each takes "
        + ", ".join(f"{count} worker(s) {ms:.1f}" for count, ms in idle.items())
        + " ms of CPU per second.",
    ]
    return lines


def report(
    runs: list[Run], counts: list[int], args: argparse.Namespace, pool: ClientPool, idle: dict[int, float]
) -> str:
    lines = [*setting_lines(args, pool, idle), "", "### Medians over the rounds", "", *summary(runs, counts)]
    lines += ["", "### Every run", "", *raw_rounds(runs)]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--workers",
        type=lambda text: [int(n) for n in text.split(",")],
        default=[1, 2],
        help="worker counts, comma-separated (default 1,2); ratios are to the first",
    )
    parser.add_argument("--seconds", type=float, default=15.0, help="counted length of each run")
    parser.add_argument("--warmup", type=float, default=2.0, help="uncounted load before each run")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=16, help="connections, over all client processes")
    parser.add_argument("--server-cpus", type=parse_cpus, help="pin the server to these CPUs (e.g. 0-7)")
    parser.add_argument(
        "--client-cpus", type=parse_cpus, help="pin the load client to these CPUs (e.g. 8-15)"
    )
    parser.add_argument(
        "--client-processes",
        type=int,
        help="load client processes (default: one per --client-cpus CPU, else 1)",
    )
    args = parser.parse_args()
    counts: list[int] = args.workers
    if not counts or min(counts) < 1 or len(set(counts)) != len(counts):
        parser.error("--workers: distinct counts of 1 or more")
    processes = args.client_processes or (len(args.client_cpus) if args.client_cpus else 1)
    processes = max(1, min(processes, args.concurrency))
    began = datetime.datetime.now().strftime("%Y%m%d-%H%M")
    runs: list[Run] = []
    pool = ClientPool(processes, args.client_cpus)
    try:
        with tempfile.TemporaryDirectory() as tmp, started(counts, Path(tmp), args.server_cpus) as servers:
            idle = {server.workers: idle_cpu_ms_per_s(server) for server in servers}
            for round_no in range(1, args.rounds + 1):
                order = servers if round_no % 2 else servers[::-1]
                for server in order:
                    runs.append(measure(server, pool, args, round_no))
                    run = runs[-1]
                    print(
                        f"  round {round_no}/{args.rounds}: {server.workers} worker(s) "
                        f"{run.requests_per_s:.0f} requests/s, {run.cpu_ms_per_request:.3f} CPU ms/request",
                        file=sys.stderr,
                        flush=True,
                    )
    finally:
        pool.close()
    text = f"## bench/workers.py, {began}\n\n" + report(runs, counts, args, pool, idle) + "\n"
    print(text)
    RESULTS.mkdir(parents=True, exist_ok=True)
    saved = RESULTS / f"workers-{began}.md"
    saved.write_text(text)
    print(f"saved {saved.relative_to(ROOT)}")


if __name__ == "__main__":
    main()

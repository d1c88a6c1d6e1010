"""The load client of bench/workers.py: P processes, each driving its share of the connections.

One Python client process tops out near the throughput of a few grps-py workers, so on a machine with
cores to spare the load is spread over several processes, each pinned (as `taskset -c` would) to the
client's cores. Every process is started once and kept for the whole run; each measured run opens new
connections (so SO_REUSEPORT spreads them over the workers afresh), sends until a shared start time
(warm-up, not counted), then counts the requests answered over the measured seconds.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection

import orjson

from grps_py import event_loop
from load import RawHttp, drive

PATH = "/v2/models/classifier/infer"
BODY = orjson.dumps({"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}]})
HEADERS = {"Content-Type": "application/json"}
REQUEST_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class ClientRun:
    """What the client processes saw over one measured window, added up."""

    requests: int
    errors: int
    p50_ms: float  # the highest of the processes' own medians (exact with one process)
    p99_ms: float  # likewise
    cpu_s: float  # the client processes' CPU time over the window


@dataclass(frozen=True)
class _Command:
    port: int
    concurrency: int
    start_at: float  # time.monotonic() (system-wide on Linux) when counting begins
    seconds: float


async def _measure(command: _Command) -> ClientRun:
    sender = RawHttp("127.0.0.1", command.port, PATH, BODY, HEADERS)
    try:
        warm_s = command.start_at - time.monotonic()
        if warm_s > 0:
            await drive(sender.send, warm_s, command.concurrency, REQUEST_TIMEOUT_S)
        cpu_before = time.process_time()
        load = await drive(sender.send, command.seconds, command.concurrency, REQUEST_TIMEOUT_S)
        cpu_s = time.process_time() - cpu_before
    finally:
        await sender.close()
    return ClientRun(load.requests, load.errors, load.p50_ms, load.p99_ms, cpu_s)


def _serve(pipe: Connection, cpus: frozenset[int] | None) -> None:
    """A client process: run each command received, send back its ClientRun; None ends it."""
    if cpus:
        os.sched_setaffinity(0, cpus)
    while (command := pipe.recv()) is not None:
        pipe.send(event_loop.run(_measure(command)))  # uvloop, as the server: less client CPU


class ClientPool:
    """`processes` client processes (spawned: the parent's threads and sockets stay its own)."""

    def __init__(self, processes: int, cpus: frozenset[int] | None) -> None:
        context = multiprocessing.get_context("spawn")
        self._pipes: list[Connection] = []
        self._processes = []
        for _ in range(processes):
            ours, theirs = context.Pipe()
            process = context.Process(target=_serve, args=(theirs, cpus), daemon=True)
            process.start()
            self._pipes.append(ours)
            self._processes.append(process)
        self._busy: list[Connection] = []

    @property
    def size(self) -> int:
        return len(self._pipes)

    def start(self, port: int, concurrency: int, start_at: float, seconds: float) -> None:
        """Every process begins a run; `concurrency` is shared out over them."""
        shares = [concurrency // self.size + (i < concurrency % self.size) for i in range(self.size)]
        self._busy = []
        for pipe, share in zip(self._pipes, shares, strict=True):
            if share:
                pipe.send(_Command(port, share, start_at, seconds))
                self._busy.append(pipe)

    def collect(self) -> ClientRun:
        """The run begun by `start`, once every process has finished it."""
        runs: list[ClientRun] = [pipe.recv() for pipe in self._busy]
        return ClientRun(
            sum(r.requests for r in runs),
            sum(r.errors for r in runs),
            max(r.p50_ms for r in runs),
            max(r.p99_ms for r in runs),
            sum(r.cpu_s for r in runs),
        )

    def close(self) -> None:
        for pipe in self._pipes:
            pipe.send(None)
        for process in self._processes:
            process.join(10)
            if process.is_alive():
                process.kill()

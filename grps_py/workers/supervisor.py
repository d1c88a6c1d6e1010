"""The supervisor of `workers: N`: one process that starts N workers on shared ports and keeps them up.

- Ports: a configured port is shared as it is; a port 0 is picked here, once, and held (bound with
  SO_REUSEPORT, never listening) so that every worker binds the same one. Each worker listens with
  SO_REUSEPORT and the kernel spreads new connections over them. Workers are separate programs
  (`grps-py serve` again, with the worker options), so gRPC is only ever created after the process
  started, as grpcio requires of forks.
- A worker that dies is started again after a pause that doubles from 0.5 s to 30 s (back to 0.5 s
  once a worker has served a minute), logged and counted (`grps_worker_restarts_total`). When workers
  die before they are ready `MAX_START_FAILURES` times in a row, the others are stopped and the
  supervisor exits non-zero: a project that cannot start does not loop forever.
- SIGTERM or SIGINT is passed on to every worker as SIGTERM (each drains as a single server does);
  the supervisor exits once they all have, 0 unless a worker failed. A second one is passed on too,
  cutting the drains short.
- With `gpu.devices`, worker i sees only `devices[i % len(devices)]` (CUDA_VISIBLE_DEVICES), as its
  `cuda:0`.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

from grps_py.core.config import ServerSettings
from grps_py.workers.group import RESTARTS_FILE, socket_path, write_switch

log = logging.getLogger("grps_py.workers")

MAX_START_FAILURES = 3
FIRST_BACKOFF_S, MAX_BACKOFF_S, STEADY_S = 0.5, 30.0, 60.0
POLL_S = 0.1
GPU_ENV = "GRPS_WORKER_GPU"  # set for a worker given one GPU: its gpu.devices becomes [0]


@dataclass
class _Worker:
    index: int
    process: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    ready: bool = False  # this life has answered (its socket exists)
    restart_at: float | None = None
    env: dict[str, str] = field(default_factory=dict)


def reserve_port(host: str, port: int) -> tuple[int, socket.socket | None]:
    """The port every worker binds: a configured one as it is; for 0, a free one, held by a socket
    bound with SO_REUSEPORT (never listening, so it takes no connection) until the supervisor ends."""
    if port:
        return port, None
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    holder = socket.socket(family, socket.SOCK_STREAM)
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    holder.bind((host, 0))
    return int(holder.getsockname()[1]), holder


def _die_with_parent() -> None:
    """In the worker, before it runs: SIGTERM when the supervisor dies, and a process group of its
    own (a terminal's Ctrl-C reaches the supervisor, which passes it on once)."""
    os.setpgrp()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class Supervisor:
    """Runs `count` workers of `argv` (the `grps-py serve` arguments, without the program)."""

    def __init__(self, argv: list[str], settings: ServerSettings, count: int) -> None:
        self.argv = argv
        self.settings = settings
        self.count = count
        self.workers = [_Worker(i) for i in range(count)]
        self.directory = Path(tempfile.mkdtemp(prefix="grps-py-workers-"))  # 0700: this user's
        self._holders: list[socket.socket] = []
        self._stopping = 0  # signals received
        self._restarts = 0
        self._start_failures = 0
        self._backoff_s = FIRST_BACKOFF_S
        self._failed_code = 0

    def run(self) -> int:
        try:
            self._prepare()
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, self._on_signal)
            for worker in self.workers:
                self._start(worker)
            return self._watch()
        finally:
            for holder in self._holders:
                holder.close()
            shutil.rmtree(self.directory, ignore_errors=True)

    def _prepare(self) -> None:
        iface = self.settings.interface
        http_port, holder = reserve_port(iface.host, iface.http_port)
        self._holders += [holder] if holder else []
        ports = [str(http_port)]
        if iface.framework == "http+grpc" and iface.grpc_port is not None:
            grpc_port, holder = reserve_port(iface.host, iface.grpc_port)
            self._holders += [holder] if holder else []
            ports.append(str(grpc_port))
        self.worker_args = [*self.argv, "--port", ",".join(ports), "--worker-dir", str(self.directory)]
        if self.settings.metrics.port is not None:
            metrics_port, holder = reserve_port(iface.host, self.settings.metrics.port)
            self._holders += [holder] if holder else []
            self.worker_args += ["--metrics-port", str(metrics_port)]
        write_switch(self.directory, self.settings.start_online)
        (self.directory / RESTARTS_FILE).write_text("0")
        log.info("supervisor: %d workers on ports %s", self.count, ",".join(ports))

    def worker_env(self, index: int) -> dict[str, str]:
        """Worker `index`'s environment: with `gpu.devices`, the one GPU it sees (round-robin)."""
        env = dict(os.environ)
        devices = self.settings.gpu.devices if self.settings.gpu else ()
        if devices:
            env["CUDA_VISIBLE_DEVICES"] = str(devices[index % len(devices)])
            env[GPU_ENV] = "1"
        return env

    def _start(self, worker: _Worker) -> None:
        env = self.worker_env(worker.index)
        command = [sys.executable, "-m", "grps_py.cli", "serve", *self.worker_args]
        command += ["--worker-index", str(worker.index), "--workers", str(self.count)]
        worker.process = subprocess.Popen(command, env=env, preexec_fn=_die_with_parent)
        worker.started_at = time.monotonic()
        worker.ready = False
        worker.restart_at = None

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._stopping += 1
        for worker in self.workers:
            if worker.process is not None and worker.process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    worker.process.send_signal(signal.SIGTERM)

    def _watch(self) -> int:
        while True:
            now = time.monotonic()
            alive = 0
            for worker in self.workers:
                process = worker.process
                if process is None:
                    if worker.restart_at is not None and now >= worker.restart_at and not self._stopping:
                        self._start(worker)
                        alive += 1
                    continue
                code = process.poll()
                if code is None:
                    alive += 1
                    if not worker.ready and socket_path(self.directory, worker.index).exists():
                        worker.ready = True
                        self._start_failures = 0
                    if worker.ready and now - worker.started_at > STEADY_S:
                        self._backoff_s = FIRST_BACKOFF_S
                    continue
                worker.process = None
                if self._stopping:
                    if code > 0:  # a worker ended by the signal before its handler was set is no failure
                        self._failed_code = self._failed_code or code
                    continue
                if self._died(worker, code, now):
                    self._on_signal(signal.SIGTERM, None)
            if self._stopping and alive == 0:
                return self._failed_code
            time.sleep(POLL_S)

    def _died(self, worker: _Worker, code: int, now: float) -> bool:
        """A worker ended while the server runs: schedule its restart. True when workers keep dying
        before they are ready: stop everything."""
        self._restarts += 1
        (self.directory / RESTARTS_FILE).write_text(str(self._restarts))
        if not worker.ready:
            self._start_failures += 1
            if self._start_failures >= MAX_START_FAILURES:
                log.error(
                    "supervisor: workers died %d times in a row before they were ready (last exit %s); "
                    "stopping",
                    self._start_failures,
                    code,
                )
                self._failed_code = code if code > 0 else 1
                return True
        log.warning(
            "supervisor: worker %d ended (exit %s) after %.1fs; starting it again in %.1fs",
            worker.index,
            code,
            now - worker.started_at,
            self._backoff_s,
        )
        worker.restart_at = now + self._backoff_s
        self._backoff_s = min(MAX_BACKOFF_S, self._backoff_s * 2)
        return False

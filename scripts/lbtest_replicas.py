"""grps-py replicas for scripts/lbtest.py: each a separate `grps-py serve` process of the bundled project on
its own loopback ports, with its own server.yml (the bundled one, logging into the run's temp dir)."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import yaml

ROOT = Path(__file__).resolve().parent.parent


def free_ports(count: int) -> list[int]:
    """`count` distinct ports free on loopback now (held open together so none repeats)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def serve_command() -> list[str]:
    """`grps-py serve` from the interpreter's own environment (`.venv/bin/grps-py` under make)."""
    entry = Path(sys.executable).parent / "grps-py"
    return [str(entry), "serve"] if entry.exists() else [sys.executable, "-m", "grps_py.cli", "serve"]


def server_conf(workdir: Path, name: str) -> Path:
    """The bundled conf/server.yml, on loopback only and logging into `workdir`, not the checkout."""
    settings = yaml.safe_load((ROOT / "conf" / "server.yml").read_text())
    settings.setdefault("interface", {})["host"] = "127.0.0.1"
    settings.setdefault("log", {})["log_dir"] = str(workdir / f"{name}-logs")
    path = workdir / f"{name}-server.yml"
    path.write_text(yaml.safe_dump(settings))
    return path


@dataclass
class Replica:
    name: str
    http_port: int
    grpc_port: int
    workdir: Path
    proc: subprocess.Popen[bytes] | None = field(default=None, init=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def log_path(self) -> Path:
        return self.workdir / f"{self.name}.log"

    def start(self) -> None:
        conf = server_conf(self.workdir, self.name)
        command = [
            *serve_command(),
            str(ROOT),
            "--server-conf",
            str(conf),
            "--port",
            f"{self.http_port},{self.grpc_port}",
        ]
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(command, stdout=log, stderr=log, cwd=ROOT)

    def is_ready(self) -> bool:
        try:
            return httpx.get(f"{self.url}/grps/v1/health/ready", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def wait_ready(self, timeout_s: float = 60) -> float:
        """Seconds from now until readiness answers 200; raises when the process exits or time runs out."""
        started = time.monotonic()
        while not self.is_ready():
            if self.proc is None or self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited before it was ready:\n{self.log_tail()}")
            if time.monotonic() - started > timeout_s:
                raise RuntimeError(f"{self.name} not ready after {timeout_s:.0f} s:\n{self.log_tail()}")
            time.sleep(0.05)
        return time.monotonic() - started

    def switch(self, action: str) -> None:
        """`online` or `offline`, sent to this replica directly (an admin call: loopback is allowed)."""
        reply = httpx.get(f"{self.url}/grps/v1/health/{action}", timeout=5)
        if reply.status_code != 200:
            raise RuntimeError(f"{self.name} {action}: HTTP {reply.status_code}")

    def terminate(self, timeout_s: float = 60) -> tuple[int | None, float]:
        """SIGTERM, then wait for the drain to finish: (exit code or None if it had to be killed, seconds)."""
        assert self.proc is not None
        started = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            code: int | None = self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            code = None
        return code, time.monotonic() - started

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def log_tail(self, lines: int = 20) -> str:
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

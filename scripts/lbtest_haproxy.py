"""HAProxy for scripts/lbtest.py: installed when missing, configured in front of the replicas, started in
the foreground, and read through its stats socket (which server is UP or DOWN, requests, redispatches).

The configuration is the one docs/deployment.md recommends in front of grps-py:
- health checks on `/grps/v1/health/ready` every `inter`, a server DOWN after `fall` failed checks and
  UP again after `rise` good ones; a replica's gRPC server `track`s its HTTP server (one check per
  replica, and its HTTP and gRPC servers turn DOWN and UP together);
- HTTP in `mode http`, gRPC in `mode http` too, with `proto h2` on the bind and on the servers (gRPC is
  HTTP/2 cleartext), so each gRPC call is balanced on its own, not each connection;
- idle pooled connections to servers purged after 1 s (`pool-purge-delay`, default 5 s), so that a
  replica's SIGTERM drain, which waits while clients are connected, ends in 2 to 3 s, not its full grace;
- retries on `conn-failure` only, each to another server (`option redispatch 1`): a request that never
  reached a server (its connection was refused: the replica is gone) is safe to send elsewhere. An
  inference POST that reached a server is not retried (`empty-response`, `response-timeout`, `5xx`):
  a model call is not idempotent in general, and a retry would run it twice.
"""

from __future__ import annotations

import csv
import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

READY_PATH = "/grps/v1/health/ready"


class HAProxyError(RuntimeError):
    """HAProxy could not be installed, configured or started."""


def _which_haproxy() -> str | None:
    return shutil.which("haproxy", path=f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin")  # Debian's place


def ensure_installed() -> str:
    """The haproxy binary; Debian's package is installed (as root) when there is none."""
    found = _which_haproxy()
    if found:
        return found
    print("lbtest: haproxy is missing; apt-get install -y haproxy", flush=True)
    if _apt_get("install", "-y", "haproxy") != 0:
        _apt_get("update")  # a fresh image has no package lists yet
        _apt_get("install", "-y", "haproxy")
    found = _which_haproxy()
    if not found:
        raise HAProxyError("haproxy is missing and `apt-get install -y haproxy` did not install it")
    return found


def _apt_get(*args: str) -> int:
    env = {"DEBIAN_FRONTEND": "noninteractive", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
    done = subprocess.run(
        ["apt-get", *args], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, check=False
    )
    return done.returncode


@dataclass(frozen=True)
class Backend:
    """One replica as HAProxy sees it: its HTTP and gRPC ports on loopback."""

    name: str
    http_port: int
    grpc_port: int


@dataclass(frozen=True)
class Checks:
    """Health-check timing: a server is DOWN after `fall` failed checks `inter_ms` apart."""

    inter_ms: int = 500
    fall: int = 2
    rise: int = 2


def config(http_port: int, grpc_port: int, backends: list[Backend], checks: Checks, socket_path: Path) -> str:
    http_servers = "\n".join(f"    server {b.name} 127.0.0.1:{b.http_port} check" for b in backends)
    grpc_servers = "\n".join(
        f"    server {b.name} 127.0.0.1:{b.grpc_port} proto h2 track replicas_http/{b.name}" for b in backends
    )
    return f"""\
global
    stats socket {socket_path} mode 600 level admin
    log stdout format raw local0
    maxconn 4000

defaults
    mode http
    log global
    option httplog
    option dontlog-normal          # only failed or retried requests reach the log
    timeout connect 1s
    timeout client 30s
    timeout server 30s
    timeout check 1s
    # A refused connection (the replica is gone) is retried on another server; nothing else is:
    # a request that reached a server may have run its model.
    retries 2
    retry-on conn-failure
    option redispatch 1
    option httpchk GET {READY_PATH}
    http-check expect status 200
    # pool-purge-delay: idle pooled connections to a replica are closed within a second or two (default
    # 5 s); grps-py's drain counts them as clients still connected and keeps listening while they last.
    default-server inter {checks.inter_ms}ms fall {checks.fall} rise {checks.rise} pool-purge-delay 1s

frontend http_in
    bind 127.0.0.1:{http_port}
    default_backend replicas_http

frontend grpc_in
    bind 127.0.0.1:{grpc_port} proto h2
    default_backend replicas_grpc

backend replicas_http
    balance roundrobin
{http_servers}

backend replicas_grpc
    balance roundrobin
{grpc_servers}
"""


class HAProxy:
    """One HAProxy process in front of `backends`, run from `workdir` (config, socket and log)."""

    BACKENDS = ("replicas_http", "replicas_grpc")

    def __init__(
        self, workdir: Path, http_port: int, grpc_port: int, backends: list[Backend], checks: Checks
    ):
        self.http_port, self.grpc_port, self.checks = http_port, grpc_port, checks
        self.socket_path = workdir / "haproxy.sock"
        self.config_path = workdir / "haproxy.cfg"
        self.log_path = workdir / "haproxy.log"
        self.config_path.write_text(config(http_port, grpc_port, backends, checks, self.socket_path))
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, binary: str) -> None:
        command = [binary, "-f", str(self.config_path)]
        checked = subprocess.run([*command, "-c"], capture_output=True, check=False)
        if checked.returncode != 0:
            raise HAProxyError(f"haproxy rejects its config: {checked.stderr.decode(errors='replace')}")
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen([*command, "-db"], stdout=log, stderr=log)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise HAProxyError(f"haproxy exited at start: {self.log_tail()}")
            try:
                self.stats()
                return
            except OSError:
                time.sleep(0.05)
        raise HAProxyError("haproxy's stats socket did not answer within 10 s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()  # SIGTERM: HAProxy's immediate stop
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    def command(self, line: str) -> str:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(2)
            sock.connect(str(self.socket_path))
            sock.sendall(line.encode() + b"\n")
            chunks = []
            while chunk := sock.recv(65536):
                chunks.append(chunk)
        return b"".join(chunks).decode(errors="replace")

    def stats(self) -> list[dict[str, str]]:
        """`show stat`, one dict per row (frontends, servers, backends)."""
        text = self.command("show stat").lstrip("# ")
        return list(csv.DictReader(line for line in text.splitlines() if line))

    def server_states(self, server: str) -> dict[str, str]:
        """The server's check status in each backend: "UP", "DOWN", "UP 1/2" (going down) and so on."""
        return {
            row["pxname"]: row["status"]
            for row in self.stats()
            if row["svname"] == server and row["pxname"] in self.BACKENDS
        }

    def wait_for(self, server: str, state: str, timeout_s: float) -> float:
        """Seconds until `server` is `state` ("UP" or "DOWN") in both backends; raises after `timeout_s`."""
        started = time.monotonic()
        while True:
            states = self.server_states(server)
            if len(states) == len(self.BACKENDS) and all(s == state for s in states.values()):
                return time.monotonic() - started
            if time.monotonic() - started > timeout_s:
                raise HAProxyError(f"{server} not {state} after {timeout_s:.0f} s: {states}")
            time.sleep(0.02)

    def per_server(self, column: str) -> dict[str, int]:
        """A counter of `show stat` per server, summed over both backends: `stot` (requests: each HTTP
        request or gRPC call is a session), `wretr` (retries), `wredis` (redispatches elsewhere)."""
        totals: dict[str, int] = {}
        for row in self.stats():
            if row["pxname"] in self.BACKENDS and row["svname"] not in ("FRONTEND", "BACKEND"):
                totals[row["svname"]] = totals.get(row["svname"], 0) + int(row[column] or 0)
        return totals

    def log_tail(self, lines: int = 20) -> str:
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

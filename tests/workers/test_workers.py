"""`workers: N`: a supervisor and N worker processes on shared ports are one server from the outside
(traffic switch, readiness, metrics, repository operations, drain), and a worker that dies comes back."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import tritonclient.grpc as tgrpc

from support import PROJECTS, REPO

PORTS = re.compile(r"supervisor: (\d+) workers on ports (\d+),(\d+)")
X = [[1.0, 2.0, 3.0, 4.0]]


class Served:
    """`grps-py serve PROJECT --workers N --port 0,0` in a subprocess, its ports from its log."""

    def __init__(self, project: Path, workers: int, *extra: str) -> None:
        command = [sys.executable, "-m", "grps_py.cli", "serve", str(project), "--workers", str(workers)]
        self.proc = subprocess.Popen([*command, "--port", "0,0", *extra], stderr=subprocess.PIPE, text=True)
        assert self.proc.stderr is not None
        self.log: list[str] = []
        found = None
        for line in self.proc.stderr:
            self.log.append(line)
            found = PORTS.search(line)
            if found:
                break
        assert found, "".join(self.log)
        self.http = f"http://127.0.0.1:{found.group(2)}"
        self.grpc = f"127.0.0.1:{found.group(3)}"
        threading.Thread(target=self._read, daemon=True).start()  # a full pipe would block the server
        self.wait_until(lambda: self.status("/v2/health/ready") == 200, 90)
        self.wait_until(lambda: f"grps_workers_serving {workers}.0" in self.metrics(), 90)

    def metrics(self) -> str:
        try:
            return httpx.get(self.http + "/metrics", timeout=10).text
        except httpx.TransportError:
            return ""

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.log.append(line)

    def status(self, path: str) -> int:
        """A new connection each time: the kernel spreads them over the workers."""
        try:
            return httpx.get(self.http + path, timeout=10).status_code
        except httpx.TransportError:
            return 0

    @staticmethod
    def wait_until(done: Callable[[], bool], timeout_s: float = 30) -> None:
        deadline = time.monotonic() + timeout_s
        while not done():
            assert time.monotonic() < deadline, "timed out"
            time.sleep(0.05)

    def worker_pids(self) -> list[int]:
        found = subprocess.run(["pgrep", "-P", str(self.proc.pid)], capture_output=True, text=True)
        return [int(pid) for pid in found.stdout.split()]

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(60)


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    server = Served(REPO, 2)
    yield server
    server.stop()


def infer(served: Served) -> httpx.Response:
    body = {"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": X[0]}]}
    return httpx.post(f"{served.http}/v2/models/classifier/infer", json=body, timeout=30)


def requests_counted(served: Served) -> float:
    text = httpx.get(f"{served.http}/metrics", timeout=10).text
    labels = 'model="classifier",outcome="success",protocol="oip-http",reason="",version="1.0.0"'
    values = [
        float(row.split()[-1])
        for row in text.splitlines()
        if row.startswith(f"grps_requests_total{{{labels}}}")
    ]
    return sum(values)


def test_both_workers_serve_and_metrics_add_them_up(served: Served) -> None:
    before = requests_counted(served)
    pids = set()
    for _ in range(20):
        reply = infer(served)
        assert reply.status_code == 200
    with tgrpc.InferenceServerClient(served.grpc) as client:
        x = tgrpc.InferInput("x", [1, 4], "FP32")
        x.set_data_from_numpy(np.array(X, dtype=np.float32))
        assert client.infer("classifier", [x]).as_numpy("probs").shape == (1, 3)
    assert requests_counted(served) == before + 20  # whichever worker answered each, and the scrape
    text = httpx.get(f"{served.http}/metrics").text
    assert "grps_workers 2.0" in text and "grps_worker_restarts_total" in text
    assert len(served.worker_pids()) == 2
    _ = pids


def test_the_traffic_switch_holds_for_every_worker(served: Served) -> None:
    assert httpx.get(f"{served.http}/grps/v1/health/offline").status_code == 200
    try:
        time.sleep(0.1)  # the switch is read when readiness is asked: at once
        assert {served.status("/v2/health/ready") for _ in range(12)} == {503}
        assert {served.status("/grps/v1/health/ready") for _ in range(6)} == {503}
    finally:
        assert httpx.get(f"{served.http}/grps/v1/health/online").status_code == 200
    assert {served.status("/v2/health/ready") for _ in range(12)} == {200}


def test_the_dashboard_speaks_for_the_whole_server(served: Served) -> None:
    snapshot = httpx.get(f"{served.http}/grps/v1/monitor/metrics").json()
    assert "*qps" in snapshot["overall"] and "classifier-1.0.0" in snapshot["models"]
    series = httpx.get(f"{served.http}/grps/v1/monitor/series", params={"name": "qps"}).json()
    assert series["name"] == "qps" and series["points"]


def test_a_worker_that_dies_is_started_again(served: Served) -> None:
    victim = served.worker_pids()[0]
    subprocess.run(["kill", "-9", str(victim)], check=True)
    served.wait_until(lambda: len(served.worker_pids()) == 2 and victim not in served.worker_pids(), 60)
    served.wait_until(
        lambda: "grps_worker_restarts_total 1.0" in httpx.get(f"{served.http}/metrics").text, 60
    )
    assert all(infer(served).status_code == 200 for _ in range(10))
    assert any("worker" in line and "ended (exit -9)" in line for line in served.log)


def test_a_load_applies_to_every_worker() -> None:
    server = Served(PROJECTS / "lifecycle", 2)
    try:
        config = {
            "name": "triple",
            "version": "7",
            "inferer_type": "customized",
            "inferer_name": "lifecycle_scale",
            "inferer_path": "data/three.txt",
            "converter_type": "numpy",
        }
        reply = httpx.post(
            f"{server.http}/v2/repository/models/triple/load",
            json={"parameters": {"config": json.dumps(config)}},
            timeout=60,
        )
        assert reply.status_code == 200, reply.text
        body = {"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": X[0]}]}
        answers = [
            httpx.post(f"{server.http}/v2/models/triple/infer", json=body).status_code for _ in range(12)
        ]
        assert answers == [200] * 12  # on new connections: both workers have it
        # A worker started again serves what the others serve: it replays the repository's operations.
        victim = server.worker_pids()[0]
        subprocess.run(["kill", "-9", str(victim)], check=True)
        server.wait_until(lambda: victim not in server.worker_pids(), 30)
        server.wait_until(lambda: "grps_workers_serving 2.0" in server.metrics(), 90)
        again = [
            httpx.post(f"{server.http}/v2/models/triple/infer", json=body).status_code for _ in range(12)
        ]
        assert again == [200] * 12
        reply = httpx.post(f"{server.http}/v2/repository/models/triple/unload", timeout=60)
        assert reply.status_code == 200
        gone = [httpx.post(f"{server.http}/v2/models/triple/infer", json=body).status_code for _ in range(12)]
        assert gone == [404] * 12
    finally:
        assert server.stop() == 0


def test_sigterm_drains_every_worker_and_exits_0() -> None:
    server = Served(REPO, 2)
    pids = server.worker_pids()
    assert server.stop() == 0
    assert all(not Path(f"/proc/{pid}").exists() for pid in pids)


def test_workers_that_keep_dying_at_start_stop_the_server(tmp_path: Path) -> None:
    (tmp_path / "conf").mkdir()
    (tmp_path / "src").mkdir()
    (tmp_path / "conf" / "server.yml").write_text("interface: {host: 127.0.0.1, port: '0,0'}\n")
    (tmp_path / "conf" / "inference.yml").write_text(
        "models: [{name: m, version: '1', inferer_type: customized, inferer_name: workers_never_loads}]\n"
        "dag: {name: d, nodes: [{name: n, model: m-1}]}\n"
    )
    (tmp_path / "src" / "workers_never_loads.py").write_text(
        "from grps_py import ModelInferer, inferer_register\n\n\n"
        "class NeverLoads(ModelInferer):\n"
        "    def load(self) -> bool:\n"
        "        return False\n\n\n"
        "inferer_register.register('workers_never_loads', NeverLoads())\n"
    )
    command = [sys.executable, "-m", "grps_py.cli", "serve", str(tmp_path), "--workers", "2"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "died 3 times in a row before they were ready" in done.stderr

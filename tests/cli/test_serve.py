"""`grps-py serve` as a user runs it: the bundled default, config errors, start offline, SIGTERM drain."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import orjson
import pytest

from support import BASIC, REPO

ROOT = REPO
LISTENING = re.compile(r"listening: http \S+:(\d+) grpc (\S+)")


@contextmanager
def serve(*args: str, env: dict[str, str] | None = None) -> Iterator[tuple[subprocess.Popen[str], int]]:
    """Start `grps-py serve ARGS`, wait for its listening line, and yield the process and HTTP port."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "grps_py.cli", "serve", *args],
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )
    assert proc.stderr is not None
    port = 0
    for line in proc.stderr:
        match = LISTENING.search(line)
        if match:
            port = int(match.group(1))
            break
    if not port:
        proc.wait(30)
        pytest.fail(f"server did not start (exit {proc.returncode})")
    # Keep draining stderr so the server never blocks on a full pipe.
    threading.Thread(target=lambda: [None for _ in proc.stderr or ()], daemon=True).start()
    try:
        yield proc, port
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def wait_ready(port: int, want: int = 200, msg: str | None = None) -> httpx.Response:
    for _ in range(300):
        reply = httpx.get(f"http://127.0.0.1:{port}/grps/v1/health/ready")
        if reply.status_code == want and msg in (None, reply.json()["status"]["msg"]):
            return reply
        threading.Event().wait(0.1)
    raise AssertionError(f"never answered {want}")


def port0_server_conf(tmp_path: Path, extra: str = "") -> Path:
    conf = tmp_path / "server.yml"
    conf.write_text(f"interface:\n  framework: http+grpc\n  host: 127.0.0.1\n  port: 0,0\n{extra}")
    return conf


def test_bundled_default_model_answers(tmp_path: Path) -> None:
    with serve(str(ROOT), "--server-conf", str(port0_server_conf(tmp_path))) as (_, port):
        wait_ready(port)
        doc = {
            "gtensors": {
                "tensors": [
                    {"name": "x", "dtype": "DT_FLOAT32", "shape": [1, 4], "flat_float32": [1, 2, 3, 4]}
                ]
            }
        }
        reply = httpx.post(f"http://127.0.0.1:{port}/grps/v1/infer/predict", json=doc, timeout=30)
        assert reply.status_code == 200
        (probs,) = reply.json()["gtensors"]["tensors"]
        assert probs["shape"] == [1, 3] and abs(sum(probs["flat_float32"]) - 1) < 1e-5


def test_config_error_stops_start_up_with_a_clear_message(tmp_path: Path) -> None:
    bad = tmp_path / "server.yml"
    bad.write_text("interface:\n  framework: carrier-pigeon\n")
    proc = subprocess.run(
        [sys.executable, "-m", "grps_py.cli", "serve", str(BASIC), "--server-conf", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert (
        "server.yml" in proc.stderr
        and "interface.framework" in proc.stderr
        and "carrier-pigeon" in proc.stderr
    )
    assert "Traceback" not in proc.stderr


def test_start_online_false_starts_offline(tmp_path: Path) -> None:
    conf = port0_server_conf(tmp_path, "start_online: false\n")
    with serve(str(BASIC), "--server-conf", str(conf)) as (_, port):
        # While models load, readiness says so; once loaded it stays 503 because the server is offline.
        wait_ready(port, want=503, msg="server is offline")
        reply = httpx.post(
            f"http://127.0.0.1:{port}/grps/v1/infer/predict",
            json={"model": "echo", "str_data": "x"},
            timeout=30,
        )
        assert reply.status_code == 200  # offline still serves predictions
        httpx.get(f"http://127.0.0.1:{port}/grps/v1/health/online")
        wait_ready(port, want=200)


def test_sigterm_goes_offline_finishes_in_flight_streams_and_exits_0(tmp_path: Path) -> None:
    conf = port0_server_conf(tmp_path, "shutdown_grace_s: 20\n")
    with serve(str(BASIC), "--server-conf", str(conf)) as (proc, port):
        wait_ready(port)
        url = f"http://127.0.0.1:{port}/grps/v1/infer/predict?streaming=true"
        lines: list[bytes] = []
        with httpx.stream("POST", url, json={"model": "stream-1.0", "str_data": "60"}, timeout=30) as reply:
            for line in reply.iter_lines():
                lines.append(line.encode())
                if len(lines) == 1:
                    proc.send_signal(signal.SIGTERM)
        assert [orjson.loads(x)["str_data"] for x in lines if x] == [f"chunk {i}" for i in range(60)]
        assert proc.wait(30) == 0

"""A model swapped under load loses nothing: requests running on the old version finish there, new ones
go to the new version, none fails and none sees two versions; loading and unloading the same model
many times returns its memory."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import tritonclient.grpc as tgrpc

from support import PROJECTS, ServerThread, start_project

LIFECYCLE = PROJECTS / "lifecycle"
X = np.arange(8, dtype=np.float32).reshape(2, 4)
PLUS = {"name": "plus", "version": "1", "inferer_type": "customized", "inferer_name": "lifecycle_plus",
        "converter_type": "numpy"}  # fmt: skip
SCALE = {
    "name": "scale",
    "version": "1",
    "inferer_type": "customized",
    "inferer_name": "lifecycle_scale",
    "converter_type": "numpy",
    "inputs": [{"name": "x", "datatype": "FP32", "shape": [-1, 4]}],
    "outputs": [{"name": "y", "datatype": "FP32", "shape": [-1, 4]}],
    "batching": {"type": "dynamic", "max_batch_size": 8, "batch_timeout_us": 500},
    "warmup": {"kind": "zeros"},
}


@pytest.fixture
def server() -> Iterator[ServerThread]:
    running = start_project(LIFECYCLE)
    yield running
    running.stop()


def body() -> dict[str, Any]:
    return {"inputs": [{"name": "x", "shape": [2, 4], "datatype": "FP32", "data": X.ravel().tolist()}]}


def infer(server: ServerThread, model: str) -> httpx.Response:
    return httpx.post(f"{server.http_url}/v2/models/{model}/infer", json=body(), timeout=30)


def answer(server: ServerThread, model: str) -> list[float]:
    reply = infer(server, model)
    assert reply.status_code == 200, reply.text
    return reply.json()["outputs"][0]["data"]  # type: ignore[no-any-return]


def wait_until(done: Any, timeout_s: float = 10) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.01)


def wait_in_flight(server: ServerThread, count: int) -> None:
    """Until the server has taken `count` requests in (they run on the model set of that moment)."""
    wait_until(lambda: server.server.executor.in_flight >= count)


def load(server: ServerThread, name: str, config: dict[str, Any] | None = None) -> None:
    payload = {"parameters": {"config": json.dumps(config)}} if config else None
    reply = httpx.post(f"{server.http_url}/v2/repository/models/{name}/load", json=payload, timeout=60)
    assert reply.status_code == 200, reply.text


def test_requests_running_on_the_old_version_finish_there(server: ServerThread) -> None:
    load(server, "slow", {**PLUS, "name": "slow", "inferer_args": {"add": 1, "delay_s": 0.5}})
    with ThreadPoolExecutor(4) as pool:
        running = [pool.submit(answer, server, "slow") for _ in range(4)]
        wait_in_flight(server, 4)
        load(server, "slow", {**PLUS, "name": "slow", "inferer_args": {"add": 10}})
        assert answer(server, "slow") == (X + 10).ravel().tolist()  # new requests: the new version
        assert [f.result() for f in running] == [(X + 1).ravel().tolist()] * 4


def test_an_unload_lets_running_requests_finish_and_refuses_new_ones(server: ServerThread) -> None:
    load(server, "slow", {**PLUS, "name": "slow", "inferer_args": {"add": 1, "delay_s": 1.0}})
    with ThreadPoolExecutor(4) as pool:
        running = [pool.submit(infer, server, "slow") for _ in range(3)]
        wait_in_flight(server, 3)
        unloading = pool.submit(httpx.post, f"{server.http_url}/v2/repository/models/slow/unload", timeout=30)
        wait_until(lambda: server.server.executor.repository.unloading("slow"))
        meanwhile = infer(server, "slow")
        index = httpx.post(f"{server.http_url}/v2/repository/index").json()
        assert unloading.result().status_code == 200  # it answered once the running ones were done
        assert [f.result().status_code for f in running] == [200] * 3
    assert meanwhile.status_code == 503 and "is being unloaded" in meanwhile.json()["error"]
    assert {"name": "slow", "version": "1", "state": "UNLOADING", "reason": ""} in index
    after = infer(server, "slow")
    assert after.status_code == 404 and "unknown model 'slow'" in after.json()["error"]


def test_no_request_fails_or_mixes_versions_while_the_model_is_reloaded(server: ServerThread) -> None:
    """HTTP and gRPC clients run the DAG (scale then plus) while scale is reloaded again and again with
    factors 2 and 3: every answer is X*2+1 or X*3+1 whole, and none fails."""
    versions = {tuple((X * k + 1).ravel().tolist()): k for k in (2, 3)}
    seen: Counter[object] = Counter()
    stop = threading.Event()
    lock = threading.Lock()

    def http_client() -> None:
        with httpx.Client(timeout=30) as client:
            while not stop.is_set():
                reply = client.post(f"{server.http_url}/v2/models/chain/infer", json=body())
                got = tuple(reply.json()["outputs"][0]["data"]) if reply.status_code == 200 else reply.text
                with lock:
                    seen[versions.get(got, f"http: {got}")] += 1  # type: ignore[call-overload]

    def grpc_client() -> None:
        with tgrpc.InferenceServerClient(server.grpc_target) as client:
            x = tgrpc.InferInput("x", [2, 4], "FP32")
            x.set_data_from_numpy(X)
            while not stop.is_set():
                try:
                    got: object = tuple(client.infer("chain", [x]).as_numpy("z").ravel().tolist())
                except Exception as exc:
                    got = str(exc)
                with lock:
                    seen[versions.get(got, f"grpc: {got}")] += 1  # type: ignore[call-overload,arg-type]

    threads = [threading.Thread(target=f) for f in (http_client, http_client, grpc_client, grpc_client)]
    for thread in threads:
        thread.start()
    try:
        for i in range(10):
            data = LIFECYCLE / "data" / ("three.txt" if i % 2 == 0 else "two.txt")
            load(server, "scale", {**SCALE, "inferer_path": str(data)})
            time.sleep(0.1)
    finally:
        stop.set()
        for thread in threads:
            thread.join(30)
    assert set(seen) == {2, 3}, seen  # nothing but whole answers of one version or the other
    assert seen[2] > 0 and seen[3] > 0


def rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads RSS from /proc")
def test_loading_and_unloading_a_model_100_times_returns_its_memory(server: ServerThread) -> None:
    triple = {
        **SCALE,
        "name": "triple",
        "version": "7",
        "inferer_path": str(LIFECYCLE / "data" / "three.txt"),
    }

    def cycle() -> None:
        load(server, "triple", triple)
        assert answer(server, "triple") == (X * 3).ravel().tolist()
        reply = httpx.post(f"{server.http_url}/v2/repository/models/triple/unload", timeout=30)
        assert reply.status_code == 200, reply.text

    for _ in range(10):  # warm: imports, caches, the allocator's arenas
        cycle()
    time.sleep(0.5)
    start = rss_kib()
    for _ in range(100):
        cycle()
    time.sleep(0.5)  # the last retirement's memory release runs in a thread
    end = rss_kib()
    assert end <= start * 1.05, f"RSS {start} KiB -> {end} KiB after 100 loads and unloads"
    assert set(server.server.executor.nodes) == {"scale-1", "plus-1"}

"""Serve {{name}} on free ports and call it over HTTP and gRPC: `python -m pytest test_project.py`."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from grps_py import GrpsMessage
from grps_py.client import GrpsClient, GrpsClientError

PROJECT = Path(__file__).resolve().parent
LISTENING = re.compile(r"listening: http \S+:(\d+) grpc (\d+)")


@pytest.fixture(scope="module")
def ports() -> Iterator[dict[str, int]]:
    """`grps-py serve` on ports the system picks (--port 0,0), read back from its log."""
    server = subprocess.Popen(
        [sys.executable, "-m", "grps_py.cli", "serve", str(PROJECT), "--port", "0,0"],
        stderr=subprocess.PIPE,
        text=True,
    )
    assert server.stderr is not None
    found = {}
    for line in server.stderr:
        match = LISTENING.search(line)
        if match:
            found = {"http": int(match.group(1)), "grpc": int(match.group(2))}
            break
    assert found, f"the server did not start (exit {server.wait(30)})"
    threading.Thread(target=server.stderr.read, daemon=True).start()  # keep its log from filling the pipe
    try:
        yield found
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(30)


@pytest.fixture(params=["http", "grpc"])
def client(request: pytest.FixtureRequest, ports: dict[str, int]) -> Iterator[GrpsClient]:
    client = GrpsClient(f"127.0.0.1:{ports[request.param]}", protocol=request.param, timeout=10.0)
    deadline = time.monotonic() + 60
    while not client.ready():  # models load and warm up before the server reports ready
        assert time.monotonic() < deadline, "the server never became ready"
        time.sleep(0.1)
    yield client
    client.close()


def test_a_tensor_is_scaled(client: GrpsClient) -> None:
    y = client.predict(np.array([1, 2, 3], dtype=np.float32), model="my_model-1.0.0")
    np.testing.assert_allclose(y, [2, 4, 6])


def test_text_runs_through_the_default_dag(client: GrpsClient) -> None:
    reply = client.predict(GrpsMessage(str_data="1,2,3"))  # text in; the converter answers a tensor
    (y,) = reply.gtensors.tensors
    assert y.name == "y" and list(y.flat_float32) == [2, 4, 6]


def test_streaming_sends_one_message_per_value(client: GrpsClient) -> None:
    parts = list(client.predict_stream(np.array([1, 2, 3], dtype=np.float32), model="my_model"))
    np.testing.assert_allclose(np.concatenate(parts), [2, 4, 6])


def test_bad_input_is_refused_with_a_clear_message(client: GrpsClient) -> None:
    with pytest.raises(GrpsClientError) as caught:
        client.predict("one,two")
    assert caught.value.status == 400 and "numbers" in caught.value.message

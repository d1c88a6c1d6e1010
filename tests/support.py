"""Test support: real servers on port 0, run on their own event loop in a background thread."""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest

from grps_py.core.config import LogSettings
from grps_py.core.telemetry import RequestRecord
from grps_py.logs import ACCESS_LOGGER, LOG_FILE, LOGGERS, setup_logging
from grps_py.server import GrpsServer

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
PROJECTS = TESTS / "projects"
# What HTTP statuses and gRPC codes mean, so tests over both protocols compare categories.
HTTP_CATEGORY = {
    200: "ok",
    400: "invalid",
    404: "not_found",
    500: "internal",
    503: "unavailable",
    504: "timeout",
}
GRPC_CATEGORY = {
    grpc.StatusCode.INVALID_ARGUMENT: "invalid",
    grpc.StatusCode.NOT_FOUND: "not_found",
    grpc.StatusCode.INTERNAL: "internal",
    grpc.StatusCode.UNAVAILABLE: "unavailable",
    grpc.StatusCode.DEADLINE_EXCEEDED: "timeout",
    grpc.StatusCode.CANCELLED: "cancelled",
}
BASIC = PROJECTS / "basic"
# An inference.yml with only the basic project's light models (no torch or onnx to load), for tests
# that need a server of their own.
LIGHT_INFERENCE = """\
models:
  - {name: echo, version: "1.0", inferer_type: customized, inferer_name: echo, converter_type: none}
  - {name: identity, version: "1", inferer_type: customized, inferer_name: identity, converter_type: numpy}
dag:
  name: echo_dag
  nodes: [{name: echo, type: model, model: echo-1.0}]
"""


class ServerThread:
    """Runs a GrpsServer's loop in a daemon thread so tests can use blocking clients."""

    def __init__(self, make_server: Callable[[], GrpsServer]) -> None:
        self._make_server = make_server
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.server: GrpsServer

    def call(self, coro: Any, timeout: float = 60) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def start(self) -> ServerThread:
        self._thread.start()

        async def build_and_start() -> GrpsServer:
            server = self._make_server()
            await server.start()
            return server

        try:
            self.server = self.call(build_and_start())
        except BaseException:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(10)
            raise
        return self

    def start_in_background(self) -> Future[Any]:
        """Build the server and begin starting it; the future resolves when start() completes.

        `self.server` is usable at once (its ports are known once it listens), so tests can watch
        what a server answers while its models load and warm up."""
        self._thread.start()

        async def build() -> GrpsServer:
            return self._make_server()

        self.server = self.call(build())
        return self.run_soon(self.server.start())

    def stop(self, grace_s: float = 2.0) -> None:
        self.call(self.server.stop(grace_s))
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)

    def run_soon(self, coro: Any) -> Future[Any]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.server.http_port}"

    @property
    def grpc_target(self) -> str:
        return f"127.0.0.1:{self.server.grpc_port}"


def start_project(
    root: Path, inference_conf: Path | None = None, server_conf: Path | None = None
) -> ServerThread:
    return ServerThread(lambda: GrpsServer.from_project(root, server_conf, inference_conf)).start()


def reference(x: Any, w: dict[str, Any]) -> Any:
    """A float64 numpy forward of the bundled classifier, for checking both backends' answers."""
    import numpy as np

    hidden = np.maximum(x.astype(np.float64) @ w["W1"] + w["b1"], 0.0)
    logits = hidden @ w["W2"] + w["b2"]
    exp = np.exp(logits - logits.max(axis=1, keepdims=True))
    return exp / exp.sum(axis=1, keepdims=True)


class Recorder:
    """A RequestObserver keeping what it hears."""

    def __init__(self) -> None:
        self.started: list[tuple[str, str]] = []
        self.records: list[RequestRecord] = []

    def request_started(self, protocol: str, model: str) -> None:
        self.started.append((protocol, model))

    def request_finished(self, record: RequestRecord) -> None:
        self.records.append(record)

    def stream_message(self, protocol: str, model: str, first_after_s: float | None) -> None:
        pass

    def record(self, request_id: str, timeout_s: float = 10.0) -> RequestRecord:
        return wait_for(
            lambda: next((r for r in self.records if r.request_id == request_id), None), timeout_s
        )


def wait_for(probe: Callable[[], Any], timeout_s: float = 10.0) -> Any:
    """HTTP answers reach the client before the server's handler has finished its record: poll."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = probe()
        if value or time.monotonic() > deadline:
            assert value, "timed out waiting"
            return value
        time.sleep(0.01)


def start_light(root: Path) -> ServerThread:
    """The basic project's light models (LIGHT_INFERENCE) on loopback, free ports; files go in `root`."""
    (root / "server.yml").write_text("interface:\n  host: 127.0.0.1\n  port: 0,0\n")
    (root / "inference.yml").write_text(LIGHT_INFERENCE)
    return start_project(BASIC, inference_conf=root / "inference.yml", server_conf=root / "server.yml")


def light_server_fixtures(name: str) -> tuple[Any, Any, Any]:
    """`server` (start_light, once per module), `http` and `channel` fixtures for it: a test module
    takes them with `server, http, channel = light_server_fixtures("its name")`."""

    @pytest.fixture(scope="module")
    def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
        running = start_light(tmp_path_factory.mktemp(name))
        yield running
        running.stop()

    @pytest.fixture
    def http(server: ServerThread) -> Iterator[httpx.Client]:
        with httpx.Client(base_url=server.http_url, timeout=30) as client:
            yield client

    @pytest.fixture
    def channel(server: ServerThread) -> Iterator[grpc.Channel]:
        with grpc.insecure_channel(server.grpc_target) as chan:
            yield chan

    return server, http, channel


@contextmanager
def logging_to(settings: LogSettings) -> Iterator[Path]:
    """setup_logging into `settings.log_dir` for one test (yields the log file), then the loggers as
    they were."""
    names = (*LOGGERS, ACCESS_LOGGER, "tornado.access")
    saved = {n: (list(logging.getLogger(n).handlers), logging.getLogger(n).level) for n in names}
    propagate = {n: logging.getLogger(n).propagate for n in names}
    setup_logging(settings)
    try:
        assert settings.log_dir is not None
        yield settings.log_dir / LOG_FILE
    finally:
        for name, (handlers, level) in saved.items():
            logger = logging.getLogger(name)
            for handler in [h for h in logger.handlers if h not in handlers]:
                logger.removeHandler(handler)
                handler.close()
            logger.setLevel(level)
            logger.propagate = propagate[name]


def run_project_test_py(source: Path, project: Path) -> subprocess.CompletedProcess[str]:
    """A grps project's own test.py (conf/, src/ and test.py copied to `project`), run as its user runs
    it: `python test.py` in the project, grps-py importable."""
    shutil.copytree(source / "conf", project / "conf")
    shutil.copytree(source / "src", project / "src", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(source / "test.py", project / "test.py")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    return subprocess.run(
        [sys.executable, "test.py"], cwd=project, env=env, capture_output=True, text=True, timeout=120
    )

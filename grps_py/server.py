"""Composition root: settings -> executor -> HTTP and gRPC servers on one asyncio loop; signals; drain."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
import socket
import sys
from pathlib import Path

import grpc
import tornado.httpserver
import tornado.netutil

from grps_py.access_log import install_access_log
from grps_py.codecs.grps_pb import GrpsMessageBridge
from grps_py.core.catalog import DAG_VERSION
from grps_py.core.config import InferenceSettings, ServerSettings
from grps_py.core.executor import Executor
from grps_py.core.warmup import Progress
from grps_py.gpu import apply_gpu_settings, gpu_gc_loop
from grps_py.grpc.server import build_grpc_server
from grps_py.http.app import build_app
from grps_py.http.monitor import build_metrics_app
from grps_py.logs import ACCESS_FLUSH_S, flush_access_log
from grps_py.metrics import ServerMetrics
from grps_py.project import load_project

log = logging.getLogger("grps_py.server")
SAMPLE_S = 1.0


class GrpsServer:
    """One serving process: one executor behind the HTTP and (optionally) gRPC adapters."""

    def __init__(self, server: ServerSettings, inference: InferenceSettings) -> None:
        self.settings = server
        # One metrics engine per server (its own Prometheus registry): it hears the schedulers, the
        # transports' request records and streamed messages, and is sampled once a second.
        self.metrics = ServerMetrics(model_labels(inference))
        self.executor = Executor(server, inference, GrpsMessageBridge(), observer=self.metrics)
        self.executor.metrics = self.metrics
        self.executor.telemetry.add(self.metrics)
        install_access_log(self.executor, server.log)  # nothing when log.access is false
        self._http: tornado.httpserver.HTTPServer | None = None
        self._metrics_http: tornado.httpserver.HTTPServer | None = None
        self.metrics_port: int | None = None
        self._grpc: grpc.aio.Server | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = asyncio.Event()
        self.http_port = 0
        self.grpc_port: int | None = None

    @classmethod
    def from_project(
        cls, root: Path, server_conf: Path | None = None, inference_conf: Path | None = None
    ) -> GrpsServer:
        project = load_project(root, server_conf, inference_conf)
        return cls(project.server, project.inference)

    async def start(self, on_progress: Progress | None = None) -> None:
        """Listen first (liveness answers while models load), then load models and go online.

        `on_progress` hears model loading and warmup steps (the CLI shows them on a terminal)."""
        iface = self.settings.interface
        sys.setswitchinterval(self.settings.gil_switch_interval_us / 1e6)  # process-wide, see config
        self._http = tornado.httpserver.HTTPServer(
            build_app(self.executor, self.settings), max_body_size=iface.max_message_bytes
        )
        sockets = tornado.netutil.bind_sockets(iface.http_port, iface.host, family=_family(iface.host))
        self._http.add_sockets(sockets)
        self.http_port = sockets[0].getsockname()[1]
        if iface.framework == "http+grpc":
            self._grpc, self.grpc_port = build_grpc_server(self.executor, self.settings)
            await self._grpc.start()
        if self.settings.metrics.port is not None:
            self._metrics_http = tornado.httpserver.HTTPServer(build_metrics_app(self.executor))
            sockets = tornado.netutil.bind_sockets(
                self.settings.metrics.port, iface.host, family=_family(iface.host)
            )
            self._metrics_http.add_sockets(sockets)
            self.metrics_port = sockets[0].getsockname()[1]
        log.info(
            "listening: http %s:%s grpc %s metrics %s",
            iface.host,
            self.http_port,
            self.grpc_port,
            self.metrics_port,
        )
        self._tasks.append(asyncio.ensure_future(_flush_access_log_every(ACCESS_FLUSH_S)))
        self._tasks.append(asyncio.ensure_future(_sample_every(self.metrics, SAMPLE_S)))
        if apply_gpu_settings(self.settings.gpu) and self.settings.gpu and self.settings.gpu.mem_gc_enable:
            self._tasks.append(asyncio.ensure_future(gpu_gc_loop(self.settings.gpu)))
        try:
            await self.executor.start(on_progress)
            # Everything alive now (torch, models, modules) lives as long as the process: freeze it so
            # the cyclic GC does not rescan that large heap while serving.
            gc.collect()
            gc.freeze()
        except BaseException:
            await self.stop(grace_s=0)  # release the ports before reporting the failure
            raise

    async def stop(self, grace_s: float | None = None) -> None:
        """Go offline, let in-flight requests finish within the grace period, then close."""
        grace = self.settings.shutdown_grace_s if grace_s is None else grace_s
        self.executor.offline()
        if not await self.executor.drain(grace):
            log.warning(
                "%d request(s) still running after %.1fs; closing anyway", self.executor.in_flight, grace
            )
        if self._http is not None:
            self._http.stop()
            await self._http.close_all_connections()
        if self._grpc is not None:
            await self._grpc.stop(0.5)
        if self._metrics_http is not None:
            self._metrics_http.stop()
        for task in self._tasks:
            task.cancel()
        flush_access_log()
        self.executor.close()
        self.metrics.close()

    def request_stop(self) -> None:
        self._stopping.set()

    async def serve(self, on_progress: Progress | None = None) -> None:
        """Start, serve until SIGTERM or SIGINT, then stop gracefully."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError):
                loop.add_signal_handler(sig, self.request_stop)
        await self.start(on_progress)
        await self._stopping.wait()
        log.info("stopping: draining in-flight requests")
        await self.stop()
        log.info("stopped")


async def _sample_every(metrics: ServerMetrics, period_s: float) -> None:
    """Process and GPU readings for the dashboard; closing each second's series bucket."""
    while True:
        await asyncio.sleep(period_s)
        metrics.sample()


def model_labels(inference: InferenceSettings) -> dict[str, tuple[str, str]]:
    """Metric labels per model key: (name, version); the DAG is labelled like the OIP catalog shows it."""
    labels = {m.key: (m.name, m.version) for m in inference.models}
    labels.setdefault(inference.dag.name, (inference.dag.name, DAG_VERSION))
    return labels


async def _flush_access_log_every(period_s: float) -> None:
    while True:
        await asyncio.sleep(period_s)
        flush_access_log()


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET

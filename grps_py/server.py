"""Composition root: settings -> executor -> HTTP and gRPC servers on one asyncio loop; signals; drain."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path

import grpc
import tornado.netutil
import tornado.web

from grps_py.access_log import install_access_log
from grps_py.codecs.grps_pb import GrpsMessageBridge
from grps_py.core.catalog import DAG_VERSION
from grps_py.core.config import InferenceSettings, ServerSettings
from grps_py.core.executor import Executor
from grps_py.core.warmup import Progress
from grps_py.gpu import apply_gpu_settings, gpu_gc_loop
from grps_py.grpc.server import build_grpc_server
from grps_py.http.app import HttpRoutes
from grps_py.http.listener import HttpListener
from grps_py.http.metrics_routes import build_metrics_app
from grps_py.http.tls import server_ssl_context
from grps_py.logs import ACCESS_FLUSH_S, flush_access_log
from grps_py.metrics import ServerMetrics
from grps_py.project import load_project
from grps_py.workers.group import WorkerGroup
from grps_py.workers.peers import PeerRequests

log = logging.getLogger("grps_py.server")
SAMPLE_S = 1.0


class GrpsServer:
    """One serving process: one executor behind the HTTP and (optionally) gRPC adapters."""

    def __init__(
        self, server: ServerSettings, inference: InferenceSettings, group: WorkerGroup | None = None
    ) -> None:
        self.settings = server
        self.group = group  # one worker of several (grps_py/workers): they share ports and state
        # One metrics engine per server (its own Prometheus registry): it hears the schedulers, the
        # transports' request records and streamed messages, and is sampled once a second.
        self.metrics = ServerMetrics(model_labels(inference))
        self.executor = Executor(server, inference, GrpsMessageBridge(), observer=self.metrics)
        self.executor.telemetry.add(self.metrics)
        if group is not None:
            self.executor.traffic = group.traffic
            self.executor.repository.everywhere = group.apply_everywhere
        install_access_log(self.executor, server.log)  # nothing when log.access is false
        self._http: HttpListener | None = None
        self._metrics_http: HttpListener | None = None
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

        A worker of several loads its models first and listens only then: the others serve meanwhile,
        and no connection the kernel hands it waits for a model. `on_progress` hears model loading and
        warmup steps (the CLI shows them on a terminal)."""
        sys.setswitchinterval(self.settings.gil_switch_interval_us / 1e6)  # process-wide, see config
        try:
            if self.group is None:
                await self._listen()
            await self._start_models(on_progress)
            if self.group is not None:
                peers = PeerRequests(self.metrics, self.executor.repository)
                await self.group.replay(peers.answer)  # what the group loaded or unloaded before
                await self._listen()
                await self.group.serve(peers.answer)
        except BaseException:
            await self.stop(grace_s=0)  # release the ports before reporting the failure
            raise

    async def _listen(self) -> None:
        iface = self.settings.interface
        shared = self.group is not None  # SO_REUSEPORT: every worker listens on the same ports
        tls = server_ssl_context(self.settings.tls, self.settings.source)  # None: plain HTTP
        routes = HttpRoutes(self.executor, self.settings, self.metrics, self.group)
        self._http = HttpListener(routes.app(), self.settings, tls, routes.direct())
        family = _family(iface.host)
        sockets = tornado.netutil.bind_sockets(iface.http_port, iface.host, family=family, reuse_port=shared)
        await self._http.listen(sockets)
        self.http_port = sockets[0].getsockname()[1]
        if iface.framework == "http+grpc":
            self._grpc, self.grpc_port = build_grpc_server(self.executor, self.settings, shared)
            await self._grpc.start()
        if self.settings.metrics.port is not None:
            metrics_app = build_metrics_app(self.executor, self.metrics, routes.policy, self.group)
            self._metrics_http = HttpListener(metrics_app, self.settings, tls)
            sockets = tornado.netutil.bind_sockets(
                self.settings.metrics.port, iface.host, family=family, reuse_port=shared
            )
            await self._metrics_http.listen(sockets)
            self.metrics_port = sockets[0].getsockname()[1]
        log.info(
            "listening: http %s:%s grpc %s metrics %s",
            iface.host,
            self.http_port,
            self.grpc_port,
            self.metrics_port,
        )

    async def _start_models(self, on_progress: Progress | None) -> None:
        self._tasks.append(asyncio.ensure_future(_flush_access_log_every(ACCESS_FLUSH_S)))
        self._tasks.append(asyncio.ensure_future(_sample_every(self.metrics, SAMPLE_S)))
        if apply_gpu_settings(self.settings.gpu) and self.settings.gpu and self.settings.gpu.mem_gc_enable:
            self._tasks.append(asyncio.ensure_future(gpu_gc_loop(self.settings.gpu)))
        await self.executor.start(on_progress)
        # Everything alive now (torch, models, modules) lives as long as the process: freeze it so
        # the cyclic GC does not rescan that large heap while serving.
        gc.collect()
        gc.freeze()

    async def stop(self, grace_s: float | None = None) -> None:
        """Drain, then close; nothing accepted is reset.

        Readiness turns false at once and every HTTP answer from then on closes its connection. The
        listeners stay open for up to the grace period while clients are connected or being served (a
        load balancer that has not yet seen readiness turn false still gets answers), then close: new
        connections are refused. Requests already accepted get up to the grace period again to finish;
        any still running then are answered 503 / UNAVAILABLE (a stream with that error as its last
        message), and the idle connections left are closed."""
        grace = self.settings.shutdown_grace_s if grace_s is None else grace_s
        self.executor.begin_drain()
        if self.group is not None:
            self.group.close()  # the other workers stop asking this one
        if self._http is not None:
            self._http.no_keep_alive = True  # each answer from now on ends with close
        say = log.info if self.executor.is_loaded else log.debug  # a failed start-up says why elsewhere
        say("draining: not ready; serving for up to %.1fs while clients are connected", grace)
        await self._wait_until(self._quiet_for(DRAIN_QUIET_S), grace)
        grpc_stopped = self._close_listeners(grace)
        if not await self._wait_until(self._answered, grace):
            log.warning(
                "%d request(s) still running %.1fs after the listeners closed; answering them 503",
                self.executor.in_flight,
                grace,
            )
            self.executor.abort("the server is shutting down")
            await self._wait_until(self._answered, ABORT_FLUSH_S)
        await self._close_connections(grpc_stopped)
        for task in self._tasks:
            task.cancel()
        flush_access_log()
        self.executor.close()
        self.metrics.close()

    _hurried = False  # a second SIGTERM/SIGINT: stop waiting for clients

    def request_stop(self) -> None:
        """The first call starts a graceful stop; a second one cuts the waiting short."""
        if self._stopping.is_set():
            self._hurried = True
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

    # -- drain helpers -------------------------------------------------------------------------
    async def _wait_until(self, done: Callable[[], bool], timeout_s: float) -> bool:
        """Poll `done` until it holds (True), or until `timeout_s` passed or a second signal (False)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while not done():
            if self._hurried or loop.time() >= deadline:
                return False
            await asyncio.sleep(DRAIN_POLL_S)
        return True

    def _quiet(self) -> bool:
        """Nothing left to serve: no request in flight and no HTTP client connected."""
        return self.executor.in_flight == 0 and (self._http is None or not self._http.connections)

    def _quiet_for(self, seconds: float) -> Callable[[], bool]:
        """`_quiet`, held for `seconds`: a client between two requests (reconnecting, now that every
        answer closes its connection) is not gone, and its next request should still be served."""
        since: float | None = None

        def done() -> bool:
            nonlocal since
            if not self._quiet():
                since = None
                return False
            now = time.monotonic()
            since = now if since is None else since
            return now - since >= seconds

        return done

    def _answered(self) -> bool:
        """Every accepted request answered: none in flight, every HTTP connection idle and flushed."""
        return self.executor.in_flight == 0 and (self._http is None or self._http.all_idle())

    def _close_listeners(self, grace_s: float) -> asyncio.Future[None] | None:
        """Refuse new connections; gRPC refuses new calls too and lets running ones finish (a bound past
        the drain's, which ends them first)."""
        for http in (self._http, self._metrics_http):
            if http is not None:
                http.stop()
        say = log.info if self.executor.is_loaded else log.debug
        say("listeners closed; waiting up to %.1fs for %d request(s)", grace_s, self.executor.in_flight)
        if self._grpc is None:
            return None
        return asyncio.ensure_future(_stop_grpc(self._grpc, grace_s + ABORT_FLUSH_S + GRPC_LINGER_S))

    async def _close_connections(self, grpc_stopped: asyncio.Future[None] | None) -> None:
        """Close what is left: idle HTTP connections, and gRPC calls after a short linger (their answers
        are on the way; an idle ModelStreamInfer stream is ended)."""
        for http in (self._http, self._metrics_http):
            if http is not None:
                await http.close_all_connections()
        if self._grpc is not None:
            await self._grpc.stop(GRPC_LINGER_S)
        if grpc_stopped is not None:
            await grpc_stopped


# Drain timing: how often the drain looks again, how long answers given at its end get to be written,
# and how long gRPC calls get after the last request was answered.
DRAIN_POLL_S = 0.05
DRAIN_QUIET_S = 0.25
ABORT_FLUSH_S = 1.0
GRPC_LINGER_S = 1.0


async def _stop_grpc(server: grpc.aio.Server, grace_s: float) -> None:
    await server.stop(grace_s)


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

"""The facade every adapter calls: infer, infer_stream, metadata, health, online/offline, drain."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, NoReturn

import yaml

from grps_py.core.catalog import DAG_VERSION, Catalog
from grps_py.core.config import InferenceSettings, ModelSettings, ServerSettings
from grps_py.core.context import STREAM_END, GrpsContext, StreamSink
from grps_py.core.dag import Dag
from grps_py.core.datatypes import numpy_dtype
from grps_py.core.errors import Cancelled, DeadlineExceeded, GrpsError, InvalidInput, ModelNotReady
from grps_py.core.model_set import ModelSet
from grps_py.core.node import ModelNode
from grps_py.core.observer import FanOut, ModelStats, SchedulerObserver, summary
from grps_py.core.repository import ModelRepository, load_node
from grps_py.core.scheduler import ConcurrencyLimit
from grps_py.core.shared_memory import SharedMemoryRegions
from grps_py.core.signature import TensorSpec
from grps_py.core.statistics import InferenceStats, Statistics
from grps_py.core.telemetry import RequestFanOut
from grps_py.core.traffic import LocalTraffic, Traffic
from grps_py.core.types import InferRequest, InferResponse, MessageBridge, Payload, PayloadKind
from grps_py.core.untrusted import shown
from grps_py.core.warmup import Progress, no_progress, warm_up

log = logging.getLogger("grps_py.executor")
SERVER_NAME = "grps-py"


class _StreamFailure:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


class StallWatch:
    """Calls `on_stall` once when a message handed to a stream's consumer is not taken within `timeout_s`.

    The consumer marks each hand-over (`handed`, just before it waits for the message to go out) and its
    end (`taken`): two attribute writes per message. One timer per stream checks, at most once per
    `timeout_s`, whether the hand-over in progress is older than that."""

    __slots__ = ("_loop", "_on_stall", "_since", "_timeout_s", "_timer", "stalled")

    def __init__(
        self, loop: asyncio.AbstractEventLoop, timeout_s: float, on_stall: Callable[[], object]
    ) -> None:
        self._loop = loop
        self._timeout_s = timeout_s
        self._on_stall = on_stall
        self._since: float | None = None
        self._timer: asyncio.TimerHandle | None = None
        self.stalled = False

    def handed(self) -> None:
        self._since = now = self._loop.time()
        if self._timer is None and not self.stalled:
            self._timer = self._loop.call_at(now + self._timeout_s, self._check)

    def taken(self) -> None:
        self._since = None

    def _check(self) -> None:
        self._timer = None
        since = self._since
        if since is None:
            return  # nothing in flight: the next hand-over sets the timer again
        due = since + self._timeout_s
        if self._loop.time() < due:
            self._timer = self._loop.call_at(due, self._check)
            return
        self.stalled = True
        self._on_stall()

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


class Admission:
    """The requests being answered, counted for `drain`: `with admission:` around each. None is admitted
    until the models are loaded (`open`). A class rather than a generator-based context manager: it runs
    per request."""

    __slots__ = ("idle", "in_flight", "open")

    def __init__(self) -> None:
        self.open = False
        self.in_flight = 0
        self.idle = asyncio.Event()  # set while nothing is in flight
        self.idle.set()

    def __enter__(self) -> None:
        if not self.open:
            raise ModelNotReady("models are still loading")
        if self.in_flight == 0:
            self.idle.clear()
        self.in_flight += 1

    def __exit__(self, *exc_info: object) -> None:
        self.in_flight -= 1
        if self.in_flight == 0:
            self.idle.set()


class Executor:
    """Runs requests through the default DAG or one named model."""

    def __init__(
        self,
        server: ServerSettings,
        inference: InferenceSettings,
        bridge: MessageBridge,
        observer: SchedulerObserver | None = None,
    ) -> None:
        self.server_settings = server
        self.inference_settings = inference
        self.stats = ModelStats()
        # Request-level observers (metrics, the access log): the server adds them; transports report.
        self.telemetry = RequestFanOut()
        self.observer: SchedulerObserver = FanOut([self.stats, observer]) if observer else self.stats
        security = server.security
        self._limit = ConcurrencyLimit(server.max_concurrency)
        self._secrets = [t for t in (security.admin_token, *security.inference_tokens) if t]
        self.bridge = bridge
        nodes = {m.key: self.make_node(m) for m in inference.models}
        # The models served now; loads and unloads swap in another set (core/repository.py).
        self.models = ModelSet(nodes, inference.dag, bridge, inference.source)
        # Triton's statistics extension: each model version's, and the DAG's under its name (unless a
        # model has that name: OIP serves the model then). The mapping follows the model set.
        self.dag_statistics = InferenceStats(inference.dag.name, DAG_VERSION)
        self.statistics = Statistics(self._statistics_by_key(self.models))
        if observer is not None and server.metrics.triton_names:
            observer.export_statistics(self.statistics)
        # Triton's system shared-memory regions, shared by both transports' OIP routes.
        self.shared_memory = SharedMemoryRegions()
        self.traffic: Traffic = LocalTraffic()  # a worker of several shares one (grps_py/workers)
        self._draining = False
        self._admission = Admission()
        self.repository = ModelRepository(self, server, inference)

    def make_node(self, settings: ModelSettings, fresh: bool = False) -> ModelNode:
        """A model node over this executor's concurrency limit and observers; `fresh`: registered
        inferer and converter objects are renewed for it (a model loaded after start-up)."""
        return ModelNode(settings, self.bridge, self._limit, self.observer, self._secrets, fresh=fresh)

    def install(self, models: ModelSet) -> None:
        """Serve `models` from now on: requests that already started keep the set they started on."""
        self.models = models
        self.statistics.by_key = self._statistics_by_key(models)

    def _statistics_by_key(self, models: ModelSet) -> dict[str, InferenceStats]:
        by_key = {key: node.statistics for key, node in models.nodes.items()}
        if models.dag is not None and all(n.settings.name != models.dag.name for n in models.nodes.values()):
            by_key[models.dag.name] = self.dag_statistics
        return by_key

    # -- the models served now (the current set's) ---------------------------------------------
    @property
    def nodes(self) -> dict[str, ModelNode]:
        return self.models.nodes

    @property
    def dag(self) -> Dag | None:
        return self.models.dag

    @property
    def catalog(self) -> Catalog:
        return self.models.catalog

    # -- lifecycle -----------------------------------------------------------------------------
    async def start(self, on_progress: Progress | None = None) -> None:
        """Load every model (each in a thread) and run its warmup, then go online unless configured to
        start offline. Readiness waits for all of it. `on_progress` hears each step begin and end."""
        report = on_progress or no_progress
        await asyncio.gather(*(load_node(node, report) for node in self.nodes.values()))
        await asyncio.gather(*(warm_up(node, report) for node in self.nodes.values() if node.settings.warmup))
        self.statistics.reset()  # the warmup runs are not the clients' (nothing is admitted before this)
        self._admission.open = True
        self.traffic.start(self.server_settings.start_online)
        self.repository.start()
        dag = self.models.dag_settings.name
        log.info("loaded models %s; dag %r; online=%s", list(self.nodes), dag, self.traffic.online)

    async def drain(self, grace_s: float) -> bool:
        """Wait up to `grace_s` for in-flight requests to finish; True when none is left."""
        try:
            await asyncio.wait_for(self._admission.idle.wait(), timeout=grace_s)
            return True
        except asyncio.TimeoutError:
            return False

    def begin_drain(self) -> None:
        """Shutting down: readiness turns false for good (an `online` call no longer lifts it), while
        requests are still served."""
        self._draining = True

    @property
    def draining(self) -> bool:
        return self._draining

    def abort(self, message: str) -> None:
        """Answer every request still queued or running with ModelNotReady(message) (503 / UNAVAILABLE):
        the end of a drain. Streams end with that error as their last message."""
        for node in self.repository.live_nodes():
            for scheduler in node.schedulers:
                scheduler.abort(lambda: ModelNotReady(message))

    def close(self) -> None:
        self.repository.close()
        for node in self.repository.live_nodes():
            node.close()
        self.shared_memory.close()

    # -- health --------------------------------------------------------------------------------
    def online(self) -> None:
        if not self._draining:
            self.traffic.set(True)

    def offline(self) -> None:
        self.traffic.set(False)

    @property
    def is_loaded(self) -> bool:
        return self._admission.open

    def is_live(self) -> bool:
        return True

    def is_ready(self) -> bool:
        return self._admission.open and not self._draining and self.traffic.online

    @property
    def in_flight(self) -> int:
        return self._admission.in_flight

    # -- inference -----------------------------------------------------------------------------
    def resolve(self, model: str) -> Dag | ModelNode:
        target = self.models.resolve(model)
        if target is None:
            raise self._missing(model)
        return target

    def _missing(self, model: str) -> GrpsError:
        """Why no served model answers to `model`: one being unloaded is UNAVAILABLE, any other unknown."""
        if self.repository.unloading(model):
            return ModelNotReady(f"model '{shown(model)}' is being unloaded")
        return self.models.not_found(model)

    def model_key(self, model: str) -> str:
        """The key a request for `model` runs under (a model's "name-version", or the DAG's name);
        "" when no such model is served. For labels: never raises."""
        try:
            target = self.resolve(model)
        except GrpsError:
            return ""
        return target.name if isinstance(target, Dag) else target.key

    async def infer(self, request: InferRequest) -> InferResponse:
        models = self.models  # the request runs on this set to its end, whatever loads meanwhile
        target = models.resolve(request.model) or self._raise_missing(request.model)
        with self._admission, models:
            try:
                if type(target) is Dag:
                    payload = await self._run_dag(target, request.payload, request.context)
                else:
                    payload = await target.run(request.payload, request.context)
            except (DeadlineExceeded, asyncio.CancelledError):
                # Answered at its deadline, or its client left, while its model may still be running: tell
                # the model code, which may stop (if_disconnected()) and free its instance.
                request.context.cancel()
                raise
        return InferResponse(payload, model=request.model)

    async def infer_stream(self, request: InferRequest) -> AsyncIterator[InferResponse]:
        """Yield each message the model streams; the model's return value when it streamed none.

        Bounded: at most `limits.stream_buffer_messages` messages wait for the consumer (the model's
        push waits past that), and a message the consumer has not taken within
        `limits.stream_stall_timeout_s` (its client reads nothing) stops the stream: the context is
        cancelled and its `on_stall` callbacks let the transport end the request."""
        models = self.models
        target = models.resolve(request.model) or self._raise_missing(request.model)
        ctx = request.context
        loop = asyncio.get_running_loop()
        limits = self.server_settings.limits
        sink = StreamSink(loop, limits.stream_buffer_messages)
        ctx.attach_stream(sink)
        with self._admission, models:
            task = asyncio.ensure_future(self._produce(target, request, sink))
            ctx.on_cancel(task.cancel)
            stall_s = limits.stream_stall_timeout_s
            watch = StallWatch(loop, stall_s, lambda: _stalled(ctx, stall_s))
            started: float | None = time.perf_counter()
            model_key = self.model_key(request.model)
            ended = False
            try:
                while (item := await sink.get()) is not STREAM_END:
                    if isinstance(item, _StreamFailure):
                        raise item.exc
                    first_after_s = None if started is None else time.perf_counter() - started
                    started = None
                    self.telemetry.stream_message(request.protocol, model_key, first_after_s)
                    watch.handed()
                    yield InferResponse(item, model=request.model)
                    watch.taken()
                    if watch.stalled:  # the consumer came back after all: the stream stays stopped
                        raise Cancelled(f"the client took no streamed message for {stall_s:g} s")
                ended = True
            finally:
                watch.close()
                ctx.stream_over()
                if not ended:
                    # The client left, or the stream failed: at its deadline the model's thread is still
                    # streaming for nobody, and holds its instance until it sees if_disconnected().
                    ctx.cancel()
                    task.cancel()

    def _raise_missing(self, model: str) -> NoReturn:
        raise self._missing(model)

    async def _run_dag(self, dag: Dag, payload: Payload, ctx: GrpsContext) -> Payload:
        """The DAG's run, counted under its name: its models count their own executions."""
        started = time.perf_counter_ns()
        try:
            answer = await dag.run(payload, ctx)
        except BaseException:
            self.dag_statistics.failed(started)
            raise
        self.dag_statistics.answered(started)
        return answer

    async def _produce(self, target: Dag | ModelNode, request: InferRequest, sink: StreamSink) -> None:
        try:
            if type(target) is Dag:
                payload = await self._run_dag(target, request.payload, request.context)
            else:
                payload = await target.run(request.payload, request.context)
            if request.context.streamed_count == 0 and payload.kind is not PayloadKind.EMPTY:
                sink.put(payload)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            sink.put(_StreamFailure(exc))
        finally:
            sink.put(STREAM_END)

    # -- metadata ------------------------------------------------------------------------------
    def server_metadata(self) -> str:
        iface = self.server_settings.interface
        meta = {
            "server": SERVER_NAME,
            "interface": {
                "framework": iface.framework,
                "http_port": iface.http_port,
                "grpc_port": iface.grpc_port,
            },
            "max_concurrency": self.server_settings.max_concurrency,
            "online": self.traffic.online and not self._draining,
            "model_control": self.repository.mode,
            "models": list(self.nodes),
            "dag": _describe_dag(self.models),
            "repository": self.repository.index(),
        }
        return yaml.safe_dump(meta, sort_keys=False)

    def model_metadata(self, model: str) -> str:
        if not model:
            raise InvalidInput("model metadata needs the model name (name-version) in str_data")
        node = self.resolve(model)
        if isinstance(node, Dag):
            dag_meta = {"name": node.name, "type": "dag", "dag_type": node.type, "nodes": node.node_names}
            return yaml.safe_dump(dag_meta, sort_keys=False)
        s = node.settings
        meta: dict[str, Any] = {
            "name": s.name,
            "version": s.version,
            "inferer_type": s.inferer_type,
            "converter_type": s.converter_type or "default",
            # Where it runs (`auto` resolved, as `grps-py check` says), and what inference.yml asked for.
            "device": ", ".join(node.run_devices),
            "configured_device": ", ".join(node.configured_devices),
            "batching": _describe_batching(node),
            "instances": len(node.instances),
            "loaded": node.loaded,
            "scheduler": summary(self.stats.model(node.key)),
        }
        meta.update(node.describe())
        # What inference.yml declares is what requests are checked against: it beats the backend's view.
        for key, specs in (("inputs", s.inputs), ("outputs", s.outputs)):
            if specs:
                meta[key] = [_describe_spec(spec) for spec in specs]
        return yaml.safe_dump(meta, sort_keys=False)

    def model_statistics(self, name: str = "", version: str = "") -> list[dict[str, Any]]:
        """Triton's `model_stats`: of every served model version (no `name`), of every version of `name`,
        or of that one version; ModelNotFound when no such model or version is served."""
        catalog = self.catalog
        if version:
            keys = [catalog.entry(name, version).key]
        elif name:
            keys = [catalog.entry(name, v).key for v in catalog.versions(name)] or [catalog.entry(name).key]
        else:
            keys = [catalog.entry(n, v).key for n in catalog.names() for v in catalog.versions(n)]
        by_key = self.statistics.by_key
        return [by_key[key].triton() for key in keys if key in by_key]


def _stalled(ctx: GrpsContext, stall_s: float) -> None:
    log.info(
        "the client took no streamed message for %ss (limits.stream_stall_timeout_s): stream stopped", stall_s
    )
    ctx.stop_stalled(stall_s)


def _describe_dag(models: ModelSet) -> dict[str, Any]:
    settings = models.dag_settings
    described: dict[str, Any] = {"name": settings.name, "type": settings.type}
    if models.dag is None:
        return {**described, "nodes": [], "unavailable": models.dag_absent}
    return {**described, "nodes": models.dag.node_names}


def _describe_batching(node: ModelNode) -> dict[str, Any]:
    """Batching as the server applies it, with OIP's model config's max_batch_size (0: not batched); the
    batch settings only where they apply."""
    if not node.max_batch_size:
        return {"type": "none", "max_batch_size": 0}
    batching = node.settings.batching
    meta: dict[str, Any] = {
        "type": batching.type,
        "max_batch_size": node.max_batch_size,
        "batch_timeout_us": batching.batch_timeout_us,
    }
    if batching.preferred_batch_size:
        meta["preferred_batch_size"] = list(batching.preferred_batch_size)
    return meta


def _describe_spec(spec: TensorSpec) -> dict[str, Any]:
    """A declared tensor as backends describe theirs: numpy dtype name, -1 for a variable dim."""
    dtype = None if spec.datatype is None else str(numpy_dtype(spec.datatype))
    return {"name": spec.name, "dtype": dtype, "shape": None if spec.shape is None else list(spec.shape)}

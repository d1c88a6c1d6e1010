"""One server's metrics: the Prometheus registry and the dashboard's time series, fed by both observers.

`ServerMetrics` is a `SchedulerObserver` (queues, batches, generated tokens) and a `RequestObserver`
(answers, streams); the server builds one, hands it to the executor, and calls `sample()` once a second. With
`metrics.triton_names` the executor also hands it its statistics, whose Triton counters
(`nv_inference_*`) are written after the registry's families when scraped.
Every method is meant for the event loop thread, as the observers are; `exposition()` only reads the
registry (thread-safe) and may be called from any thread.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from contextlib import suppress
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Gauge, ProcessCollector, generate_latest

from grps_py.app_metrics import AppMonitor, app_monitor
from grps_py.core.statistics import Statistics
from grps_py.core.telemetry import RequestRecord
from grps_py.metrics.nvml import Nvml
from grps_py.metrics.process import ProcessSampler, open_connections
from grps_py.metrics.prometheus import UNKNOWN_LABELS, Families, ModelMetrics, triton_exposition
from grps_py.metrics.series import (
    CPU,
    GENERATION_SERIES,
    MEM,
    REQUEST_SERIES,
    WINDOW_BY_NAME,
    Bucket,
    GenerationBucket,
    Scope,
    ValueOf,
    gpu_names,
    latency_index,
    latest,
    process_series,
    render,
)
from grps_py.metrics.user import UserMetricsCollector

_MIB = 1 << 20
_MODEL_SERIES = {**REQUEST_SERIES, **GENERATION_SERIES}  # what every scope, the server's or a model's, has


_DETACHED_KEYS = 64  # dropped keys whose late reports are still answered (and not exported)


class _ModelChildren(dict[str, ModelMetrics]):
    """The children of each known model key; any other key gets the ("unknown", "") children, made on
    first use (no idle "unknown" series). A plain subscript for a known key: it runs per request.

    A key dropped from the model set stays in the dict, detached (its samples no longer exported), so
    a request that finishes after it went moves its own counts rather than the "unknown" ones; the
    last `_DETACHED_KEYS` such keys are kept, oldest forgotten first."""

    def __init__(self, families: Families, model_labels: Mapping[str, tuple[str, str]]) -> None:
        super().__init__((key, ModelMetrics(families, labels)) for key, labels in model_labels.items())
        self._families = families
        self._unknown: ModelMetrics | None = None
        self._detached: dict[str, None] = {}  # keys in the order they were dropped

    def __missing__(self, key: str) -> ModelMetrics:
        if self._unknown is None:
            self._unknown = ModelMetrics(self._families, UNKNOWN_LABELS)
        return self._unknown

    def change(self, model_labels: Mapping[str, tuple[str, str]]) -> None:
        """Export exactly `model_labels`' keys: a key kept with the same labels keeps its children."""
        exported = set(model_labels.values())
        for key, children in list(self.items()):
            if key not in self._detached and model_labels.get(key) != children.labels:
                children.detach(unexport=children.labels not in exported)
                self._detached[key] = None
        for key, labels in model_labels.items():
            if key in self._detached:
                del self._detached[key]
                self[key] = self._reborn(self[key], labels)
            elif key not in self:
                self[key] = ModelMetrics(self._families, labels)
        while len(self._detached) > _DETACHED_KEYS:
            oldest = next(iter(self._detached))
            del self._detached[oldest], self[oldest]

    def _reborn(self, detached: ModelMetrics, labels: tuple[str, str]) -> ModelMetrics:
        """Fresh children for a key that comes back: counters and histograms from zero; the gauges of
        what is happening now (requests of its old incarnation still in flight, hung instances) go on,
        so their late reports balance."""
        children = ModelMetrics(self._families, labels)
        children.inflight, children.depth, children.hung = detached.inflight, detached.depth, detached.hung
        return children


class ServerMetrics:
    """Prometheus metrics (`registry`, `exposition()`) and dashboard series (`series()`, `snapshot()`).

    `model_labels` maps each model key ("name-version", or the DAG's name) to its (model, version)
    labels; events for any other key (including "") count as ("unknown", "") in Prometheus and only in
    the overall series. `models_changed` replaces that map while the server runs. `gpu=False` never
    touches NVML. `clock` (epoch seconds) times every bucket.
    `monitor` is whose user metrics are exported: grps's process-global `app_monitor` unless a test
    gives its own.
    """

    def __init__(
        self,
        model_labels: Mapping[str, tuple[str, str]],
        *,
        gpu: bool = True,
        clock: Callable[[], float] = time.time,
        monitor: AppMonitor = app_monitor,
    ) -> None:
        self._clock = clock
        self._created = clock()
        self.registry = CollectorRegistry()
        self._models = _ModelChildren(Families(self.registry), model_labels)
        ProcessCollector(namespace="grps", registry=self.registry)
        Gauge(
            "grps_open_connections",
            "Open sockets of this process (listeners included).",
            registry=self.registry,
        ).set_function(open_connections)
        self._tasks = Gauge(
            "grps_asyncio_tasks",
            "asyncio tasks alive on the server's event loop (sampled once a second).",
            registry=self.registry,
        )
        self.registry.register(UserMetricsCollector(monitor))
        self._process = ProcessSampler(clock)
        self._nvml = Nvml(enabled=gpu)
        self._gpu_gauges = self._gpu_families() if self._nvml.devices else None
        self._overall = Scope()
        self._scopes = {key: Scope() for key in model_labels}
        self._current_s = -1  # the second of the buckets in _current
        self._current: dict[str, tuple[Bucket, Bucket | None]] = {}
        self._current_generation: dict[str, tuple[GenerationBucket, GenerationBucket | None]] = {}
        self._generating: set[str] = set()  # model keys that reported generating: sampled each second
        process_names = [CPU, MEM]
        for index in self._nvml.devices:
            process_names.extend(gpu_names(index))
        self._process_series = process_series(process_names)
        self._triton: Statistics | None = None  # Triton's counters, once the executor exports them

    def _gpu_families(self) -> tuple[Gauge, Gauge, Gauge]:
        return (
            Gauge(
                "grps_gpu_utilization_ratio", "GPU busy ratio (NVML).", ("device",), registry=self.registry
            ),
            Gauge("grps_gpu_memory_used_bytes", "GPU memory in use.", ("device",), registry=self.registry),
            Gauge("grps_gpu_memory_total_bytes", "GPU memory in all.", ("device",), registry=self.registry),
        )

    def _buckets(self, key: str) -> tuple[Bucket, Bucket | None]:
        """The current 1 s buckets of the whole server and of the model (None: not a known model).

        Looked up once per model and second: requests and batches report twice per request."""
        now_s = int(self._clock())
        if now_s != self._current_s:
            self._current_s = now_s
            self._current.clear()
            self._current_generation.clear()
        pair = self._current.get(key)
        if pair is None:
            scope = self._scopes.get(key)
            pair = self._overall.bucket(now_s), None if scope is None else scope.bucket(now_s)
            self._current[key] = pair
        return pair

    # -- SchedulerObserver ---------------------------------------------------------------------
    def queued(self, model: str, depth: int) -> None:
        self._models[model].depth = depth

    def dropped(self, model: str, reason: str, depth: int) -> None:
        children = self._models[model]
        children.rejection(reason).inc()
        children.depth = depth

    def batch_ran(self, model: str, rows: int, queue_s: list[float], compute_s: float, depth: int) -> None:
        children = self._models[model]
        children.batch.observe(rows)
        children.compute.observe(compute_s)
        observe = children.queue.observe
        waited_s = 0.0
        for wait in queue_s:
            observe(wait)
            waited_s += wait
        children.depth = depth
        waits = len(queue_s)
        overall, scope = self._buckets(model)
        overall.add_batch(rows, waits, waited_s)
        if scope is not None:
            scope.add_batch(rows, waits, waited_s)

    # -- SchedulerObserver: generative models, per token -----------------------------------------
    def first_token(self, model: str, seconds: float) -> None:
        self._models[model].generating().first_token.observe(seconds)
        index = latency_index(seconds)
        overall, scope = self._generation_buckets(model)
        overall.first_token.add(seconds, index)
        if scope is not None:
            scope.first_token.add(seconds, index)

    def token_gap(self, model: str, seconds: float) -> None:
        self._models[model].generating().inter_token.observe(seconds)
        index = latency_index(seconds)
        overall, scope = self._generation_buckets(model)
        overall.inter_token.add(seconds, index)
        if scope is not None:
            scope.inter_token.add(seconds, index)

    def tokens_generated(self, model: str, count: int) -> None:
        self._models[model].generating().tokens.inc(count)
        overall, scope = self._generation_buckets(model)
        overall.tokens += count
        if scope is not None:
            scope.tokens += count

    def sequences(self, model: str, running: int, waiting: int) -> None:
        """Only kept: the gauges read the counts when scraped, `sample()` adds them to the series."""
        children = self._models[model].generating()
        children.running, children.waiting = running, waiting
        if model not in self._generating and model in self._scopes:
            self._generating.add(model)

    def _generation_buckets(self, key: str) -> tuple[GenerationBucket, GenerationBucket | None]:
        """The current second's generation buckets of the whole server and of the model (None: not a
        known model); looked up once per model and second, as `_buckets`."""
        if int(self._clock()) == self._current_s:
            pair = self._current_generation.get(key)
            if pair is not None:
                return pair
        overall, scope = self._buckets(key)  # a new second clears the cache
        pair = overall.generating(), None if scope is None else scope.generating()
        self._current_generation[key] = pair
        if scope is not None:
            self._generating.add(key)
        return pair

    # -- RequestObserver -----------------------------------------------------------------------
    def request_started(self, protocol: str, model: str) -> None:
        self._models[model].inflight += 1

    def request_finished(self, record: RequestRecord) -> None:
        if not record.inference:
            return
        children = self._models[record.model]
        children.inflight -= 1
        by_protocol = children.protocols[record.protocol]
        reason = record.reason
        if reason is None:
            by_protocol.success.inc()
        else:
            by_protocol.failure(reason).inc()
        duration_s = record.duration_s
        by_protocol.duration.observe(duration_s)
        failed, index = reason is not None, latency_index(duration_s)
        overall, scope = self._buckets(record.model)
        overall.add_request(duration_s, failed, index)
        if scope is not None:
            scope.add_request(duration_s, failed, index)

    def stream_message(self, protocol: str, model: str, first_after_s: float | None) -> None:
        by_protocol = self._models[model].protocols[protocol]
        by_protocol.streamed.inc()
        if first_after_s is not None:
            by_protocol.first_message.observe(first_after_s)

    def instance_hung(self, model: str, index: int, running_s: float) -> None:
        children = self._models[model]
        children.hung += 1
        children.hangs.inc()

    def instance_recovered(self, model: str, index: int, running_s: float) -> None:
        self._models[model].hung -= 1

    def models_changed(self, labels: Mapping[str, tuple[str, str]]) -> None:
        """Export the series and keep the dashboard scopes of exactly these keys: a new key gets
        them from zero, a kept key goes on, a dropped key's samples leave the exposition and its scope
        goes (a late report for it is still counted, unexported)."""
        self._models.change(labels)
        for key in [key for key in self._scopes if key not in labels]:
            del self._scopes[key]
        for key in labels:
            if key not in self._scopes:
                self._scopes[key] = Scope()
        self._generating &= set(labels)
        self._current.clear()  # cached buckets may belong to a scope that went
        self._current_generation.clear()

    def export_statistics(self, statistics: Statistics) -> None:
        self._triton = statistics

    def gpu_oom(self, model: str) -> None:
        self._models[model].gpu_oom.inc()
        overall, scope = self._buckets(model)
        overall.ooms += 1
        if scope is not None:
            scope.ooms += 1

    # -- sampling ------------------------------------------------------------------------------
    def sample(self) -> None:
        """Close the buckets of past seconds, then record process and GPU usage into the current one."""
        now_s = int(self._clock())
        for scope in self._scopes.values():
            scope.advance(now_s)
        bucket = self._overall.bucket(now_s)
        cpu, mem = self._process.sample()
        if cpu is not None:
            bucket.add_sample(CPU, cpu)
        if mem is not None:
            bucket.add_sample(MEM, mem)
        if self._gpu_gauges is not None:
            self._sample_gpus(bucket, self._gpu_gauges)
        if self._generating:
            self._sample_sequences(bucket, now_s)
        with suppress(RuntimeError):  # no running loop: sampled from a test, not the server
            self._tasks.set(len(asyncio.all_tasks()))

    def _sample_sequences(self, overall: Bucket, now_s: int) -> None:
        """Each generative model's running and waiting sequences now, and their sums for the server."""
        running = waiting = 0
        for key in self._generating:
            scope, children = self._scopes.get(key), self._models.get(key)
            generation = None if children is None else children.generation
            if scope is None or generation is None:
                continue  # reloaded since: sampled again once it reports
            scope.bucket(now_s).generating().add_sequences(generation.running, generation.waiting)
            running += generation.running
            waiting += generation.waiting
        overall.generating().add_sequences(running, waiting)

    def _sample_gpus(self, bucket: Bucket, gauges: tuple[Gauge, Gauge, Gauge]) -> None:
        """Set the GPU gauges and add the dashboard's samples; a device that did not answer loses its
        series rather than keep showing a stale value."""
        silent = set(self._nvml.devices)
        for gpu in self._nvml.sample():
            silent.discard(gpu.index)
            device = str(gpu.index)
            utilization, used, total = gauges
            utilization.labels(device).set(gpu.utilization_ratio)
            used.labels(device).set(gpu.memory_used_bytes)
            total.labels(device).set(gpu.memory_total_bytes)
            usage_name, memory_name = gpu_names(gpu.index)
            bucket.add_sample(usage_name, gpu.utilization_ratio * 100)
            bucket.add_sample(memory_name, gpu.memory_used_bytes / _MIB)
        for index in silent:
            for gauge in gauges:
                with suppress(KeyError):
                    gauge.remove(str(index))

    def close(self) -> None:
        """Release NVML (the registry needs nothing)."""
        self._nvml.close()

    # -- reading -------------------------------------------------------------------------------
    def exposition(self) -> tuple[bytes, str]:
        """The Prometheus text format body and its Content-Type."""
        body = generate_latest(self.registry)
        if self._triton is not None:
            body += triton_exposition(self._triton.entries())
        return body, CONTENT_TYPE_LATEST

    def models(self) -> list[str]:
        return list(self._scopes)

    def series_names(self) -> list[str]:
        return [*REQUEST_SERIES, *GENERATION_SERIES, *self._process_series]

    def series(self, name: str, model: str = "", window: str = "minute") -> dict[str, Any]:
        """One series over a window, JSON-able. Process and GPU series are server-wide: asked for a
        model, they answer the whole server's points with "model": "". KeyError for an unknown name
        or model, ValueError for an unknown window."""
        value = _MODEL_SERIES.get(name) or self._process_series.get(name)
        if value is None:
            raise KeyError(f"unknown series {name!r}; series: {', '.join(self.series_names())}")
        scope = self._scope(model)
        if name in self._process_series:
            scope, model = self._overall, ""
        spec = WINDOW_BY_NAME.get(window)
        if spec is None:
            raise ValueError(f"unknown window {window!r}; windows: {', '.join(WINDOW_BY_NAME)}")
        now = self._clock()
        scope.advance(int(now))
        points = render(scope, name, value, spec, now, self._created)
        return {"name": name, "model": model, "window": window, "step_s": spec.step_s, "points": points}

    def snapshot(self) -> dict[str, Any]:
        """The last complete second under grps's names (`*qps`, `*latency_avg(ms)`, ...), for the
        whole server (with process and GPU usage) and per model; None where there was no data."""
        now = self._clock()
        overall = self._latest(self._overall, {**_MODEL_SERIES, **self._process_series}, now)
        models = {key: self._latest(scope, _MODEL_SERIES, now) for key, scope in self._scopes.items()}
        return {"overall": overall, "models": models}

    def _scope(self, model: str) -> Scope:
        if not model:
            return self._overall
        scope = self._scopes.get(model)
        if scope is None:
            raise KeyError(f"unknown model {model!r}; models: {', '.join(self._scopes)}")
        return scope

    def _latest(self, scope: Scope, names: Mapping[str, ValueOf], now: float) -> dict[str, Any]:
        scope.advance(int(now))
        return {"*" + name: latest(scope, name, value, now, self._created) for name, value in names.items()}

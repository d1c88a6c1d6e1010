"""The Prometheus metric families of one server, and per-model caches of their labelled children.

`labels(...)` hashes and validates its arguments on every call; a request instead finds its children
with two dict lookups (model key, then protocol), so the hot path never formats or validates labels.
The two gauges every request moves (in flight, queue depth) are plain integers, read when scraped.

Triton's per-model counters (`metrics.triton_names`) are written as Triton writes them, from the
executor's statistics when scraped (`triton_exposition`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge

from grps_py.core import telemetry
from grps_py.core.statistics import InferenceStats
from grps_py.metrics.fast_counter import CounterFamily, FastCounter
from grps_py.metrics.fast_histogram import HistogramFamily
from grps_py.metrics.generation import GenerationFamilies, GenerationMetrics

# Seconds, 0.5 ms .. 60 s: covers a fast ONNX model and a slow generation alike.
DURATION_BUCKETS = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
)
BATCH_BUCKETS = tuple(float(2**i) for i in range(11))  # 1 .. 1024 rows
SUCCESS, FAILURE = "success", "failure"
UNKNOWN_LABELS = ("unknown", "")
_REASONS = frozenset(telemetry.REASONS)


class Families:
    """Every grps_* family that is labelled by model, registered on the server's own registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        mv, mvp = ("model", "version"), ("model", "version", "protocol")
        self.requests = CounterFamily(  # counted per request: no lock, no checks (fast_counter.py)
            "grps_requests",
            "Inference requests answered, by outcome and failure reason.",
            (*mvp, "outcome", "reason"),
            registry,
        )
        self.duration = HistogramFamily(
            "grps_request_duration_seconds",
            "Inference request latency, arrival to answer.",
            mvp,
            DURATION_BUCKETS,
            registry,
        )
        self.queue = HistogramFamily(
            "grps_queue_duration_seconds",
            "Time a request waited in its model's queue before its batch ran.",
            mv,
            DURATION_BUCKETS,
            registry,
        )
        self.compute = HistogramFamily(
            "grps_compute_duration_seconds",
            "Compute time of one batch (or one unbatched request).",
            mv,
            DURATION_BUCKETS,
            registry,
        )
        self.batch = HistogramFamily("grps_batch_size", "Rows per batch run.", mv, BATCH_BUCKETS, registry)
        self.inflight = Gauge(
            "grps_inflight_requests", "Inference requests being served.", mv, registry=registry
        )
        self.depth = Gauge(
            "grps_queue_depth", "Requests waiting in the model's queue.", mv, registry=registry
        )
        self.rejections = Counter(
            "grps_queue_rejections",
            "Requests that left a queue without running (queue_full, timeout, cancelled).",
            (*mv, "reason"),
            registry=registry,
        )
        self.streamed = Counter(
            "grps_streamed_messages", "Streamed response messages sent.", mvp, registry=registry
        )
        self.first_message = HistogramFamily(
            "grps_time_to_first_message_seconds",
            "Time from a streaming request's start to its first message.",
            mvp,
            DURATION_BUCKETS,
            registry,
        )
        self.gpu_oom = Counter("grps_gpu_oom", "GPU out-of-memory errors.", mv, registry=registry)
        self.hung = Gauge(
            "grps_hung_instances",
            "Instances still running a request past its deadline (they get no new work until it returns).",
            mv,
            registry=registry,
        )
        self.hangs = Counter(
            "grps_instance_hangs", "Times an instance ran a request past its deadline.", mv, registry=registry
        )
        self.generation = GenerationFamilies(registry)  # generative models' own (generation.py)


class ProtocolMetrics:
    """The children of one (model, protocol): what a request's answer and its stream touch."""

    __slots__ = ("_families", "_labels", "duration", "failures", "first_message", "streamed", "success")

    def __init__(self, families: Families, model: str, version: str, protocol: str) -> None:
        self._families = families
        self._labels = (model, version, protocol)
        self.success = families.requests.labels(model, version, protocol, SUCCESS, "")
        self.failures: dict[str, FastCounter] = {}
        self.duration = families.duration.labels(*self._labels)
        self.streamed = families.streamed.labels(*self._labels)
        self.first_message = families.first_message.labels(*self._labels)

    def failure(self, reason: str) -> FastCounter:
        child = self.failures.get(reason)
        if child is None:
            label = reason if reason in _REASONS else telemetry.INTERNAL  # keep the label set bounded
            child = self.failures[reason] = self._families.requests.labels(*self._labels, FAILURE, label)
        return child

    def move_to(self, families: Families) -> None:
        """Make failure children from now on in `families` (those already made stay as they are)."""
        self._families = families


class _ByProtocol(dict[str, ProtocolMetrics]):
    """A model's children per protocol, made the first time a protocol is seen; a plain subscript after
    that (it runs per request)."""

    def __init__(self, families: Families, labels: tuple[str, str]) -> None:
        super().__init__()
        self._families, self._labels = families, labels

    def __missing__(self, protocol: str) -> ProtocolMetrics:
        children = self[protocol] = ProtocolMetrics(self._families, *self._labels, protocol)
        return children

    def move_to(self, families: Families) -> None:
        """Make children from now on in `families` (those already made stay as they are)."""
        self._families = families
        for children in self.values():
            children.move_to(families)


class ModelMetrics:
    """The children of one model key; protocols and reasons are added the first time they are seen."""

    __slots__ = (
        "_families",
        "batch",
        "compute",
        "depth",
        "generation",
        "gpu_oom",
        "hangs",
        "hung",
        "inflight",
        "labels",
        "protocols",
        "queue",
        "rejections",
    )

    def __init__(self, families: Families, labels: tuple[str, str]) -> None:
        self._families = families
        self.labels = labels
        self.queue = families.queue.labels(*labels)
        self.compute = families.compute.labels(*labels)
        self.batch = families.batch.labels(*labels)
        # Requests in flight, waiting in the queue, and instances hung now: grps_inflight_requests,
        # grps_queue_depth and grps_hung_instances read them when scraped, rather than be set per
        # event. Never shown below zero: a late report for a key forgotten since lands on "unknown".
        self.inflight = 0
        self.depth = 0
        self.hung = 0
        families.inflight.labels(*labels).set_function(lambda: max(self.inflight, 0))
        families.depth.labels(*labels).set_function(lambda: max(self.depth, 0))
        families.hung.labels(*labels).set_function(lambda: max(self.hung, 0))
        self.gpu_oom = families.gpu_oom.labels(*labels)
        self.hangs = families.hangs.labels(*labels)
        self.protocols = _ByProtocol(families, labels)
        self.rejections: dict[str, Counter] = {}
        self.generation: GenerationMetrics | None = None  # made at the model's first token report

    def generating(self) -> GenerationMetrics:
        """The generation children, made the first time the model reports generating."""
        children = self.generation
        if children is None:
            children = self.generation = GenerationMetrics(self._families.generation, self.labels)
        return children

    def protocol(self, protocol: str) -> ProtocolMetrics:
        return self.protocols[protocol]

    def rejection(self, reason: str) -> Counter:
        child = self.rejections.get(reason)
        if child is None:
            child = self.rejections[reason] = self._families.rejections.labels(*self.labels, reason)
        return child

    def detach(self, *, unexport: bool = True) -> None:
        """Stop exporting this key's samples (`unexport`: every family's, each protocol's and reason's;
        False while another key still exports the same labels) and make any child a late report still
        needs on a private registry that is never scraped: the object keeps answering (a request that
        finishes after its model went) without bringing its series back."""
        families, labels = self._families, self.labels
        if unexport:
            for family in (
                families.requests,
                families.duration,
                families.first_message,
                families.queue,
                families.compute,
                families.batch,
            ):
                family.remove(*labels)  # every child under these leading labels
            for gauge in (families.inflight, families.depth, families.hung):
                gauge.remove(*labels)
            for counter in (families.gpu_oom, families.hangs):
                counter.remove(*labels)
            for protocol in self.protocols:
                families.streamed.remove(*labels, protocol)
            for reason in self.rejections:
                families.rejections.remove(*labels, reason)
            families.generation.remove(labels)
        unexported = Families(CollectorRegistry())
        self._families = unexported
        self.protocols.move_to(unexported)


# Triton's per-model counters: name, Triton's help text, the value (read from the statistics that
# `GET /v2/models/stats` answers, so both always agree). Durations in microseconds; Triton adds only
# successful requests' durations.
TRITON_COUNTERS: tuple[tuple[str, str, Callable[[InferenceStats], int]], ...] = (
    (
        "nv_inference_request_success",
        "Number of successful inference requests, all batch sizes",
        lambda s: s.success_count,
    ),
    (
        "nv_inference_request_failure",
        "Number of failed inference requests, all batch sizes",
        lambda s: s.fail_count,
    ),
    (
        "nv_inference_count",
        "Number of inferences performed (does not include cached requests)",
        lambda s: s.inference_count,
    ),
    (
        "nv_inference_exec_count",
        "Number of model executions performed (does not include cached requests)",
        lambda s: s.execution_count,
    ),
    (
        "nv_inference_request_duration_us",
        "Cumulative inference request duration in microseconds (includes cached requests)",
        lambda s: s.success_ns // 1000,
    ),
    (
        "nv_inference_queue_duration_us",
        "Cumulative inference queuing duration in microseconds (includes cached requests)",
        lambda s: s.queue_ns // 1000,
    ),
    (
        "nv_inference_compute_input_duration_us",
        "Cumulative compute input duration in microseconds (does not include cached requests)",
        lambda s: s.input_ns // 1000,
    ),
    (
        "nv_inference_compute_infer_duration_us",
        "Cumulative compute inference duration in microseconds (does not include cached requests)",
        lambda s: s.infer_ns // 1000,
    ),
    (
        "nv_inference_compute_output_duration_us",
        "Cumulative inference compute output duration in microseconds (does not include cached requests)",
        lambda s: s.output_ns // 1000,
    ),
)


def triton_exposition(entries: Iterable[InferenceStats]) -> bytes:
    """Triton's counters in the Prometheus text format, as Triton writes them: typed `counter` under
    their own names. prometheus_client would name a counter's sample `<name>_total`, which Triton's
    dashboards and autoscaling rules do not query, so these lines are written here."""
    stats = list(entries)
    labels = [f'{{model="{_label(s.name)}",version="{_label(s.version)}"}}' for s in stats]
    lines: list[str] = []
    for name, help_text, value_of in TRITON_COUNTERS:
        lines.append(f"# HELP {name} {help_text}\n# TYPE {name} counter\n")
        lines.extend(f"{name}{label} {value_of(s)}\n" for s, label in zip(stats, labels, strict=True))
    return "".join(lines).encode()


def _label(value: str) -> str:
    """A label value escaped as the text format requires."""
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')

"""What the schedulers report: queue depth, queue and compute time, batch sizes, rejections, and
instances that hang (still running a request past its deadline) and recover; and, once, the executor's
statistics for an exporter that reads them when scraped (`metrics.triton_names`).

One small interface (`SchedulerObserver`) that the metrics work exports; `ModelStats` is the
in-memory implementation the executor builds by default (per executor, never global), which tests
and benchmarks read.
"""

from __future__ import annotations

from array import array
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from grps_py.core.statistics import Statistics

# Why a request left a queue without running.
QUEUE_FULL = "queue_full"
TIMEOUT = "timeout"
CANCELLED = "cancelled"
_RECENT = 4096  # how many recent batches ModelStats keeps per model


class SchedulerObserver(Protocol):
    def queued(self, model: str, depth: int) -> None:
        """A request joined the model's queue; `depth` counts it."""

    def dropped(self, model: str, reason: str, depth: int) -> None:
        """A request left the queue without running: QUEUE_FULL, TIMEOUT or CANCELLED."""

    def batch_ran(self, model: str, rows: int, queue_s: list[float], compute_s: float, depth: int) -> None:
        """A batch (or a single request) ran: its rows, each request's wait, the compute time."""

    def gpu_oom(self, model: str) -> None:
        """A request failed because the model ran out of GPU memory."""

    def instance_hung(self, model: str, index: int, running_s: float) -> None:
        """Instance `index` has run one batch for `running_s`, past a request's deadline: it gets no
        new work until that batch returns."""

    def instance_recovered(self, model: str, index: int, running_s: float) -> None:
        """A hung instance's batch returned after `running_s` in all; it takes work again."""

    def export_statistics(self, statistics: Statistics) -> None:
        """The executor's per-model statistics (Triton's statistics extension), given once when it is
        built with `metrics.triton_names` on: an exporter reads them when scraped (nothing per request)."""

    def models_changed(self, labels: Mapping[str, tuple[str, str]]) -> None:
        """The model keys served now (and those still finishing requests), each with its (model,
        version) labels: export these; stop exporting any other."""

    # A generative model's continuous batcher (grps_py/generation) reports per token.
    def first_token(self, model: str, seconds: float) -> None:
        """A sequence's first token came, `seconds` after its request reached the model."""

    def token_gap(self, model: str, seconds: float) -> None:
        """A sequence's next token came, `seconds` after its previous one (inter-token latency)."""

    def tokens_generated(self, model: str, count: int) -> None:
        """One model step produced `count` tokens (one per sequence in it)."""

    def sequences(self, model: str, running: int, waiting: int) -> None:
        """The model's sequences now: generating, and waiting for a slot (in the model's queue or its
        batcher's)."""


class Recent:
    """The last `size` values of a series, in an array allocated up front: it takes the same memory
    from the first value on (a deque of floats grows until it is full, which a soak reads as a leak)."""

    __slots__ = ("_count", "_next", "_size", "_values")

    def __init__(self, size: int, typecode: str = "d") -> None:
        self._values: array[Any] = array(typecode, bytes(array(typecode).itemsize * size))
        self._size = size
        self._next = 0
        self._count = 0

    def append(self, value: float) -> None:
        self._values[self._next] = value
        self._next = (self._next + 1) % self._size
        if self._count < self._size:
            self._count += 1

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[float]:
        """Oldest first."""
        values, size = self._values, len(self._values)
        start = (self._next - self._count) % size
        return (values[(start + i) % size] for i in range(self._count))


@dataclass
class ModelCounters:
    depth: int = 0
    queued: int = 0
    batches_run: int = 0  # totals since start: batches (a lone request is a batch of its rows)
    rows_run: int = 0
    dropped: Counter[str] = field(default_factory=Counter)
    gpu_ooms: int = 0
    hung_instances: int = 0  # now
    hangs: int = 0  # since start
    tokens: int = 0  # generated, since start (generative models)
    running: int = 0  # sequences generating now
    # Rows per recent batch (queue and compute times are in the metrics' histograms, not kept here).
    batches: Recent = field(default_factory=lambda: Recent(_RECENT, "q"))


class _CountersByModel(dict[str, "ModelCounters"]):
    """Each model's counters, made the first time the model is seen; a plain subscript after that (the
    schedulers report twice per request)."""

    def __missing__(self, model: str) -> ModelCounters:
        return self.setdefault(model, ModelCounters())  # atomic: a reader's thread may be first


class ModelStats:
    """Counts and recent samples per model, cheap enough to keep on by default.

    The schedulers call it from the event loop thread only, so it takes no lock; other threads may
    read it (a value read while one is being added may be the previous one)."""

    def __init__(self) -> None:
        self._models = _CountersByModel()

    def model(self, model: str) -> ModelCounters:
        return self._models[model]

    def queued(self, model: str, depth: int) -> None:
        counters = self._models[model]
        counters.queued += 1
        counters.depth = depth

    def dropped(self, model: str, reason: str, depth: int) -> None:
        counters = self._models[model]
        counters.dropped[reason] += 1
        counters.depth = depth

    def batch_ran(self, model: str, rows: int, queue_s: list[float], compute_s: float, depth: int) -> None:
        counters = self._models[model]
        counters.batches_run += 1
        counters.rows_run += rows
        counters.batches.append(rows)
        counters.depth = depth

    def gpu_oom(self, model: str) -> None:
        self.model(model).gpu_ooms += 1

    def instance_hung(self, model: str, index: int, running_s: float) -> None:
        counters = self.model(model)
        counters.hung_instances += 1
        counters.hangs += 1

    def instance_recovered(self, model: str, index: int, running_s: float) -> None:
        self.model(model).hung_instances -= 1

    def export_statistics(self, statistics: Statistics) -> None:
        pass  # the executor's own: it holds them already

    def first_token(self, model: str, seconds: float) -> None:
        pass  # latencies live in the metrics' histograms

    def token_gap(self, model: str, seconds: float) -> None:
        pass

    def tokens_generated(self, model: str, count: int) -> None:
        self._models[model].tokens += count

    def sequences(self, model: str, running: int, waiting: int) -> None:
        self._models[model].running = running

    def models_changed(self, labels: Mapping[str, tuple[str, str]]) -> None:
        """Forget the counters of every key not in `labels` (a late report for one starts it again)."""
        for model in [model for model in self._models if model not in labels]:
            self._models.pop(model, None)


class FanOut:
    """Reports to several observers (the executor's own ModelStats and, say, a metrics exporter)."""

    def __init__(self, observers: list[SchedulerObserver]) -> None:
        self._observers = observers

    def queued(self, model: str, depth: int) -> None:
        for observer in self._observers:
            observer.queued(model, depth)

    def dropped(self, model: str, reason: str, depth: int) -> None:
        for observer in self._observers:
            observer.dropped(model, reason, depth)

    def batch_ran(self, model: str, rows: int, queue_s: list[float], compute_s: float, depth: int) -> None:
        for observer in self._observers:
            observer.batch_ran(model, rows, queue_s, compute_s, depth)

    def gpu_oom(self, model: str) -> None:
        for observer in self._observers:
            observer.gpu_oom(model)

    def instance_hung(self, model: str, index: int, running_s: float) -> None:
        for observer in self._observers:
            observer.instance_hung(model, index, running_s)

    def instance_recovered(self, model: str, index: int, running_s: float) -> None:
        for observer in self._observers:
            observer.instance_recovered(model, index, running_s)

    def export_statistics(self, statistics: Statistics) -> None:
        for observer in self._observers:
            observer.export_statistics(statistics)

    def models_changed(self, labels: Mapping[str, tuple[str, str]]) -> None:
        for observer in self._observers:
            observer.models_changed(labels)

    def first_token(self, model: str, seconds: float) -> None:
        for observer in self._observers:
            observer.first_token(model, seconds)

    def token_gap(self, model: str, seconds: float) -> None:
        for observer in self._observers:
            observer.token_gap(model, seconds)

    def tokens_generated(self, model: str, count: int) -> None:
        for observer in self._observers:
            observer.tokens_generated(model, count)

    def sequences(self, model: str, running: int, waiting: int) -> None:
        for observer in self._observers:
            observer.sequences(model, running, waiting)


def summary(counters: ModelCounters) -> dict[str, Any]:
    """The counters as plain values (for metadata answers): totals, drops, recent batch sizes."""
    recent = sorted(counters.batches)
    return {
        "queue_depth": counters.depth,
        "requests_queued": counters.queued,
        "batches_run": counters.batches_run,
        "rows_run": counters.rows_run,
        "dropped": dict(counters.dropped),
        "gpu_ooms": counters.gpu_ooms,
        "hung_instances": counters.hung_instances,
        "hangs": counters.hangs,
        "tokens_generated": counters.tokens,
        "sequences_running": counters.running,
        "recent_batch_rows": {
            "count": len(recent),
            "mean": round(sum(recent) / len(recent), 2) if recent else 0,
            "median": recent[len(recent) // 2] if recent else 0,
            "max": recent[-1] if recent else 0,
        },
    }

"""What the schedulers report: queue depth, queue and compute time, batch sizes, rejections.

One small interface (`SchedulerObserver`) that the metrics work exports; `ModelStats` is the
in-memory implementation the executor builds by default (per executor, never global), which tests
and benchmarks read.
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Protocol

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


@dataclass
class ModelCounters:
    depth: int = 0
    queued: int = 0
    dropped: Counter[str] = field(default_factory=Counter)
    batches: deque[int] = field(default_factory=lambda: deque(maxlen=_RECENT))  # rows per batch
    queue_s: deque[float] = field(default_factory=lambda: deque(maxlen=_RECENT))
    compute_s: deque[float] = field(default_factory=lambda: deque(maxlen=_RECENT))


class ModelStats:
    """Counts and recent samples per model, cheap enough to keep on by default.

    The schedulers call it from the event loop thread only, so it takes no lock; other threads may
    read it (deque appends and int updates are atomic in CPython)."""

    def __init__(self) -> None:
        self._models: dict[str, ModelCounters] = {}

    def model(self, model: str) -> ModelCounters:
        counters = self._models.get(model)
        if counters is None:
            counters = self._models.setdefault(model, ModelCounters())
        return counters

    def queued(self, model: str, depth: int) -> None:
        counters = self.model(model)
        counters.queued += 1
        counters.depth = depth

    def dropped(self, model: str, reason: str, depth: int) -> None:
        counters = self.model(model)
        counters.dropped[reason] += 1
        counters.depth = depth

    def batch_ran(self, model: str, rows: int, queue_s: list[float], compute_s: float, depth: int) -> None:
        counters = self.model(model)
        counters.batches.append(rows)
        counters.queue_s.extend(queue_s)
        counters.compute_s.append(compute_s)
        counters.depth = depth

"""User metrics: grps's `app_monitor` API (inc/avg/max/min/cdf), aggregated in process.

Model code records values from its worker threads; an exporter (Prometheus, a dashboard) reads
`app_monitor.snapshot()`. Each record is a short critical section on the metric's own lock, so
threads recording different metrics never wait for each other.

`app_monitor` is process-global, as in grps, because model modules import it at module level.
grps-py's own statistics (each server's `ModelStats`, the metrics registry) are injected per server
instead; this module holds only what user code records.
"""

from __future__ import annotations

import logging
import math
import numbers
import threading
from typing import Any

log = logging.getLogger("grps_py.monitor")  # the name log configuration and filters know it by

# The percentiles a cdf metric reports (grps dumps 80, 90, 99, 99.9 and 99.99).
PERCENTILES = (50.0, 80.0, 90.0, 99.0, 99.9, 99.99)
# A cdf metric's percentiles are over its most recent values, at most this many.
CDF_WINDOW = 4096


class _Metric:
    """One named aggregate. All fields change under `lock`; `samples` is a ring buffer (cdf only)."""

    __slots__ = ("count", "high", "kind", "lock", "low", "next", "samples", "total", "window")

    def __init__(self, kind: str, window: int) -> None:
        self.kind = kind
        self.lock = threading.Lock()
        self.count = 0
        self.total = 0.0
        self.low = math.inf
        self.high = -math.inf
        self.window = window
        self.samples: list[float] | None = [] if kind == "cdf" else None
        self.next = 0  # where the next sample overwrites once the ring is full

    def add(self, value: float) -> None:
        with self.lock:
            self.count += 1
            self.total += value
            if value < self.low:
                self.low = value
            if value > self.high:
                self.high = value
            samples = self.samples
            if samples is None:
                return
            if len(samples) < self.window:
                samples.append(value)
            else:
                samples[self.next] = value
                self.next = (self.next + 1) % self.window

    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            count, total, low, high = self.count, self.total, self.low, self.high
            samples = None if self.samples is None else list(self.samples)
        entry: dict[str, Any] = {"kind": self.kind, "count": count, "sum": total, "min": low, "max": high}
        if samples is None:
            entry["value"] = _headline(self.kind, count, total, low, high)
        else:
            entry["window"] = len(samples)
            entry["percentiles"] = percentiles(samples)
        return entry


def _headline(kind: str, count: int, total: float, low: float, high: float) -> float:
    """The value a dashboard shows for the metric: the total, the mean, the largest or the smallest."""
    if kind == "inc":
        return total
    if kind == "avg":
        return total / count if count else 0.0
    return high if kind == "max" else low


def percentiles(values: list[float], points: tuple[float, ...] = PERCENTILES) -> dict[str, float]:
    """Nearest-rank percentiles, keyed `p50`, `p99.9`, ...; empty when there are no values."""
    if not values:
        return {}
    ordered = sorted(values)
    n = len(ordered)
    out: dict[str, float] = {}
    for p in points:
        rank = min(n, max(1, math.ceil(p / 100 * n)))
        out[f"p{p:g}"] = ordered[rank - 1]
    return out


def _number(name: object, value: object) -> float:
    if not isinstance(name, str) or not name:
        raise ValueError(f"metric name must be a non-empty string, got {name!r}")
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"metric '{name}': value must be an int or a float, got {value!r}")
    return float(value)


class AppMonitor:
    """Named metrics, each with one aggregation kind, fixed by its first record (as in grps)."""

    def __init__(self, cdf_window: int = CDF_WINDOW) -> None:
        if cdf_window < 1:
            raise ValueError("cdf_window must be at least 1")
        self._cdf_window = cdf_window
        self._metrics: dict[str, _Metric] = {}
        self._lock = threading.Lock()  # guards adding names only; records use each metric's lock
        self._mismatches: set[tuple[str, str]] = set()

    def inc(self, name: str, value: float = 1) -> None:
        """Add `value` to a running total (requests, errors, tokens)."""
        self._record(name, "inc", value)

    def avg(self, name: str, value: float) -> None:
        """Record a value whose mean is reported (a latency, a batch size)."""
        self._record(name, "avg", value)

    def max(self, name: str, value: float) -> None:
        """Record a value whose maximum is reported."""
        self._record(name, "max", value)

    def min(self, name: str, value: float) -> None:
        """Record a value whose minimum is reported."""
        self._record(name, "min", value)

    def cdf(self, name: str, value: float) -> None:
        """Record a value whose distribution (percentiles of recent values) is reported."""
        self._record(name, "cdf", value)

    def snapshot(self) -> dict[str, dict[str, Any]]:
        """Every metric as a plain dict: kind, count, sum, min, max and `value` or `percentiles`."""
        with self._lock:
            metrics = list(self._metrics.items())
        return {name: metric.snapshot() for name, metric in sorted(metrics)}

    def clear(self) -> None:
        """Forget every metric (for tests and restarts)."""
        with self._lock:
            self._metrics.clear()
            self._mismatches.clear()

    def _record(self, name: str, kind: str, value: float) -> None:
        number = _number(name, value)
        metric = self._metrics.get(name)
        if metric is None:
            with self._lock:
                metric = self._metrics.get(name)
                if metric is None:
                    metric = self._metrics[name] = _Metric(kind, self._cdf_window)
        if metric.kind != kind:
            self._mismatch(name, kind, metric.kind)
            return
        metric.add(number)

    def _mismatch(self, name: str, kind: str, first: str) -> None:
        """grps drops a record whose kind differs from the metric's; say so once per name and kind."""
        with self._lock:
            if (name, kind) in self._mismatches:
                return
            self._mismatches.add((name, kind))
        log.error("metric '%s' is a %s metric; %s records for it are dropped", name, first, kind)


app_monitor = AppMonitor()

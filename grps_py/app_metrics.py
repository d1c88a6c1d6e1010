"""User metrics: grps's `app_monitor` API (inc/avg/max/min/cdf), aggregated in process.

Model code records values from its worker threads. Each metric is kept two ways:

- cumulative, since the start (`snapshot()`), for Prometheus (`metrics/user.py`);
- per second, as grps's monitor shows them (`series()`, `latest()`), for the dashboard and
  `/grps/v1/monitor/series`: inc is the sum of each second (over coarser buckets, the mean per
  second), avg the mean, max and min the extreme, cdf the percentiles of each second's values. Seconds
  roll up into the same minute, hour, day and month windows as the server's series (`time_windows`).

Each record is a short critical section on the metric's own lock, so threads recording different
metrics never wait for each other.

`app_monitor` is process-global, as in grps, because model modules import it at module level.
grps-py's own statistics (each server's `ModelStats`, the metrics registry) are injected per server
instead; this module holds only what user code records.
"""

from __future__ import annotations

import logging
import math
import numbers
import random
import threading
import time
from collections.abc import Callable
from typing import Any

from grps_py.time_windows import WINDOW_BY_NAME, Scope

log = logging.getLogger("grps_py.monitor")  # the name log configuration and filters know it by

# The percentiles a cdf metric reports (grps dumps 80, 90, 99, 99.9 and 99.99).
PERCENTILES = (50.0, 80.0, 90.0, 99.0, 99.9, 99.99)
# A cdf metric's percentiles are over its most recent values, at most this many.
CDF_WINDOW = 4096
# A cdf metric keeps at most this many values of each time bucket (a uniform sample of them past it).
BUCKET_SAMPLES = 512
KINDS = ("inc", "avg", "max", "min", "cdf")


class TimeBucket:
    """What one metric recorded during one time bucket (1 s, or a coarser one merged from seconds)."""

    __slots__ = ("count", "high", "low", "samples", "start", "total")

    def __init__(self, start: int, cdf: bool) -> None:
        self.start = start
        self.count = 0
        self.total = 0.0
        self.low = math.inf
        self.high = -math.inf
        self.samples: list[float] | None = [] if cdf else None

    def add(self, value: float, rng: random.Random) -> None:
        self.count += 1
        self.total += value
        if value < self.low:
            self.low = value
        if value > self.high:
            self.high = value
        samples = self.samples
        if samples is None:
            return
        if len(samples) < BUCKET_SAMPLES:
            samples.append(value)
        else:  # reservoir sampling: each value so far is kept with the same chance
            slot = rng.randrange(self.count)
            if slot < BUCKET_SAMPLES:
                samples[slot] = value

    def empty(self) -> bool:
        return self.count == 0

    def merge(self, other: TimeBucket) -> None:
        """Fold a finer bucket in; a cdf keeps a sample of both, each in proportion to its count."""
        count = self.count + other.count
        if self.samples is not None and other.samples is not None:
            mine, theirs = self.samples, other.samples
            if len(mine) + len(theirs) > BUCKET_SAMPLES:
                keep = min(len(mine), round(BUCKET_SAMPLES * self.count / count))
                keep_theirs = min(len(theirs), BUCKET_SAMPLES - keep)
                rng = random.Random(self.start)
                mine = rng.sample(mine, keep)
                theirs = rng.sample(theirs, keep_theirs)
            self.samples = mine + theirs
        self.count = count
        self.total += other.total
        self.low = min(self.low, other.low)
        self.high = max(self.high, other.high)


def _per_second(kind: str) -> Callable[[TimeBucket, int], Any]:
    """A bucket's value on the dashboard: grps's aggregation of the metric's kind."""
    if kind == "inc":
        return lambda bucket, step_s: round(bucket.total / step_s, 3)
    if kind == "avg":
        return lambda bucket, step_s: round(bucket.total / bucket.count, 3)
    if kind == "max":
        return lambda bucket, step_s: bucket.high
    if kind == "min":
        return lambda bucket, step_s: bucket.low
    return lambda bucket, step_s: percentiles(bucket.samples or [])


class _Metric:
    """One named aggregate. All fields change under `lock`; `samples` is a ring buffer (cdf only)."""

    __slots__ = (
        "clock",
        "created",
        "kind",
        "lock",
        "next",
        "rng",
        "samples",
        "seconds",
        "totals",
        "window",
    )

    def __init__(self, kind: str, window: int, clock: Callable[[], float]) -> None:
        self.kind = kind
        self.lock = threading.Lock()
        self.totals = TimeBucket(0, cdf=False)  # count, sum, min and max since the start
        self.window = window
        self.samples: list[float] | None = [] if kind == "cdf" else None
        self.next = 0  # where the next sample overwrites once the ring is full
        self.clock = clock
        self.created = clock()
        cdf = kind == "cdf"
        self.seconds: Scope[TimeBucket] = Scope(lambda start: TimeBucket(start, cdf))
        self.rng = random.Random()

    def add(self, value: float) -> None:
        now_s = int(self.clock())
        with self.lock:
            self.seconds.bucket(now_s).add(value, self.rng)
            self.totals.add(value, self.rng)
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
            totals = self.totals
            count, total, low, high = totals.count, totals.total, totals.low, totals.high
            samples = None if self.samples is None else list(self.samples)
        entry: dict[str, Any] = {"kind": self.kind, "count": count, "sum": total, "min": low, "max": high}
        if samples is None:
            entry["value"] = _headline(self.kind, count, total, low, high)
        else:
            entry["window"] = len(samples)
            entry["percentiles"] = percentiles(samples)
        return entry

    def points(self, window_name: str, now: float) -> tuple[int, list[dict[str, Any]]]:
        """(step_s, the window's points) per grps's aggregation of the kind; ValueError for an unknown
        window. An inc metric reads 0 where it recorded nothing (after it was created), others null."""
        window = WINDOW_BY_NAME.get(window_name)
        if window is None:
            raise ValueError(f"unknown window {window_name!r}; windows: {', '.join(WINDOW_BY_NAME)}")
        created, counts = self.created, self.kind == "inc"

        def missing(start: int, step_s: int) -> Any:
            return 0 if counts and start + step_s > created else None

        with self.lock:
            self.seconds.advance(int(now))
            return window.step_s, self.seconds.points(window, now, _per_second(self.kind), missing)


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

    def __init__(self, cdf_window: int = CDF_WINDOW, clock: Callable[[], float] = time.time) -> None:
        if cdf_window < 1:
            raise ValueError("cdf_window must be at least 1")
        self._cdf_window = cdf_window
        self._clock = clock  # epoch seconds: the per-second buckets are the server series' seconds
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

    def kinds(self) -> dict[str, str]:
        """Every metric's name and kind, in name order."""
        with self._lock:
            return {name: metric.kind for name, metric in sorted(self._metrics.items())}

    def series(self, name: str, window: str = "minute") -> dict[str, Any]:
        """One metric per second (or per minute, hour, day) over a window, shaped as the server's series
        (`ServerMetrics.series`) plus its `kind`; KeyError for an unknown name, ValueError for an
        unknown window."""
        metric = self._metrics.get(name)
        if metric is None:
            raise KeyError(f"unknown user metric {name!r}")
        step_s, points = metric.points(window, self._clock())
        return {
            "name": name,
            "model": "",
            "window": window,
            "step_s": step_s,
            "kind": metric.kind,
            "points": points,
        }

    def latest(self) -> dict[str, Any]:
        """Every metric's value for the last complete second (None where it recorded nothing)."""
        with self._lock:
            metrics = sorted(self._metrics.items())
        now = self._clock()
        return {name: metric.points("minute", now)[1][-1]["v"] for name, metric in metrics}

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
                    metric = self._metrics[name] = _Metric(kind, self._cdf_window, self._clock)
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

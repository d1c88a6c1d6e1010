"""Time-bucketed aggregates for the dashboard: the last minute, hour, day and month at a glance.

Like grps's monitor, every scope (the whole server, each model) keeps buckets of 1 s, 1 min, 1 h and
1 d (`grps_py.time_windows`). Only the current 1 s bucket is touched per request; when a second closes
it is merged once into its minute, hour and day buckets, so the hot path stays a few attribute updates
whatever the window. Buckets are aligned on epoch seconds (UTC minutes, hours and days).

Not thread-safe: the observers that feed it and the readers are all called on the event loop thread.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from grps_py.time_windows import WINDOW_BY_NAME, WINDOWS, Ring, Window
from grps_py.time_windows import Scope as _Scope

__all__ = [
    "COUNT_SERIES",
    "CPU",
    "GENERATION_SERIES",
    "MEM",
    "PERCENTILES",
    "REQUEST_SERIES",
    "WINDOWS",
    "WINDOW_BY_NAME",
    "Bucket",
    "GenerationBucket",
    "Latencies",
    "Ring",
    "Scope",
    "ValueOf",
    "Window",
    "gpu_names",
    "index_value",
    "latency_index",
    "latest",
    "process_series",
    "render",
]

# Latency histogram: log-spaced buckets from 10 us with ratio 2**(1/8), so a bucket's geometric middle
# is within 4.5% of any value in it; sparse (index -> count), so only the ranges seen cost memory.
_LAT_MIN_S = 1e-5
_LOG_RATIO = math.log(2) / 8
_INV_LOG_RATIO = 1 / _LOG_RATIO
PERCENTILES = (("p50", 0.50), ("p90", 0.90), ("p99", 0.99))


def latency_index(seconds: float) -> int:
    """The histogram bucket of a latency (everything below 10 us lands in bucket 0)."""
    if seconds <= _LAT_MIN_S:
        return 0
    return int(math.log(seconds / _LAT_MIN_S) * _INV_LOG_RATIO)


def index_value(index: int) -> float:
    """The representative latency of a bucket: its geometric middle, in seconds."""
    return _LAT_MIN_S * math.exp((index + 0.5) * _LOG_RATIO)


def _percentiles(hist: dict[int, int], count: int, peak_s: float) -> dict[str, float] | None:
    """p50/p90/p99 in ms of `count` latencies in `hist` (nearest rank, capped at the true maximum)."""
    if not count:
        return None
    ranks = [(key, max(1, math.ceil(q * count))) for key, q in PERCENTILES]
    out: dict[str, float] = {}
    seen = 0
    for index in sorted(hist):
        seen += hist[index]
        while ranks and ranks[0][1] <= seen:
            key = ranks.pop(0)[0]
            out[key] = _ms(min(index_value(index), peak_s))
        if not ranks:
            break
    return out


class Latencies:
    """Latencies of one bucket, in a sparse log histogram (as a bucket's request latencies)."""

    __slots__ = ("count", "hist", "peak", "total")

    def __init__(self) -> None:
        self.count = 0
        self.total = 0.0
        self.peak = 0.0
        self.hist: dict[int, int] = {}

    def add(self, seconds: float, index: int) -> None:
        """`index`: the value's `latency_index` (worked out once for all the scopes it counts in)."""
        self.count += 1
        self.total += seconds
        if seconds > self.peak:
            self.peak = seconds
        hist = self.hist
        hist[index] = hist.get(index, 0) + 1

    def merge(self, other: Latencies) -> None:
        self.count += other.count
        self.total += other.total
        self.peak = max(self.peak, other.peak)
        for index, count in other.hist.items():
            self.hist[index] = self.hist.get(index, 0) + count

    def percentiles(self) -> dict[str, float] | None:
        return _percentiles(self.hist, self.count, self.peak)


class GenerationBucket:
    """What generative models did during one time bucket of one scope: tokens, time to first token,
    time between tokens, and the running and waiting sequences sampled once a second."""

    __slots__ = ("first_token", "inter_token", "running", "samples", "tokens", "waiting")

    def __init__(self) -> None:
        self.tokens = 0
        self.first_token = Latencies()
        self.inter_token = Latencies()
        self.running = 0  # sums of the samples: their mean is the bucket's value
        self.waiting = 0
        self.samples = 0

    def add_sequences(self, running: int, waiting: int) -> None:
        self.running += running
        self.waiting += waiting
        self.samples += 1

    def merge(self, other: GenerationBucket) -> None:
        self.tokens += other.tokens
        self.first_token.merge(other.first_token)
        self.inter_token.merge(other.inter_token)
        self.running += other.running
        self.waiting += other.waiting
        self.samples += other.samples


class Bucket:
    """What happened during one time bucket of one scope."""

    __slots__ = (
        "batches",
        "failures",
        "generation",
        "lat_hist",
        "lat_max",
        "lat_sum",
        "ooms",
        "queue_n",
        "queue_sum",
        "requests",
        "rows",
        "samples",
        "start",
    )

    def __init__(self, start: int) -> None:
        self.start = start
        self.requests = 0
        self.failures = 0
        self.lat_sum = 0.0
        self.lat_max = 0.0
        self.lat_hist: dict[int, int] = {}
        self.queue_sum = 0.0
        self.queue_n = 0
        self.rows = 0
        self.batches = 0
        self.ooms = 0
        self.samples: dict[str, list[float]] = {}  # process/GPU sample name -> [sum, count]
        self.generation: GenerationBucket | None = None  # made at a generative model's first report

    def generating(self) -> GenerationBucket:
        generation = self.generation
        if generation is None:
            generation = self.generation = GenerationBucket()
        return generation

    def add_request(self, latency_s: float, failed: bool, index: int) -> None:
        """`index`: the latency's `latency_index` (worked out once for all the scopes it counts in)."""
        self.requests += 1
        if failed:
            self.failures += 1
        self.lat_sum += latency_s
        if latency_s > self.lat_max:
            self.lat_max = latency_s
        hist = self.lat_hist
        hist[index] = hist.get(index, 0) + 1

    def add_batch(self, rows: int, waits: int, waited_s: float) -> None:
        """A batch of `rows` whose `waits` requests waited `waited_s` in all."""
        self.rows += rows
        self.batches += 1
        self.queue_sum += waited_s
        self.queue_n += waits

    def add_sample(self, name: str, value: float) -> None:
        entry = self.samples.get(name)
        if entry is None:
            self.samples[name] = [value, 1.0]
        else:
            entry[0] += value
            entry[1] += 1

    def empty(self) -> bool:
        return not (self.requests or self.batches or self.ooms or self.samples or self.generation)

    def merge(self, other: Bucket) -> None:
        """Fold a finer bucket into this coarser one."""
        self.requests += other.requests
        self.failures += other.failures
        self.lat_sum += other.lat_sum
        self.lat_max = max(self.lat_max, other.lat_max)
        for index, count in other.lat_hist.items():
            self.lat_hist[index] = self.lat_hist.get(index, 0) + count
        self.queue_sum += other.queue_sum
        self.queue_n += other.queue_n
        self.rows += other.rows
        self.batches += other.batches
        self.ooms += other.ooms
        for name, (total, n) in other.samples.items():
            entry = self.samples.setdefault(name, [0.0, 0.0])
            entry[0] += total
            entry[1] += n
        if other.generation is not None:
            self.generating().merge(other.generation)

    def percentiles(self) -> dict[str, float] | None:
        """p50/p90/p99 latency in ms from the histogram (nearest rank, capped at the true maximum)."""
        return _percentiles(self.lat_hist, self.requests, self.lat_max)


class Scope(_Scope[Bucket]):
    """The request buckets of the whole server or of one model, at every resolution."""

    def __init__(self) -> None:
        super().__init__(Bucket)


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 3)


def _ratio(numerator: float, denominator: float, scale: float = 1.0) -> float | None:
    return round(numerator / denominator * scale, 3) if denominator else None


ValueOf = Callable[[Bucket, int], Any]  # a bucket and its length in seconds -> the point's value


def _sample(name: str) -> ValueOf:
    def value(bucket: Bucket, step_s: int) -> float | None:
        entry = bucket.samples.get(name)
        return round(entry[0] / entry[1], 3) if entry else None

    return value


# grps's metric names -> the value of one bucket (None: no data). Counts default to 0 for a missing
# bucket the server was up for; every other series is null there.
REQUEST_SERIES: dict[str, ValueOf] = {
    "qps": lambda b, step: round(b.requests / step, 3),
    "fail_rate(%)": lambda b, step: _ratio(b.failures, b.requests, 100),
    "latency_avg(ms)": lambda b, step: _ratio(b.lat_sum, b.requests, 1000),
    "latency_max(ms)": lambda b, step: _ms(b.lat_max) if b.requests else None,
    "latency_cdf(ms)": lambda b, step: b.percentiles(),
    "queue_time_avg(ms)": lambda b, step: _ratio(b.queue_sum, b.queue_n, 1000),
    "batch_size_avg": lambda b, step: _ratio(b.rows, b.batches),
    "gpu_oom_count": lambda b, step: b.ooms,
}
COUNT_SERIES = frozenset({"qps", "gpu_oom_count"})


def _generation(value: Callable[[GenerationBucket, int], Any]) -> ValueOf:
    """A generation series: null in a bucket where no model generated (nor was sampled generating)."""
    return lambda b, step: None if b.generation is None else value(b.generation, step)


# Generative models' series: null where no generative model was seen, so a page can hide them.
GENERATION_SERIES: dict[str, ValueOf] = {
    "tokens_per_s": _generation(lambda g, step: round(g.tokens / step, 3)),
    "ttft_cdf(ms)": _generation(lambda g, step: g.first_token.percentiles()),
    "inter_token_cdf(ms)": _generation(lambda g, step: g.inter_token.percentiles()),
    "running_sequences": _generation(lambda g, step: _ratio(g.running, g.samples)),
    "waiting_sequences": _generation(lambda g, step: _ratio(g.waiting, g.samples)),
}
CPU, MEM = "cpu_usage(%)", "mem_usage(%)"


def gpu_names(index: int) -> tuple[str, str]:
    """The dashboard names of one GPU's utilisation and memory series."""
    return f"gpu{index}_usage(%)", f"gpu{index}_mem_usage(MIB)"


def process_series(names: list[str]) -> dict[str, ValueOf]:
    """Series read from the process/GPU samples averaged over each bucket."""
    return {name: _sample(name) for name in names}


def render(
    scope: Scope, name: str, value: ValueOf, window: Window, now: float, created: float
) -> list[dict[str, Any]]:
    """The window's points, oldest first, ending with the last complete bucket."""
    return scope.points(window, now, value, _missing(name, created))


def latest(scope: Scope, name: str, value: ValueOf, now: float, created: float) -> Any:
    """The value of the last complete 1 s bucket."""
    start = int(now) - 1
    bucket = scope.rings[0].buckets.get(start)
    return _missing(name, created)(start, 1) if bucket is None else value(bucket, 1)


def _missing(name: str, created: float) -> Callable[[int, int], Any]:
    """No bucket: nothing happened then. A count is 0 once the server was up, anything else unknown."""
    count = name in COUNT_SERIES
    return lambda start, step: 0 if count and start + step > created else None

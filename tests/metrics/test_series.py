"""ServerMetrics' dashboard side: per-second buckets rolled up to minutes, hours and days, read as
series under grps's metric names, with a clock the test moves."""

from __future__ import annotations

import itertools
import json
import math
import random
import sys
import types
from collections.abc import Iterator
from typing import Any

import pytest

from grps_py.app_metrics import AppMonitor
from grps_py.core import telemetry
from grps_py.core.telemetry import RequestRecord
from grps_py.metrics import WINDOWS, ServerMetrics

LABELS = {"clf-1.0": ("clf", "1.0"), "clf-2.0": ("clf", "2.0"), "pipe": ("pipe", "1")}
DAY = 1_699_920_000  # a UTC midnight
START = DAY + 0.25  # the server starts a quarter second into that day


class Clock:
    """Epoch seconds that move only when the test says so."""

    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def metrics(clock: Clock) -> Iterator[ServerMetrics]:
    server_metrics = ServerMetrics(LABELS, gpu=False, clock=clock, monitor=AppMonitor())
    yield server_metrics
    server_metrics.close()


def finish(
    metrics: ServerMetrics, model: str = "clf-1.0", duration_s: float = 0.01, failed: bool = False
) -> None:
    metrics.request_finished(
        RequestRecord(
            request_id="r",
            protocol=telemetry.GRPS_HTTP,
            route="POST /grps/v1/infer/predict",
            model=model,
            inference=True,
            status=500 if failed else 200,
            reason=telemetry.MODEL_ERROR if failed else None,
            started=0.0,
            duration_s=duration_s,
            bytes_in=1,
            bytes_out=1,
        )
    )


def last(metrics: ServerMetrics, name: str, model: str = "", window: str = "minute") -> Any:
    """The value of the last complete bucket."""
    return metrics.series(name, model, window)["points"][-1]["v"]


def nearest_rank(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q * len(ordered))) - 1]


def test_series_names_are_grps_names(metrics: ServerMetrics) -> None:
    assert metrics.series_names() == [
        "qps",
        "fail_rate(%)",
        "latency_avg(ms)",
        "latency_max(ms)",
        "latency_cdf(ms)",
        "queue_time_avg(ms)",
        "batch_size_avg",
        "gpu_oom_count",
        "tokens_per_s",
        "ttft_cdf(ms)",
        "inter_token_cdf(ms)",
        "running_sequences",
        "waiting_sequences",
        "cpu_usage(%)",
        "mem_usage(%)",
    ]
    assert metrics.models() == ["clf-1.0", "clf-2.0", "pipe"]


WINDOW_SPECS = [("minute", 1, 60), ("hour", 60, 60), ("day", 3600, 24), ("month", 86400, 30)]


def test_the_windows_are_grps_minute_hour_day_and_month() -> None:
    assert [(w.name, w.step_s, w.points) for w in WINDOWS] == WINDOW_SPECS


@pytest.mark.parametrize(("window", "step_s", "count"), WINDOW_SPECS)
def test_each_window_has_all_its_points_up_to_the_last_complete_bucket(
    metrics: ServerMetrics, clock: Clock, window: str, step_s: int, count: int
) -> None:
    clock.advance(3 * 86400 + 7261.5)  # somewhere inside a bucket of every size
    got = metrics.series("qps", "clf-1.0", window)
    assert {k: got[k] for k in ("name", "model", "window", "step_s")} == {
        "name": "qps",
        "model": "clf-1.0",
        "window": window,
        "step_s": step_s,
    }
    starts = [p["t"] for p in got["points"]]
    assert len(starts) == count
    assert all(b - a == step_s for a, b in itertools.pairwise(starts))
    now = int(clock.now)
    assert starts[-1] == now - now % step_s - step_s  # the still-filling bucket is left out
    json.dumps(got)


def test_a_second_shows_once_over_and_leaves_after_a_minute(metrics: ServerMetrics, clock: Clock) -> None:
    for _ in range(3):
        finish(metrics)
    assert metrics.series("qps")["points"][-1] == {"t": DAY - 1, "v": None}  # before the server started
    clock.advance(0.5)
    assert last(metrics, "qps") is None  # still the same second: not shown yet
    clock.advance(0.5)
    assert metrics.series("qps")["points"][-1] == {"t": DAY, "v": 3.0}
    clock.advance(1)
    points = metrics.series("qps")["points"]
    assert points[-2:] == [{"t": DAY, "v": 3.0}, {"t": DAY + 1, "v": 0}]  # an idle second counts 0
    assert last(metrics, "latency_avg(ms)") is None  # ... and has no latency
    clock.advance(59)
    assert [p["v"] for p in metrics.series("qps")["points"]] == [0] * 60


def test_qps_fail_rate_and_latency_of_a_second(metrics: ServerMetrics, clock: Clock) -> None:
    for ms in (10, 20, 30):
        finish(metrics, duration_s=ms / 1000)
    finish(metrics, duration_s=0.040, failed=True)
    clock.advance(1)
    assert last(metrics, "qps") == 4.0
    assert last(metrics, "fail_rate(%)") == 25.0
    assert last(metrics, "latency_avg(ms)") == pytest.approx(25.0)
    assert last(metrics, "latency_max(ms)") == pytest.approx(40.0)
    cdf = last(metrics, "latency_cdf(ms)")
    assert set(cdf) == {"p50", "p90", "p99"}
    assert cdf["p50"] == pytest.approx(20.0, rel=0.05) and cdf["p99"] == pytest.approx(40.0, rel=0.05)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_percentiles_are_within_ten_percent(metrics: ServerMetrics, clock: Clock, seed: int) -> None:
    rng = random.Random(seed)
    latencies: list[float] = []
    for _ in range(60):  # one minute, so the hour window's merged minute bucket is checked too
        for _ in range(100):
            latency = rng.lognormvariate(math.log(0.02), 1.0)
            latencies.append(latency)
            finish(metrics, duration_s=latency)
        clock.advance(1)
    # now one minute in: the last second holds the last 100, the last minute all of them
    for window, values in (("minute", latencies[-100:]), ("hour", latencies)):
        got = last(metrics, "latency_cdf(ms)", window=window)
        for key, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99)):
            assert got[key] == pytest.approx(nearest_rank(values, q) * 1000, rel=0.1), (window, key)


def test_seconds_roll_up_into_minutes_hours_and_days(metrics: ServerMetrics, clock: Clock) -> None:
    finish(metrics, duration_s=0.010)  # second 0 of the first minute
    clock.advance(30)
    finish(metrics, duration_s=0.030)
    clock.advance(29)
    finish(metrics, duration_s=0.050, failed=True)  # second 59: its minute closes with it
    clock.advance(1)
    hour = metrics.series("fail_rate(%)", window="hour")["points"]
    assert hour[-1] == {"t": DAY, "v": pytest.approx(33.333)}
    assert last(metrics, "qps", window="hour") == 0.05  # 3 requests in 60 s
    assert last(metrics, "latency_avg(ms)", window="hour") == pytest.approx(30.0)
    assert metrics.series("latency_max(ms)", window="day")["points"][-1] == {"t": DAY - 3600, "v": None}
    clock.advance(3600)
    assert metrics.series("latency_max(ms)", window="day")["points"][-1] == {"t": DAY, "v": 50.0}
    assert last(metrics, "fail_rate(%)", window="day") == pytest.approx(33.333)
    clock.advance(86400)
    assert metrics.series("latency_max(ms)", window="month")["points"][-1] == {"t": DAY, "v": 50.0}
    assert last(metrics, "latency_avg(ms)", "clf-1.0", "month") == pytest.approx(30.0)
    assert metrics.series("fail_rate(%)", window="hour")["points"][-1]["v"] is None  # an idle minute


def test_queue_time_and_batch_size_per_model_and_overall(metrics: ServerMetrics, clock: Clock) -> None:
    metrics.batch_ran("clf-1.0", 4, [0.001, 0.003], 0.01, 0)
    metrics.batch_ran("clf-2.0", 2, [0.005], 0.01, 0)
    clock.advance(1)
    assert last(metrics, "queue_time_avg(ms)") == pytest.approx(3.0)
    assert last(metrics, "batch_size_avg") == 3.0
    assert last(metrics, "queue_time_avg(ms)", "clf-1.0") == pytest.approx(2.0)
    assert last(metrics, "batch_size_avg", "clf-2.0") == 2.0
    assert last(metrics, "batch_size_avg", "pipe") is None


def test_a_model_series_counts_only_its_model(metrics: ServerMetrics, clock: Clock) -> None:
    finish(metrics, "clf-1.0")
    finish(metrics, "clf-1.0")
    finish(metrics, "pipe")
    finish(metrics, "ghost")  # not served: counted in the overall series only
    finish(metrics, "")
    metrics.gpu_oom("clf-2.0")
    clock.advance(1)
    assert last(metrics, "qps") == 5.0
    assert last(metrics, "qps", "clf-1.0") == 2.0
    assert last(metrics, "qps", "pipe") == 1.0
    assert last(metrics, "qps", "clf-2.0") == 0
    assert last(metrics, "gpu_oom_count", "clf-2.0") == 1 and last(metrics, "gpu_oom_count") == 1


def test_unknown_series_model_or_window(metrics: ServerMetrics) -> None:
    with pytest.raises(KeyError):
        metrics.series("requests_per_second")
    with pytest.raises(KeyError):
        metrics.series("qps", "ghost")
    with pytest.raises(KeyError):
        metrics.series("cpu_usage(%)", "ghost")
    with pytest.raises(KeyError):
        metrics.series("gpu0_usage(%)")  # no GPU here
    with pytest.raises(ValueError):
        metrics.series("qps", window="week")


def test_process_series_are_server_wide(metrics: ServerMetrics, clock: Clock) -> None:
    clock.advance(0.5)
    metrics.sample()
    clock.advance(1)
    cpu = metrics.series("cpu_usage(%)")
    assert cpu["points"][-1]["v"] is not None and cpu["points"][-1]["v"] >= 0
    assert metrics.series("cpu_usage(%)", "clf-1.0") == cpu  # asked for a model: the server's, model ""
    if sys.platform == "linux":
        assert 0 < last(metrics, "mem_usage(%)") < 100
    assert last(metrics, "qps") == 0  # samples alone are no requests


def test_gpu_samples_are_averaged_over_each_bucket(monkeypatch: pytest.MonkeyPatch, clock: Clock) -> None:
    busy = iter([20, 40, 90, 90])
    nvml: Any = types.ModuleType("pynvml")
    nvml.nvmlInit = nvml.nvmlShutdown = lambda: None
    nvml.nvmlDeviceGetCount = lambda: 1
    nvml.nvmlDeviceGetHandleByIndex = lambda i: i
    nvml.nvmlDeviceGetUtilizationRates = lambda h: types.SimpleNamespace(gpu=next(busy))
    nvml.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(used=512 << 20, total=1 << 34)
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    metrics = ServerMetrics(LABELS, clock=clock, monitor=AppMonitor())
    metrics.sample()  # 20 % and 40 % in the first second, 90 % twice in the next
    metrics.sample()
    clock.advance(1)
    metrics.sample()
    metrics.sample()
    clock.advance(1)
    points = metrics.series("gpu0_usage(%)")["points"]
    assert [p["v"] for p in points[-2:]] == [30.0, 90.0]
    assert last(metrics, "gpu0_mem_usage(MIB)") == 512.0
    clock.advance(60)
    assert last(metrics, "gpu0_usage(%)", window="hour") == 60.0  # the mean of the four samples
    assert metrics.snapshot()["overall"]["*gpu0_usage(%)"] is None  # the last second had no sample


def test_snapshot_keeps_grps_names_for_the_last_complete_second(metrics: ServerMetrics, clock: Clock) -> None:
    finish(metrics, duration_s=0.002)
    finish(metrics, duration_s=0.004, failed=True)
    metrics.batch_ran("clf-1.0", 2, [0.001, 0.001], 0.002, 0)
    clock.advance(0.5)
    metrics.sample()
    clock.advance(0.5)
    snap = metrics.snapshot()
    overall = snap["overall"]
    assert overall["*qps"] == 2.0 and overall["*fail_rate(%)"] == 50.0
    assert overall["*latency_avg(ms)"] == pytest.approx(3.0) and overall["*latency_max(ms)"] == 4.0
    assert overall["*batch_size_avg"] == 2.0 and overall["*queue_time_avg(ms)"] == 1.0
    assert overall["*gpu_oom_count"] == 0 and overall["*cpu_usage(%)"] is not None
    assert "*mem_usage(%)" in overall
    assert set(snap["models"]) == {"clf-1.0", "clf-2.0", "pipe"}
    assert snap["models"]["clf-1.0"]["*qps"] == 2.0 and "*cpu_usage(%)" not in snap["models"]["clf-1.0"]
    assert snap["models"]["pipe"]["*qps"] == 0 and snap["models"]["pipe"]["*latency_avg(ms)"] is None
    assert set(snap["models"]["pipe"]["*latency_cdf(ms)"] or {}) == set()
    json.dumps(snap)


def test_a_clock_that_steps_back_keeps_recording(metrics: ServerMetrics, clock: Clock) -> None:
    finish(metrics)
    clock.advance(-5)
    finish(metrics)
    clock.advance(6)
    assert metrics.series("qps")["points"][-1] == {"t": DAY, "v": 2.0}

"""AppMonitor: grps's user metrics (inc/avg/max/min/cdf) aggregated per name, safe across threads."""

from __future__ import annotations

import logging
import threading

import pytest

from grps_py.app_metrics import AppMonitor, app_monitor, percentiles


def test_each_kind_reports_its_aggregate() -> None:
    monitor = AppMonitor()
    monitor.inc("requests")
    monitor.inc("requests", 4)
    for value in (3, 1.5, 4.5):
        monitor.avg("latency", value)
        monitor.max("peak", value)
        monitor.min("floor", value)
    snap = monitor.snapshot()
    assert list(snap) == ["floor", "latency", "peak", "requests"]
    assert snap["requests"] == {"kind": "inc", "count": 2, "sum": 5.0, "min": 1.0, "max": 4.0, "value": 5.0}
    assert snap["latency"]["kind"] == "avg" and snap["latency"]["value"] == pytest.approx(3.0)
    assert snap["peak"]["value"] == 4.5 and snap["floor"]["value"] == 1.5
    assert snap["peak"]["count"] == 3


def test_cdf_gives_nearest_rank_percentiles() -> None:
    monitor = AppMonitor()
    for value in range(1, 101):
        monitor.cdf("ms", value)
    entry = monitor.snapshot()["ms"]
    assert entry["count"] == 100 and entry["window"] == 100 and entry["min"] == 1 and entry["max"] == 100
    assert entry["percentiles"] == {
        "p50": 50,
        "p80": 80,
        "p90": 90,
        "p99": 99,
        "p99.9": 100,
        "p99.99": 100,
    }
    assert "value" not in entry


def test_cdf_keeps_only_the_most_recent_window() -> None:
    monitor = AppMonitor(cdf_window=10)
    for value in range(1000):
        monitor.cdf("ms", value)
    entry = monitor.snapshot()["ms"]
    assert entry["count"] == 1000 and entry["window"] == 10
    assert entry["percentiles"]["p50"] == 994 and entry["percentiles"]["p99"] == 999
    assert entry["min"] == 0  # count, sum, min and max cover every value, not only the window


def test_percentiles_of_nothing_and_of_one_value() -> None:
    assert percentiles([]) == {}
    assert set(percentiles([7.0]).values()) == {7.0}


def test_bad_names_and_values_are_refused() -> None:
    monitor = AppMonitor()
    for name, value in (("", 1), (None, 1), ("x", "3"), ("x", None), ("x", True)):
        with pytest.raises(ValueError):
            monitor.avg(name, value)  # type: ignore[arg-type]
    assert monitor.snapshot() == {}


def test_numpy_scalars_are_numbers() -> None:
    np = pytest.importorskip("numpy")
    monitor = AppMonitor()
    monitor.avg("rows", np.int64(4))
    monitor.avg("rows", np.float32(2.0))
    assert monitor.snapshot()["rows"]["value"] == pytest.approx(3.0)


def test_a_second_kind_for_a_name_is_dropped_and_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    monitor = AppMonitor()
    monitor.inc("n", 2)
    with caplog.at_level(logging.ERROR, logger="grps_py.monitor"):
        monitor.max("n", 100)
        monitor.max("n", 200)
    assert monitor.snapshot()["n"]["value"] == 2.0 and monitor.snapshot()["n"]["count"] == 1
    assert [r.getMessage() for r in caplog.records if r.name == "grps_py.monitor"] == [
        "metric 'n' is a inc metric; max records for it are dropped"
    ]


def test_records_from_many_threads_are_all_counted() -> None:
    monitor = AppMonitor(cdf_window=100_000)
    threads, per_thread = 8, 2000
    start = threading.Barrier(threads)

    def work(k: int) -> None:
        start.wait()
        for i in range(per_thread):
            monitor.inc("calls")
            monitor.avg("value", k)
            monitor.max("top", i)
            monitor.cdf(f"ms_{k % 2}", i)

    workers = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    snap = monitor.snapshot()
    total = threads * per_thread
    assert snap["calls"]["value"] == total and snap["calls"]["count"] == total
    assert snap["value"]["value"] == pytest.approx(sum(range(threads)) / threads)
    assert snap["top"]["value"] == per_thread - 1
    assert snap["ms_0"]["count"] + snap["ms_1"]["count"] == total
    assert snap["ms_0"]["window"] == total // 2


def test_clear_forgets_every_metric() -> None:
    monitor = AppMonitor()
    monitor.inc("a")
    monitor.clear()
    assert monitor.snapshot() == {}


def test_app_monitor_is_one_process_wide_instance() -> None:
    from grps_framework.monitor.monitor import app_monitor as grps_app_monitor

    assert isinstance(app_monitor, AppMonitor) and grps_app_monitor is app_monitor


# -- per second, as grps's monitor shows them -----------------------------------------------------

T0 = 1_699_920_000  # a UTC midnight


class Clock:
    def __init__(self) -> None:
        self.now = T0 + 0.25

    def __call__(self) -> float:
        return self.now


def values(monitor: AppMonitor, name: str, window: str = "minute") -> list[object]:
    return [point["v"] for point in monitor.series(name, window)["points"]]


def test_each_kind_is_aggregated_per_second_as_grps_does() -> None:
    clock = Clock()
    monitor = AppMonitor(clock=clock)
    for second, batch in enumerate([(1, 2, 3), (10,), (4, 4)]):
        clock.now = T0 + second + 0.5
        for value in batch:
            monitor.inc("n", value)
            monitor.avg("mean", value)
            monitor.max("peak", value)
            monitor.min("floor", value)
            monitor.cdf("dist", value)
    clock.now = T0 + 3.1  # the third second is complete
    assert values(monitor, "n")[-3:] == [6.0, 10.0, 8.0]  # the sum of each second
    assert values(monitor, "n")[-4] is None  # before the metric existed: unknown, not 0
    assert values(monitor, "mean")[-3:] == [2.0, 10.0, 4.0]
    assert values(monitor, "peak")[-3:] == [3.0, 10.0, 4.0]
    assert values(monitor, "floor")[-3:] == [1.0, 10.0, 4.0]
    first = values(monitor, "dist")[-3]
    assert isinstance(first, dict) and (first["p50"], first["p99"]) == (2.0, 3.0)
    clock.now = T0 + 5.1
    assert values(monitor, "n")[-2:] == [0, 0]  # an inc metric that recorded nothing counted 0
    assert values(monitor, "mean")[-1] is None
    series = monitor.series("dist")
    assert (series["name"], series["kind"], series["model"], series["step_s"]) == ("dist", "cdf", "", 1)
    assert len(series["points"]) == 60


def test_seconds_roll_up_into_minutes_and_hours() -> None:
    clock = Clock()
    monitor = AppMonitor(clock=clock)
    for second in range(120):  # two minutes of 1 a second (and 2 in the very first second)
        clock.now = T0 + second + 0.5
        monitor.inc("n", 2 if second == 0 else 1)
        monitor.max("peak", second)
        monitor.avg("mean", second % 60)
    clock.now = T0 + 3600 + 1
    assert values(monitor, "n", "hour")[-60:-58] == [1.017, 1.0]  # a minute's mean per second
    assert values(monitor, "peak", "hour")[-60:-58] == [59.0, 119.0]
    assert values(monitor, "mean", "hour")[-60] == 29.5
    assert values(monitor, "n", "day")[-1] == round(121 / 3600, 3)


def test_a_cdf_keeps_a_bounded_sample_of_each_bucket() -> None:
    clock = Clock()
    monitor = AppMonitor(clock=clock)
    for value in range(5000):
        monitor.cdf("dist", float(value))
    clock.now += 1
    (bucket,) = [b for b in monitor._metrics["dist"].seconds.rings[0].buckets.values() if b.count]
    assert bucket.count == 5000 and bucket.samples is not None and len(bucket.samples) == 512
    point = values(monitor, "dist")[-1]
    assert isinstance(point, dict) and 2000 < point["p50"] < 3000  # a uniform sample's median


def test_unknown_names_and_windows_are_refused() -> None:
    monitor = AppMonitor()
    monitor.inc("n")
    with pytest.raises(KeyError, match="unknown user metric 'nope'"):
        monitor.series("nope")
    with pytest.raises(ValueError, match="unknown window 'week'; windows: minute, hour, day, month"):
        monitor.series("n", "week")
    assert monitor.kinds() == {"n": "inc"}
    assert monitor.latest() == {"n": None}  # the current second is not over

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

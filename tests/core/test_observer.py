"""Scheduler observations: the executor's ModelStats, fan-out to another observer, the summary."""

from __future__ import annotations

from grps_py.core.observer import CANCELLED, QUEUE_FULL, FanOut, ModelStats, summary
from grps_py.core.statistics import Statistics


def test_stats_summary_and_fan_out() -> None:
    first, second = ModelStats(), ModelStats()
    fan = FanOut([first, second])
    fan.queued("m", 1)
    fan.batch_ran("m", 4, [0.001] * 2, 0.01, 0)
    fan.batch_ran("m", 2, [0.002], 0.01, 0)
    fan.dropped("m", QUEUE_FULL, 3)
    fan.dropped("m", CANCELLED, 2)
    for stats in (first, second):
        got = summary(stats.model("m"))
        assert got["batches_run"] == 2 and got["rows_run"] == 6 and got["queue_depth"] == 2
        assert got["dropped"] == {QUEUE_FULL: 1, CANCELLED: 1}
        assert got["recent_batch_rows"] == {"count": 2, "mean": 3.0, "median": 4, "max": 4}
    assert summary(ModelStats().model("idle"))["recent_batch_rows"]["count"] == 0


def test_fan_out_hands_the_statistics_to_every_observer() -> None:
    class Exporter(ModelStats):
        exported: Statistics | None = None

        def export_statistics(self, statistics: Statistics) -> None:
            self.exported = statistics

    first, second = Exporter(), Exporter()
    statistics = Statistics({})
    FanOut([first, ModelStats(), second]).export_statistics(statistics)
    assert first.exported is statistics and second.exported is statistics

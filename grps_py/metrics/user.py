"""grps's user metrics (`app_monitor`) as Prometheus gauges, read when scraped.

Model code records through the process-global `app_monitor` (grps's API); this collector only reads
its `snapshot()`, so user metrics cost nothing between scrapes and need no registration by the user.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from grps_py.app_metrics import AppMonitor

PREFIX = "grps_user_"
_INVALID = re.compile(r"[^a-zA-Z0-9_]")


def metric_name(name: str) -> str:
    """`grps_user_` + the user's name with every character Prometheus refuses turned into `_`."""
    return PREFIX + _INVALID.sub("_", name)


def quantile_label(key: str) -> str:
    """A percentile key of `AppMonitor.snapshot()` (`p99.9`) as a quantile label value (`0.999`)."""
    return f"{float(key[1:]) / 100:g}"


class UserMetricsCollector(Collector):
    """inc: the running total; avg: the mean; max / min: the extreme; cdf: one sample per percentile,
    labelled `quantile`, over the metric's recent values. Two names that sanitise alike: the first
    (in name order) is exported, the other skipped."""

    def __init__(self, monitor: AppMonitor) -> None:
        self._monitor = monitor

    def describe(self) -> list[Metric]:
        return []  # names are the user's and change at run time: nothing to claim when registering

    def collect(self) -> Iterator[Metric]:
        seen: set[str] = set()
        for name, entry in self._monitor.snapshot().items():
            exported = metric_name(name)
            if exported in seen:
                continue
            seen.add(exported)
            yield _family(exported, name, entry)


def _family(exported: str, name: str, entry: dict[str, Any]) -> GaugeMetricFamily:
    kind = entry["kind"]
    doc = f"grps user metric {name!r} ({kind})"
    if kind != "cdf":
        return GaugeMetricFamily(exported, doc, value=float(entry["value"]))
    family = GaugeMetricFamily(exported, doc, labels=("quantile",))
    for key, value in entry["percentiles"].items():
        family.add_metric((quantile_label(key),), float(value))
    return family

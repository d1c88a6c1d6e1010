"""The hot-path histogram family exposes what prometheus_client's Histogram does for the same values."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Histogram, generate_latest

from grps_py.metrics.fast_histogram import HistogramFamily

BOUNDS = (0.001, 0.5, 1.0, 10.0)


def exposition(registry: CollectorRegistry) -> list[str]:
    return [line for line in generate_latest(registry).decode().splitlines() if "_created" not in line]


def test_same_samples_as_prometheus_client() -> None:
    theirs, ours = CollectorRegistry(), CollectorRegistry()
    reference = Histogram("x_seconds", "doc", ("model", "version"), buckets=BOUNDS, registry=theirs)
    family = HistogramFamily("x_seconds", "doc", ("model", "version"), BOUNDS, ours)
    for labels, value in [(("a", "1"), 0.0005), (("a", "1"), 0.001), (("a", "1"), 0.7), (("b", ""), 11.0)]:
        reference.labels(*labels).observe(value)
        family.labels(*labels).observe(value)  # a bound itself counts in its bucket (le)
    assert exposition(ours) == exposition(theirs)


def test_a_child_is_made_once_per_label_set() -> None:
    family = HistogramFamily("y", "doc", ("model",), BOUNDS, CollectorRegistry())
    assert family.labels("a") is family.labels("a")
    with pytest.raises(ValueError):
        family.labels("a", "b")

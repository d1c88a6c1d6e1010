"""The hot-path counter family exposes what prometheus_client's Counter does for the same counts."""

from __future__ import annotations

import re

import pytest
from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client import metrics as prometheus_metrics

from grps_py.metrics.fast_counter import CounterFamily


def exposition(registry: CollectorRegistry) -> list[str]:
    """The body, creation times masked (each child's own)."""
    text = generate_latest(registry).decode()
    return [re.sub(r"(_created\{.*\}) \S+$", r"\1 T", line) for line in text.splitlines()]


@pytest.mark.parametrize("created", [True, False])
def test_same_samples_as_prometheus_client(created: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prometheus_metrics, "_use_created", created)
    theirs, ours = CollectorRegistry(), CollectorRegistry()
    reference = Counter("x", "doc", ("model", "outcome"), registry=theirs)
    family = CounterFamily("x", "doc", ("model", "outcome"), ours)
    for labels, amount in [(("a", "ok"), 1), (("a", "ok"), 2.5), (("b", "failed"), 1), (("c", "ok"), 0)]:
        reference.labels(*labels).inc(amount)
        family.labels(*labels).inc(amount)
    assert exposition(ours) == exposition(theirs)
    assert any("_created" in line for line in exposition(ours)) is created


def test_a_child_is_made_once_per_label_set_and_only_counts_up() -> None:
    family = CounterFamily("y_total", "doc", ("model",), CollectorRegistry())
    assert family.name == "y" and family.labels("a") is family.labels("a")
    with pytest.raises(ValueError):
        family.labels("a", "b")
    with pytest.raises(ValueError):
        family.labels("a").inc(-1)

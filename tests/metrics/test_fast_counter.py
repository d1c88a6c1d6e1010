"""The hot-path counter family exposes what prometheus_client's Counter does for the same counts."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import prometheus_client
import pytest
from prometheus_client import CollectorRegistry, Counter, generate_latest

from grps_py.metrics.fast_counter import CounterFamily, created_series

ROOT = Path(__file__).resolve().parents[2]
COUNTS = [(("a", "ok"), 1), (("a", "ok"), 2.5), (("b", "failed"), 1), (("c", "ok"), 0)]


def exposition(registry: CollectorRegistry) -> list[str]:
    """The body, creation times masked (each child's own)."""
    text = generate_latest(registry).decode()
    return [re.sub(r"(_created\{.*\}) \S+$", r"\1 T", line) for line in text.splitlines()]


def theirs_and_ours() -> tuple[list[str], list[str]]:
    theirs, ours = CollectorRegistry(), CollectorRegistry()
    reference = Counter("x", "doc", ("model", "outcome"), registry=theirs)
    family = CounterFamily("x", "doc", ("model", "outcome"), ours)
    for labels, amount in COUNTS:
        reference.labels(*labels).inc(amount)
        family.labels(*labels).inc(amount)
    return exposition(theirs), exposition(ours)


@pytest.fixture
def created_switch() -> Iterator[None]:
    """Lets a test flip prometheus_client's process-wide switch; puts it back as it was."""
    was = created_series()
    yield
    if was:
        prometheus_client.enable_created_metrics()
    else:
        prometheus_client.disable_created_metrics()


@pytest.mark.parametrize("created", [True, False])
def test_same_samples_as_prometheus_client(created: bool, created_switch: None) -> None:
    if created:
        prometheus_client.enable_created_metrics()
    else:
        prometheus_client.disable_created_metrics()
    theirs, ours = theirs_and_ours()
    assert ours == theirs
    assert any("_created" in line for line in ours) is created


def test_the_environment_switch_turns_created_series_off_for_both() -> None:
    """`PROMETHEUS_DISABLE_CREATED_SERIES` is read when prometheus_client is imported: a fresh process."""
    code = (
        "import sys; sys.path.insert(0, 'tests/metrics'); import test_fast_counter as t; "
        "theirs, ours = t.theirs_and_ours(); "
        "assert ours == theirs, (ours, theirs); "
        "assert not any('_created' in line for line in ours), ours"
    )
    env = {**os.environ, "PROMETHEUS_DISABLE_CREATED_SERIES": "true"}
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr


def test_a_child_is_made_once_per_label_set_and_only_counts_up() -> None:
    family = CounterFamily("y_total", "doc", ("model",), CollectorRegistry())
    assert family.name == "y" and family.labels("a") is family.labels("a")
    with pytest.raises(ValueError):
        family.labels("a", "b")
    with pytest.raises(ValueError):
        family.labels("a").inc(-1)

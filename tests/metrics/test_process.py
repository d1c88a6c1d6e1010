"""Process sampling (/proc) and the user-metric name rules, on their own."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest

from grps_py.metrics.process import ProcessSampler, cpu_seconds, open_connections, resident_bytes
from grps_py.metrics.user import metric_name, quantile_label

linux_only = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")


@linux_only
def test_open_connections_counts_sockets_only(tmp_path: Path) -> None:
    before = open_connections()
    with open(tmp_path / "file", "w"), socket.socket() as first, socket.socket() as second:
        first.bind(("127.0.0.1", 0))
        first.listen()
        second.connect(first.getsockname())
        with first.accept()[0]:
            assert open_connections() == before + 3  # the listener and both ends
    assert open_connections() == before


def test_no_proc_means_no_connections_and_no_memory(tmp_path: Path) -> None:
    assert open_connections(str(tmp_path / "missing")) == 0
    assert resident_bytes(str(tmp_path / "missing")) is None
    sampler = ProcessSampler(iter([0.0, 1.0]).__next__, statm=str(tmp_path / "missing"))
    cpu, mem = sampler.sample()
    assert cpu is not None and cpu >= 0 and mem is None


@linux_only
def test_cpu_percent_over_the_time_since_the_last_sample() -> None:
    # Both clocks are given: the arithmetic is checked exactly, whatever the machine's load.
    times = iter([100.0, 100.0, 100.5, 101.5])
    cpu_times = iter([7.0, 7.0, 7.25, 7.25])
    sampler = ProcessSampler(times.__next__, cpu=cpu_times.__next__)
    assert sampler.sample()[0] is None  # no time has passed: nothing to divide by
    cpu, mem = sampler.sample()
    assert cpu == 50.0  # 0.25 s of CPU over half a second
    assert mem is not None and 0 < mem < 100  # the real /proc/self/statm
    assert sampler.sample()[0] == 0.0  # a second without CPU


def test_cpu_seconds_never_go_back() -> None:
    readings = [cpu_seconds() for _ in range(1000)]
    assert readings == sorted(readings) and readings[0] >= 0


def test_user_metric_names_and_quantiles() -> None:
    assert metric_name("tokens") == "grps_user_tokens"
    assert metric_name("*latency(ms) p99") == "grps_user__latency_ms__p99"
    assert metric_name("9lives") == "grps_user_9lives"
    keys = ("p50", "p99", "p99.9", "p99.99")
    assert [quantile_label(k) for k in keys] == ["0.5", "0.99", "0.999", "0.9999"]

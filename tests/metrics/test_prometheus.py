"""ServerMetrics' Prometheus side: each observer event moves the right series, read back by parsing
the exposition text as a Prometheus server would."""

from __future__ import annotations

import socket
import sys
import types
from collections.abc import Iterator
from typing import Any

import prometheus_client
import pytest
from prometheus_client.parser import text_string_to_metric_families

from grps_py.app_metrics import AppMonitor, app_monitor
from grps_py.core import observer, telemetry
from grps_py.core.statistics import InferenceStats, Statistics
from grps_py.core.telemetry import RequestRecord
from grps_py.metrics import ServerMetrics

LABELS = {"clf-1.0": ("clf", "1.0"), "clf-2.0": ("clf", "2.0"), "pipe": ("pipe", "1")}
CLF = {"model": "clf", "version": "1.0"}


@pytest.fixture
def metrics() -> Iterator[ServerMetrics]:
    server_metrics = ServerMetrics(LABELS, gpu=False, monitor=AppMonitor())
    yield server_metrics
    server_metrics.close()


def record(
    protocol: str = telemetry.GRPS_HTTP,
    model: str = "clf-1.0",
    reason: str | None = None,
    duration_s: float = 0.01,
    inference: bool = True,
) -> RequestRecord:
    return RequestRecord(
        request_id="r",
        protocol=protocol,
        route="POST /grps/v1/infer/predict",
        model=model,
        inference=inference,
        status=200 if reason is None else 500,
        reason=reason,
        started=0.0,
        duration_s=duration_s,
        bytes_in=1,
        bytes_out=1,
    )


def scrape(metrics: ServerMetrics) -> dict[str, dict[frozenset[tuple[str, str]], float]]:
    """Sample name -> {label set: value}, from the exposition text."""
    body, content_type = metrics.exposition()
    assert content_type.startswith("text/plain")
    out: dict[str, dict[frozenset[tuple[str, str]], float]] = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            out.setdefault(sample.name, {})[frozenset(sample.labels.items())] = sample.value
    return out


def value(metrics: ServerMetrics, name: str, **labels: str) -> float | None:
    return scrape(metrics).get(name, {}).get(frozenset(labels.items()))


def test_requests_count_by_protocol_outcome_and_reason(metrics: ServerMetrics) -> None:
    for _ in range(2):
        metrics.request_finished(record(telemetry.GRPS_HTTP))
    metrics.request_finished(record(telemetry.OIP_GRPC, duration_s=0.2))
    metrics.request_finished(record(telemetry.GRPS_HTTP, reason=telemetry.TIMEOUT))
    metrics.request_finished(record(telemetry.GRPS_HTTP, reason="no such reason"))  # bounded: internal
    metrics.request_finished(record("http", inference=False))  # health, metadata: not counted

    total = scrape(metrics)["grps_requests_total"]
    http = {**CLF, "protocol": telemetry.GRPS_HTTP}
    assert total[frozenset({**http, "outcome": "success", "reason": ""}.items())] == 2
    assert total[frozenset({**http, "outcome": "failure", "reason": "timeout"}.items())] == 1
    assert total[frozenset({**http, "outcome": "failure", "reason": "internal"}.items())] == 1
    oip = {**CLF, "protocol": telemetry.OIP_GRPC, "outcome": "success", "reason": ""}
    assert total[frozenset(oip.items())] == 1
    assert sum(total.values()) == 5
    assert value(metrics, "grps_request_duration_seconds_count", **http) == 4
    assert value(metrics, "grps_request_duration_seconds_sum", **http) == pytest.approx(0.04)
    oip_labels = {**CLF, "protocol": telemetry.OIP_GRPC}
    assert value(metrics, "grps_request_duration_seconds_bucket", **oip_labels, le="0.1") == 0
    assert value(metrics, "grps_request_duration_seconds_bucket", **oip_labels, le="0.25") == 1


def test_model_keys_map_to_model_and_version_labels(metrics: ServerMetrics) -> None:
    metrics.request_finished(record(model="clf-2.0"))
    metrics.request_finished(record(model="pipe"))
    metrics.request_finished(record(model="", reason=telemetry.NOT_FOUND))
    metrics.request_finished(record(model="ghost", reason=telemetry.NOT_FOUND))
    total = scrape(metrics)["grps_requests_total"]
    by_model = {(dict(k)["model"], dict(k)["version"]): v for k, v in total.items()}
    assert by_model == {("clf", "2.0"): 1, ("pipe", "1"): 1, ("unknown", ""): 2}


def test_inflight_goes_up_on_start_and_down_on_an_inference_answer(metrics: ServerMetrics) -> None:
    for _ in range(3):
        metrics.request_started(telemetry.OIP_HTTP, "clf-1.0")
    metrics.request_finished(record(telemetry.OIP_HTTP))
    metrics.request_finished(record("http", inference=False))
    assert value(metrics, "grps_inflight_requests", **CLF) == 2
    metrics.request_finished(record(telemetry.OIP_HTTP, reason=telemetry.CANCELLED))
    metrics.request_finished(record(telemetry.OIP_HTTP))
    assert value(metrics, "grps_inflight_requests", **CLF) == 0
    assert value(metrics, "grps_inflight_requests", model="pipe", version="1") == 0  # known models: 0


def test_batches_feed_batch_size_queue_and_compute(metrics: ServerMetrics) -> None:
    metrics.queued("clf-1.0", 5)
    assert value(metrics, "grps_queue_depth", **CLF) == 5
    metrics.batch_ran("clf-1.0", 4, [0.001, 0.002, 0.003], 0.02, 1)
    metrics.batch_ran("clf-1.0", 1, [0.004], 0.01, 0)
    assert value(metrics, "grps_batch_size_count", **CLF) == 2
    assert value(metrics, "grps_batch_size_sum", **CLF) == 5
    assert value(metrics, "grps_batch_size_bucket", **CLF, le="1.0") == 1
    assert value(metrics, "grps_batch_size_bucket", **CLF, le="2.0") == 1
    assert value(metrics, "grps_batch_size_bucket", **CLF, le="4.0") == 2
    assert value(metrics, "grps_queue_duration_seconds_count", **CLF) == 4  # one per queued request
    assert value(metrics, "grps_queue_duration_seconds_sum", **CLF) == pytest.approx(0.01)
    assert value(metrics, "grps_compute_duration_seconds_count", **CLF) == 2  # one per batch
    assert value(metrics, "grps_compute_duration_seconds_sum", **CLF) == pytest.approx(0.03)
    assert value(metrics, "grps_queue_depth", **CLF) == 0


def test_rejections_count_by_reason_and_set_the_depth(metrics: ServerMetrics) -> None:
    metrics.dropped("clf-1.0", observer.QUEUE_FULL, 8)
    metrics.dropped("clf-1.0", observer.QUEUE_FULL, 8)
    metrics.dropped("clf-1.0", observer.TIMEOUT, 7)
    metrics.dropped("clf-1.0", observer.CANCELLED, 6)
    rejections = {dict(k)["reason"]: v for k, v in scrape(metrics)["grps_queue_rejections_total"].items()}
    assert rejections == {"queue_full": 2, "timeout": 1, "cancelled": 1}
    assert value(metrics, "grps_queue_depth", **CLF) == 6


def test_streamed_messages_and_time_to_first_message(metrics: ServerMetrics) -> None:
    metrics.stream_message(telemetry.GRPS_GRPC, "clf-1.0", 0.05)
    metrics.stream_message(telemetry.GRPS_GRPC, "clf-1.0", None)
    metrics.stream_message(telemetry.GRPS_GRPC, "clf-1.0", None)
    metrics.stream_message(telemetry.OIP_GRPC, "clf-1.0", 0.5)
    grpc_labels = {**CLF, "protocol": telemetry.GRPS_GRPC}
    assert value(metrics, "grps_streamed_messages_total", **grpc_labels) == 3
    assert value(metrics, "grps_time_to_first_message_seconds_count", **grpc_labels) == 1
    assert value(metrics, "grps_time_to_first_message_seconds_sum", **grpc_labels) == pytest.approx(0.05)
    oip_labels = {**CLF, "protocol": telemetry.OIP_GRPC}
    assert value(metrics, "grps_time_to_first_message_seconds_bucket", **oip_labels, le="0.25") == 0
    assert value(metrics, "grps_time_to_first_message_seconds_bucket", **oip_labels, le="0.5") == 1


def test_gpu_oom_counts_per_model(metrics: ServerMetrics) -> None:
    assert value(metrics, "grps_gpu_oom_total", **CLF) == 0
    metrics.gpu_oom("clf-1.0")
    metrics.gpu_oom("clf-1.0")
    metrics.gpu_oom("nobody")
    assert value(metrics, "grps_gpu_oom_total", **CLF) == 2
    assert value(metrics, "grps_gpu_oom_total", model="unknown", version="") == 1


def test_process_metrics_and_open_connections(metrics: ServerMetrics) -> None:
    before = value(metrics, "grps_open_connections")
    assert before is not None
    if sys.platform != "linux":
        pytest.skip("process metrics read /proc")
    assert value(metrics, "grps_process_cpu_seconds_total") is not None
    assert (value(metrics, "grps_process_resident_memory_bytes") or 0) > 0
    assert (value(metrics, "grps_process_open_fds") or 0) > 0
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        assert value(metrics, "grps_open_connections") == before + 1  # read at scrape time


def test_user_metrics_are_exported_as_gauges() -> None:
    monitor = AppMonitor()
    monitor.inc("tokens out", 3)
    monitor.inc("tokens out", 4)
    monitor.avg("latency(ms)", 2)
    monitor.avg("latency(ms)", 4)
    monitor.max("peak", 9)
    monitor.min("floor", -1)
    for v in range(1, 101):
        monitor.cdf("ttft", v)
    server_metrics = ServerMetrics(LABELS, gpu=False, monitor=monitor)
    got = scrape(server_metrics)
    assert got["grps_user_tokens_out"] == {frozenset(): 7}
    assert got["grps_user_latency_ms_"] == {frozenset(): 3}
    assert got["grps_user_peak"] == {frozenset(): 9} and got["grps_user_floor"] == {frozenset(): -1}
    quantiles = {dict(k)["quantile"]: v for k, v in got["grps_user_ttft"].items()}
    assert quantiles["0.5"] == 50 and quantiles["0.99"] == 99 and quantiles["0.999"] == 100
    monitor.inc("late", 1)  # read at scrape time: a metric recorded later shows up on the next scrape
    assert scrape(server_metrics)["grps_user_late"] == {frozenset(): 1}


def test_user_metrics_default_to_the_process_wide_app_monitor() -> None:
    app_monitor.inc("metrics_test_default_monitor", 2)
    got = scrape(ServerMetrics(LABELS, gpu=False))
    assert got["grps_user_metrics_test_default_monitor"][frozenset()] >= 2


def test_two_servers_side_by_side_do_not_share_series() -> None:
    first = ServerMetrics(LABELS, gpu=False, monitor=AppMonitor())
    second = ServerMetrics(LABELS, gpu=False, monitor=AppMonitor())  # same names: no duplicate error
    assert first.registry is not prometheus_client.REGISTRY and first.registry is not second.registry
    first.request_finished(record())
    success = {**CLF, "protocol": telemetry.GRPS_HTTP, "outcome": "success", "reason": ""}
    assert value(first, "grps_requests_total", **success) == 1
    assert value(second, "grps_requests_total", **success) is None
    assert b"grps_requests" not in prometheus_client.generate_latest(prometheus_client.REGISTRY)


def _fake_nvml(devices: int, fail_init: bool = False) -> types.ModuleType:
    """A pynvml stand-in: `devices` GPUs of 16 GiB, GPU i at (30 + i) % busy with i+1 GiB in use."""
    gib = 1 << 30
    nvml: Any = types.ModuleType("pynvml")
    nvml.calls = []

    def init() -> None:
        nvml.calls.append("init")
        if fail_init:
            raise RuntimeError("NVML Shared Library Not Found")

    nvml.nvmlInit = init
    nvml.nvmlShutdown = lambda: nvml.calls.append("shutdown")
    nvml.nvmlDeviceGetCount = lambda: devices
    nvml.nvmlDeviceGetHandleByIndex = lambda i: i
    nvml.nvmlDeviceGetUtilizationRates = lambda h: types.SimpleNamespace(gpu=30 + h, memory=0)
    nvml.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(used=(h + 1) * gib, total=16 * gib)
    return nvml


def test_no_gpu_metrics_without_a_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    nvml = _fake_nvml(2)
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    server_metrics = ServerMetrics(LABELS, gpu=False, monitor=AppMonitor())
    server_metrics.sample()
    assert nvml.calls == []  # gpu=False: NVML is never touched
    body = server_metrics.exposition()[0].decode()
    assert "grps_gpu_utilization_ratio" not in body and "grps_gpu_memory" not in body
    assert not [name for name in server_metrics.series_names() if name.startswith("gpu0")]


def test_an_nvml_failure_means_no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", _fake_nvml(2, fail_init=True))
    server_metrics = ServerMetrics(LABELS, gpu=True, monitor=AppMonitor())
    server_metrics.sample()
    assert "grps_gpu_utilization_ratio" not in server_metrics.exposition()[0].decode()
    monkeypatch.setitem(sys.modules, "pynvml", _fake_nvml(0))  # a driver but no device
    assert "gpu0_usage(%)" not in ServerMetrics(LABELS, monitor=AppMonitor()).series_names()


def test_gpu_metrics_from_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    nvml = _fake_nvml(2)
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    server_metrics = ServerMetrics(LABELS, gpu=True, monitor=AppMonitor())
    assert "gpu0_usage(%)" in server_metrics.series_names()
    assert "gpu1_mem_usage(MIB)" in server_metrics.series_names()
    server_metrics.sample()
    got = scrape(server_metrics)
    ratio = {dict(k)["device"]: v for k, v in got["grps_gpu_utilization_ratio"].items()}
    assert ratio == {"0": pytest.approx(0.30), "1": pytest.approx(0.31)}
    assert got["grps_gpu_memory_used_bytes"][frozenset({"device": "1"}.items())] == 2 * (1 << 30)
    assert got["grps_gpu_memory_total_bytes"][frozenset({"device": "0"}.items())] == 16 * (1 << 30)
    nvml.nvmlDeviceGetMemoryInfo = lambda h: 1 / 0 if h == 1 else types.SimpleNamespace(used=1, total=2)
    server_metrics.sample()  # device 1 stops answering: its series go rather than stay stale
    devices = {dict(k)["device"] for k in scrape(server_metrics)["grps_gpu_memory_used_bytes"]}
    assert devices == {"0"}
    server_metrics.close()
    assert nvml.calls == ["init", "shutdown"]


@pytest.mark.gpu
def test_a_real_gpu_is_seen_through_nvml() -> None:
    server_metrics = ServerMetrics(LABELS, gpu=True, monitor=AppMonitor())
    if "gpu0_usage(%)" not in server_metrics.series_names():
        pytest.skip("no GPU visible to NVML")
    server_metrics.sample()
    got = scrape(server_metrics)
    assert got["grps_gpu_memory_total_bytes"][frozenset({"device": "0"}.items())] > 0
    assert 0 <= got["grps_gpu_utilization_ratio"][frozenset({"device": "0"}.items())] <= 1
    server_metrics.close()


def test_triton_counters_are_written_from_exported_statistics(metrics: ServerMetrics) -> None:
    assert "nv_inference" not in metrics.exposition()[0].decode()  # none until statistics are exported
    odd = InferenceStats('we"ird\\name\n', "1")  # any label value stays one parseable label
    clf = InferenceStats("clf", "1.0")
    clf.success_count, clf.success_ns, clf.queue_ns = 3, 7_654_321, 1_999
    metrics.export_statistics(Statistics({"clf-1.0": clf, "odd": odd}))
    # prometheus_client's parser names every counter sample `<name>_total` (the text has no suffix).
    assert value(metrics, "nv_inference_request_success_total", **CLF) == 3
    assert value(metrics, "nv_inference_request_duration_us_total", **CLF) == 7654  # ns // 1000, as Triton
    assert value(metrics, "nv_inference_queue_duration_us_total", **CLF) == 1
    assert value(metrics, "nv_inference_exec_count_total", model='we"ird\\name\n', version="1") == 0
    clf.success_count += 1  # read when scraped: nothing to update per request
    assert value(metrics, "nv_inference_request_success_total", **CLF) == 4

"""The metrics follow a model set that changes while the server runs (`models_changed`): a new key is
exported, a dropped key leaves the exposition and the dashboard, a kept key goes on, and reports that
arrive for a key after it went change nothing anyone reads."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from grps_py.app_metrics import AppMonitor
from grps_py.core import telemetry
from grps_py.core.observer import CANCELLED, QUEUE_FULL, FanOut, ModelStats
from grps_py.core.telemetry import RequestRecord
from grps_py.metrics import ServerMetrics

LABELS = {"clf-1.0": ("clf", "1.0"), "clf-2.0": ("clf", "2.0"), "pipe": ("pipe", "1")}
START = 1_699_920_000.25

# Every family labelled by model, as the exposition names its samples.
MODEL_FAMILIES = {
    "grps_requests",
    "grps_request_duration_seconds",
    "grps_queue_duration_seconds",
    "grps_compute_duration_seconds",
    "grps_batch_size",
    "grps_inflight_requests",
    "grps_queue_depth",
    "grps_queue_rejections",
    "grps_streamed_messages",
    "grps_time_to_first_message_seconds",
    "grps_gpu_oom",
    "grps_hung_instances",
    "grps_instance_hangs",
}


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
    metrics: ServerMetrics,
    model: str,
    protocol: str = telemetry.GRPS_HTTP,
    reason: str | None = None,
) -> None:
    metrics.request_finished(
        RequestRecord(
            request_id="r",
            protocol=protocol,
            route="POST /grps/v1/infer/predict",
            model=model,
            inference=True,
            status=200 if reason is None else 500,
            reason=reason,
            started=0.0,
            duration_s=0.01,
            bytes_in=1,
            bytes_out=1,
        )
    )


def every_event(
    metrics: ServerMetrics, key: str, protocols: tuple[str, ...] = (telemetry.GRPS_HTTP,)
) -> None:
    """One report of each kind for `key`, so that each family has a child for it."""
    for protocol in protocols:
        metrics.request_started(protocol, key)
        finish(metrics, key, protocol)
        metrics.request_started(protocol, key)
        finish(metrics, key, protocol, reason=telemetry.TIMEOUT)
        metrics.stream_message(protocol, key, 0.002)
    metrics.queued(key, 1)
    metrics.dropped(key, QUEUE_FULL, 0)
    metrics.batch_ran(key, 4, [0.001, 0.002], 0.01, 0)
    metrics.gpu_oom(key)
    metrics.instance_hung(key, 0, 1.5)


def samples(
    metrics: ServerMetrics, model: str, version: str
) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """(sample name, its labels) -> value, for the samples labelled with this model and version."""
    body, _ = metrics.exposition()
    found = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            if sample.labels.get("model") == model and sample.labels.get("version") == version:
                found[sample.name, frozenset(sample.labels.items())] = sample.value
    return found


def families_of(metrics: ServerMetrics, model: str, version: str) -> set[str]:
    """The families with a sample for this model and version (a counter's `_created` samples are
    parsed as a family of their own: counted under the counter's name)."""
    body, _ = metrics.exposition()
    return {
        family.name.removesuffix("_created")
        for family in text_string_to_metric_families(body.decode())
        if any(s.labels.get("model") == model and s.labels.get("version") == version for s in family.samples)
    }


def value(metrics: ServerMetrics, name: str, **labels: str) -> float | None:
    body, _ = metrics.exposition()
    wanted = frozenset(labels.items())
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            if sample.name == name and frozenset(sample.labels.items()) == wanted:
                return sample.value
    return None


def successes(metrics: ServerMetrics, model: str, version: str) -> float | None:
    labels = {"protocol": telemetry.GRPS_HTTP, "outcome": "success", "reason": ""}
    return value(metrics, "grps_requests_total", model=model, version=version, **labels)


def test_the_initial_labels_are_exported_as_before(metrics: ServerMetrics) -> None:
    every_event(metrics, "clf-2.0")
    assert families_of(metrics, "clf", "2.0") == MODEL_FAMILIES
    assert metrics.models() == ["clf-1.0", "clf-2.0", "pipe"]


def test_a_new_key_is_exported_with_a_dashboard_scope(metrics: ServerMetrics, clock: Clock) -> None:
    metrics.models_changed({**LABELS, "det-3": ("det", "3")})
    assert metrics.models() == ["clf-1.0", "clf-2.0", "pipe", "det-3"]
    assert value(metrics, "grps_inflight_requests", model="det", version="3") == 0  # shown while idle

    every_event(metrics, "det-3")
    assert families_of(metrics, "det", "3") == MODEL_FAMILIES
    assert successes(metrics, "det", "3") == 1
    clock.advance(1)
    assert metrics.series("qps", "det-3")["points"][-1]["v"] == 2.0
    assert metrics.snapshot()["models"]["det-3"]["*qps"] == 2.0


def test_a_dropped_key_leaves_every_family_and_the_dashboard(metrics: ServerMetrics, clock: Clock) -> None:
    every_event(metrics, "clf-2.0", (telemetry.GRPS_HTTP, telemetry.OIP_GRPC))
    every_event(metrics, "clf-1.0")
    clock.advance(1)
    metrics.sample()
    kept = samples(metrics, "clf", "1.0")

    metrics.models_changed({"clf-1.0": ("clf", "1.0"), "pipe": ("pipe", "1")})

    assert samples(metrics, "clf", "2.0") == {}
    assert families_of(metrics, "clf", "2.0") == set()
    assert samples(metrics, "clf", "1.0") == kept  # the same labels' other version is untouched
    assert metrics.models() == ["clf-1.0", "pipe"]
    assert "clf-2.0" not in metrics.snapshot()["models"]
    with pytest.raises(KeyError):
        metrics.series("qps", "clf-2.0")
    clock.advance(1)
    metrics.sample()  # the dropped scope is no longer advanced, nothing fails
    assert metrics.series("qps")["points"][-2]["v"] == 6.0  # the overall series keep what it served


def test_late_reports_for_a_dropped_key_change_nothing_exported(metrics: ServerMetrics, clock: Clock) -> None:
    metrics.request_started(telemetry.GRPS_HTTP, "clf-2.0")  # in flight when its model goes
    metrics.instance_hung("clf-2.0", 0, 2.0)
    metrics.models_changed({"clf-1.0": ("clf", "1.0")})

    finish(metrics, "clf-2.0")
    finish(metrics, "clf-2.0", telemetry.OIP_HTTP, reason="never seen before")  # a new protocol, reason
    metrics.stream_message(telemetry.OIP_GRPC, "clf-2.0", 0.1)
    metrics.queued("clf-2.0", 3)
    metrics.dropped("clf-2.0", CANCELLED, 2)
    metrics.batch_ran("clf-2.0", 2, [0.001], 0.01, 0)
    metrics.gpu_oom("clf-2.0")
    metrics.instance_recovered("clf-2.0", 0, 5.0)
    metrics.request_started(telemetry.GRPS_HTTP, "pipe")  # dropped too, without a report before

    assert samples(metrics, "clf", "2.0") == {}
    assert samples(metrics, "pipe", "1") == {}
    assert families_of(metrics, "unknown", "") == set()  # they went to the dropped keys' own children
    clock.advance(1)
    assert metrics.models() == ["clf-1.0"]
    assert metrics.series("qps")["points"][-1]["v"] == 2.0  # counted in the whole server's series


def test_a_key_that_comes_back_starts_from_zero(metrics: ServerMetrics, clock: Clock) -> None:
    every_event(metrics, "clf-2.0")
    metrics.request_started(telemetry.GRPS_HTTP, "clf-2.0")  # still running through the reload
    clock.advance(1)
    metrics.models_changed({"clf-1.0": ("clf", "1.0")})
    metrics.models_changed(LABELS)

    assert successes(metrics, "clf", "2.0") is None  # no protocol seen yet by the new children
    assert value(metrics, "grps_batch_size_count", model="clf", version="2.0") == 0
    assert value(metrics, "grps_hung_instances", model="clf", version="2.0") == 1  # the old one still
    assert value(metrics, "grps_inflight_requests", model="clf", version="2.0") == 1
    finish(metrics, "clf-2.0")  # the request of the old incarnation balances its start
    assert value(metrics, "grps_inflight_requests", model="clf", version="2.0") == 0
    assert successes(metrics, "clf", "2.0") == 1
    clock.advance(1)
    points = metrics.series("qps", "clf-2.0")["points"]
    assert [p["v"] for p in points[-2:]] == [0, 1.0]  # a fresh scope: the old second's 2 are gone


def test_a_kept_key_goes_on_counting(metrics: ServerMetrics, clock: Clock) -> None:
    finish(metrics, "clf-1.0")
    clock.advance(1)
    before = metrics.series("qps", "clf-1.0")["points"]
    metrics.models_changed(dict(LABELS))  # a reload of the same name-version
    metrics.models_changed({"clf-1.0": ("clf", "1.0"), "det-1": ("det", "1")})
    assert metrics.series("qps", "clf-1.0")["points"] == before
    finish(metrics, "clf-1.0")
    assert successes(metrics, "clf", "1.0") == 2
    clock.advance(1)
    assert [p["v"] for p in metrics.series("qps", "clf-1.0")["points"][-2:]] == [1.0, 1.0]


def test_forgotten_keys_are_bounded_and_never_push_unknown_below_zero(metrics: ServerMetrics) -> None:
    many = {f"m-{i}": (f"m{i}", "1") for i in range(80)}
    metrics.models_changed(many)
    for key in many:
        metrics.request_started(telemetry.GRPS_HTTP, key)
        metrics.instance_hung(key, 0, 1.0)
    metrics.models_changed({})
    for key in many:  # the oldest dropped are forgotten: their late reports count as "unknown"
        finish(metrics, key)
        metrics.instance_recovered(key, 0, 2.0)
    assert successes(metrics, "unknown", "") == 16  # 83 dropped (3 + 80), the last 64 still held
    assert value(metrics, "grps_inflight_requests", model="unknown", version="") == 0
    assert value(metrics, "grps_hung_instances", model="unknown", version="") == 0
    assert all(samples(metrics, f"m{i}", "1") == {} for i in range(80))
    assert metrics.models() == []


def test_model_stats_forget_dropped_keys() -> None:
    stats = ModelStats()
    stats.queued("a-1", 1)
    stats.queued("b-1", 1)
    stats.models_changed({"a-1": ("a", "1")})
    assert stats.model("a-1").queued == 1
    assert stats.model("b-1").queued == 0  # forgotten: counts again from zero


def test_fan_out_forwards_model_changes(metrics: ServerMetrics) -> None:
    stats = ModelStats()
    stats.queued("clf-2.0", 1)
    FanOut([stats, metrics]).models_changed({"det-1": ("det", "1")})
    assert stats.model("clf-2.0").queued == 0
    assert metrics.models() == ["det-1"]

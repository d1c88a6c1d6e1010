"""Generation metrics: time to first token, inter-token latency, tokens, running and waiting sequences.

Read back as a scraper and the dashboard read them: the Prometheus exposition (`/metrics`) and the
dashboard's JSON series, from ServerMetrics on a clock the test moves, from a real server whose metrics
hear the reports on its own loop, and end to end from the tiny_gpt example generating over OIP. The
workers' merge adds them up as one server's.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from grps_py.app_metrics import AppMonitor
from grps_py.metrics import ServerMetrics
from grps_py.workers.merge import merge_expositions, merge_series, merge_snapshots
from support import REPO, ServerThread, start_light, start_project, wait_for

LABELS = {"gen-1": ("gen", "1"), "clf-1": ("clf", "1")}
GEN = {"model": "gen", "version": "1"}
START = 1_699_920_000.25
SERIES = "/grps/v1/monitor/series"
GENERATION_SERIES = [
    "tokens_per_s",
    "ttft_cdf(ms)",
    "inter_token_cdf(ms)",
    "running_sequences",
    "waiting_sequences",
]
FAMILIES = {
    "grps_generation_time_to_first_token_seconds",
    "grps_generation_inter_token_seconds",
    "grps_generation_tokens",
    "grps_generation_running_sequences",
    "grps_generation_waiting_sequences",
}
TINY_GPT = REPO / "examples" / "tiny_gpt"
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
CHART = re.compile(r'<svg[^>]*\bdata-series="([^"]+)"[^>]*\bdata-points="(\d+)"')


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


def generate(metrics: ServerMetrics, model: str = "gen-1", sequences: int = 2, tokens: int = 5) -> None:
    """What a batcher reports for `sequences` sequences of `tokens` tokens decoded together: the first
    token of each 20 ms after it was queued, then 5 ms between tokens."""
    metrics.sequences(model, sequences, 0)
    for step in range(tokens):
        for _ in range(sequences):
            if step == 0:
                metrics.first_token(model, 0.02)
            else:
                metrics.token_gap(model, 0.005)
        metrics.tokens_generated(model, sequences)
    metrics.sequences(model, 0, 0)


def scrape_text(text: str) -> dict[str, dict[frozenset[tuple[str, str]], float]]:
    """Sample name -> {label set: value}."""
    out: dict[str, dict[frozenset[tuple[str, str]], float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, {})[frozenset(sample.labels.items())] = sample.value
    return out


def value_in(text: str, name: str, **labels: str) -> float | None:
    return scrape_text(text).get(name, {}).get(frozenset(labels.items()))


def value(metrics: ServerMetrics, name: str, **labels: str) -> float | None:
    return value_in(metrics.exposition()[0].decode(), name, **labels)


def families_of(metrics: ServerMetrics, model: str) -> set[str]:
    return families_in(metrics.exposition()[0].decode(), model)


def families_in(text: str, model: str) -> set[str]:
    """The grps_generation_* families with a sample for `model`."""
    return {
        family.name.removesuffix("_created")
        for family in text_string_to_metric_families(text)
        if family.name.startswith("grps_generation_")
        and any(sample.labels.get("model") == model for sample in family.samples)
    }


def last(metrics: ServerMetrics, name: str, model: str = "", window: str = "minute") -> Any:
    return metrics.series(name, model, window)["points"][-1]["v"]


# -- ServerMetrics, on a clock the test moves ---------------------------------------------------------
def test_each_report_moves_its_prometheus_family(metrics: ServerMetrics) -> None:
    generate(metrics, sequences=2, tokens=5)
    assert value(metrics, "grps_generation_tokens_total", **GEN) == 10
    assert value(metrics, "grps_generation_time_to_first_token_seconds_count", **GEN) == 2
    assert value(metrics, "grps_generation_time_to_first_token_seconds_sum", **GEN) == pytest.approx(0.04)
    first = "grps_generation_time_to_first_token_seconds_bucket"
    assert value(metrics, first, le="0.01", **GEN) == 0 and value(metrics, first, le="0.025", **GEN) == 2
    assert value(metrics, "grps_generation_inter_token_seconds_count", **GEN) == 8
    gap = "grps_generation_inter_token_seconds_bucket"
    assert value(metrics, gap, le="0.002", **GEN) == 0 and value(metrics, gap, le="0.005", **GEN) == 8
    assert value(metrics, gap, le="+Inf", **GEN) == 8

    metrics.sequences("gen-1", 3, 7)
    assert value(metrics, "grps_generation_running_sequences", **GEN) == 3
    assert value(metrics, "grps_generation_waiting_sequences", **GEN) == 7


def test_buckets_span_milliseconds_to_tens_of_seconds(metrics: ServerMetrics) -> None:
    generate(metrics, tokens=2)
    text = metrics.exposition()[0].decode()
    bounds = {
        name: sorted(float(labels["le"]) for labels in map(dict, samples) if labels["le"] != "+Inf")
        for name, samples in scrape_text(text).items()
        if name.startswith("grps_generation_") and name.endswith("_bucket")
    }
    first, gap = (
        bounds["grps_generation_time_to_first_token_seconds_bucket"],
        bounds["grps_generation_inter_token_seconds_bucket"],
    )
    assert first[0] <= 0.001 and first[-1] >= 30
    assert gap[0] <= 0.001 and 1 <= gap[-1] <= 10


def test_a_model_that_never_generates_exports_no_generation_series(metrics: ServerMetrics) -> None:
    assert families_of(metrics, "gen") == set() == families_of(metrics, "clf")
    generate(metrics)
    assert families_of(metrics, "gen") == FAMILIES
    assert families_of(metrics, "clf") == set()
    text = metrics.exposition()[0].decode()
    assert "# TYPE grps_generation_tokens_total counter" in text  # described even before any sample


def test_gauges_never_read_below_zero(metrics: ServerMetrics) -> None:
    metrics.sequences("gen-1", -1, -2)
    assert value(metrics, "grps_generation_running_sequences", **GEN) == 0
    assert value(metrics, "grps_generation_waiting_sequences", **GEN) == 0


def test_an_unloaded_model_leaves_and_late_reports_change_nothing(metrics: ServerMetrics) -> None:
    generate(metrics)
    metrics.sequences("gen-1", 2, 1)  # still generating when it goes
    metrics.models_changed({"clf-1": ("clf", "1")})
    assert families_of(metrics, "gen") == set()

    generate(metrics)  # late reports: counted on the dropped key's own children, never exported
    metrics.sample()
    assert families_of(metrics, "gen") == set()
    assert families_of(metrics, "unknown") == set()

    metrics.models_changed(LABELS)  # loaded again: from zero, at its first report
    assert families_of(metrics, "gen") == set()
    metrics.tokens_generated("gen-1", 3)
    assert value(metrics, "grps_generation_tokens_total", **GEN) == 3


def test_an_unknown_key_counts_as_unknown(metrics: ServerMetrics) -> None:
    generate(metrics, model="ghost-9", sequences=1, tokens=3)
    unknown = {"model": "unknown", "version": ""}
    assert value(metrics, "grps_generation_tokens_total", **unknown) == 3


def test_series_of_a_second(metrics: ServerMetrics, clock: Clock) -> None:
    generate(metrics, sequences=2, tokens=5)
    metrics.first_token("gen-1", 1.0)  # a slow one: the p99
    metrics.tokens_generated("gen-1", 1)
    clock.advance(1)
    for model in ("", "gen-1"):
        assert last(metrics, "tokens_per_s", model) == 11.0
        ttft = last(metrics, "ttft_cdf(ms)", model)
        assert ttft["p50"] == pytest.approx(20, rel=0.05) and ttft["p99"] == pytest.approx(1000, rel=0.05)
        gap = last(metrics, "inter_token_cdf(ms)", model)
        assert gap == {key: pytest.approx(5, rel=0.05) for key in ("p50", "p90", "p99")}


def test_running_and_waiting_are_sampled_each_second(metrics: ServerMetrics, clock: Clock) -> None:
    metrics.sequences("gen-1", 4, 2)
    metrics.sample()
    clock.advance(0.5)
    metrics.sequences("gen-1", 2, 0)
    metrics.sample()
    clock.advance(0.5)
    assert last(metrics, "running_sequences", "gen-1") == 3.0  # the mean of the second's two samples
    assert last(metrics, "waiting_sequences", "gen-1") == 1.0
    assert last(metrics, "running_sequences") == 3.0  # the server's: every model's summed
    assert last(metrics, "tokens_per_s", "gen-1") == 0  # it generates, but made no token that second
    metrics.sample()
    clock.advance(1)
    assert last(metrics, "running_sequences", "gen-1") == 2.0  # idle seconds keep being sampled
    assert last(metrics, "ttft_cdf(ms)", "gen-1") is None  # no first token in that second


def test_models_that_never_generate_have_null_series(metrics: ServerMetrics, clock: Clock) -> None:
    metrics.batch_ran("clf-1", 2, [0.001, 0.001], 0.01, 0)
    metrics.sample()
    clock.advance(1)
    for name in GENERATION_SERIES:
        assert all(point["v"] is None for point in metrics.series(name, "clf-1")["points"]), name
        assert all(point["v"] is None for point in metrics.series(name)["points"]), name
    generate(metrics)
    clock.advance(1)
    assert last(metrics, "tokens_per_s", "clf-1") is None and last(metrics, "tokens_per_s") == 10.0


def test_seconds_roll_up_into_the_hour(metrics: ServerMetrics, clock: Clock) -> None:
    for _ in range(3):
        generate(metrics, sequences=2, tokens=5)  # 10 tokens a second
        metrics.sample()
        clock.advance(1)
    clock.advance(60)
    assert last(metrics, "tokens_per_s", "gen-1", "hour") == pytest.approx(0.5)  # 30 tokens over 60 s
    assert last(metrics, "ttft_cdf(ms)", "gen-1", "hour")["p99"] == pytest.approx(20, rel=0.05)
    assert last(metrics, "running_sequences", "gen-1", "hour") == 0.0


def test_snapshot_has_the_generation_series(metrics: ServerMetrics, clock: Clock) -> None:
    generate(metrics)
    metrics.sample()
    clock.advance(1)
    snapshot = metrics.snapshot()
    assert snapshot["overall"]["*tokens_per_s"] == 10.0
    assert snapshot["models"]["gen-1"]["*tokens_per_s"] == 10.0
    assert snapshot["models"]["gen-1"]["*running_sequences"] == 0.0
    assert snapshot["models"]["clf-1"]["*tokens_per_s"] is None


# -- workers: one server's metrics ---------------------------------------------------------------------
def test_the_workers_merge_sums_generation_metrics(clock: Clock) -> None:
    workers = [ServerMetrics(LABELS, gpu=False, clock=clock, monitor=AppMonitor()) for _ in range(2)]
    try:
        generate(workers[0], sequences=2, tokens=5)
        generate(workers[1], sequences=1, tokens=4)
        workers[0].sequences("gen-1", 3, 1)
        workers[1].sequences("gen-1", 2, 4)
        for worker in workers:
            worker.sample()
        clock.advance(1)
        merged = merge_expositions([w.exposition()[0].decode() for w in workers]).decode()
        assert value_in(merged, "grps_generation_tokens_total", **GEN) == 14
        assert value_in(merged, "grps_generation_time_to_first_token_seconds_count", **GEN) == 3
        assert value_in(merged, "grps_generation_inter_token_seconds_bucket", le="+Inf", **GEN) == 11
        assert value_in(merged, "grps_generation_running_sequences", **GEN) == 5
        assert value_in(merged, "grps_generation_waiting_sequences", **GEN) == 5

        def merged_last(name: str) -> Any:
            answers = [w.series(name, "gen-1") for w in workers]
            weights = [w.series("qps", "gen-1")["points"] for w in workers]
            return merge_series(name, answers, weights)["points"][-1]["v"]

        assert merged_last("tokens_per_s") == 14.0
        assert merged_last("running_sequences") == 5.0 and merged_last("waiting_sequences") == 5.0
        assert merged_last("ttft_cdf(ms)")["p99"] == pytest.approx(20, rel=0.05)  # the larger bound
        snapshot = merge_snapshots([w.snapshot() for w in workers])
        assert snapshot["models"]["gen-1"]["*tokens_per_s"] == 14.0
        assert snapshot["overall"]["*running_sequences"] == 5.0
    finally:
        for worker in workers:
            worker.close()


# -- a real server: its /metrics and dashboard JSON ---------------------------------------------------
@pytest.fixture(scope="module")
def light(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    running = start_light(tmp_path_factory.mktemp("generation_metrics"))
    yield running
    running.stop()


def report_on_loop(server: ServerThread, model: str) -> None:
    """Report generation as the model node does: on the server's event loop thread."""

    async def reports() -> None:
        generate(server.server.metrics, model, sequences=3, tokens=4)
        server.server.metrics.sequences(model, 1, 2)

    server.call(reports())


def series_json(server: ServerThread, model: str = "") -> dict[str, Any]:
    params = {"names": ",".join(GENERATION_SERIES), **({"model": model} if model else {})}
    reply = httpx.get(f"{server.http_url}{SERIES}", params=params, timeout=10)
    assert reply.status_code == 200, reply.text
    series: dict[str, Any] = reply.json()["series"]
    return series


def values(series: dict[str, Any], name: str) -> list[Any]:
    return [point["v"] for point in series[name]["points"] if point["v"] is not None]


def with_tokens(server: ServerThread, model: str = "") -> dict[str, Any] | None:
    """The generation series once a second with tokens has closed (None before: poll)."""
    series = series_json(server, model)
    return series if any(values(series, "tokens_per_s")) else None


def test_a_live_server_exports_and_charts_them(light: ServerThread) -> None:
    report_on_loop(light, "identity-1")
    text = httpx.get(f"{light.http_url}/metrics", timeout=10).text
    identity = {"model": "identity", "version": "1"}
    assert value_in(text, "grps_generation_tokens_total", **identity) == 12
    assert value_in(text, "grps_generation_time_to_first_token_seconds_count", **identity) == 3
    assert value_in(text, "grps_generation_inter_token_seconds_count", **identity) == 9
    assert value_in(text, "grps_generation_running_sequences", **identity) == 1
    assert value_in(text, "grps_generation_waiting_sequences", **identity) == 2
    assert families_in(text, "echo") == set()  # it never generated

    meta = httpx.get(f"{light.http_url}/grps/v1/monitor/models", timeout=10).json()
    assert set(GENERATION_SERIES) <= set(meta["names"]) and set(GENERATION_SERIES) <= set(meta["model_names"])
    # The second of the reports closes: the dashboard's series show it.
    per_model = wait_for(lambda: with_tokens(light, "identity-1"))
    assert 12.0 in values(per_model, "tokens_per_s")
    assert any(v["p50"] == pytest.approx(20, rel=0.05) for v in values(per_model, "ttft_cdf(ms)"))
    assert any(v["p99"] == pytest.approx(5, rel=0.05) for v in values(per_model, "inter_token_cdf(ms)"))
    assert 12.0 in values(series_json(light), "tokens_per_s")
    assert all(not values(series_json(light, "echo-1.0"), name) for name in GENERATION_SERIES)

    single = httpx.get(f"{light.http_url}{SERIES}", params={"name": "*ttft_cdf(ms)"}, timeout=10).json()
    assert single["label"] == "cdf" and [x for x, _ in single["data"]] == [50, 90, 99]  # grps's form


# -- end to end: tiny_gpt generating over OIP ---------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_gpt(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    conf = tmp_path_factory.mktemp("tiny_gpt_metrics") / "server.yml"
    conf.write_text("interface:\n  host: 127.0.0.1\n  port: 0,0\n")
    running = start_project(TINY_GPT, server_conf=conf)
    yield running
    running.stop()


def test_generating_over_oip_moves_the_counters(tiny_gpt: ServerThread) -> None:
    tiny = {"model": "tiny-gpt", "version": "1"}

    def scraped() -> str:
        return httpx.get(f"{tiny_gpt.http_url}/metrics", timeout=10).text

    def count(text: str, name: str) -> float:
        return value_in(text, name, **tiny) or 0.0

    before = scraped()
    body = {"text_input": "Once upon a time", "parameters": {"max_tokens": 6, "temperature": 0}}
    reply = httpx.post(f"{tiny_gpt.http_url}/v2/models/tiny-gpt/generate", json=body, timeout=60)
    assert reply.status_code == 200, reply.text
    answer = reply.json()
    generated = len(answer["output_ids"])
    assert 1 <= generated <= 6
    after = scraped()

    tokens = count(after, "grps_generation_tokens_total") - count(before, "grps_generation_tokens_total")
    assert generated <= tokens <= generated + 1  # an end-of-text token is counted, never sent
    first = "grps_generation_time_to_first_token_seconds_count"
    assert count(after, first) - count(before, first) == 1
    gaps = "grps_generation_inter_token_seconds_count"
    assert count(after, gaps) - count(before, gaps) == tokens - 1
    assert count(after, "grps_generation_running_sequences") == 0  # answered: nothing runs or waits
    assert count(after, "grps_generation_waiting_sequences") == 0
    series = wait_for(lambda: with_tokens(tiny_gpt, "tiny-gpt-1"))
    assert sum(values(series, "tokens_per_s")) >= tokens


# -- the dashboard page in a real browser -------------------------------------------------------------
@pytest.mark.browser
@pytest.mark.timeout(300)
def test_the_page_draws_generation_charts_only_while_a_model_generates(
    tiny_gpt: ServerThread, tmp_path: Path
) -> None:
    browser = next(
        (p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None
    )
    if browser is None:  # tests/http/test_dashboard.py installs it; this one only uses it when present
        pytest.skip("needs Chromium on PATH")
    page = f"{tiny_gpt.http_url}/"

    def charts(url: str) -> dict[str, int]:
        command = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"]
        command += [f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=5000", "--dump-dom"]
        dom = subprocess.run([*command, url], capture_output=True, text=True, timeout=120, check=True).stdout
        return {name: int(points) for name, points in CHART.findall(dom)}

    body = {"text_input": "The", "parameters": {"max_tokens": 4}}
    reply = httpx.post(f"{tiny_gpt.http_url}/v2/models/tiny-gpt/generate", json=body, timeout=60)
    assert reply.status_code == 200, reply.text
    wait_for(lambda: with_tokens(tiny_gpt))
    drawn = charts(page)
    assert set(GENERATION_SERIES) <= set(drawn), drawn
    # running_sequences is sampled once a second: a 4-token answer may end between two samples.
    assert drawn["tokens_per_s"] > 0, drawn
    # The DAG's scope never generates (its node does): no generation chart for it.
    assert not set(GENERATION_SERIES) & set(charts(page + "#model=tiny_gpt_dag")), "shown for the DAG"

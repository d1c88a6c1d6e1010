"""The monitoring routes against a real server: /metrics, the series JSON the dashboard reads, the page."""

from __future__ import annotations

import itertools
import re
import time
from typing import Any

import httpx
import pytest
import tornado.httpserver
import tornado.netutil
from prometheus_client.parser import text_string_to_metric_families

from grps_py.app_metrics import app_monitor
from grps_py.http.metrics_routes import SERIES, build_metrics_app
from support import BASIC, ServerThread, start_project

PREDICT = "/grps/v1/infer/predict"
WINDOW_SHAPES = {"minute": (1, 60), "hour": (60, 60), "day": (3600, 24), "month": (86400, 30)}
GRPS_NAMES = {
    "qps",
    "fail_rate(%)",
    "latency_cdf(ms)",
    "queue_time_avg(ms)",
    "batch_size_avg",
    "cpu_usage(%)",
    "mem_usage(%)",
}
# The only absolute URL the page may hold: the SVG namespace name, an identifier that is never fetched.
NAMESPACES = {"http://www.w3.org/2000/svg"}


def send_traffic(http: httpx.Client, ok: int = 6, failing: int = 2) -> None:
    for _ in range(ok):
        assert http.post(PREDICT, json={"model": "echo-1.0", "str_data": "hi"}).status_code == 200
    for _ in range(failing):
        assert http.post(PREDICT, json={"model": "raiser-1.0", "str_data": "boom"}).status_code >= 400


def values(series: dict[str, Any]) -> list[Any]:
    return [point["v"] for point in series["points"] if point["v"] is not None]


def wait_for_values(http: httpx.Client, name: str, model: str = "", timeout_s: float = 10) -> list[Any]:
    """Send traffic until the series shows it: a second bucket must close before it is reported."""
    deadline = time.monotonic() + timeout_s
    while True:
        send_traffic(http)
        reply = http.get(SERIES, params={"name": name, "model": model})
        assert reply.status_code == 200, reply.text
        found = [v for v in values(reply.json()) if v != 0]
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.3)


def test_prometheus_exposition_parses(http: httpx.Client) -> None:
    send_traffic(http)
    reply = http.get("/metrics")
    assert reply.status_code == 200
    assert reply.headers["content-type"].startswith("text/plain")
    families = list(text_string_to_metric_families(reply.text))
    assert families, reply.text[:500]
    assert all(family.name for family in families)


@pytest.mark.parametrize("window", list(WINDOW_SHAPES))
def test_series_shape_for_each_window(http: httpx.Client, window: str) -> None:
    step_s, count = WINDOW_SHAPES[window]
    reply = http.get(SERIES, params={"name": "qps", "window": window})
    assert reply.status_code == 200, reply.text
    assert reply.headers["content-type"] == "application/json"
    doc = reply.json()
    assert (doc["name"], doc["model"], doc["window"], doc["step_s"]) == ("qps", "", window, step_s)
    starts = [point["t"] for point in doc["points"]]
    assert len(starts) == count
    assert all(b - a == step_s for a, b in itertools.pairwise(starts))  # oldest first, no holes
    assert starts[-1] <= time.time()
    assert all(v is None or isinstance(v, (int, float)) for v in (p["v"] for p in doc["points"]))


def test_series_shows_traffic_overall_and_per_model(http: httpx.Client) -> None:
    assert any(v > 0 for v in wait_for_values(http, "qps"))
    assert any(v > 0 for v in wait_for_values(http, "qps", model="echo-1.0"))
    assert any(v == 100 for v in wait_for_values(http, "fail_rate(%)", model="raiser-1.0"))
    latencies = wait_for_values(http, "latency_cdf(ms)", model="echo-1.0")
    assert latencies and all(set(v) >= {"p50", "p90", "p99"} for v in latencies)
    assert all(0 <= v["p50"] <= v["p90"] <= v["p99"] for v in latencies)


def test_several_series_in_one_request(http: httpx.Client) -> None:
    reply = http.get(SERIES, params={"names": "qps,latency_cdf(ms), fail_rate(%)", "window": "hour"})
    assert reply.status_code == 200, reply.text
    doc = reply.json()
    assert (doc["model"], doc["window"]) == ("", "hour")
    assert set(doc["series"]) == {"qps", "latency_cdf(ms)", "fail_rate(%)"}
    assert all(len(series["points"]) == 60 for series in doc["series"].values())


@pytest.mark.parametrize(
    ("params", "status", "words"),
    [
        ({"name": "no_such_series"}, 404, "unknown series 'no_such_series'"),
        ({"names": "qps,no_such_series"}, 404, "unknown series 'no_such_series'"),
        ({"name": "qps", "model": "ghost-1.0"}, 404, "unknown model 'ghost-1.0'"),
        ({"name": "qps", "window": "week"}, 400, "unknown window 'week'"),
        ({}, 400, "give ?name="),
        ({"names": " , "}, 400, "at least one series name"),
    ],
)
def test_series_errors_answer_the_envelope(
    http: httpx.Client, params: dict[str, str], status: int, words: str
) -> None:
    reply = http.get(SERIES, params=params)
    assert reply.status_code == status
    body = reply.json()["status"]
    assert (body["code"], body["status"]) == (status, "FAILURE")
    assert words in body["msg"] and "[request_id=" in body["msg"]
    if status == 400 and "window" in params:
        assert all(window in body["msg"] for window in WINDOW_SHAPES)  # says what would do


def test_server_wide_series_asked_for_a_model_answer_for_the_server(http: httpx.Client) -> None:
    reply = http.get(SERIES, params={"names": "qps,cpu_usage(%)", "model": "echo-1.0"})
    assert reply.status_code == 200, reply.text
    series = reply.json()["series"]
    assert (series["qps"]["model"], series["cpu_usage(%)"]["model"]) == ("echo-1.0", "")


def test_models_lists_what_the_page_can_ask_for(http: httpx.Client) -> None:
    doc = http.get("/grps/v1/monitor/models").json()
    assert {"echo-1.0", "raiser-1.0"} <= set(doc["models"])
    assert set(doc["names"]) >= GRPS_NAMES
    assert {"qps", "latency_cdf(ms)"} <= set(doc["model_names"]) <= set(doc["names"])
    assert "cpu_usage(%)" not in doc["model_names"]  # process-wide only
    assert doc["windows"] == ["minute", "hour", "day", "month"]


def test_snapshot_uses_grps_names(http: httpx.Client) -> None:
    send_traffic(http)
    reply = http.get("/grps/v1/monitor/metrics")
    assert reply.status_code == 200
    doc = reply.json()
    assert {"*qps", "*fail_rate(%)", "*latency_cdf(ms)", "*cpu_usage(%)"} <= set(doc["overall"])
    assert "*qps" in doc["models"]["echo-1.0"] and "*cpu_usage(%)" not in doc["models"]["echo-1.0"]


def test_grps_star_names_and_grps_form(http: httpx.Client) -> None:
    """grps's names for its own metrics (`*qps`) answer the same series, with grps's label and data."""
    wait_for_values(http, "qps")
    plain = http.get(SERIES, params={"name": "qps"}).json()
    starred = http.get(SERIES, params={"name": "*qps"})
    assert starred.status_code == 200, starred.text
    doc = starred.json()
    assert (doc["name"], doc["label"], len(doc["data"])) == ("qps", "trend", 60)
    assert [index for index, _ in doc["data"]] == list(range(60))
    assert any(value > 0 for _, value in doc["data"]) and len(plain["points"]) == 60
    cdf = http.get(SERIES, params={"name": "*latency_cdf(ms)", "model": "echo-1.0"}).json()
    assert cdf["label"] == "cdf" and [percent for percent, _ in cdf["data"]] == [50.0, 90.0, 99.0]
    several = http.get(SERIES, params={"names": "*qps,fail_rate(%)"}).json()["series"]
    assert set(several) == {"*qps", "fail_rate(%)"} and several["*qps"]["name"] == "qps"


def wait_for_user_values(http: httpx.Client, name: str, record: Any, timeout_s: float = 10) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        record()
        reply = http.get(SERIES, params={"name": name})
        assert reply.status_code == 200, reply.text
        doc: dict[str, Any] = reply.json()
        if any(v != 0 for v in values(doc)) or time.monotonic() > deadline:
            return doc
        time.sleep(0.2)


def test_user_metrics_are_series_under_their_own_names(http: httpx.Client) -> None:
    """What model code records with grps's app_monitor (the server runs in this process), per second."""
    count = wait_for_user_values(
        http, "monitor_test_requests", lambda: app_monitor.inc("monitor_test_requests", 2)
    )
    assert count["kind"] == "inc" and count["model"] == "" and count["label"] == "trend"
    assert all(v % 2 == 0 for v in values(count))  # sums of 2s, per second
    dist = wait_for_user_values(http, "monitor_test_ms", lambda: app_monitor.cdf("monitor_test_ms", 7.5))
    assert dist["kind"] == "cdf" and all(v["p50"] == 7.5 for v in values(dist) if v)
    assert dist["label"] == "cdf" and [100, 7.5] in dist["data"] and [101, 7.5] in dist["data"]
    # Server-wide: asked for a model they answer for the server; an unknown model or window still fails.
    assert http.get(SERIES, params={"name": "monitor_test_ms", "model": "echo-1.0"}).json()["model"] == ""
    assert http.get(SERIES, params={"name": "monitor_test_ms", "model": "ghost-1"}).status_code == 404
    assert http.get(SERIES, params={"name": "monitor_test_ms", "window": "week"}).status_code == 400
    meta = http.get("/grps/v1/monitor/models").json()
    assert meta["user_metrics"]["monitor_test_ms"] == "cdf" and "monitor_test_requests" in meta["names"]
    assert "monitor_test_ms" not in meta["model_names"]
    overall = http.get("/grps/v1/monitor/metrics").json()["overall"]
    assert "monitor_test_requests" in overall and "*qps" in overall
    hour = http.get(SERIES, params={"names": "monitor_test_requests,qps", "window": "hour"}).json()
    assert hour["series"]["monitor_test_requests"]["step_s"] == 60


def test_dashboard_page_is_self_contained(http: httpx.Client) -> None:
    reply = http.get("/")
    assert reply.status_code == 200
    assert reply.headers["content-type"] == "text/html; charset=utf-8"
    page = reply.text
    assert "data-points" in page and "grps/v1/monitor/series" in page  # the script is inlined
    assert not re.search(r"<(script|img|iframe)[^>]*\bsrc=|<link\b|@import|url\(", page, re.IGNORECASE)
    assert set(re.findall(r"https?://[^\s\"'`<>)]+", page, re.IGNORECASE)) <= NAMESPACES
    assert not re.search(r"[\"'(]//\w", page)  # nor a protocol-relative one
    assert len(reply.content) < 30_000


def test_separate_metrics_app_serves_only_metrics(basic_server: ServerThread) -> None:
    async def listen() -> tuple[tornado.httpserver.HTTPServer, int]:
        server = tornado.httpserver.HTTPServer(
            build_metrics_app(basic_server.server.executor, basic_server.server.metrics)
        )
        sockets = tornado.netutil.bind_sockets(0, "127.0.0.1")
        server.add_sockets(sockets)
        return server, sockets[0].getsockname()[1]

    server, port = basic_server.call(listen())
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
            reply = client.get("/metrics")
            assert reply.status_code == 200 and list(text_string_to_metric_families(reply.text))
            assert client.get("/").status_code == 404
            assert client.get(SERIES, params={"name": "qps"}).status_code == 404
    finally:
        basic_server.call(close(server))


async def close(server: tornado.httpserver.HTTPServer) -> None:
    server.stop()
    await server.close_all_connections()


def test_metrics_on_their_own_port() -> None:
    server = start_project(BASIC, server_conf=BASIC / "conf" / "server_metrics_port.yml")
    try:
        port = server.server.metrics_port
        assert port is not None and port != server.server.http_port
        reply = httpx.get(f"http://127.0.0.1:{port}/metrics")
        assert reply.status_code == 200
        names = {family.name for family in text_string_to_metric_families(reply.text)}
        assert "grps_requests" in names
        assert httpx.get(f"http://127.0.0.1:{port}/").status_code == 404  # only /metrics there
        assert httpx.get(f"{server.http_url}/metrics").status_code == 200  # and still on the HTTP port
    finally:
        server.stop()


def test_gpu_out_of_memory_is_counted(http: httpx.Client) -> None:
    reply = http.post(PREDICT, json={"model": "oom-1.0", "str_data": "x"})
    assert reply.status_code == 500
    families = {f.name: f for f in text_string_to_metric_families(http.get("/metrics").text)}
    counts = [s.value for s in families["grps_gpu_oom"].samples if s.labels.get("model") == "oom"]
    assert counts and counts[0] >= 1

"""`metrics.triton_names`: Triton's per-model counters (`nv_inference_*`) on /metrics, written as Triton
writes them, moving exactly as the statistics extension's numbers do; absent when the option is off."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from support import PROJECTS, ServerThread, start_project

STATS = PROJECTS / "stats"
SAMPLE = re.compile(r'^(nv_inference_\w+)\{model="([^"]*)",version="([^"]*)"\} (\d+)$')
# Triton's counters and what each is in the statistics of /v2/models/{model}/stats.
FROM_STATISTICS = {
    "nv_inference_request_success": lambda s: s["inference_stats"]["success"]["count"],
    "nv_inference_request_failure": lambda s: s["inference_stats"]["fail"]["count"],
    "nv_inference_count": lambda s: s["inference_count"],
    "nv_inference_exec_count": lambda s: s["execution_count"],
    "nv_inference_request_duration_us": lambda s: s["inference_stats"]["success"]["ns"] // 1000,
    "nv_inference_queue_duration_us": lambda s: s["inference_stats"]["queue"]["ns"] // 1000,
    "nv_inference_compute_input_duration_us": lambda s: s["inference_stats"]["compute_input"]["ns"] // 1000,
    "nv_inference_compute_infer_duration_us": lambda s: s["inference_stats"]["compute_infer"]["ns"] // 1000,
    "nv_inference_compute_output_duration_us": lambda s: s["inference_stats"]["compute_output"]["ns"] // 1000,
}


@pytest.fixture(scope="module")
def server() -> Iterator[ServerThread]:
    running = start_project(STATS, server_conf=STATS / "conf" / "server_triton_names.yml")
    yield running
    running.stop()


def infer(server: ServerThread, model: str, value: float) -> int:
    body = {"inputs": [{"name": "x", "shape": [1, 3], "datatype": "FP32", "data": [value] * 3}]}
    return httpx.post(f"{server.http_url}/v2/models/{model}/infer", json=body, timeout=30).status_code


def triton_counters(server: ServerThread, model: str) -> dict[str, int]:
    text = httpx.get(f"{server.http_url}/metrics").text
    found = {}
    for line in text.splitlines():
        sample = SAMPLE.match(line)
        if sample and sample[2] == model and sample[3] == "1":
            found[sample[1]] = int(sample[4])
    return found


def statistics(server: ServerThread, model: str) -> dict[str, Any]:
    (stat,) = httpx.get(f"{server.http_url}/v2/models/{model}/stats").json()["model_stats"]
    return stat


def test_the_counters_move_as_the_statistics_do(server: ServerThread) -> None:
    assert triton_counters(server, "counted") == dict.fromkeys(FROM_STATISTICS, 0)  # there from the start
    assert [infer(server, "counted", v) for v in (1.0, 2.0, -1.0)] == [200, 200, 500]
    before = triton_counters(server, "counted")
    stat = statistics(server, "counted")
    assert before == {name: value(stat) for name, value in FROM_STATISTICS.items()}
    assert before["nv_inference_request_success"] == 2 and before["nv_inference_request_failure"] == 1
    assert before["nv_inference_count"] == before["nv_inference_exec_count"] == 2
    assert before["nv_inference_request_duration_us"] > 0

    assert infer(server, "counted", 3.0) == 200
    after = triton_counters(server, "counted")
    assert after == {name: value(statistics(server, "counted")) for name, value in FROM_STATISTICS.items()}
    moved = {
        name: after[name] - before[name] for name in ("nv_inference_request_success", "nv_inference_count")
    }
    assert moved == {"nv_inference_request_success": 1, "nv_inference_count": 1}
    assert after["nv_inference_request_failure"] == 1


def test_they_are_written_as_triton_writes_them(server: ServerThread) -> None:
    text = httpx.get(f"{server.http_url}/metrics").text
    for name in FROM_STATISTICS:
        assert f"# TYPE {name} counter\n" in text
        assert f"{name}_total" not in text  # prometheus_client's name for a counter; Triton's has none
    assert (
        "# HELP nv_inference_request_success Number of successful inference requests, all batch sizes\n"
        in text
    )
    assert 'nv_inference_request_success{model="pipeline",version="1"}' in text  # the DAG has its own
    families = {family.name for family in text_string_to_metric_families(text)}  # the whole page parses
    assert {"grps_requests", "nv_inference_request_success", "nv_inference_exec_count"} <= families


def test_they_are_absent_when_the_option_is_off() -> None:
    off = start_project(STATS)  # server.yml: metrics.triton_names unset
    try:
        assert infer(off, "counted", 1.0) == 200
        text = httpx.get(f"{off.http_url}/metrics").text
        assert "grps_requests" in text and "nv_inference" not in text
    finally:
        off.stop()

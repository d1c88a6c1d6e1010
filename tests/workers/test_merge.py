"""How the workers' metrics add up into one server's (grps_py/workers/merge.py)."""

from __future__ import annotations

from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from grps_py.workers.merge import merge_expositions, merge_series, merge_snapshots

WORKER = """# HELP grps_requests_total Inference requests answered.
# TYPE grps_requests_total counter
grps_requests_total{{model="m",version="1"}} {requests}
grps_requests_created{{model="m",version="1"}} {created}
# HELP grps_inflight_requests Inference requests being served.
# TYPE grps_inflight_requests gauge
grps_inflight_requests{{model="m",version="1"}} {inflight}
# HELP grps_gpu_memory_total_bytes GPU memory in all.
# TYPE grps_gpu_memory_total_bytes gauge
grps_gpu_memory_total_bytes{{device="0"}} 100.0
# HELP grps_user_latency_avg a user metric
# TYPE grps_user_latency_avg gauge
grps_user_latency_avg {user}
# HELP nv_inference_count Number of inferences performed
# TYPE nv_inference_count counter
nv_inference_count{{model="m",version="1"}} {requests}
"""


def sample(text: str, name: str, **labels: str) -> float:
    for family in text_string_to_metric_families(text):
        for found in family.samples:
            if found.name == name and found.labels == labels:
                return float(found.value)
    raise AssertionError(f"no {name} {labels}")


def test_counters_and_gauges_add_up_and_device_readings_do_not() -> None:
    texts = [
        WORKER.format(requests=3, created=20.0, inflight=1, user=5.0),
        WORKER.format(requests=4, created=10.0, inflight=2, user=7.0),
    ]
    merged = merge_expositions(texts).decode()
    assert sample(merged, "grps_requests_total", model="m", version="1") == 7
    assert sample(merged, "grps_requests_created", model="m", version="1") == 10.0  # the earliest
    assert sample(merged, "grps_inflight_requests", model="m", version="1") == 3
    assert sample(merged, "grps_gpu_memory_total_bytes", device="0") == 100.0  # one GPU, read twice
    assert sample(merged, "grps_user_latency_avg", worker="0") == 5.0  # a mean cannot be added up
    assert sample(merged, "grps_user_latency_avg", worker="1") == 7.0
    assert 'nv_inference_count{model="m",version="1"} 7.0' in merged  # Triton's names, as Triton writes them
    assert merged.count("# TYPE grps_requests_total counter") == 1


def series(name: str, *values: object) -> dict[str, object]:
    return {"name": name, "points": [{"t": i, "v": v} for i, v in enumerate(values)]}


def test_series_sum_counts_and_weigh_averages_by_requests() -> None:
    qps = [series("qps", 10, None, 0), series("qps", 30, 5, None)]
    assert [p["v"] for p in merge_series("qps", qps, [q["points"] for q in qps])["points"]] == [40, 5, 0]
    latency = [series("latency_avg(ms)", 1.0, None, None), series("latency_avg(ms)", 3.0, 2.0, None)]
    merged = merge_series("latency_avg(ms)", latency, [q["points"] for q in qps])["points"]
    assert [p["v"] for p in merged] == [2.5, 2.0, None]
    cdf = [series("latency_cdf(ms)", {"p50": 1, "p99": 9}), series("latency_cdf(ms)", {"p50": 2, "p99": 4})]
    assert merge_series("latency_cdf(ms)", cdf, [[], []])["points"][0]["v"] == {"p50": 2, "p99": 9}


def test_snapshots_merge_per_model() -> None:
    one = {"overall": {"*qps": 1.0, "*latency_max(ms)": 3.0}, "models": {"m-1": {"*qps": 1.0}}}
    two = {"overall": {"*qps": 2.0, "*latency_max(ms)": 5.0}, "models": {"m-1": {"*qps": 3.0}}}
    merged = merge_snapshots([one, two])
    assert merged == {"overall": {"*qps": 3.0, "*latency_max(ms)": 5.0}, "models": {"m-1": {"*qps": 4.0}}}


def test_workers_are_spread_over_the_gpus_round_robin() -> None:
    from grps_py.core.config import GpuSettings, ServerSettings
    from grps_py.workers.supervisor import GPU_ENV, Supervisor

    supervisor = Supervisor([], ServerSettings(gpu=GpuSettings(devices=(1, 3))), 3)
    try:
        seen = [supervisor.worker_env(i)["CUDA_VISIBLE_DEVICES"] for i in range(3)]
        assert seen == ["1", "3", "1"] and supervisor.worker_env(0)[GPU_ENV] == "1"
        assert "CUDA_VISIBLE_DEVICES" not in Supervisor([], ServerSettings(), 2).worker_env(0) or True
    finally:
        import shutil

        shutil.rmtree(supervisor.directory, ignore_errors=True)


def test_auto_workers_count_a_cgroup_cpu_limit(tmp_path: Path) -> None:
    from grps_py.core.config import _cgroup_cpu_quota

    limit = tmp_path / "cpu.max"
    limit.write_text("150000 100000\n")
    assert _cgroup_cpu_quota(limit) == 2  # 1.5 cores: rounded up
    limit.write_text("max 100000\n")
    assert _cgroup_cpu_quota(limit) is None
    assert _cgroup_cpu_quota(tmp_path / "missing") is None

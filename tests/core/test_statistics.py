"""Triton's statistics of one model (core/statistics.py): what a request and an execution add."""

from __future__ import annotations

import time

from grps_py.core.statistics import Execution, InferenceStats, Statistics, Timed, executed


def ran(rows: list[int]) -> list[Timed]:
    """Requests of `rows` each, run together as one execution (as an instance's thread reports it)."""
    now = time.perf_counter_ns()
    sent = [Timed(object(), r, now - 1000) for r in rows]
    executed(sent, now, now + 10, now + 110)
    return sent


def test_an_execution_counts_once_and_its_steps_count_for_each_request() -> None:
    stats = InferenceStats("m", "1", max_batch_size=8)
    started = time.perf_counter_ns()
    batch = ran([1, 2, 1])
    execution = batch[0].execution
    assert execution is not None and execution.rows == 4 and all(t.execution is execution for t in batch)
    stats.succeeded(started, batch[0])
    stats.failed(started)  # the second request: its answer failed after the model
    stats.succeeded(started, batch[2])
    got = stats.triton()
    assert (got["inference_count"], got["execution_count"]) == (2, 1)
    inference = got["inference_stats"]
    assert {k: v["count"] for k, v in inference.items()} == {
        "success": 2,
        "fail": 1,
        "queue": 2,
        "compute_input": 2,
        "compute_infer": 2,
        "compute_output": 2,
        "cache_hit": 0,
        "cache_miss": 0,
    }
    assert inference["queue"]["ns"] == 2 * 1000 and inference["compute_input"]["ns"] == 2 * 10
    assert inference["compute_infer"]["ns"] == 2 * 100
    (batch_stat,) = got["batch_stats"]
    assert batch_stat["batch_size"] == 4 and batch_stat["compute_infer"] == {"count": 1, "ns": 100}
    assert got["last_inference"] > 0


def test_an_execution_whose_requests_all_failed_is_not_counted() -> None:
    stats = InferenceStats("m", "1", max_batch_size=4)
    started = time.perf_counter_ns()
    for _ in ran([1, 1]):
        stats.failed(started)
    got = stats.triton()
    assert (got["execution_count"], got["batch_stats"], got["last_inference"]) == (0, [], 0)


def test_batch_sizes_are_bounded_by_the_models_max_batch_size() -> None:
    unbatched = InferenceStats("u", "1", max_batch_size=0)
    unbatched.succeeded(time.perf_counter_ns(), ran([5])[0])
    assert [b["batch_size"] for b in unbatched.triton()["batch_stats"]] == [1]


def test_a_dag_answer_counts_without_an_execution_and_reset_forgets() -> None:
    dag = InferenceStats("dag", "1")
    dag.answered(time.perf_counter_ns())
    got = dag.triton()
    assert got["inference_stats"]["success"]["count"] == 1 and got["execution_count"] == 0
    assert got["inference_stats"]["queue"]["count"] == 0
    book = Statistics({"dag": dag, "a-1": InferenceStats("a", "1")})
    assert [s.name for s in book.entries()] == ["a", "dag"]
    book.reset()
    assert dag.triton()["inference_stats"]["success"] == {"count": 0, "ns": 0}


def test_plain_inputs_are_left_alone() -> None:
    executed([object(), object()], 0, 1, 2)  # a caller that measures nothing: nothing to tell
    assert Execution(3, 0, 5, 15, 45).output_ns == 30

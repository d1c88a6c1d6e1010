"""Triton's statistics extension, kept per model version: what `GET /v2/models/stats` and gRPC
`ModelStatistics` answer (Triton's fields and meanings), and what `metrics.triton_names` exports.

A model node counts each request when it is answered: success or fail with the request's duration
(from the node's start to its answer), and for a success its rows (`inference_count`), its wait in the
queue and the compute steps of the execution that ran it (preprocess, inference, postprocess). An
execution (a batch, or one request) is counted once, when the first of its requests succeeds, as
Triton's backends count a batch unless all its requests failed: `execution_count`, its batch size's
`batch_stats`, `last_inference`.

Cheap on the hot path: a few `time.perf_counter_ns()` readings and integer additions per request, no
lock. Every counter is written on the event loop's thread only (by the node, when the request's answer
is back). An instance's thread writes nothing but the timings of its own execution, into the
`Execution` it makes and hands to the execution's `Timed` inputs; the loop reads them only after that
execution's answer came back through it, which orders the thread's writes before the reads.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from time import perf_counter_ns
from typing import Any

__all__ = ["BatchStats", "Execution", "InferenceStats", "Statistics", "Timed"]


class Execution:
    """One model execution as an instance ran it: its rows and the duration of each step."""

    __slots__ = ("counted", "infer_ns", "input_ns", "output_ns", "rows", "started_ns")

    def __init__(
        self, rows: int, started_ns: int, preprocessed_ns: int, inferred_ns: int, ended_ns: int
    ) -> None:
        self.rows = rows
        self.started_ns = started_ns  # time.perf_counter_ns() as the instance began it
        self.input_ns = preprocessed_ns - started_ns
        self.infer_ns = inferred_ns - preprocessed_ns
        self.output_ns = ended_ns - inferred_ns
        self.counted = False  # set by the first of its requests to succeed (on the loop)


class Timed:
    """A request's input on its way through the model's scheduler to an instance (which unwraps it),
    with the execution that ran it once one did."""

    __slots__ = ("execution", "inp", "queued_ns", "rows")

    def __init__(self, inp: Any, rows: int, queued_ns: int) -> None:
        self.inp = inp
        self.rows = rows
        self.queued_ns = queued_ns  # time.perf_counter_ns() as it was handed to the scheduler
        self.execution: Execution | None = None


def executed(sent: Sequence[Any], started_ns: int, preprocessed_ns: int, inferred_ns: int) -> None:
    """In the instance's thread, at the end of an execution: hand it to each Timed input it ran (a
    plain input, from a caller that measures nothing, counts one row)."""
    timed = [item for item in sent if type(item) is Timed]
    if not timed:
        return
    rows = sum(item.rows for item in timed) + sum(1 for item in sent if type(item) is not Timed)
    execution = Execution(rows, started_ns, preprocessed_ns, inferred_ns, perf_counter_ns())
    for item in timed:
        item.execution = execution


class BatchStats:
    """The executions of one batch size: how many, and the cumulative duration of each step."""

    __slots__ = ("count", "infer_ns", "input_ns", "output_ns")

    def __init__(self) -> None:
        self.count = 0
        self.input_ns = 0
        self.infer_ns = 0
        self.output_ns = 0


class InferenceStats:
    """The statistics of one model version (or of the DAG, under its name) since the server started
    serving (warmup runs are not counted). Written on the event loop's thread only."""

    __slots__ = (
        "batch_limit",
        "batches",
        "computed",
        "execution_count",
        "fail_count",
        "fail_ns",
        "infer_ns",
        "inference_count",
        "input_ns",
        "last_ns",
        "name",
        "output_ns",
        "queue_ns",
        "success_count",
        "success_ns",
        "version",
    )

    def __init__(self, name: str, version: str, max_batch_size: int = 0) -> None:
        self.name = name
        self.version = version
        # Batch sizes run: 1 for a model the server does not batch, at most max_batch_size for one it
        # does (the scheduler forms no larger batch): `batches` holds at most that many sizes.
        self.batch_limit = max(1, max_batch_size)
        self.reset()

    def reset(self) -> None:
        self.success_count = 0
        self.success_ns = 0
        self.fail_count = 0
        self.fail_ns = 0
        self.computed = 0  # successes whose execution is known: the count of queue and compute_*
        self.queue_ns = 0
        self.input_ns = 0
        self.infer_ns = 0
        self.output_ns = 0
        self.inference_count = 0
        self.execution_count = 0
        self.last_ns = 0  # perf_counter_ns() of the last execution (the wall clock is read when asked)
        self.batches: dict[int, BatchStats] = {}

    # -- counting (on the loop) ----------------------------------------------------------------
    def failed(self, started_ns: int) -> None:
        self.fail_count += 1
        self.fail_ns += perf_counter_ns() - started_ns

    def succeeded(self, started_ns: int, timed: Timed) -> None:
        """A request the node answered: its duration, rows, queue wait and compute steps; its execution
        counted once (by the first of its requests to succeed)."""
        now = perf_counter_ns()
        self.success_count += 1
        self.success_ns += now - started_ns
        self.inference_count += timed.rows
        execution = timed.execution
        if execution is None:
            return
        self.computed += 1
        self.queue_ns += execution.started_ns - timed.queued_ns
        input_ns, infer_ns, output_ns = execution.input_ns, execution.infer_ns, execution.output_ns
        self.input_ns += input_ns
        self.infer_ns += infer_ns
        self.output_ns += output_ns
        if execution.counted:
            return
        execution.counted = True
        self.execution_count += 1
        self.last_ns = now
        size = min(execution.rows, self.batch_limit)  # never larger: bounded whatever happens
        batch = self.batches.get(size)
        if batch is None:
            batch = self.batches[size] = BatchStats()
        batch.count += 1
        batch.input_ns += input_ns
        batch.infer_ns += infer_ns
        batch.output_ns += output_ns

    def answered(self, started_ns: int) -> None:
        """A success that is not an execution of its own (a DAG's run: its models count theirs)."""
        now = perf_counter_ns()
        self.success_count += 1
        self.success_ns += now - started_ns
        self.inference_count += 1
        self.last_ns = now

    @property
    def last_inference_ms(self) -> int:
        """Milliseconds since the epoch of the last inference; 0 when none yet."""
        if not self.last_ns:
            return 0
        return (time.time_ns() - (perf_counter_ns() - self.last_ns)) // 1_000_000

    # -- reading -------------------------------------------------------------------------------
    def triton(self) -> dict[str, Any]:
        """Triton's `$model_stat` object: the fields, names and integer values its HTTP answer has."""
        computed = self.computed
        return {
            "name": self.name,
            "version": self.version,
            "last_inference": self.last_inference_ms,
            "inference_count": self.inference_count,
            "execution_count": self.execution_count,
            "inference_stats": {
                "success": _duration(self.success_count, self.success_ns),
                "fail": _duration(self.fail_count, self.fail_ns),
                "queue": _duration(computed, self.queue_ns),
                "compute_input": _duration(computed, self.input_ns),
                "compute_infer": _duration(computed, self.infer_ns),
                "compute_output": _duration(computed, self.output_ns),
                "cache_hit": _duration(0, 0),  # no response cache
                "cache_miss": _duration(0, 0),
            },
            "response_stats": {},  # decoupled models' per-response statistics: none here
            "batch_stats": [
                {
                    "batch_size": size,
                    "compute_input": _duration(batch.count, batch.input_ns),
                    "compute_infer": _duration(batch.count, batch.infer_ns),
                    "compute_output": _duration(batch.count, batch.output_ns),
                }
                for size, batch in sorted(self.batches.items())
            ],
            "memory_usage": [],  # not measured
        }


def _duration(count: int, ns: int) -> dict[str, int]:
    return {"count": count, "ns": ns}


class Statistics:
    """Every served model version's statistics by model key ("name-version", or the DAG's name)."""

    def __init__(self, by_key: dict[str, InferenceStats]) -> None:
        self.by_key = by_key

    def entries(self) -> list[InferenceStats]:
        """In Triton's order: by name, then version."""
        return sorted(self.by_key.values(), key=lambda stats: (stats.name, stats.version))

    def reset(self) -> None:
        """Forget what was counted (the warmup runs), on the loop."""
        for stats in self.by_key.values():
            stats.reset()

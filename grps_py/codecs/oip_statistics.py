"""Triton's statistics (the JSON form core/statistics.py builds) as gRPC's ModelStatisticsResponse.

Every StatisticDuration is set, zero or not, as Triton's server sets them. `response_stats` (decoupled
models) has no field in this proto, and `memory_usage` is empty.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from grps_py.protos import open_inference_pb2 as pb

_INFERENCE_FIELDS = (
    "success",
    "fail",
    "queue",
    "compute_input",
    "compute_infer",
    "compute_output",
    "cache_hit",
    "cache_miss",
)
_BATCH_FIELDS = ("compute_input", "compute_infer", "compute_output")


def _set(duration: pb.StatisticDuration, stat: Mapping[str, int]) -> None:
    duration.SetInParent()  # present even when both are zero
    duration.count = stat["count"]
    duration.ns = stat["ns"]


def encode_statistics(models: Sequence[Mapping[str, Any]]) -> pb.ModelStatisticsResponse:
    response = pb.ModelStatisticsResponse()
    for model in models:
        stat = response.model_stats.add(
            name=model["name"],
            version=model["version"],
            last_inference=model["last_inference"],
            inference_count=model["inference_count"],
            execution_count=model["execution_count"],
        )
        inference = model["inference_stats"]
        for name in _INFERENCE_FIELDS:
            _set(getattr(stat.inference_stats, name), inference[name])
        for batch in model["batch_stats"]:
            added = stat.batch_stats.add(batch_size=batch["batch_size"])
            for name in _BATCH_FIELDS:
                _set(getattr(added, name), batch[name])
    return response

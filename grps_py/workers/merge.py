"""The workers' metrics added up into one server's: Prometheus expositions and dashboard series.

Prometheus (`merge_expositions`), sample by sample (the same name and labels in every worker):
- counters, histograms and summaries: summed (requests, durations, rows, CPU seconds...);
- gauges: summed (requests in flight, queue depth, open connections, memory, asyncio tasks...),
  except the GPU's and the limits of one process, which every worker reads alike: their maximum;
- `*_created` and `*_start_time_seconds`: the earliest;
- grps's user metrics (`grps_user_*`: totals, means, extremes and percentiles of model code's own
  values) cannot be added up: each worker's is kept, labelled `worker`.
Each worker writes the same families in the same order, so their lines merge by their text.

Dashboard series (`merge_series`), point by point: counts (`qps`, OOMs, tokens per second, running
and waiting sequences) and CPU and memory summed; averages weighted by each worker's requests; maxima
and percentiles (an upper bound) the largest.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

_MAX_PREFIXES = ("grps_gpu_", "grps_process_max_fds")
_MIN_SUFFIXES = ("_created", "_start_time_seconds")
_PER_WORKER_PREFIX = "grps_user_"
# Dashboard series that count or use something: summed over workers.
SUMMED = frozenset(
    {
        "qps",
        "gpu_oom_count",
        "cpu_usage(%)",
        "mem_usage(%)",
        "tokens_per_s",
        "running_sequences",
        "waiting_sequences",
    }
)
WEIGHTED = frozenset({"fail_rate(%)", "latency_avg(ms)", "queue_time_avg(ms)", "batch_size_avg"})


def _sample(line: str) -> tuple[str, str, float] | None:
    """`name{labels} value` as (name, labels, value); None for a line that is no sample."""
    head, _, value = line.rpartition(" ")
    if not head:
        return None
    brace = head.find("{")
    name = head if brace < 0 else head[:brace]
    try:
        return name, head[len(name) :], float(value)
    except ValueError:
        return None


def _combine(name: str, kind: str, old: float, new: float) -> float:
    if name.endswith(_MIN_SUFFIXES):
        return min(old, new)
    if kind == "gauge" and name.startswith(_MAX_PREFIXES):
        return max(old, new)
    return old + new


def _with_worker(labels: str, worker: int) -> str:
    if not labels:
        return f'{{worker="{worker}"}}'
    return f'{labels[:-1]},worker="{worker}"}}'


def merge_expositions(texts: Sequence[str]) -> bytes:
    """The text expositions of the workers (in worker order) as one."""
    headers: dict[str, list[str]] = {}  # family -> its HELP and TYPE lines, first seen
    kinds: dict[str, str] = {}
    values: dict[str, dict[tuple[str, str], float]] = {}  # family -> (name, labels) -> value
    for worker, text in enumerate(texts):
        family = ""
        for line in text.splitlines():
            if line.startswith("# "):
                parts = line.split(" ", 3)
                if len(parts) >= 3 and parts[1] in ("HELP", "TYPE"):
                    family = parts[2]
                    lines = headers.setdefault(family, [])
                    if len(lines) < 2 and line not in lines:
                        lines.append(line)
                    if parts[1] == "TYPE" and len(parts) == 4:
                        kinds[family] = parts[3].strip()
                continue
            sample = _sample(line)
            if sample is None:
                continue
            name, labels, value = sample
            if name.startswith(_PER_WORKER_PREFIX):
                labels = _with_worker(labels, worker)
            merged = values.setdefault(family, {})
            key = (name, labels)
            old = merged.get(key)
            merged[key] = value if old is None else _combine(name, kinds.get(family, ""), old, value)
    out: list[str] = []
    for family, lines in headers.items():
        out.extend(lines)
        out.extend(
            f"{name}{labels} {_number(value)}" for (name, labels), value in values.get(family, {}).items()
        )
    return ("\n".join(out) + "\n").encode()


def _number(value: float) -> str:
    if value == int(value) and abs(value) < 1e15:
        return f"{int(value)}.0"
    return repr(value)


def merge_series(
    name: str, series: Sequence[Mapping[str, Any]], weights: Sequence[Sequence[Any]]
) -> dict[str, Any]:
    """One dashboard series over the workers' (`series`: each worker's answer for `name`; `weights`:
    each worker's `qps` points, by which its averages count)."""
    first = dict(series[0])
    points = []
    for index, point in enumerate(first["points"]):
        values = [s["points"][index]["v"] if index < len(s["points"]) else None for s in series]
        weight = [_weight(w, index) for w in weights]
        points.append({**point, "v": _merge_point(name, values, weight)})
    return {**first, "points": points}


def _weight(points: Sequence[Any], index: int) -> float:
    if index >= len(points):
        return 0.0
    value = points[index]["v"]
    return float(value) if isinstance(value, (int, float)) else 0.0


def _merge_point(name: str, values: list[Any], weights: list[float]) -> Any:
    present = [(v, w) for v, w in zip(values, weights, strict=False) if v is not None]
    if not present:
        return None
    if isinstance(present[0][0], dict):  # percentiles: the largest of each is an upper bound
        keys = {key for v, _ in present for key in v}
        return {key: max(v.get(key, 0) for v, _ in present) for key in sorted(keys)}
    if name in SUMMED:
        return round(sum(v for v, _ in present), 3)
    if name in WEIGHTED:
        total = sum(w for _, w in present)
        if total > 0:
            return round(sum(v * w for v, w in present) / total, 3)
        return round(sum(v for v, _ in present) / len(present), 3)
    return max(v for v, _ in present)  # maxima, GPU readings


def merge_snapshots(snapshots: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The dashboard's latest values (`{"overall": {...}, "models": {key: {...}}}`) over the workers,
    by the same rules as the series (each worker's `*qps` weighs its averages)."""
    overall = _merge_scope([s.get("overall", {}) for s in snapshots])
    keys = dict.fromkeys(key for s in snapshots for key in s.get("models", {}))
    models = {
        key: _merge_scope([s["models"][key] for s in snapshots if key in s.get("models", {})]) for key in keys
    }
    return {"overall": overall, "models": models}


def _merge_scope(scopes: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    weights = [float(scope.get("*qps") or 0) for scope in scopes]
    names = dict.fromkeys(name for scope in scopes for name in scope)
    return {
        name: _merge_point(name.removeprefix("*"), [scope.get(name) for scope in scopes], weights)
        for name in names
    }

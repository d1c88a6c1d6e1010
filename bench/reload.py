"""Issue 21's benchmark: zero failed requests while a model is swapped, grps-py beside Triton in one run.

    .venv/bin/python bench/reload.py [--seconds 60] [--every 3] [--peers triton|none]

Eight clients, each a process with its own connection (4 OIP HTTP/JSON, 4 OIP gRPC ModelInfer), send to
model `m` back to back, first for `--seconds` with no swap (the baseline), then for `--seconds` more
while `m` is swapped every `--every` seconds between two versions. Every element of both outputs of
version 1 is 1, of version 2 is 2, so each answer tells which version made it, and an answer whose
elements disagree is a MIXED answer.

grps-py (bench/projects/reload, model_control: explicit) swaps through `POST /v2/repository/models/m/load`
with the model entry's inferer_path switched between two ONNX files; Triton (installed by bench/peers.py)
runs with --model-control-mode=poll --repository-poll-secs=1 and swaps when the benchmark rewrites the
constant file of its python model (bench/peer_models/triton_reload). See bench/reload_servers.py.

Printed per server: requests answered and failed (with a tally of statuses and messages), MIXED answers,
p50/p99 latency with and without swaps, how long after each swap (grps-py: after the load call
returned; Triton: after the file was replaced) the new version first answered, and PASS/FAIL per target.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from reload_clients import FAILED, MIXED, VERSIONS, ClientLog, ping, run_client
from reload_servers import Served, start_grps, start_triton, triton_unavailable

TRANSPORTS = ("http",) * 4 + ("grpc",) * 4  # one client process each
P99_RATIO_TARGET = 2.0
START_DELAY_S = 1.0  # between submitting the clients and their first request: time to connect
SETTLE_S = 3.0  # after a server is ready, before the baseline (Triton's poll sees the starting files)
WARM_UP_S = 5.0


@dataclass
class Swap:
    version: int  # the version swapped to
    began: float  # time.monotonic() when the load call was made / the file replacement began
    returned: float  # when the load call returned / the file was replaced
    error: str = ""


@dataclass
class Phase:
    logs: list[ClientLog]
    swaps: list[Swap]
    began: float
    ended: float

    def column(self, attr: str) -> np.ndarray:
        return np.concatenate([np.asarray(getattr(log, attr), dtype=np.float64) for log in self.logs])


@dataclass
class Figures:
    """What one phase of one server came to."""

    answered: int
    failed: int
    mixed: int
    requests_per_s: float
    p50_ms: float
    p99_ms: float
    errors: Counter[str] = field(default_factory=Counter)
    swaps: int = 0
    swap_errors: Counter[str] = field(default_factory=Counter)
    swap_call_ms: list[float] = field(default_factory=list)
    new_version_after_ms: list[float] = field(default_factory=list)  # per swap that took effect
    stale: int = 0  # old-version answers to requests sent after the swap returned


def run_phase(pool: ProcessPoolExecutor, served: Served, seconds: float, every: float | None) -> Phase:
    """The clients for `seconds`; with `every`, the model swapped to its other version that often (the
    last swap two intervals before the end, so that every swap has time to show)."""
    began = time.monotonic() + START_DELAY_S
    ended = began + seconds
    futures = [pool.submit(run_client, served.target, t, began, ended) for t in TRANSPORTS]
    swaps: list[Swap] = []
    version = VERSIONS[0]
    while every is not None and (at := began + every * (len(swaps) + 1)) <= ended - 2 * every:
        time.sleep(max(0.0, at - time.monotonic()))
        version = VERSIONS[1] if version == VERSIONS[0] else VERSIONS[0]
        swap = Swap(version, time.monotonic(), 0.0)
        try:
            served.swap(version)
        except Exception as exc:
            swap.error = f"{type(exc).__name__}: {str(exc)[:160]}"
            version = VERSIONS[1] if version == VERSIONS[0] else VERSIONS[0]  # still the old one
        swap.returned = time.monotonic()
        swaps.append(swap)
    logs = [future.result() for future in futures]
    return Phase(logs, swaps, began, ended)


def figures(phase: Phase) -> Figures:
    sent, done, outcome = phase.column("sent"), phase.column("done"), phase.column("outcome")
    ok = outcome != FAILED
    latencies = np.sort(done[ok] - sent[ok]) * 1e3 if ok.any() else np.asarray([np.nan])
    errors: Counter[str] = Counter()
    for log in phase.logs:
        errors.update(log.errors)
    result = Figures(
        answered=int(ok.sum()),
        failed=int((~ok).sum()),
        mixed=int((outcome == MIXED).sum()),
        requests_per_s=float(ok.sum()) / (phase.ended - phase.began),
        p50_ms=float(np.percentile(latencies, 50)),
        p99_ms=float(np.percentile(latencies, 99)),
        errors=errors,
        swaps=len(phase.swaps),
    )
    for i, swap in enumerate(phase.swaps):
        if swap.error:
            result.swap_errors[swap.error] += 1
            continue
        result.swap_call_ms.append((swap.returned - swap.began) * 1e3)
        # Its version can only come from this swap until the swap after next begins (the next one goes
        # back to the other version), however late a server acts on it.
        until, after_next = (phase.swaps[j].began if j < len(phase.swaps) else np.inf for j in (i + 1, i + 2))
        new = (done >= swap.began) & (done < after_next) & (outcome == swap.version)
        if new.any():
            # 0 when the new version was already answering by the time the call returned
            result.new_version_after_ms.append(max(0.0, float(done[new].min()) - swap.returned) * 1e3)
        old = (sent >= swap.returned) & (done < until) & np.isin(outcome, VERSIONS)
        result.stale += int((old & (outcome != swap.version)).sum())
    return result


# -- report ----------------------------------------------------------------------------------------
def median_max(values: list[float]) -> str:
    return f"{statistics.median(values):.0f} / {max(values):.0f}" if values else "-"


def ratio(reload: Figures, baseline: Figures) -> float:
    return reload.p99_ms / baseline.p99_ms if baseline.p99_ms > 0 else float("nan")


ROWS: tuple[tuple[str, Callable[[Figures, Figures], str]], ...] = (
    ("baseline: answered / failed", lambda b, r: f"{b.answered} / {b.failed}"),
    ("baseline: requests/s", lambda b, r: f"{b.requests_per_s:.0f}"),
    ("baseline: p50 / p99 ms", lambda b, r: f"{b.p50_ms:.1f} / {b.p99_ms:.1f}"),
    ("swaps: answered / failed", lambda b, r: f"{r.answered} / {r.failed}"),
    ("swaps: MIXED answers", lambda b, r: f"{r.mixed}"),
    ("swaps: requests/s", lambda b, r: f"{r.requests_per_s:.0f}"),
    ("swaps: p50 / p99 ms", lambda b, r: f"{r.p50_ms:.1f} / {r.p99_ms:.1f}"),
    ("p99 swaps / p99 baseline", lambda b, r: f"{ratio(r, b):.2f}x"),
    ("swaps made / took effect", lambda b, r: f"{r.swaps} / {len(r.new_version_after_ms)}"),
    ("swap call ms, median / max", lambda b, r: median_max(r.swap_call_ms)),
    ("new version answers after, ms med / max", lambda b, r: median_max(r.new_version_after_ms)),
    ("old-version answers sent after swap", lambda b, r: f"{r.stale}"),
)


def report(results: dict[str, tuple[Figures, Figures]], args: argparse.Namespace, skipped: str) -> bool:
    """Print the table, the failure tallies and the PASS/FAIL lines; True if grps-py passed every target
    (the peer's lines are for comparison)."""
    names = list(results)
    print(
        f"\nmodel m swapped every {args.every:g} s for {args.seconds:g} s, after a {args.seconds:g} s "
        f"baseline without swaps; {len(TRANSPORTS)} client processes ({TRANSPORTS.count('http')} "
        f"OIP HTTP/JSON, {TRANSPORTS.count('grpc')} OIP gRPC), one connection each"
    )
    print(
        f"machine: {os.cpu_count()} CPU cores shared by the server and all clients: latencies are noisy; "
        "p50 is the median, quote it"
    )
    print(
        "grps-py swaps: POST /v2/repository/models/m/load (times from the call's return); Triton: poll mode, "
        "repository polled every 1 s (times from the file's replacement)"
    )
    if skipped:
        print(f"triton: not run ({skipped})")
    print(f"\n{'':42}" + "".join(f"{name:>16}" for name in names))
    for label, cell in ROWS:
        print(f"{label:42}" + "".join(f"{cell(*results[name]):>16}" for name in names))
    for name in names:
        baseline, swapping = results[name]
        tally = baseline.errors + swapping.errors + swapping.swap_errors
        print(f"\n{name} failures: " + ("none" if not tally else ""))
        for message, count in tally.most_common(10):
            print(f"  {count:6} x {message}")
    print()
    passed = True
    for name in names:
        baseline, swapping = results[name]
        checks = (
            (swapping.failed == 0, f"zero failed requests during swaps ({swapping.failed})"),
            (swapping.mixed == 0, f"every answer from one whole version ({swapping.mixed} MIXED)"),
            (
                ratio(swapping, baseline) <= P99_RATIO_TARGET,
                f"p99 during swaps <= {P99_RATIO_TARGET:g}x baseline ({ratio(swapping, baseline):.2f}x)",
            ),
            (
                swapping.swaps > 0 and len(swapping.new_version_after_ms) == swapping.swaps,
                f"every swap took effect ({len(swapping.new_version_after_ms)} of {swapping.swaps})",
            ),
        )
        for ok, what in checks:
            print(f"{'PASS' if ok else 'FAIL'}  {name:8} {what}")
            passed = passed and (ok or name != "grps-py")
    return passed


def measure(
    pool: ProcessPoolExecutor, start: Callable[[Path], Served], workdir: Path, args: argparse.Namespace
) -> tuple[Figures, Figures]:
    workdir.mkdir(parents=True)
    served = start(workdir)
    try:
        print(f"{served.name}: ready; baseline {args.seconds:g} s", flush=True)
        time.sleep(SETTLE_S)
        run_phase(pool, served, WARM_UP_S, None)  # connections, caches, first calls: not measured
        baseline = figures(run_phase(pool, served, args.seconds, None))
        print(f"{served.name}: swapping every {args.every:g} s for {args.seconds:g} s", flush=True)
        swapping = figures(run_phase(pool, served, args.seconds, args.every))
    finally:
        served.stop()
    return baseline, swapping


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=60.0, help="length of each phase (default 60)")
    parser.add_argument("--every", type=float, default=3.0, help="seconds between swaps (default 3)")
    parser.add_argument("--peers", choices=("triton", "none"), default="triton")
    args = parser.parse_args()
    if args.seconds < 3 * args.every:
        parser.error("--seconds must leave room for a swap: at least 3 times --every")
    skipped = "--peers none" if args.peers == "none" else ""
    if not skipped and (why := triton_unavailable()):
        skipped = why
        print(f"triton cannot run here, grps-py alone: {why}", flush=True)
    context = multiprocessing.get_context("spawn")  # no gRPC state forked into the clients
    with (
        tempfile.TemporaryDirectory(prefix="bench-reload-") as tmp,
        ProcessPoolExecutor(len(TRANSPORTS), mp_context=context) as pool,
    ):
        # Every client process started and done importing before any phase: until one task each keeps
        # every process busy at once.
        while len(set(pool.map(ping, [1.0] * len(TRANSPORTS)))) < len(TRANSPORTS):
            pass
        results = {"grps-py": measure(pool, start_grps, Path(tmp) / "grps-py", args)}
        if not skipped:
            results["triton"] = measure(pool, start_triton, Path(tmp) / "triton", args)
        passed = report(results, args, skipped)
    raise SystemExit(0 if passed else 1)


if __name__ == "__main__":
    main()

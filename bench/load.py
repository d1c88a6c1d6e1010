"""The load the benchmarks share: `concurrency` workers sending back to back, latencies recorded."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

Send = Callable[[], Awaitable[object]]


@dataclass(frozen=True)
class Load:
    requests_per_s: float
    p50_ms: float
    p99_ms: float


async def drive(send: Send, seconds: float, concurrency: int) -> Load:
    """Requests/s, p50 and p99 of `concurrency` workers sending back to back for `seconds`."""
    latencies: list[float] = []
    stop = time.perf_counter() + seconds

    async def worker() -> None:
        while time.perf_counter() < stop:
            start = time.perf_counter()
            await send()
            latencies.append(time.perf_counter() - start)

    began = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.perf_counter() - began
    ordered = sorted(latencies)
    return Load(
        len(ordered) / elapsed,
        ordered[len(ordered) // 2] * 1e3,
        ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1e3,
    )

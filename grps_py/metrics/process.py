"""This process's CPU and memory as percentages (the dashboard's), and its open connections.

Prometheus gets CPU seconds, resident memory and file descriptors from prometheus_client's own
ProcessCollector; the dashboard wants grps's percentages instead, sampled once a second.
Everything here reads /proc and quietly reports nothing where it is missing (not Linux).
"""

from __future__ import annotations

import os
from collections.abc import Callable

FD_DIR = "/proc/self/fd"
STATM = "/proc/self/statm"


def open_connections(fd_dir: str = FD_DIR) -> int:
    """How many of this process's file descriptors are sockets (listeners included); 0 without /proc."""
    try:
        names = os.listdir(fd_dir)
    except OSError:
        return 0
    count = 0
    for name in names:
        try:
            if os.readlink(os.path.join(fd_dir, name)).startswith("socket:"):
                count += 1
        except OSError:  # closed between listdir and readlink
            continue
    return count


def resident_bytes(statm: str = STATM) -> int | None:
    """Resident set size now (not the peak that getrusage gives)."""
    try:
        with open(statm, encoding="ascii") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def total_memory_bytes() -> int | None:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, AttributeError):
        return None


def cpu_seconds() -> float:
    """User + system CPU time of this process (all threads)."""
    times = os.times()
    return times.user + times.system


class ProcessSampler:
    """CPU % since the previous sample (100 = one core busy, like top) and memory % of the machine."""

    def __init__(
        self, clock: Callable[[], float], statm: str = STATM, cpu: Callable[[], float] = cpu_seconds
    ) -> None:
        self._clock = clock
        self._cpu = cpu
        self._statm = statm
        self._total = total_memory_bytes()
        self._last = (clock(), cpu())

    def sample(self) -> tuple[float | None, float | None]:
        """(cpu %, memory %); None for what cannot be measured (no time passed, no /proc)."""
        now, cpu = self._clock(), self._cpu()
        last_now, last_cpu = self._last
        self._last = (now, cpu)
        elapsed = now - last_now
        cpu_pct = max(0.0, (cpu - last_cpu) / elapsed * 100) if elapsed > 0 else None
        rss = resident_bytes(self._statm)
        mem_pct = rss / self._total * 100 if rss is not None and self._total else None
        return cpu_pct, mem_pct

"""The dashboard's windows over 1 s buckets: the last minute, hour, day and month, as grps keeps them.

Like grps's monitor, a scope keeps buckets of 1 s, 1 min, 1 h and 1 d. Only the current 1 s bucket is
written to; when its second is over it is merged once into its minute, hour and day buckets. Buckets are
aligned on epoch seconds (UTC minutes, hours and days). Any bucket type that knows its `start`, whether
it is `empty()` and how to `merge` a finer one works: the server's request series (metrics/series.py)
and the user metrics (app_metrics.py, which the metrics package imports, hence a module of its own).

Not thread-safe: each owner calls a scope from one thread, or under its own lock.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar


class TimeBucket(Protocol):
    start: int

    def empty(self) -> bool: ...

    def merge(self, other: Any) -> None: ...


B = TypeVar("B", bound=TimeBucket)


@dataclass(frozen=True)
class Window:
    """A dashboard window: `points` buckets of `step_s` seconds each."""

    name: str
    step_s: int
    points: int


# Finest first: the 1 s buckets are the ones written to; the others are merged into.
WINDOWS = (
    Window("minute", 1, 60),
    Window("hour", 60, 60),
    Window("day", 3600, 24),
    Window("month", 86400, 30),
)
WINDOW_BY_NAME = {w.name: w for w in WINDOWS}


class Ring(Generic[B]):
    """The buckets of one resolution, by start time; keeps what its window can show, plus the current."""

    def __init__(self, window: Window, make: Callable[[int], B]) -> None:
        self.window = window
        self.make = make
        self.buckets: dict[int, B] = {}

    def at(self, start: int) -> B:
        bucket = self.buckets.get(start)
        if bucket is None:
            bucket = self.buckets[start] = self.make(start)
            oldest = start - self.window.points * self.window.step_s
            for old in [s for s in self.buckets if s < oldest]:
                del self.buckets[old]
        return bucket


class Scope(Generic[B]):
    """The buckets of one scope (the server, a model, a user metric) at every resolution."""

    def __init__(self, make: Callable[[int], B]) -> None:
        self.rings = [Ring(w, make) for w in WINDOWS]
        self.current: B | None = None  # the 1 s bucket being filled (also in rings[0])

    def bucket(self, now_s: int) -> B:
        """The 1 s bucket to record into at `now_s` (a clock that steps back keeps the current one)."""
        current = self.current
        if current is not None and current.start >= now_s:
            return current
        self.advance(now_s)
        current = self.current = self.rings[0].at(now_s)
        return current

    def advance(self, now_s: int) -> None:
        """Close the current 1 s bucket if its second is over, merging it into the coarser rings."""
        current = self.current
        if current is None or current.start >= now_s:
            return
        self.current = None
        if current.empty():
            return
        for ring in self.rings[1:]:
            step = ring.window.step_s
            ring.at(current.start - current.start % step).merge(current)

    def points(
        self,
        window: Window,
        now: float,
        value: Callable[[B, int], Any],
        missing: Callable[[int, int], Any],
    ) -> list[dict[str, Any]]:
        """The window's points `{"t": start, "v": value}`, oldest first, ending with the last complete
        bucket; `value(bucket, step_s)`, or `missing(start, step_s)` where no bucket was kept."""
        step = window.step_s
        buckets = self.rings[WINDOWS.index(window)].buckets
        now_s = int(now)
        last = now_s - now_s % step - step
        out = []
        for start in range(last - (window.points - 1) * step, last + step, step):
            bucket = buckets.get(start)
            out.append({"t": start, "v": missing(start, step) if bucket is None else value(bucket, step)})
        return out

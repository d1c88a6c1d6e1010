"""Which waiting requests run next, and when: priority levels, aging and dynamic batch forming.

Pure rules, no state of their own: no threads, no event loop, no clock. The caller passes `now`, in
the seconds of the clock that stamped the requests' `enqueued` (the event loop's, in the scheduler),
so a test drives the policy with plain numbers.

Priorities: level 1 is served first. A waiting request moves up one level per `aging_s` it has
waited, so lower levels are delayed, never starved; equal levels are served oldest first.

Batches (a batched model): the best waiting request leads, and the compatible requests behind it join
in that order, as long as they fit in `max_rows`. The batch goes when it is full, when it reached a
preferred size (cut back to the largest preferred size it reached), or when its oldest request has
waited `timeout_s`. What fits depends on who merges the batch:

- **Rows** (Triton's rule; the numpy/torch converters and every step-by-step converter, which grps-py
  concatenates along dim 0): a request counts its rows, and joins only requests of an equal `key`
  (same tensor names, dtypes and non-batch dims).
- **Requests** (grps's rule, `counts_requests`; a converter with its own `batch_preprocess`, which
  merges the batch itself): a request counts 1 whatever its shape, and any request joins any other, so
  variable-length inputs batch together; `max_rows` is then grps's `max_batch_size` in requests.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from typing import Protocol, TypeVar

from grps_py.core.config import ModelSettings


class Waiting(Protocol):
    """A request as the policy sees it."""

    rows: int  # along the batch dimension
    key: Hashable  # by the rows rule, requests batch together only when their keys are equal
    level: int  # its priority level when it arrived
    enqueued: float  # when it arrived, on the caller's clock


W = TypeVar("W", bound=Waiting)


class BatchPolicy:
    def __init__(
        self,
        *,
        batching: bool,
        max_rows: int,
        preferred: Iterable[int] = (),
        timeout_s: float,
        aging_s: float,
        levels: int = 1,
        default_level: int = 1,
        counts_requests: bool = False,
    ) -> None:
        self.batching = batching
        self.counts_requests = counts_requests
        self.max_rows = max_rows
        self.preferred = frozenset(preferred)
        self.timeout_s = timeout_s
        self.aging_s = aging_s
        self.levels = levels
        self.default_level = default_level

    @classmethod
    def from_settings(
        cls, settings: ModelSettings, batching: bool, counts_requests: bool = False
    ) -> BatchPolicy:
        """A model's policy; `batching` says whether its requests are batched (its settings ask for it,
        and its code can be: async model code is not), `counts_requests` whether its converter merges
        its batches itself (grps's rule: the batch size counts requests, of any shape)."""
        config = settings.batching
        return cls(
            batching=batching,
            counts_requests=counts_requests,
            max_rows=config.max_batch_size,
            preferred=config.preferred_batch_size,
            timeout_s=config.batch_timeout_us / 1e6,
            aging_s=settings.priority_aging_us / 1e6,
            levels=settings.priority_levels,
            default_level=settings.default_priority_level,
        )

    def level(self, priority: int) -> int:
        """A request's priority level: 0 (unset) is the model's default; out of range is clamped."""
        if priority <= 0:
            return self.default_level
        return min(priority, self.levels)

    def effective_level(self, item: Waiting, now: float) -> int:
        """Its level once aged: one level up per `aging_s` waited."""
        return item.level - int((now - item.enqueued) / self.aging_s)

    def next_batch(self, waiting: Sequence[W], now: float) -> tuple[list[W], float]:
        """What to run now out of `waiting` (not empty): a batch, or none yet and the seconds until the
        one forming is due."""
        order = sorted(waiting, key=lambda it: (self.effective_level(it, now), it.enqueued))
        leader = order[0]
        if not self.batching:
            return [leader], 0.0
        batch: list[W] = []
        rows, cut = 0, 0
        per_request = self.counts_requests
        for item in order:
            size = 1 if per_request else item.rows
            if (not per_request and item.key != leader.key) or rows + size > self.max_rows:
                continue
            batch.append(item)
            rows += size
            if rows == self.max_rows:
                return batch, 0.0
            if rows in self.preferred:
                cut = len(batch)
        due = min(item.enqueued for item in batch) + self.timeout_s
        if now >= due:
            return batch, 0.0
        if cut:
            return batch[:cut], 0.0
        return [], due - now

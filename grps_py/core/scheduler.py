"""Per-model scheduling: a bounded priority queue, dynamic batching, instances, timeouts, cancellation.

Requests wait in the model's queue (at most `max_queue_size`; a full queue answers Overloaded at
once). Whenever an instance is free and the server-wide `max_concurrency` allows, the scheduler
takes the best waiting request and, for a batched model, the compatible requests behind it (same
tensor names, dtypes and non-batch dims) up to `max_batch_size` rows. It sends the batch when it
is full, when it reaches a preferred size, or when the oldest request in it has waited
`batch_timeout_us`. A request whose time runs out while queued is answered DeadlineExceeded and
never runs; a cancelled one just leaves the queue.

Priorities: level 1 is served first. A waiting request moves up one level per `priority_aging_us`
it has waited, so lower levels are delayed, never starved; equal levels are served oldest first.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

from grps_py.core import request_scope
from grps_py.core.config import ModelSettings
from grps_py.core.context import GrpsContext
from grps_py.core.errors import DeadlineExceeded, InvalidInput, ModelNotReady, Overloaded
from grps_py.core.instance import ModelInstance, Outcome
from grps_py.core.observer import CANCELLED, QUEUE_FULL, TIMEOUT, SchedulerObserver


class ConcurrencyLimit:
    """Server-wide `max_concurrency`: model executions (a batch is one) running at once.

    Only schedulers that found the limit reached are woken when a slot frees (waking every model's
    scheduler on every release would cost each request a wake-up per served model)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.running = 0
        self._waiting: dict[int, Callable[[], None]] = {}

    def available(self) -> bool:
        return self.running < self.limit

    def acquire(self) -> None:
        self.running += 1

    def release(self) -> None:
        self.running -= 1
        waiting, self._waiting = self._waiting, {}
        for wake in waiting.values():
            wake()

    def wait(self, wake: Callable[[], None]) -> None:
        """Call `wake` once, at the next release."""
        self._waiting[id(wake)] = wake


@dataclass(eq=False)
class QueueItem:
    inp: Any
    ctx: GrpsContext
    rows: int
    key: Hashable  # requests batch together only when their keys are equal
    level: int
    enqueued: float
    future: asyncio.Future[Any]
    timer: asyncio.TimerHandle | None = field(default=None)
    # Handed to a busy instance's thread ahead of time (unbatched models): until it starts there,
    # it can still time out or be cancelled, and the thread then skips it.
    prefetched: bool = False
    started: bool = False
    abandoned: bool = False

    def waiting(self) -> bool:
        return self.prefetched and not self.started


class ModelScheduler:
    def __init__(
        self,
        settings: ModelSettings,
        instances: list[ModelInstance],
        limit: ConcurrencyLimit,
        observer: SchedulerObserver,
    ) -> None:
        self.key = settings.key
        self.settings = settings
        self.instances = instances
        batching = settings.batching
        self.batching = batching.type == "dynamic" and not any(i.is_async for i in instances)
        self.max_rows = batching.max_batch_size
        self._preferred = set(batching.preferred_batch_size)
        self._timeout_s = batching.batch_timeout_us / 1e6
        self._aging_s = settings.priority_aging_us / 1e6
        # Unbatched sync models with one priority level get the next request handed to their thread
        # while one runs: the thread goes from one to the next without a round trip through the
        # event loop (a thread hand-off costs 100-300 us of CPU on small VMs). A batched model waits
        # so batches fill, and with priorities the next request is chosen only when a thread is free.
        prefetch = not self.batching and settings.priority_levels == 1
        self._depth = 2 if prefetch and not any(i.is_async for i in instances) else 1
        self._default_timeout_s = settings.default_timeout_us / 1e6 or None
        self._limit = limit
        self._observer = observer
        self._pending: list[QueueItem] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._running: set[asyncio.Task[None]] = set()

    @property
    def depth(self) -> int:
        return len(self._pending)

    # -- admission -----------------------------------------------------------------------------
    async def submit(self, inp: Any, ctx: GrpsContext, rows: int, key: Hashable) -> Any:
        loop = asyncio.get_running_loop()
        if self._task is None:
            self._task = loop.create_task(self._dispatch())
        if self.batching and rows > self.max_rows:
            raise InvalidInput(
                f"the request has {rows} rows; model '{self.key}' takes at most {self.max_rows}"
            )
        if len(self._pending) >= self.settings.batching.max_queue_size:
            self._observer.dropped(self.key, QUEUE_FULL, self.depth)
            raise Overloaded(f"model '{self.key}' queue is full ({self.depth} requests waiting); retry later")
        remaining = ctx.time_remaining()
        if remaining is None:
            remaining = self._default_timeout_s
        if remaining is not None and remaining <= 0:
            raise DeadlineExceeded(f"the request's time ran out before it reached model '{self.key}'")
        item = QueueItem(inp, ctx, rows, key, self._level(ctx), loop.time(), loop.create_future())
        if remaining is not None:
            item.timer = loop.call_later(remaining, self._expire, item)
        instance = self._free_instance()
        if not self.batching and not self._pending and instance is not None and self._limit.available():
            self._start(instance, [item], item.enqueued)  # nothing to choose from: skip the dispatcher
        else:
            self._pending.append(item)
            self._wake.set()
        self._observer.queued(self.key, self.depth)
        try:
            return await item.future
        except asyncio.CancelledError:
            if self._remove(item) or item.waiting():
                item.abandoned = True
                self._observer.dropped(self.key, CANCELLED, self.depth)
            raise

    def _level(self, ctx: GrpsContext) -> int:
        """The request's priority level: 0 (unset) is the model's default; out of range is clamped."""
        if ctx.priority <= 0:
            return self.settings.default_priority_level
        return min(ctx.priority, self.settings.priority_levels)

    def _remove(self, item: QueueItem, keep_timer: bool = False) -> bool:
        """Take an item out of the queue; False when it already left (dispatched, expired)."""
        for i, queued in enumerate(self._pending):
            if queued is item:
                del self._pending[i]
                if item.timer is not None and not keep_timer:
                    item.timer.cancel()
                return True
        return False

    def _expire(self, item: QueueItem) -> None:
        if not self._remove(item) and not item.waiting():
            return
        item.abandoned = True
        waited_ms = (asyncio.get_running_loop().time() - item.enqueued) * 1e3
        self._observer.dropped(self.key, TIMEOUT, self.depth)
        if not item.future.done():
            item.future.set_exception(
                DeadlineExceeded(
                    f"timed out after waiting {waited_ms:.0f} ms in the queue of model '{self.key}'"
                )
            )

    # -- dispatch ------------------------------------------------------------------------------
    async def _dispatch(self) -> None:
        while True:
            self._wake.clear()
            wait_s = self._dispatch_ready()
            if wait_s is None:
                await self._wake.wait()
                continue
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wake.wait(), wait_s)

    def _dispatch_ready(self) -> float | None:
        """Start every batch that can start now; the seconds until a waiting batch is due, or None."""
        loop = asyncio.get_running_loop()
        while self._pending:
            instance = self._free_instance()
            if instance is None:
                return None  # the instance that frees up wakes this scheduler
            if not self._limit.available():
                self._limit.wait(self._wake.set)
                return None
            now = loop.time()
            batch, wait_s = self._form_batch(now)
            if not batch:
                return wait_s
            for item in batch:
                self._remove(item, keep_timer=True)
            self._start(instance, batch, now)
        return None

    def _free_instance(self) -> ModelInstance | None:
        instance = min(self.instances, key=lambda i: i.active)
        return instance if instance.active < self._depth else None

    def _start(self, instance: ModelInstance, batch: list[QueueItem], now: float) -> None:
        """Hand a batch (out of the queue) to an instance. On a busy instance's thread it is prefetched:
        its timers stay, so it can still time out before it starts."""
        prefetched = instance.active > 0
        for item in batch:
            item.prefetched = prefetched
            if not prefetched and item.timer is not None:
                item.timer.cancel()
        instance.active += 1
        self._limit.acquire()
        task = asyncio.get_running_loop().create_task(self._run(instance, batch, now))
        self._running.add(task)  # the loop keeps only weak references to tasks
        task.add_done_callback(self._running.discard)

    def _effective_level(self, item: QueueItem, now: float) -> int:
        return item.level - int((now - item.enqueued) / self._aging_s)

    def _form_batch(self, now: float) -> tuple[list[QueueItem], float]:
        order = sorted(self._pending, key=lambda it: (self._effective_level(it, now), it.enqueued))
        leader = order[0]
        if not self.batching:
            return [leader], 0.0
        batch: list[QueueItem] = []
        rows, cut = 0, 0
        for item in order:
            if item.key != leader.key or rows + item.rows > self.max_rows:
                continue
            batch.append(item)
            rows += item.rows
            if rows == self.max_rows:
                return batch, 0.0
            if rows in self._preferred:
                cut = len(batch)
        due = min(item.enqueued for item in batch) + self._timeout_s
        if now >= due:
            return batch, 0.0
        if cut:
            return batch[:cut], 0.0
        return [], due - now

    async def _run(self, instance: ModelInstance, batch: list[QueueItem], started: float) -> None:
        # This task may have been started from another request's task or the dispatcher: log lines
        # here belong to the batch's own requests.
        request_scope.enter(batch_scope(batch))
        loop = asyncio.get_running_loop()
        queue_s = [started - item.enqueued for item in batch]
        try:
            outcomes = await self._execute(loop, instance, batch)
        except Exception as exc:  # the instance's thread pool is gone (shutdown)
            outcomes = [(None, exc)] * len(batch)
        finally:
            instance.active -= 1
            self._limit.release()
            self._wake.set()  # this model's next batch can use the freed instance
        compute_s = loop.time() - started
        self._observer.batch_ran(self.key, sum(item.rows for item in batch), queue_s, compute_s, self.depth)
        for item, (out, err) in zip(batch, outcomes, strict=True):
            item.ctx.postprocess = None  # the instance's closure holds the context: no cycle left for the GC
            if item.future.done():  # the caller gave up while it ran
                continue
            if err is not None:
                item.future.set_exception(err)
            else:
                item.future.set_result(out)

    async def _execute(
        self, loop: asyncio.AbstractEventLoop, instance: ModelInstance, items: list[QueueItem]
    ) -> list[Outcome]:
        inps, ctxs = [item.inp for item in items], [item.ctx for item in items]
        if instance.is_async:
            try:
                return [(await instance.run_async(inps[0], ctxs[0]), None)]
            except Exception as exc:
                return [(None, exc)]
        if len(inps) == 1 and not (self.batching and instance.batches_whole):
            return [await loop.run_in_executor(instance.pool, _run_one, instance, items[0])]
        return await loop.run_in_executor(instance.pool, instance.run_batch, inps, ctxs)

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
        for item in self._pending:
            if item.timer is not None:
                item.timer.cancel()
            if not item.future.done():
                item.future.set_exception(ModelNotReady(f"model '{self.key}' is shutting down"))
        self._pending.clear()


def batch_scope(batch: list[QueueItem]) -> str:
    """The request id of a batch's log lines: its one request's, or all of theirs."""
    if len(batch) == 1:
        return batch[0].ctx.request_id
    return request_scope.batch_id(item.ctx.request_id for item in batch)


def _run_one(instance: ModelInstance, item: QueueItem) -> Outcome:
    """In the instance's thread. A prefetched request that timed out or was cancelled meanwhile is skipped."""
    item.started = True
    if item.abandoned:
        return None, None  # already answered on the loop
    token = request_scope.enter(item.ctx.request_id)  # threads inherit no context: the model's lines
    try:
        return instance.run_one(item.inp, item.ctx), None
    except Exception as exc:
        return None, exc
    finally:
        request_scope.leave(token)

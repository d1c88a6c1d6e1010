"""Per-model scheduling: a bounded priority queue, dynamic batching, instances, timeouts, cancellation.

Requests wait in the model's queue (at most `max_queue_size`; a full queue answers Overloaded at
once). Whenever an instance is free and the server-wide `max_concurrency` allows, the scheduler
takes the best waiting request and, for a batched model, the compatible requests behind it (same
tensor names, dtypes and non-batch dims) up to `max_batch_size` rows. It sends the batch when it
is full, when it reaches a preferred size, or when the oldest request in it has waited
`batch_timeout_us`. A request whose time runs out while queued is answered DeadlineExceeded and
never runs; a cancelled one just leaves the queue.

An unbatched model's requests are prefetched: handed to a busy instance's thread, to run as soon as it
is done with the one before, so the thread goes from one to the next without a round trip through the
event loop. A model with one instance gets up to PREFETCH_ONE_INSTANCE of them (no other instance could
take them sooner, and each round trip costs a context switch each way); a model with several gets one
(a slow request must not hold up others that another instance could run). Requests prefetched behind
an instance's next one count as queued (`max_queue_size`, queue depth). `max_concurrency` counts busy
instances (one slot each, whatever is prefetched behind the running request).

A request whose time runs out while it runs is answered DeadlineExceeded at its deadline too (its
thread cannot be stopped and goes on). Its instance is then reported hung: it releases its
`max_concurrency` slot, the requests prefetched behind it go back to the queue, and it gets no new
work until the batch returns, so the model's other instances (and other models) keep serving.

Priorities: level 1 is served first. A waiting request moves up one level per `priority_aging_us`
it has waited, so lower levels are delayed, never starved; equal levels are served oldest first.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

from grps_py.core import request_scope
from grps_py.core.config import ModelSettings
from grps_py.core.context import GrpsContext
from grps_py.core.errors import DeadlineExceeded, InvalidInput, ModelNotReady, Overloaded
from grps_py.core.instance import ModelInstance, Outcome
from grps_py.core.observer import CANCELLED, QUEUE_FULL, TIMEOUT, SchedulerObserver

log = logging.getLogger("grps_py.model")
# Held while an instance's thread starts a prefetched request, and while the loop takes one back
# (timed out, cancelled, or moved off a hung instance): the request then runs once or not at all.
_CLAIM = threading.Lock()
PREFETCH_ONE_INSTANCE = 16


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
        if self._waiting:  # seldom: only while the limit holds requests back
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
    timeout_s: float | None = None
    timer: asyncio.TimerHandle | None = field(default=None)
    # The dispatch that runs it; None while it is queued and once it was answered or taken back.
    run: Dispatch | None = None


@dataclass(eq=False)
class Dispatch:
    """A batch handed to an instance. A prefetched one (unbatched models) waits on the instance's
    thread behind the running one: until the thread starts it, its requests can still time out, be
    cancelled or go back to the queue, and the thread then skips them."""

    instance: ModelInstance
    items: list[QueueItem]
    started_at: float | None  # time.monotonic() when it began to run; None while prefetched
    holds_slot: bool = True  # its instance's max_concurrency slot (the first one an idle instance ran)
    hung: bool = False  # ran past a request's deadline

    def running_s(self) -> float:
        return 0.0 if self.started_at is None else time.monotonic() - self.started_at


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
        self._max_queue = batching.max_queue_size
        self._preferred = set(batching.preferred_batch_size)
        self._timeout_s = batching.batch_timeout_us / 1e6
        self._aging_s = settings.priority_aging_us / 1e6
        # Prefetching (see the module's docstring) is for unbatched sync models with one priority level:
        # a batched model waits so batches fill, and with priorities the next request is chosen only
        # when a thread is free.
        prefetch = (
            not self.batching and settings.priority_levels == 1 and not any(i.is_async for i in instances)
        )
        self._depth = 1 + (PREFETCH_ONE_INSTANCE if len(instances) == 1 else 1) * prefetch
        self._default_timeout_s = settings.default_timeout_us / 1e6 or None
        self._limit = limit
        self._observer = observer
        self._pending: list[QueueItem] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._running: set[asyncio.Task[None]] = set()
        self._dispatched: list[Dispatch] = []  # not yet returned from their instance

    @property
    def depth(self) -> int:
        """Requests waiting: in the queue, or prefetched behind an instance's next one (which, as with
        several instances, is not counted: it is as good as running)."""
        waiting = len(self._pending)
        for instance in self.instances:  # a loop, not sum(): this runs twice per request
            if instance.active > 2:
                waiting += instance.active - 2
        return waiting

    # -- admission -----------------------------------------------------------------------------
    async def submit(self, inp: Any, ctx: GrpsContext, rows: int, key: Hashable) -> Any:
        loop = asyncio.get_running_loop()
        if self._task is None:
            self._task = loop.create_task(self._dispatch())
        if self.batching and rows > self.max_rows:
            raise InvalidInput(
                f"the request has {rows} rows; model '{self.key}' takes at most {self.max_rows}"
            )
        depth = self.depth
        if depth >= self._max_queue:
            self._observer.dropped(self.key, QUEUE_FULL, depth)
            raise Overloaded(f"model '{self.key}' queue is full ({depth} requests waiting); retry later")
        if ctx.if_disconnected():  # a DAG's later node, after the client went away
            raise asyncio.CancelledError
        remaining = ctx.time_remaining()
        if remaining is None:
            remaining = self._default_timeout_s
        if remaining is not None and remaining <= 0:
            raise DeadlineExceeded(f"the request's time ran out before it reached model '{self.key}'")
        item = QueueItem(inp, ctx, rows, key, self._level(ctx), loop.time(), loop.create_future(), remaining)
        if remaining is not None:
            item.timer = loop.call_later(remaining, self._expire, item)
        # The client going away ends the wait (below): the request leaves the queue, or is taken back from
        # a thread that has not started it. The transports need no task of their own to cancel.
        ctx.on_cancel(item.future.cancel)
        instance = self._free_instance()
        if not self.batching and not self._pending and instance is not None and self._may_start(instance):
            self._start(loop, instance, [item], item.enqueued)  # nothing to choose from: skip the dispatcher
        else:
            self._pending.append(item)
            self._wake.set()
        self._observer.queued(self.key, self.depth)
        try:
            return await item.future
        except asyncio.CancelledError:
            if self._remove(item) or self._take_back(item):
                _stop_timer(item)
                self._observer.dropped(self.key, CANCELLED, self.depth)
            raise

    def _level(self, ctx: GrpsContext) -> int:
        """The request's priority level: 0 (unset) is the model's default; out of range is clamped."""
        if ctx.priority <= 0:
            return self.settings.default_priority_level
        return min(ctx.priority, self.settings.priority_levels)

    def _remove(self, item: QueueItem) -> bool:
        """Take an item out of the queue; False when it already left (dispatched, expired)."""
        for i, queued in enumerate(self._pending):
            if queued is item:
                del self._pending[i]
                return True
        return False

    @staticmethod
    def _take_back(item: QueueItem) -> bool:
        """Take a prefetched request back from a thread that has not started it; False when it runs."""
        run = item.run
        if run is None:
            return False
        with _CLAIM:
            if run.started_at is not None:
                return False
            item.run = None
        return True

    def _expire(self, item: QueueItem) -> None:
        item.timer = None
        loop = asyncio.get_running_loop()
        if self._remove(item) or self._take_back(item):
            waited_ms = (loop.time() - item.enqueued) * 1e3
            self._observer.dropped(self.key, TIMEOUT, self.depth)
            if not item.future.done():
                item.future.set_exception(
                    DeadlineExceeded(
                        f"timed out after waiting {waited_ms:.0f} ms in the queue of model '{self.key}'"
                    )
                )
            return
        dispatch = item.run
        if dispatch is None:
            return  # answered already
        if not item.future.done():
            item.future.set_exception(
                DeadlineExceeded(
                    f"model '{self.key}' did not answer within {_duration(item.timeout_s or 0)} "
                    "(the request's timeout)"
                )
            )
        self._hang(dispatch)

    def _hang(self, dispatch: Dispatch) -> None:
        """A running batch went past a request's deadline: report its instance hung, free its slot, and
        move the request prefetched behind it back to the queue for the other instances."""
        if dispatch.hung:
            return
        dispatch.hung = True
        instance = dispatch.instance
        self._release_slot(dispatch)
        instance.hung = True
        running_s = dispatch.running_s()
        log.warning(
            "model '%s' instance %d is hung: it has run one batch for %.2f s, past a request's deadline "
            "(answered 504); it gets no new work until that batch returns",
            self.key,
            instance.index,
            running_s,
        )
        self._observer.instance_hung(self.key, instance.index, running_s)
        for other in self._dispatched:
            if other.instance is instance and other is not dispatch:
                for item in other.items:
                    if self._take_back(item):
                        self._pending.append(item)
                self._release_slot(other)  # what it still holds never runs
        self._wake.set()

    def _release_slot(self, dispatch: Dispatch) -> None:
        if dispatch.holds_slot:
            dispatch.holds_slot = False
            self._limit.release()

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
            if not self._may_start(instance):
                self._limit.wait(self._wake.set)
                return None
            now = loop.time()
            batch, wait_s = self._form_batch(now)
            if not batch:
                return wait_s
            for item in batch:
                self._remove(item)
            self._start(loop, instance, batch, now)
        return None

    def _may_start(self, instance: ModelInstance) -> bool:
        """A busy instance holds its slot already; an idle one needs a free one."""
        return instance.active > 0 or self._limit.available()

    def _free_instance(self) -> ModelInstance | None:
        """The least busy instance that is not hung, when it can take a batch now."""
        best: ModelInstance | None = None
        for instance in self.instances:
            if not instance.hung and (best is None or instance.active < best.active):
                best = instance
        return best if best is not None and best.active < self._depth else None

    def _start(
        self, loop: asyncio.AbstractEventLoop, instance: ModelInstance, batch: list[QueueItem], now: float
    ) -> None:
        """Hand a batch (out of the queue) to an instance. On a busy instance's thread it is prefetched:
        it starts when the thread is done with the running one."""
        idle = instance.active == 0
        dispatch = Dispatch(instance, batch, time.monotonic() if idle else None, holds_slot=idle)
        for item in batch:
            item.run = dispatch
        instance.active += 1
        if idle:
            self._limit.acquire()
        self._dispatched.append(dispatch)
        if len(batch) == 1 and not instance.is_async and not (self.batching and instance.batches_whole):
            self._run_in_thread(loop, dispatch, now)
            return
        task = loop.create_task(self._run(dispatch, now))
        self._running.add(task)  # the loop keeps only weak references to tasks
        task.add_done_callback(self._running.discard)

    def _run_in_thread(self, loop: asyncio.AbstractEventLoop, dispatch: Dispatch, started: float) -> None:
        """One request on its instance's thread, its outcome handed back to the loop by a callback: the
        hot path of an unbatched model, without a task or a future of its own."""

        def ran(outcome: Outcome) -> None:  # on the loop
            request_scope.enter(dispatch.items[0].ctx.request_id)  # this callback's own context
            self._complete(loop, dispatch, started, [outcome])

        try:
            dispatch.instance.pool.call(loop, _run_one, dispatch, ran)
        except RuntimeError as exc:  # the instance's thread is gone (shutdown)
            self._complete(loop, dispatch, started, [(None, exc)])

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

    async def _run(self, dispatch: Dispatch, started: float) -> None:
        # This task may have been started from another request's task or the dispatcher: log lines
        # here belong to the batch's own requests.
        batch = dispatch.items
        request_scope.enter(batch_scope(batch))
        loop = asyncio.get_running_loop()
        try:
            outcomes = await self._execute(loop, dispatch)
        except asyncio.CancelledError:  # the loop is closing, the thread may still run
            self._returned(dispatch, came_back=False)
            raise
        except Exception as exc:  # the instance's thread pool is gone (shutdown)
            outcomes = [(None, exc)] * len(batch)
        self._complete(loop, dispatch, started, outcomes)

    def _complete(
        self, loop: asyncio.AbstractEventLoop, dispatch: Dispatch, started: float, outcomes: list[Outcome]
    ) -> None:
        """The instance is done with a dispatch: answer the requests that ran in it."""
        self._returned(dispatch)
        ran: list[tuple[QueueItem, Outcome]] = []
        queue_s: list[float] = []
        rows = 0
        for item, outcome in zip(dispatch.items, outcomes, strict=True):  # one loop: this runs per request
            if item.run is dispatch:
                ran.append((item, outcome))
                queue_s.append(started - item.enqueued)
                rows += item.rows
        if not ran:
            return  # everything in it was taken back before it started
        compute_s = loop.time() - started
        self._observer.batch_ran(self.key, rows, queue_s, compute_s, self.depth)
        for item, (out, err) in ran:
            item.run = None  # no reference cycles left for the GC: item -> dispatch -> item
            if item.timer is not None:
                _stop_timer(item)
            item.ctx.postprocess = None  # the instance's closure holds the context
            if item.future.done():  # the caller gave up, or its deadline answered it, while it ran
                continue
            if err is not None:
                item.future.set_exception(err)
            else:
                item.future.set_result(out)

    def _returned(self, dispatch: Dispatch, came_back: bool = True) -> None:
        """The instance is done with a dispatch (or the server with it: `came_back` False): its slot and
        instance are free again."""
        instance = dispatch.instance
        instance.active -= 1
        self._dispatched.remove(dispatch)
        if dispatch.holds_slot and came_back and not instance.hung:
            for successor in self._dispatched:
                if successor.instance is instance:
                    dispatch.holds_slot, successor.holds_slot = False, True  # the instance stays busy
                    break
        self._release_slot(dispatch)
        if dispatch.hung and came_back:
            instance.hung = False
            running_s = dispatch.running_s()
            log.warning(
                "model '%s' instance %d recovered: its batch returned after %.2f s",
                self.key,
                instance.index,
                running_s,
            )
            self._observer.instance_recovered(self.key, instance.index, running_s)
        if self._pending:
            self._wake.set()  # this model's next batch can use the freed instance

    async def _execute(self, loop: asyncio.AbstractEventLoop, dispatch: Dispatch) -> list[Outcome]:
        instance, items = dispatch.instance, dispatch.items
        inps, ctxs = [item.inp for item in items], [item.ctx for item in items]
        if instance.is_async:
            try:
                return [(await instance.run_async(inps[0], ctxs[0]), None)]
            except Exception as exc:
                return [(None, exc)]
        return await loop.run_in_executor(instance.pool, instance.run_batch, inps, ctxs)

    def abort(self, make_error: Callable[[], BaseException]) -> None:
        """Answer every request still queued or running with `make_error()` (shutdown): their callers
        get an answer now; threads still running finish on their own and are ignored."""
        for item in self._pending:
            _stop_timer(item)
            if not item.future.done():
                item.future.set_exception(make_error())
        self._pending.clear()
        for dispatch in self._dispatched:
            for item in dispatch.items:
                if item.run is dispatch:
                    _stop_timer(item)
                    if not item.future.done():
                        item.future.set_exception(make_error())

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
        self.abort(lambda: ModelNotReady(f"model '{self.key}' is shutting down"))


def batch_scope(batch: list[QueueItem]) -> str:
    """The request id of a batch's log lines: its one request's, or all of theirs."""
    if len(batch) == 1:
        return batch[0].ctx.request_id
    return request_scope.batch_id(item.ctx.request_id for item in batch)


def _duration(seconds: float) -> str:
    """As the clients write a timeout: "0.2 s", or "50 ms" below a tenth of a second."""
    return f"{seconds:.1f} s" if seconds >= 0.1 else f"{seconds * 1e3:.0f} ms"


def _stop_timer(item: QueueItem) -> None:
    if item.timer is not None:
        item.timer.cancel()
        item.timer = None


def _run_one(dispatch: Dispatch) -> Outcome:
    """In the instance's thread. A prefetched request taken back meanwhile (timed out, cancelled, moved
    off a hung instance) is skipped."""
    item = dispatch.items[0]
    with _CLAIM:
        dispatch.started_at = time.monotonic()
        if item.run is not dispatch:
            return None, None  # answered on the loop, or runs elsewhere
    token = request_scope.enter(item.ctx.request_id)  # threads inherit no context: the model's lines
    try:
        return dispatch.instance.run_one(item.inp, item.ctx), None
    except Exception as exc:
        return None, exc
    except BaseException as exc:  # SystemExit and the like: the model's failure, not the thread's end
        return None, RuntimeError(f"the model raised {type(exc).__name__}: {exc}")
    finally:
        request_scope.leave(token)

"""Per-model scheduling: the admission front of a model, in front of its batch policy and dispatcher.

Requests wait in the model's queue (at most `max_queue_size`; a full queue answers Overloaded at
once). Whenever an instance is free and the server-wide `max_concurrency` allows, the scheduler takes
the next batch the policy forms out of the queue (`batch_policy.py`: priority levels, aging, batch
size and timeout) and hands it to the dispatcher (`dispatcher.py`: instances, slots, prefetch, hung
instances). A request whose time runs out while queued is answered DeadlineExceeded and never runs; a
cancelled one just leaves the queue. A request whose time runs out while it runs is answered
DeadlineExceeded at its deadline too (its thread cannot be stopped and goes on), and its instance is
reported hung: the requests prefetched behind it come back to this queue.

Requests prefetched behind an instance's next one count as queued (`max_queue_size`, queue depth).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Hashable
from typing import Any

from grps_py.core.batch_policy import BatchPolicy
from grps_py.core.config import ModelSettings
from grps_py.core.context import GrpsContext
from grps_py.core.dispatcher import ConcurrencyLimit, Dispatch, InstanceDispatcher, QueueItem
from grps_py.core.errors import DeadlineExceeded, InvalidInput, ModelNotReady, Overloaded
from grps_py.core.instance import ModelInstance, Outcome
from grps_py.core.observer import CANCELLED, QUEUE_FULL, TIMEOUT, SchedulerObserver

# ConcurrencyLimit lives in dispatcher.py; the executor and the model nodes import it from here.
__all__ = ["ConcurrencyLimit", "ModelScheduler"]


class ModelScheduler:
    """One model's front: admits requests to its queue, answers them (or refuses, expires, cancels),
    and runs its batch loop: the policy chooses, the dispatcher runs."""

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
        is_async = any(i.is_async for i in instances)
        self.batching = settings.batching.type == "dynamic" and not is_async
        # A converter that merges its batches itself (`batch_preprocess`: grps's contract) takes requests
        # of any shape: its batches count requests (grps's rule). Others batch by rows and shape.
        counts_requests = self.batching and any(i.batches_whole for i in instances)
        self.policy = BatchPolicy.from_settings(settings, self.batching, counts_requests)
        # Prefetching (dispatcher.py) is for unbatched sync models with one priority level: a batched
        # model waits so batches fill, and with priorities the next request is chosen only when a
        # thread is free.
        prefetch = not self.batching and settings.priority_levels == 1 and not is_async
        self.dispatcher = InstanceDispatcher(
            self.key, instances, limit, observer, self._answer, batching=self.batching, prefetch=prefetch
        )
        self._max_queue = settings.batching.max_queue_size
        self._default_timeout_s = settings.default_timeout_us / 1e6 or None
        self._observer = observer
        self._pending: list[QueueItem] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @property
    def depth(self) -> int:
        """Requests waiting: in the queue, or prefetched behind an instance's next one (which, as with
        several instances, is not counted: it is as good as running)."""
        waiting = len(self._pending)
        for instance in self.instances:  # a loop, not sum(): this runs twice per request
            running = max(2, instance.capacity)
            if instance.active > running:
                waiting += instance.active - running
        return waiting

    # -- admission -----------------------------------------------------------------------------
    async def submit(self, inp: Any, ctx: GrpsContext, rows: int, key: Hashable) -> Any:
        loop = asyncio.get_running_loop()
        if self._task is None:
            self._task = loop.create_task(self._dispatch())
        if self.policy.counts_requests:
            rows, key = 1, None  # a request counts one, whatever its shape, and joins any other
        elif self.batching and rows > self.policy.max_rows:
            raise InvalidInput(
                f"the request has {rows} rows; model '{self.key}' takes at most {self.policy.max_rows}"
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
        level = self.policy.level(ctx.priority)
        item = QueueItem(inp, ctx, rows, key, level, loop.time(), loop.create_future(), remaining)
        if remaining is not None:
            item.timer = loop.call_later(remaining, self._expire, item)
        # The client going away ends the wait (below): the request leaves the queue, or is taken back from
        # a thread that has not started it. The transports need no task of their own to cancel.
        ctx.on_cancel(item.future.cancel)
        dispatcher = self.dispatcher
        instance = dispatcher.free_instance()
        if (
            not self.batching
            and not self._pending
            and instance is not None
            and dispatcher.may_start(instance)
        ):
            dispatcher.start(loop, instance, [item], item.enqueued)  # nothing to choose from: no batch loop
        else:
            self._pending.append(item)
            self._wake.set()
        self._observer.queued(self.key, self.depth)
        try:
            return await item.future
        except asyncio.CancelledError:
            if self._remove(item) or dispatcher.take_back(item):
                _stop_timer(item)
                self._observer.dropped(self.key, CANCELLED, self.depth)
            raise

    def _remove(self, item: QueueItem) -> bool:
        """Take an item out of the queue; False when it already left (dispatched, expired)."""
        for i, queued in enumerate(self._pending):
            if queued is item:
                del self._pending[i]
                return True
        return False

    def _expire(self, item: QueueItem) -> None:
        item.timer = None
        loop = asyncio.get_running_loop()
        if self._remove(item) or self.dispatcher.take_back(item):
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
        if dispatch.instance.capacity > 1:
            return  # a generative model ends a sequence at its deadline itself (finish_reason length)
        if not item.future.done():
            item.future.set_exception(
                DeadlineExceeded(
                    f"model '{self.key}' did not answer within {_duration(item.timeout_s or 0)} "
                    "(the request's timeout)"
                )
            )
        # Its instance is hung: what was prefetched behind it goes to the model's other instances, and
        # the slot it freed may let this model start another batch.
        self._pending.extend(self.dispatcher.hang(dispatch))
        self._wake.set()

    # -- the batch loop --------------------------------------------------------------------------
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
        dispatcher = self.dispatcher
        while self._pending:
            instance = dispatcher.free_instance()
            if instance is None:
                return None  # the instance that frees up wakes this scheduler
            if not dispatcher.may_start(instance):
                dispatcher.wait_for_slot(self._wake.set)
                return None
            now = loop.time()
            batch, wait_s = self.policy.next_batch(self._pending, now)
            if not batch:
                return wait_s
            for item in batch:
                self._remove(item)
            dispatcher.start(loop, instance, batch, now)
        return None

    def _answer(
        self, loop: asyncio.AbstractEventLoop, dispatch: Dispatch, started: float, outcomes: list[Outcome]
    ) -> None:
        """The instance is done with a dispatch (the dispatcher freed it): answer the requests that ran
        in it, those not taken back before it started."""
        if self._pending:
            self._wake.set()  # this model's next batch can use the freed instance
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

    # -- shutdown --------------------------------------------------------------------------------
    def abort(self, make_error: Callable[[], BaseException]) -> None:
        """Answer every request still queued or running with `make_error()` (shutdown): their callers
        get an answer now; threads still running finish on their own and are ignored."""
        for item in self._pending:
            _stop_timer(item)
            if not item.future.done():
                item.future.set_exception(make_error())
        self._pending.clear()
        for item in self.dispatcher.in_hand():
            _stop_timer(item)
            if not item.future.done():
                item.future.set_exception(make_error())

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
        self.abort(lambda: ModelNotReady(f"model '{self.key}' is shutting down"))


def _duration(seconds: float) -> str:
    """As the clients write a timeout: "0.2 s", or "50 ms" below a tenth of a second."""
    return f"{seconds:.1f} s" if seconds >= 0.1 else f"{seconds * 1e3:.0f} ms"


def _stop_timer(item: QueueItem) -> None:
    if item.timer is not None:
        item.timer.cancel()
        item.timer = None

"""Handing a model's batches to its instances: slots, prefetch, the claim on a request, hung instances.

A batch goes to the least busy instance that is not hung. `max_concurrency` (a `ConcurrencyLimit`
shared by every model of the server) counts busy instances: an idle instance takes a slot when it
gets a batch, and keeps it while it has more to run.

An unbatched model's requests are prefetched: handed to a busy instance's thread, to run as soon as it
is done with the one before, so the thread goes from one to the next without a round trip through the
event loop. A model with one instance gets up to PREFETCH_ONE_INSTANCE of them (no other instance could
take them sooner, and each round trip costs a context switch each way); a model with several gets one
(a slow request must not hold up others that another instance could run). When a dispatch returns, its
slot passes to the next dispatch of the same instance, if any.

Until its thread starts it, a prefetched request can still be taken back (it timed out, its client went
away, its instance hung): the thread and the loop claim it under one lock, so it runs once or not at
all.

A request whose time runs out while it runs cannot be stopped (nor can its thread). Its instance is then
reported hung: it releases its slot, the requests prefetched behind it are taken back for the model's
other instances, and it gets no new work until the batch returns (it has recovered then).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass, field
from typing import Any

from grps_py.core import request_scope
from grps_py.core.context import GrpsContext
from grps_py.core.instance import ModelInstance, Outcome
from grps_py.core.observer import SchedulerObserver

log = logging.getLogger("grps_py.model")
# Held while an instance's thread starts a prefetched request, and while the loop takes one back
# (timed out, cancelled, or moved off a hung instance): the request then runs once or not at all.
# It is held for a few bytecodes at a time: one lock serves every model of the process.
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
    """One request in a model's hands: queued, prefetched, running, until it is answered."""

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


# What the dispatcher calls on the loop when an instance is done with a dispatch (its slot and instance
# are free again by then): the dispatch, the loop time it was handed over at, and one outcome per item.
OnReturn = Callable[[asyncio.AbstractEventLoop, Dispatch, float, list[Outcome]], None]


class InstanceDispatcher:
    """Runs one model's batches on its instances, within the server's `max_concurrency`."""

    def __init__(
        self,
        key: str,
        instances: list[ModelInstance],
        limit: ConcurrencyLimit,
        observer: SchedulerObserver,
        on_return: OnReturn,
        *,
        batching: bool = False,
        prefetch: bool = False,
    ) -> None:
        self.key = key
        self.instances = instances
        self.batching = batching
        # How many dispatches an instance may hold: the running one, and those prefetched behind it.
        self.per_instance = 1 + (PREFETCH_ONE_INSTANCE if len(instances) == 1 else 1) * prefetch
        self.dispatched: list[Dispatch] = []  # not yet returned from their instance
        self._limit = limit
        self._observer = observer
        self._on_return = on_return
        self._running: set[asyncio.Task[None]] = set()

    # -- choosing an instance ------------------------------------------------------------------
    def free_instance(self) -> ModelInstance | None:
        """The least busy instance that is not hung, when it can take a batch now."""
        best: ModelInstance | None = None
        for instance in self.instances:
            if not instance.hung and (best is None or instance.active < best.active):
                best = instance
        if best is None or best.active >= max(self.per_instance, best.capacity):
            return None
        return best

    def may_start(self, instance: ModelInstance) -> bool:
        """A busy instance holds its slot already; an idle one needs a free one."""
        return instance.active > 0 or self._limit.available()

    def wait_for_slot(self, wake: Callable[[], None]) -> None:
        """Call `wake` once, when the next `max_concurrency` slot frees."""
        self._limit.wait(wake)

    # -- hand-off ------------------------------------------------------------------------------
    def start(
        self, loop: asyncio.AbstractEventLoop, instance: ModelInstance, batch: list[QueueItem], now: float
    ) -> None:
        """Hand a batch (out of the queue) to an instance. On a busy instance's thread it is prefetched:
        it starts when the thread is done with the running one. `now` is the loop's time."""
        idle = instance.active == 0
        # Async model code starts at once (a generative model runs `capacity` requests side by side).
        started_at = time.monotonic() if idle or instance.is_async else None
        dispatch = Dispatch(instance, batch, started_at, holds_slot=idle)
        for item in batch:
            item.run = dispatch
        instance.active += 1
        if idle:
            self._limit.acquire()
        self.dispatched.append(dispatch)
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
            self._returned(dispatch)
            self._on_return(loop, dispatch, started, [outcome])

        try:
            dispatch.instance.pool.call(loop, _run_one, dispatch, ran)
        except RuntimeError as exc:  # the instance's thread is gone (shutdown)
            self._returned(dispatch)
            self._on_return(loop, dispatch, started, [(None, exc)])

    async def _run(self, dispatch: Dispatch, started: float) -> None:
        # This task may have been started from another request's task or the scheduler's: log lines
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
        self._returned(dispatch)
        self._on_return(loop, dispatch, started, outcomes)

    @staticmethod
    async def _execute(loop: asyncio.AbstractEventLoop, dispatch: Dispatch) -> list[Outcome]:
        instance, items = dispatch.instance, dispatch.items
        inps, ctxs = [item.inp for item in items], [item.ctx for item in items]
        if instance.is_async:
            try:
                return [(await instance.run_async(inps[0], ctxs[0]), None)]
            except Exception as exc:
                return [(None, exc)]
        return await loop.run_in_executor(instance.pool, instance.run_batch, inps, ctxs)

    def _returned(self, dispatch: Dispatch, came_back: bool = True) -> None:
        """The instance is done with a dispatch (or the server with it: `came_back` False): its slot and
        instance are free again."""
        instance = dispatch.instance
        instance.active -= 1
        self.dispatched.remove(dispatch)
        if dispatch.holds_slot and came_back and not instance.hung:
            for successor in self.dispatched:
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

    def _release_slot(self, dispatch: Dispatch) -> None:
        if dispatch.holds_slot:
            dispatch.holds_slot = False
            self._limit.release()

    # -- taking requests back ------------------------------------------------------------------
    @staticmethod
    def take_back(item: QueueItem) -> bool:
        """Take a prefetched request back from a thread that has not started it; False when it runs (or
        is not on an instance at all)."""
        run = item.run
        if run is None:
            return False
        with _CLAIM:
            if run.started_at is not None:
                return False
            item.run = None
        return True

    def hang(self, dispatch: Dispatch) -> list[QueueItem]:
        """A running batch went past a request's deadline: report its instance hung and free its slot.
        Answers the requests prefetched behind it, taken back for the model's other instances."""
        if dispatch.hung:
            return []
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
        moved: list[QueueItem] = []
        for other in self.dispatched:
            if other.instance is instance and other is not dispatch:
                moved.extend(item for item in other.items if self.take_back(item))
                self._release_slot(other)  # what it still holds never runs
        return moved

    def in_hand(self) -> Iterator[QueueItem]:
        """The requests handed to instances and not answered nor taken back."""
        for dispatch in self.dispatched:
            for item in dispatch.items:
                if item.run is dispatch:
                    yield item


def batch_scope(batch: list[QueueItem]) -> str:
    """The request id of a batch's log lines: its one request's, or all of theirs."""
    if len(batch) == 1:
        return batch[0].ctx.request_id
    return request_scope.batch_id(item.ctx.request_id for item in batch)


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

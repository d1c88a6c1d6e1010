"""The scheduler's three parts, each without a server: the batch policy on a fake clock, the instance
dispatcher with a trivial model, and the admission front (`ModelScheduler`) in front of both.

Model code here waits on a gate the test opens, so what runs when is decided by the test, not by
timing; the only timers are request deadlines, whose outcome (not their duration) is checked.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import Any, TypeVar

import pytest

from grps_py.core.batch_policy import BatchPolicy
from grps_py.core.config import BatchingSettings, ModelSettings
from grps_py.core.context import GrpsContext
from grps_py.core.dispatcher import ConcurrencyLimit, Dispatch, InstanceDispatcher, QueueItem
from grps_py.core.errors import DeadlineExceeded, InvalidInput, Overloaded
from grps_py.core.instance import ModelInstance, Outcome
from grps_py.core.model import Converter, ModelInferer
from grps_py.core.observer import CANCELLED, QUEUE_FULL, TIMEOUT, ModelStats
from grps_py.core.scheduler import ModelScheduler

T = TypeVar("T")
KEY = "m-1"
SAFETY_S = 30  # only ever reached when a test is broken: nothing here waits on time to pass


# -- the batch policy ------------------------------------------------------------------------------
@dataclass
class Waiting:
    name: str
    enqueued: float
    rows: int = 1
    key: Hashable = "a"
    level: int = 1


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def advance(self, seconds: float) -> float:
        self.now += seconds
        return self.now


def policy(**overrides: Any) -> BatchPolicy:
    options: dict[str, Any] = {
        "batching": True,
        "max_rows": 8,
        "timeout_s": 0.010,
        "aging_s": 0.100,
        "levels": 3,
        "default_level": 2,
    }
    options.update(overrides)
    return BatchPolicy(**options)


def names(batch: list[Waiting]) -> list[str]:
    return [item.name for item in batch]


def test_priority_levels_default_and_clamp() -> None:
    rules = policy()
    assert rules.level(0) == 2  # unset: the model's default
    assert rules.level(1) == 1
    assert rules.level(9) == 3  # past the lowest level: the lowest


def test_higher_level_first_then_oldest_first() -> None:
    clock, rules = FakeClock(), policy(batching=False)
    old_low = Waiting("old_low", clock.now, level=2)
    old = Waiting("old", clock.now, level=1)
    new = Waiting("new", clock.advance(0.001), level=1)
    assert names(rules.next_batch([new, old_low, old], clock.now)[0]) == ["old"]
    assert names(rules.next_batch([new, old_low], clock.now)[0]) == ["new"]


def test_aging_promotes_a_waiting_low_priority_request() -> None:
    clock, rules = FakeClock(), policy(batching=False)
    low = Waiting("low", clock.now, level=3)
    high = Waiting("high", clock.advance(0.150), level=1)
    assert rules.effective_level(low, clock.now) == 2  # one level up per 100 ms waited
    assert names(rules.next_batch([high, low], clock.now)[0]) == ["high"]
    clock.advance(0.100)  # 250 ms: level 1, as high, and older
    assert rules.effective_level(low, clock.now) == 1
    assert names(rules.next_batch([high, low], clock.now)[0]) == ["low"]


def test_an_unbatched_model_takes_one_request_at_once() -> None:
    clock, rules = FakeClock(), policy(batching=False)
    batch, wait_s = rules.next_batch([Waiting("a", clock.now), Waiting("b", clock.now)], clock.now)
    assert names(batch) == ["a"] and wait_s == 0


def test_a_batch_waits_for_its_timeout_then_goes_as_it_is() -> None:
    clock, rules = FakeClock(), policy(timeout_s=0.010)
    waiting = [Waiting("a", clock.now), Waiting("b", clock.advance(0.004))]
    batch, wait_s = rules.next_batch(waiting, clock.now)
    assert batch == [] and wait_s == pytest.approx(0.006)  # due 10 ms after the oldest arrived
    batch, wait_s = rules.next_batch(waiting, clock.advance(0.006))
    assert names(batch) == ["a", "b"] and wait_s == 0


def test_a_full_batch_goes_before_its_timeout() -> None:
    clock, rules = FakeClock(), policy(max_rows=4)
    waiting = [Waiting(str(i), clock.now, rows=2) for i in range(3)]
    batch, wait_s = rules.next_batch(waiting, clock.now)
    assert names(batch) == ["0", "1"] and wait_s == 0


def test_rows_past_the_max_batch_wait_for_the_next_one() -> None:
    clock, rules = FakeClock(), policy(max_rows=4)
    waiting = [Waiting("three", clock.now, rows=3), Waiting("two", clock.now, rows=2)]
    waiting.append(Waiting("one", clock.now, rows=1))
    batch, _ = rules.next_batch(waiting, clock.now)
    assert names(batch) == ["three", "one"]  # "two" would not fit: the one behind it joins instead


def test_a_preferred_size_goes_before_the_timeout() -> None:
    clock = FakeClock()
    waiting = [Waiting(str(i), clock.now) for i in range(3)]
    batch, wait_s = policy(preferred=(2,)).next_batch(waiting, clock.now)
    assert names(batch) == ["0", "1"] and wait_s == 0  # cut back to the preferred size
    batch, _ = policy(preferred=(2, 3)).next_batch(waiting, clock.now)
    assert names(batch) == ["0", "1", "2"]  # the largest preferred size reached
    batch, _ = policy(preferred=(5,)).next_batch(waiting, clock.now)
    assert batch == []  # none reached: it waits for its timeout


def test_a_due_batch_goes_whole_rather_than_cut_to_a_preferred_size() -> None:
    clock = FakeClock()
    waiting = [Waiting(str(i), clock.now) for i in range(3)]
    batch, _ = policy(preferred=(2,), timeout_s=0.010).next_batch(waiting, clock.advance(0.010))
    assert names(batch) == ["0", "1", "2"]


def test_only_requests_of_the_leaders_shape_batch_together() -> None:
    clock, rules = FakeClock(), policy(aging_s=60.0)
    waiting = [
        Waiting("b-older", clock.now - 1, key="b", level=2),
        Waiting("a1", clock.now, key="a"),
        Waiting("b1", clock.now, key="b"),
        Waiting("a2", clock.now, key="a"),
    ]
    batch, _ = rules.next_batch(waiting, clock.advance(1.0))
    assert names(batch) == ["a1", "a2"]  # the best request (level 1, oldest) leads; the "b"s wait


def test_counting_requests_batches_any_shapes_and_row_counts_together() -> None:
    """grps's rule (a converter that merges its batches): a request counts one, whatever its key or rows."""
    clock, rules = FakeClock(), policy(max_rows=3, counts_requests=True, aging_s=60.0)
    waiting = [
        Waiting("a", clock.now, rows=5, key="a"),
        Waiting("b", clock.now, rows=1, key="b"),
        Waiting("c", clock.now, rows=2, key="c"),
        Waiting("d", clock.now, rows=1, key="a"),
    ]
    batch, _ = rules.next_batch(waiting, clock.now)
    assert names(batch) == ["a", "b", "c"]  # full at three requests: it goes at once
    rows_rule = policy(max_rows=3, aging_s=60.0)
    # The rows rule: only the leader's shape ("a": itself over 3 rows), and rows count.
    assert names(rows_rule.next_batch(waiting, clock.advance(1.0))[0]) == ["d"]


def test_the_policy_reads_the_model_settings() -> None:
    settings = ModelSettings(
        name="m",
        version="1",
        inferer_type="customized",
        batching=BatchingSettings(
            type="dynamic", max_batch_size=6, batch_timeout_us=2500, preferred_batch_size=(2, 4)
        ),
        priority_levels=4,
        default_priority_level=3,
        priority_aging_us=50_000,
    )
    rules = BatchPolicy.from_settings(settings, batching=True)
    assert (rules.max_rows, rules.preferred, rules.levels, rules.default_level) == (6, {2, 4}, 4, 3)
    assert not rules.counts_requests and BatchPolicy.from_settings(settings, True, True).counts_requests
    assert rules.timeout_s == pytest.approx(0.0025) and rules.aging_s == pytest.approx(0.05)


# -- a model whose requests run when the test says ---------------------------------------------------
class Gated(ModelInferer):
    """Echoes its input once its gate is open; `ran` lists what it ran, in order."""

    def __init__(self, open_: bool = False) -> None:
        super().__init__()
        self.ran: list[Any] = []
        self.gate = threading.Event()
        if open_:
            self.gate.set()

    def infer(self, inp: Any, context: GrpsContext) -> Any:
        self.ran.append(inp)
        if not self.gate.wait(SAFETY_S):
            raise TimeoutError("the test never opened the gate")
        return inp


def make_instance(inferer: ModelInferer, index: int = 0) -> ModelInstance:
    return ModelInstance(KEY, index, "cpu", inferer, Converter(), lambda out: out)


def run(scenario: Callable[[], Awaitable[T]]) -> T:
    return asyncio.run(asyncio.wait_for(scenario(), SAFETY_S))


async def until(condition: Callable[[], bool]) -> None:
    """Let the loop (and the instance threads) go on until `condition` holds."""
    while not condition():
        await asyncio.sleep(0.001)


# -- the instance dispatcher -----------------------------------------------------------------------
class Returns:
    """The dispatcher's `on_return`: what came back, in order, for the test to await; with `look`,
    what it saw at that moment too (`seen`)."""

    def __init__(self, look: Callable[[], Any] = lambda: None) -> None:
        self.queue: asyncio.Queue[tuple[Dispatch, list[Outcome]]] = asyncio.Queue()
        self.look = look
        self.seen: list[Any] = []

    def __call__(
        self, loop: asyncio.AbstractEventLoop, dispatch: Dispatch, started: float, outcomes: list[Outcome]
    ) -> None:
        self.seen.append(self.look())
        self.queue.put_nowait((dispatch, outcomes))

    async def next(self) -> tuple[Dispatch, list[Outcome]]:
        return await self.queue.get()


def queue_item(loop: asyncio.AbstractEventLoop, inp: Any) -> QueueItem:
    return QueueItem(inp, GrpsContext(request_id=str(inp)), 1, None, 1, loop.time(), loop.create_future())


def test_dispatcher_hands_a_request_to_an_idle_instance_and_frees_it() -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        inferer, limit, returns = Gated(open_=True), ConcurrencyLimit(4), Returns()
        instance = make_instance(inferer)
        dispatcher = InstanceDispatcher(KEY, [instance], limit, ModelStats(), returns)
        assert dispatcher.free_instance() is instance and dispatcher.may_start(instance)
        item = queue_item(loop, "a")
        dispatcher.start(loop, instance, [item], loop.time())
        assert item.run is not None and instance.active == 1 and limit.running == 1
        assert dispatcher.free_instance() is None  # no prefetch: one at a time
        dispatch, outcomes = await returns.next()
        assert dispatch.items == [item] and outcomes == [("a", None)]
        assert instance.active == 0 and limit.running == 0 and dispatcher.dispatched == []
        instance.close()

    run(scenario)


def test_dispatcher_runs_a_batch_through_the_instance_batch_path() -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        returns = Returns()
        instance = make_instance(Gated(open_=True))
        dispatcher = InstanceDispatcher(
            KEY, [instance], ConcurrencyLimit(1), ModelStats(), returns, batching=True
        )
        batch = [queue_item(loop, "a"), queue_item(loop, "b")]
        dispatcher.start(loop, instance, batch, loop.time())
        dispatch, outcomes = await returns.next()
        assert dispatch.items == batch and outcomes == [("a", None), ("b", None)]
        instance.close()

    run(scenario)


def test_dispatcher_picks_the_least_busy_instance() -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        first, second = make_instance(Gated(), 0), make_instance(Gated(), 1)
        dispatcher = InstanceDispatcher(KEY, [first, second], ConcurrencyLimit(4), ModelStats(), Returns())
        dispatcher.start(loop, first, [queue_item(loop, "a")], loop.time())
        assert dispatcher.free_instance() is second
        for instance in (first, second):
            instance.inferer.gate.set()
            instance.close()

    run(scenario)


def test_dispatcher_waits_for_a_concurrency_slot() -> None:
    limit = ConcurrencyLimit(1)
    instance = make_instance(Gated())
    dispatcher = InstanceDispatcher(KEY, [instance], limit, ModelStats(), Returns())
    limit.acquire()  # another model's execution holds the one slot
    assert not dispatcher.may_start(instance)
    woken: list[str] = []
    dispatcher.wait_for_slot(lambda: woken.append("woken"))
    limit.release()
    limit.acquire()
    limit.release()
    assert woken == ["woken"] and dispatcher.may_start(instance)  # woken once


def test_dispatcher_prefetches_onto_a_busy_thread_and_hands_the_slot_on() -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        inferer, limit = Gated(), ConcurrencyLimit(4)
        instance = make_instance(inferer)
        returns = Returns(lambda: (limit.running, [d.holds_slot for d in dispatcher.dispatched]))
        dispatcher = InstanceDispatcher(KEY, [instance], limit, ModelStats(), returns, prefetch=True)
        first, second = queue_item(loop, "a"), queue_item(loop, "b")
        dispatcher.start(loop, instance, [first], loop.time())
        assert dispatcher.free_instance() is instance and dispatcher.may_start(instance)  # busy, not full
        dispatcher.start(loop, instance, [second], loop.time())
        running, prefetched = dispatcher.dispatched
        assert prefetched.started_at is None and not prefetched.holds_slot
        assert instance.active == 2 and limit.running == 1  # one slot per busy instance
        inferer.gate.set()
        dispatch, _ = await returns.next()
        assert dispatch is running
        dispatch, outcomes = await returns.next()
        assert returns.seen == [(1, [True]), (0, [])]  # the slot went on to the prefetched one
        assert dispatch is prefetched and outcomes == [("b", None)]
        assert inferer.ran == ["a", "b"] and limit.running == 0 and instance.active == 0
        instance.close()

    run(scenario)


def test_dispatcher_gives_back_a_prefetched_request_that_never_started() -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        inferer, returns = Gated(), Returns()
        instance = make_instance(inferer)
        dispatcher = InstanceDispatcher(
            KEY, [instance], ConcurrencyLimit(4), ModelStats(), returns, prefetch=True
        )
        first, second = queue_item(loop, "a"), queue_item(loop, "b")
        dispatcher.start(loop, instance, [first], loop.time())
        dispatcher.start(loop, instance, [second], loop.time())
        assert not dispatcher.take_back(first)  # it runs
        assert dispatcher.take_back(second) and second.run is None
        assert list(dispatcher.in_hand()) == [first]
        inferer.gate.set()
        await returns.next()
        dispatch, _ = await returns.next()  # its thread skipped it
        assert dispatch.items == [second] and inferer.ran == ["a"]
        instance.close()

    run(scenario)


def test_dispatcher_reports_a_hung_instance_moves_its_prefetched_work_and_sees_it_recover() -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        inferer, limit, returns, stats = Gated(), ConcurrencyLimit(4), Returns(), ModelStats()
        instance = make_instance(inferer)
        dispatcher = InstanceDispatcher(KEY, [instance], limit, stats, returns, prefetch=True)
        first, second = queue_item(loop, "a"), queue_item(loop, "b")
        dispatcher.start(loop, instance, [first], loop.time())
        dispatcher.start(loop, instance, [second], loop.time())
        running = dispatcher.dispatched[0]
        assert dispatcher.hang(running) == [second]  # taken back for another instance
        assert dispatcher.hang(running) == []  # reported once
        assert instance.hung and limit.running == 0 and dispatcher.free_instance() is None
        assert stats.model(KEY).hung_instances == 1
        inferer.gate.set()  # the batch returns at last
        await returns.next()
        await returns.next()
        assert not instance.hung and stats.model(KEY).hung_instances == 0 and stats.model(KEY).hangs == 1
        assert inferer.ran == ["a"] and limit.running == 0 and dispatcher.free_instance() is instance
        instance.close()

    run(scenario)


# -- the admission front ---------------------------------------------------------------------------
def model_settings(**overrides: Any) -> ModelSettings:
    batching = overrides.pop("batching", {})
    return ModelSettings(
        name="m", version="1", inferer_type="customized", batching=BatchingSettings(**batching), **overrides
    )


def scheduler(
    settings: ModelSettings, *inferers: ModelInferer, limit: int = 8
) -> tuple[ModelScheduler, ModelStats]:
    stats = ModelStats()
    instances = [make_instance(inferer, i) for i, inferer in enumerate(inferers)]
    return ModelScheduler(settings, instances, ConcurrencyLimit(limit), stats), stats


async def ask(sched: ModelScheduler, inp: Any, rows: int = 1, key: Hashable = None, **context: Any) -> Any:
    return await sched.submit(inp, GrpsContext(request_id=str(inp), **context), rows, key)


async def started(*tasks: Awaitable[Any]) -> list[asyncio.Task[Any]]:
    """Submit requests together, in this order, and let each reach its wait."""
    running = [asyncio.ensure_future(task) for task in tasks]
    await asyncio.sleep(0)
    return running


def close(sched: ModelScheduler, *inferers: Gated) -> None:
    for inferer in inferers:
        inferer.gate.set()
    sched.close()
    for instance in sched.instances:
        instance.close()


def test_front_answers_requests_and_counts_them() -> None:
    async def scenario() -> None:
        inferer = Gated(open_=True)
        sched, stats = scheduler(model_settings(), inferer)
        assert await ask(sched, "a") == "a"
        assert [await task for task in await started(ask(sched, "b"), ask(sched, "c"))] == ["b", "c"]
        counters = stats.model(KEY)
        assert (counters.queued, counters.batches_run, counters.depth) == (3, 3, 0)
        close(sched, inferer)

    run(scenario)


def test_front_refuses_requests_past_its_queue_bound() -> None:
    async def scenario() -> None:
        inferer = Gated()
        # Two priority levels: no prefetch, so whatever does not run waits in the queue.
        sched, stats = scheduler(model_settings(priority_levels=2, batching={"max_queue_size": 2}), inferer)
        waiting = await started(ask(sched, "a"), ask(sched, "b"), ask(sched, "c"))
        assert sched.depth == 2  # "a" runs
        with pytest.raises(Overloaded, match="queue is full"):
            await ask(sched, "d")
        assert stats.model(KEY).dropped[QUEUE_FULL] == 1
        inferer.gate.set()
        assert [await task for task in waiting] == ["a", "b", "c"]
        assert inferer.ran == ["a", "b", "c"]
        close(sched, inferer)

    run(scenario)


def test_front_counts_prefetched_requests_as_queued() -> None:
    async def scenario() -> None:
        inferer = Gated()
        sched, _ = scheduler(model_settings(batching={"max_queue_size": 1}), inferer)
        waiting = await started(ask(sched, "a"), ask(sched, "b"), ask(sched, "c"))
        instance = sched.instances[0]
        assert instance.active == 3 and sched.depth == 1  # "b" is next: as good as running
        with pytest.raises(Overloaded):
            await ask(sched, "d")
        inferer.gate.set()
        assert [await task for task in waiting] == ["a", "b", "c"]
        close(sched, inferer)

    run(scenario)


def test_front_refuses_a_request_whose_time_already_ran_out() -> None:
    async def scenario() -> None:
        inferer = Gated(open_=True)
        sched, _ = scheduler(model_settings(), inferer)
        with pytest.raises(DeadlineExceeded, match="before it reached"):
            await ask(sched, "late", deadline_s=-1)
        assert inferer.ran == []
        close(sched, inferer)

    run(scenario)


@pytest.mark.parametrize("priority_levels", [1, 2], ids=["prefetched", "queued"])
def test_front_answers_a_request_whose_time_runs_out_while_it_waits(priority_levels: int) -> None:
    async def scenario() -> None:
        inferer = Gated()
        sched, stats = scheduler(model_settings(priority_levels=priority_levels), inferer)
        (first,) = await started(ask(sched, "a"))
        with pytest.raises(DeadlineExceeded, match="in the queue"):
            await ask(sched, "b", deadline_s=0.02)
        assert stats.model(KEY).dropped[TIMEOUT] == 1
        inferer.gate.set()
        assert await first == "a"
        assert inferer.ran == ["a"]  # "b" never ran
        close(sched, inferer)

    run(scenario)


def test_front_applies_the_model_default_timeout() -> None:
    async def scenario() -> None:
        inferer = Gated()
        sched, _ = scheduler(model_settings(priority_levels=2, default_timeout_us=20_000), inferer)
        with pytest.raises(DeadlineExceeded):
            await ask(sched, "a")  # runs, and is answered at its deadline
        close(sched, inferer)

    run(scenario)


def test_front_answers_at_the_deadline_of_a_running_request_and_moves_work_off_its_hung_instance() -> None:
    async def scenario() -> None:
        hanging, healthy = Gated(), Gated()
        sched, stats = scheduler(model_settings(instances=2), hanging, healthy)
        slow, busy = sched.instances
        # "a" runs on the first instance, "b" on the second, "c" is prefetched behind "a".
        tasks = await started(ask(sched, "a", deadline_s=0.05), ask(sched, "b"), ask(sched, "c"))
        assert (slow.active, busy.active) == (2, 1)
        with pytest.raises(DeadlineExceeded, match="did not answer within"):
            await tasks[0]
        assert slow.hung and stats.model(KEY).hung_instances == 1
        healthy.gate.set()
        assert [await task for task in tasks[1:]] == ["b", "c"]
        assert hanging.ran == ["a"] and healthy.ran == ["b", "c"]  # "c" moved to the healthy instance
        hanging.gate.set()
        await until(lambda: not slow.hung)
        assert stats.model(KEY).hung_instances == 0 and await ask(sched, "d") == "d"
        close(sched, hanging, healthy)

    run(scenario)


@pytest.mark.parametrize("priority_levels", [1, 2], ids=["prefetched", "queued"])
def test_front_drops_a_cancelled_request_that_has_not_started(priority_levels: int) -> None:
    async def scenario() -> None:
        inferer = Gated()
        sched, stats = scheduler(model_settings(priority_levels=priority_levels), inferer)
        context = GrpsContext(request_id="b")
        first, second = await started(ask(sched, "a"), sched.submit("b", context, 1, None))
        context.cancel()  # the client went away
        with pytest.raises(asyncio.CancelledError):
            await second
        assert stats.model(KEY).dropped[CANCELLED] == 1 and sched.depth == 0
        inferer.gate.set()
        assert await first == "a"
        assert inferer.ran == ["a"]
        close(sched, inferer)

    run(scenario)


def test_front_lets_a_cancelled_running_request_finish_unanswered() -> None:
    async def scenario() -> None:
        inferer = Gated()
        sched, stats = scheduler(model_settings(), inferer)
        context = GrpsContext(request_id="a")
        (task,) = await started(sched.submit("a", context, 1, None))
        context.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert stats.model(KEY).dropped[CANCELLED] == 0  # it runs: its thread cannot be stopped
        inferer.gate.set()
        await until(lambda: sched.instances[0].active == 0)
        assert inferer.ran == ["a"] and stats.model(KEY).batches_run == 1
        close(sched, inferer)

    run(scenario)


def test_front_refuses_a_request_of_a_client_already_gone() -> None:
    async def scenario() -> None:
        inferer = Gated(open_=True)
        sched, _ = scheduler(model_settings(), inferer)
        context = GrpsContext()
        context.cancel()
        with pytest.raises(asyncio.CancelledError):
            await sched.submit("a", context, 1, None)
        close(sched, inferer)

    run(scenario)


def test_front_batches_what_waits_together() -> None:
    async def scenario() -> None:
        inferer = Gated(open_=True)
        dynamic = {"type": "dynamic", "max_batch_size": 4, "batch_timeout_us": 10_000_000}
        sched, stats = scheduler(model_settings(batching=dynamic), inferer)
        with pytest.raises(InvalidInput, match="takes at most 4"):
            await ask(sched, "huge", rows=5)
        tasks = await started(*(ask(sched, name) for name in "abcd"))  # full: no wait for the timeout
        assert [await task for task in tasks] == list("abcd")
        counters = stats.model(KEY)
        assert (counters.batches_run, counters.rows_run) == (1, 4)
        close(sched, inferer)

    run(scenario)


class Merging(Converter):
    """Overrides batch_preprocess: merges the batch itself (grps's contract)."""

    def batch_preprocess(self, inps: list[Any], contexts: list[GrpsContext]) -> Any:
        return list(inps)


class Lister(Gated):
    def batch_infer(self, inp: Any, contexts: list[GrpsContext]) -> Any:
        self.ran.append(list(inp))
        return list(inp)


def test_front_of_a_merging_converter_counts_requests_of_any_shape() -> None:
    async def scenario() -> None:
        inferer = Lister(open_=True)
        dynamic = {"type": "dynamic", "max_batch_size": 3, "batch_timeout_us": 10_000_000}
        instance = ModelInstance(KEY, 0, "cpu", inferer, Merging(), lambda out: out)
        stats = ModelStats()
        sched = ModelScheduler(model_settings(batching=dynamic), [instance], ConcurrencyLimit(8), stats)
        assert sched.policy.counts_requests
        # Three requests of different shapes and row counts (one over max_batch_size) fill one batch.
        tasks = await started(
            ask(sched, "a", rows=7, key="x"), ask(sched, "b", key="y"), ask(sched, "c", rows=2)
        )
        assert [await task for task in tasks] == ["a", "b", "c"]
        assert inferer.ran == [["a", "b", "c"]]
        counters = stats.model(KEY)
        assert (counters.batches_run, counters.rows_run) == (1, 3)  # rows_run counts requests here
        close(sched, inferer)

    run(scenario)


def test_front_sends_a_lone_request_once_its_batch_timeout_passes() -> None:
    async def scenario() -> None:
        inferer = Gated(open_=True)
        sched, _ = scheduler(model_settings(batching={"type": "dynamic", "batch_timeout_us": 1000}), inferer)
        assert await ask(sched, "a") == "a"
        close(sched, inferer)

    run(scenario)


def test_front_answers_everything_in_hand_at_shutdown() -> None:
    async def scenario() -> None:
        inferer = Gated()
        sched, _ = scheduler(model_settings(priority_levels=2), inferer)
        tasks = await started(ask(sched, "a"), ask(sched, "b"))
        sched.close()
        for task in tasks:
            with pytest.raises(Exception, match="shutting down"):
                await task
        close(sched, inferer)

    run(scenario)

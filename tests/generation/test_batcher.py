"""The continuous batcher with a fake, deterministic model: which sequences each model call holds.

The model counts: after token t the most likely next token is (t + 1) % vocab, so a greedy
sequence's text is known in advance ("a" -> "bcdef..."). It records every call (kind, slots, inputs)
and checks the batcher's use of slots (no prefill into a slot in use, no decode of a free one). Where
a test needs to know what runs when, the model's calls wait for permits the test gives (`pace`), so
the order is decided by the test, never by timing.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import numpy as np
import pytest

from grps_py.core.errors import InvalidInput, ModelError, ModelNotReady, Overloaded
from grps_py.generation.api import GenerationRequest, GenerativeModel
from grps_py.generation.batcher import ContinuousBatcher, GenerationStats, TokenEvent
from grps_py.generation.detokenize import IncrementalDetokenizer
from grps_py.generation.sampling import Sampling, sample_tokens

T = TypeVar("T")
SAFETY_S = 30  # only reached when a test is broken: nothing here waits on time to pass
LETTERS = "abcdefghijklmnopqrstuvwxyz"


class PieceTokenizer:
    """Each id is one piece of text (a character, or longer); encode takes the longest piece."""

    def __init__(self, pieces: Sequence[str], eos_id: int | None = None) -> None:
        self.pieces = list(pieces)
        self.vocab_size = len(self.pieces)
        self.eos_id = eos_id

    def encode(self, text: str) -> list[int]:
        ids, at = [], 0
        while at < len(text):
            best = max((i for i, p in enumerate(self.pieces) if text.startswith(p, at)), key=self._length)
            ids.append(best)
            at += len(self.pieces[best])
        return ids

    def _length(self, i: int) -> int:
        return len(self.pieces[i])

    def decode(self, ids: Sequence[int]) -> str:
        assert self.eos_id not in ids, "the eos token is never decoded"
        return "".join(self.pieces[i] for i in ids)


class CountingModel(GenerativeModel):
    """Logits that make (last + 1) % vocab the most likely next token, by `margin` over the others."""

    def __init__(
        self, tokenizer: PieceTokenizer | None = None, max_running: int = 8, margin: float = 5.0
    ) -> None:
        self.tokenizer = tokenizer or PieceTokenizer(LETTERS)
        self.max_running = max_running
        self.margin = margin
        self.calls: list[tuple[str, tuple[int, ...], list[Any]]] = []  # (kind, slots, inputs)
        self.released: list[int] = []
        self.threads: set[int] = set()
        self.active: set[int] = set()
        self.peak_active = 0
        self.fail_prompts_with: int | None = None  # a prefill of a prompt holding this token fails
        self.fail_decode_of: int | None = None  # a decode fed this token fails
        self.pace: threading.Semaphore | None = None  # when set, each call waits for a permit
        self.waiting_calls = 0  # calls waiting for a permit now

    def prefill(self, slots: Sequence[int], prompts: Sequence[Sequence[int]]) -> np.ndarray[Any, Any]:
        self._enter("prefill", slots, [list(p) for p in prompts])
        for slot in slots:
            assert slot not in self.active, f"prefill into slot {slot}, still in use"
            self.active.add(slot)
        self.peak_active = max(self.peak_active, len(self.active))
        if self.fail_prompts_with is not None and any(self.fail_prompts_with in p for p in prompts):
            raise RuntimeError("the fake model fails on this prompt")
        return self._logits([p[-1] for p in prompts])

    def decode(self, slots: Sequence[int], tokens: Sequence[int]) -> np.ndarray[Any, Any]:
        self._enter("decode", slots, list(tokens))
        assert set(slots) <= self.active, f"decode of free slots {set(slots) - self.active}"
        if self.fail_decode_of in tokens:
            raise RuntimeError("the fake model fails on this token")
        return self._logits(tokens)

    def release(self, slot: int) -> None:
        self.threads.add(threading.get_ident())
        self.active.discard(slot)
        self.released.append(slot)

    def _enter(self, kind: str, slots: Sequence[int], inputs: list[Any]) -> None:
        self.threads.add(threading.get_ident())
        if self.pace is not None:
            self.waiting_calls += 1
            acquired = self.pace.acquire(timeout=SAFETY_S)
            self.waiting_calls -= 1
            if not acquired:
                raise TimeoutError("the test never gave the model a permit")
        self.calls.append((kind, tuple(slots), inputs))

    def _logits(self, last: Sequence[int]) -> np.ndarray[Any, Any]:
        vocab = self.tokenizer.vocab_size
        logits = np.zeros((len(last), vocab), dtype=np.float32)
        for row, token in enumerate(last):
            logits[row, (token + 1) % vocab] = self.margin
        return logits

    def slot_of(self, prompt: list[int]) -> int:
        """The slot the (first) prefill of `prompt` went into."""
        for kind, slots, inputs in self.calls:
            for slot, ids in zip(slots, inputs, strict=True):
                if kind == "prefill" and ids == prompt:
                    return slot
        raise AssertionError(f"no prefill of {prompt}")

    def slot_calls(self, slot: int) -> int:
        return sum(1 for _, slots, _ in self.calls if slot in slots)


def run(scenario: Callable[[], Awaitable[T]]) -> T:
    return asyncio.run(asyncio.wait_for(scenario(), SAFETY_S))


async def until(condition: Callable[[], bool]) -> None:
    while not condition():
        await asyncio.sleep(0.001)


def request(prompt: str, max_tokens: int, **options: Any) -> GenerationRequest:
    options.setdefault("temperature", 0.0)
    return GenerationRequest(PieceTokenizer(LETTERS).encode(prompt), max_tokens, **options)


async def events_of(
    batcher: ContinuousBatcher, req: GenerationRequest, cancelled: Callable[[], bool] = lambda: False
) -> list[TokenEvent]:
    return [event async for event in batcher.generate(req, cancelled)]


def text(events: list[TokenEvent]) -> str:
    return "".join(e.text for e in events)


def batcher_for(model: CountingModel, **options: Any) -> ContinuousBatcher:
    settings = {"max_running": 4, "max_waiting": 16, "token_budget": 64, **options}
    return ContinuousBatcher(model, **settings)


# -- one sequence --------------------------------------------------------------------------------
def test_greedy_sequence_streams_one_token_per_event_and_ends_at_max_tokens() -> None:
    model = CountingModel()

    async def scenario() -> list[TokenEvent]:
        return await events_of(batcher_for(model), request("xa", 5))

    events = run(scenario)
    assert [e.text for e in events] == ["b", "c", "d", "e", "f"]
    assert [e.token_ids for e in events] == [(1,), (2,), (3,), (4,), (5,)]
    assert [e.finish_reason for e in events] == [None, None, None, None, "length"]
    assert [kind for kind, _, _ in model.calls] == ["prefill", "decode", "decode", "decode", "decode"]
    assert model.calls[0][2] == [[23, 0]]  # the prompt, as ids
    assert model.released == [0]


def test_model_calls_run_on_one_thread_off_the_event_loop() -> None:
    model = CountingModel()

    async def scenario() -> None:
        batcher = batcher_for(model)
        await asyncio.gather(*(events_of(batcher, request("a", 4)) for _ in range(6)))

    run(scenario)
    assert len(model.threads) == 1
    assert threading.get_ident() not in model.threads


def test_eos_ends_with_stop_and_is_not_in_the_output() -> None:
    model = CountingModel(PieceTokenizer(LETTERS, eos_id=LETTERS.index("e")))

    async def scenario() -> list[TokenEvent]:
        return await events_of(batcher_for(model), request("a", 20))

    events = run(scenario)
    assert text(events) == "bcd"
    assert events[-1] == TokenEvent("", (), "stop")
    assert [i for e in events for i in e.token_ids] == [1, 2, 3]
    assert model.released == [0]


# -- stop strings ----------------------------------------------------------------------------------
def test_a_stop_string_split_across_tokens_is_never_emitted() -> None:
    model = CountingModel()

    async def scenario() -> list[TokenEvent]:
        return await events_of(batcher_for(model), request("a", 20, stop=("xyz", "def")))

    events = run(scenario)
    assert [e.text for e in events] == ["b", "c", "", "", ""]  # "d", "de" held back, then "def"
    assert events[-1].finish_reason == "stop"
    assert events[-1].token_ids == (LETTERS.index("f"),)
    assert model.released == [0]


def test_a_stop_string_starting_inside_a_token_cuts_that_token_s_text() -> None:
    pieces = ["ab", "cd", "ef", "gh", "ij"]
    model = CountingModel(PieceTokenizer(pieces))

    async def scenario() -> list[TokenEvent]:
        req = GenerationRequest([0], 10, temperature=0.0, stop=("de",))
        return await events_of(batcher_for(model), req)

    events = run(scenario)
    assert [e.text for e in events] == ["c", ""]  # "cd": "d" could begin "de"; "cdef" holds it
    assert events[-1].finish_reason == "stop"


def test_the_first_stop_string_to_complete_ends_the_text_where_it_starts() -> None:
    model = CountingModel()

    async def scenario() -> tuple[list[TokenEvent], list[TokenEvent]]:
        batcher = batcher_for(model)
        both_end_at_f = await events_of(batcher, request("a", 20, stop=("ef", "def")))
        one_ends_sooner = await events_of(batcher, request("a", 20, stop=("cdefg", "ef")))
        return both_end_at_f, one_ends_sooner

    both_end_at_f, one_ends_sooner = run(scenario)
    assert text(both_end_at_f) == "bc"
    assert text(one_ends_sooner) == "bcd"  # "cdefg" never completes: generation stopped at "ef"
    assert one_ends_sooner[-1].finish_reason == "stop"


def test_text_held_back_for_a_stop_string_that_never_comes_is_emitted_at_the_end() -> None:
    model = CountingModel()

    async def scenario() -> list[TokenEvent]:
        return await events_of(batcher_for(model), request("a", 4, stop=("ex",)))

    events = run(scenario)
    assert [e.text for e in events] == ["b", "c", "d", "e"]  # "e" held, then let go at the end
    assert events[-1].finish_reason == "length"


def test_incremental_text_waits_for_a_whole_character_from_byte_tokens() -> None:
    class ByteTokenizer:
        eos_id = None
        vocab_size = 256

        def encode(self, text: str) -> list[int]:
            return list(text.encode())

        def decode(self, ids: Sequence[int]) -> str:
            return bytes(ids).decode("utf-8", errors="replace")

    words = "héllo wörld ✓"
    detokenizer = IncrementalDetokenizer(ByteTokenizer(), list(b"say: "), stop=("ld ✓",))
    emitted = [detokenizer.add(byte) for byte in words.encode()]
    assert "".join(emitted) == "héllo wör"
    assert detokenizer.stopped
    assert all("\ufffd" not in piece for piece in emitted)


# -- joining and leaving the batch -----------------------------------------------------------------
def test_a_request_joins_the_running_batch_at_the_next_step_and_leaves_before_a_longer_one() -> None:
    model = CountingModel()
    model.pace = threading.Semaphore(3)  # the long request's prefill and two decodes, then it waits

    async def scenario() -> tuple[list[TokenEvent], list[TokenEvent], list[str]]:
        batcher = batcher_for(model)
        finished: list[str] = []

        async def named(name: str, req: GenerationRequest) -> list[TokenEvent]:
            events = await events_of(batcher, req)
            finished.append(name)
            return events

        long = asyncio.ensure_future(named("long", request("a", 12)))
        await until(lambda: len(model.calls) == 3 and model.waiting_calls == 1)  # in its 3rd decode
        short = asyncio.ensure_future(named("short", request("k", 3)))
        await until(lambda: batcher.waiting_count == 1)
        assert model.pace is not None
        model.pace.release(1000)
        return await long, await short, finished

    long, short, finished = run(scenario)
    assert text(long) == "bcdefghijklm"
    assert text(short) == "lmn"
    assert finished == ["short", "long"]
    slots = [(kind, slots) for kind, slots, _ in model.calls]
    assert slots[:9] == [
        ("prefill", (0,)),
        ("decode", (0,)),
        ("decode", (0,)),
        ("decode", (0,)),  # the step under way when the short request came
        ("prefill", (1,)),  # the very next step starts it
        ("decode", (0,)),  # ... and advances those that ran before it
        ("decode", (0, 1)),
        ("decode", (0, 1)),  # its third token: it leaves
        ("decode", (0,)),
    ]
    assert model.released == [1, 0]


def test_max_running_is_respected_and_slots_are_reused() -> None:
    model = CountingModel()

    async def scenario() -> list[list[TokenEvent]]:
        batcher = batcher_for(model, max_running=2)
        lengths = [7, 2, 5, 1, 3, 4]
        return await asyncio.gather(*(events_of(batcher, request("a", n)) for n in lengths))

    results = run(scenario)
    assert [text(r) for r in results] == ["bcdefgh", "bc", "bcdef", "b", "bcd", "bcde"]
    assert model.peak_active == 2
    assert all(len(slots) <= 2 and set(slots) <= {0, 1} for _, slots, _ in model.calls)
    assert len(model.released) == 6
    assert set(model.released) == {0, 1}
    assert not model.active


def test_the_model_s_own_slot_count_caps_max_running() -> None:
    model = CountingModel(max_running=1)

    async def scenario() -> list[list[TokenEvent]]:
        batcher = batcher_for(model, max_running=4)
        assert batcher.max_running == 1
        return await asyncio.gather(*(events_of(batcher, request("a", 3)) for _ in range(3)))

    assert [text(r) for r in run(scenario)] == ["bcd"] * 3
    assert model.peak_active == 1


def test_the_token_budget_limits_the_prompts_one_step_admits() -> None:
    model = CountingModel()
    model.pace = threading.Semaphore(0)

    async def scenario() -> list[list[TokenEvent]]:
        batcher = batcher_for(model, max_running=8, token_budget=10)
        first = asyncio.ensure_future(events_of(batcher, request("a", 8)))
        await until(lambda: model.waiting_calls == 1)  # its prefill holds the loop
        prompts = ["abcdef", "abc", "abcde", "abcdefghijklmno"]  # 6, 3, 5 and 15 tokens
        others = [asyncio.ensure_future(events_of(batcher, request(p, 2))) for p in prompts]
        await until(lambda: batcher.waiting_count == 4)
        assert model.pace is not None
        model.pace.release(1000)
        return [await first, *[await task for task in others]]

    results = run(scenario)
    assert [text(r) for r in results] == ["bcdefghi", "gh", "de", "fg", "pq"]
    prefills = [[len(p) for p in prompts] for kind, _, prompts in model.calls if kind == "prefill"]
    assert prefills == [[1], [6, 3], [5], [15]]  # a prompt over the budget still runs, alone


# -- cancellation ------------------------------------------------------------------------------------
def test_cancelled_stops_the_sequence_at_the_next_step() -> None:
    model = CountingModel()

    async def scenario() -> tuple[list[TokenEvent], int]:
        batcher = batcher_for(model)
        gone = threading.Event()  # the client's connection, as the transports see it
        other = asyncio.ensure_future(events_of(batcher, request("a", 60)))
        events: list[TokenEvent] = []
        async for event in batcher.generate(request("b", 1000), gone.is_set):
            events.append(event)
            if len(events) == 3:
                gone.set()
        slot = model.slot_of([1])
        steps_when_cancelled = model.slot_calls(slot)
        await other
        assert model.slot_calls(slot) == steps_when_cancelled  # no step for it after its last event
        assert model.released.count(slot) == 1
        return events, steps_when_cancelled

    events, steps = run(scenario)
    assert events[-1] == TokenEvent("", (), "cancelled")
    assert 3 <= steps < 1000


def test_a_reader_that_stops_reading_frees_the_slot() -> None:
    model = CountingModel()

    async def scenario() -> None:
        batcher = batcher_for(model)
        stream: Any = batcher.generate(request("a", 1000))
        for _ in range(2):
            await anext(stream)
        await stream.aclose()
        await until(lambda: model.released == [0])
        assert batcher.running_count == 0
        assert text(await events_of(batcher, request("a", 2))) == "bc"  # the slot serves again

    run(scenario)
    assert model.slot_calls(0) < 1000


def test_a_request_cancelled_while_waiting_never_runs() -> None:
    model = CountingModel()
    model.pace = threading.Semaphore(0)

    async def scenario() -> tuple[list[TokenEvent], list[TokenEvent]]:
        batcher = batcher_for(model, max_running=1)
        first = asyncio.ensure_future(events_of(batcher, request("a", 3)))
        await until(lambda: model.waiting_calls == 1)
        gone = asyncio.ensure_future(events_of(batcher, request("z", 3), lambda: True))
        await until(lambda: batcher.waiting_count == 1)
        assert model.pace is not None
        model.pace.release(1000)
        return await gone, await first

    gone, first = run(scenario)
    assert gone == [TokenEvent("", (), "cancelled")]
    assert text(first) == "bcd"
    assert all(prompts == [[0]] for kind, _, prompts in model.calls if kind == "prefill")


# -- sampling ----------------------------------------------------------------------------------------
def test_the_same_seed_gives_the_same_text_whatever_runs_beside_it() -> None:
    model = CountingModel(margin=5.0)

    def sampled(seed: int) -> GenerationRequest:
        return request("a", 30, temperature=3.0, seed=seed)

    async def scenario() -> tuple[str, str, str, str]:
        batcher = batcher_for(model)
        alone = text(await events_of(batcher, sampled(7)))
        crowded = await asyncio.gather(
            events_of(batcher, sampled(1)), events_of(batcher, sampled(7)), events_of(batcher, sampled(2))
        )
        other = text(await events_of(batcher, sampled(8)))
        negative = [text(await events_of(batcher, sampled(-5))) for _ in range(2)]
        assert negative[0] == negative[1]
        greedy = text(await events_of(batcher, request("a", 30, seed=7)))
        return alone, text(crowded[1]), other, greedy

    alone, crowded, other, greedy = run(scenario)
    assert alone == crowded
    assert alone != other
    assert greedy == LETTERS[1:] + LETTERS[:5]
    assert alone != greedy


def test_top_p_keeps_only_the_most_likely_tokens() -> None:
    model = CountingModel(margin=5.0)  # at temperature 3 the top token has about 17%

    async def scenario() -> str:
        return text(await events_of(batcher_for(model), request("a", 30, temperature=3.0, top_p=0.1, seed=3)))

    assert run(scenario) == LETTERS[1:] + LETTERS[:5]


def test_sample_tokens_draws_from_the_nucleus_in_proportion() -> None:
    probabilities = np.log(np.array([[0.1, 0.5, 0.25, 0.15]]))
    rng = np.random.default_rng(0)
    draws = [sample_tokens(probabilities, [Sampling(1.0, 0.7, rng)])[0] for _ in range(400)]
    assert set(draws) == {1, 2}  # 0.5 + 0.25 reaches 0.7: the rest is cut
    assert draws.count(1) > draws.count(2)
    logits = np.random.default_rng(1).normal(0.0, 3.0, size=(1, 5000))  # a large vocabulary
    weights = np.exp(logits[0] - logits[0].max())
    order = np.argsort(-weights)
    nucleus = set(order[: int(np.searchsorted(np.cumsum(weights[order]), 0.9 * weights.sum())) + 1].tolist())
    draws = [sample_tokens(logits, [Sampling(1.0, 0.9, rng)])[0] for _ in range(400)]
    assert set(draws) <= nucleus
    assert len(set(draws)) > 10
    greedy = sample_tokens(np.array([[0.0, np.nan, 3.0], [np.inf, 1.0, 2.0]]), [Sampling(0.0, 1.0, rng)] * 2)
    assert greedy == [2, 0]


# -- admission, failures, shutdown -------------------------------------------------------------------
def test_a_full_waiting_queue_answers_overloaded() -> None:
    model = CountingModel()
    model.pace = threading.Semaphore(0)

    async def scenario() -> list[list[TokenEvent]]:
        batcher = batcher_for(model, max_running=1, max_waiting=1)
        running = asyncio.ensure_future(events_of(batcher, request("a", 2)))
        await until(lambda: model.waiting_calls == 1)
        waiting = asyncio.ensure_future(events_of(batcher, request("b", 2)))
        await until(lambda: batcher.waiting_count == 1)
        with pytest.raises(Overloaded):
            await events_of(batcher, request("c", 2))
        assert model.pace is not None
        model.pace.release(1000)
        return [await running, await waiting]

    assert [text(r) for r in run(scenario)] == ["bc", "cd"]


def test_requests_it_cannot_run_are_invalid() -> None:
    async def scenario() -> None:
        batcher = batcher_for(CountingModel())
        bad = [
            GenerationRequest([], 3),
            GenerationRequest([1], 0),
            GenerationRequest([1], 3, temperature=-1.0),
            GenerationRequest([1], 3, temperature=float("nan")),
            GenerationRequest([1], 3, temperature=float("inf")),
            GenerationRequest([1, 26], 3),
            GenerationRequest([-1], 3),
            GenerationRequest([1], 3, top_p=0.0),
            GenerationRequest([1], 3, stop=("x",) * 17),
            GenerationRequest([1], 3, stop=("x" * 257,)),
        ]
        for req in bad:
            with pytest.raises(InvalidInput):
                await events_of(batcher, req)
        assert batcher.waiting_count == 0

    run(scenario)


def test_a_failing_prefill_fails_its_requests_only() -> None:
    model = CountingModel()
    model.pace = threading.Semaphore(2)  # the first request's prefill and one decode

    async def scenario() -> list[TokenEvent]:
        batcher = batcher_for(model)
        model.fail_prompts_with = LETTERS.index("z")
        survivor = asyncio.ensure_future(events_of(batcher, request("a", 6)))
        await until(lambda: len(model.calls) == 2 and model.waiting_calls == 1)
        doomed = asyncio.ensure_future(events_of(batcher, request("z", 6)))
        await until(lambda: batcher.waiting_count == 1)
        assert model.pace is not None
        model.pace.release(1000)
        with pytest.raises(ModelError):
            await doomed
        return await survivor

    assert text(run(scenario)) == "bcdefg"
    assert sorted(model.released) == [0, 1]


def test_a_failing_decode_fails_the_sequences_in_it_and_the_batcher_serves_on() -> None:
    model = CountingModel()
    model.fail_decode_of = LETTERS.index("d")

    async def scenario() -> list[TokenEvent]:
        batcher = batcher_for(model)
        results = await asyncio.gather(
            events_of(batcher, request("a", 6)), events_of(batcher, request("b", 6)), return_exceptions=True
        )
        assert all(isinstance(r, ModelError) for r in results)
        assert not model.active
        model.fail_decode_of = None
        return await events_of(batcher, request("a", 3))

    assert text(run(scenario)) == "bcd"


def test_a_token_the_tokenizer_cannot_decode_ends_only_its_own_sequence() -> None:
    class Fussy(PieceTokenizer):
        def decode(self, ids: Sequence[int]) -> str:
            if LETTERS.index("d") in ids:
                raise KeyError("no such piece")
            return super().decode(ids)

    model = CountingModel(Fussy(LETTERS))

    async def scenario() -> list[TokenEvent]:
        batcher = batcher_for(model)
        doomed = asyncio.ensure_future(events_of(batcher, request("a", 6)))
        fine = await events_of(batcher, request("k", 6))
        with pytest.raises(ModelError):
            await doomed
        return fine

    assert text(run(scenario)) == "lmnopq"
    assert sorted(model.released) == [0, 1]


def test_close_ends_waiting_and_running_requests() -> None:
    model = CountingModel()
    model.pace = threading.Semaphore(0)

    async def scenario() -> None:
        batcher = batcher_for(model, max_running=1)
        running = asyncio.ensure_future(events_of(batcher, request("a", 5)))
        await until(lambda: model.waiting_calls == 1)
        waiting = asyncio.ensure_future(events_of(batcher, request("b", 5)))
        await until(lambda: batcher.waiting_count == 1)
        batcher.close()
        for task in (running, waiting):
            with pytest.raises(ModelNotReady):
                await task
        with pytest.raises(ModelNotReady):
            await events_of(batcher, request("c", 2))
        assert model.pace is not None
        model.pace.release(1000)  # the prefill under way finishes in its thread
        await batcher.aclose()

    run(scenario)
    assert [kind for kind, _, _ in model.calls] == ["prefill"]


# -- observer ----------------------------------------------------------------------------------------
class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, float]] = []

    def first_token(self, seconds: float) -> None:
        self.calls.append(("first_token", seconds))

    def token_gap(self, seconds: float) -> None:
        self.calls.append(("token_gap", seconds))

    def tokens(self, count: int) -> None:
        self.calls.append(("tokens", count))

    def running(self, count: int) -> None:
        self.calls.append(("running", count))

    def waiting(self, count: int) -> None:
        self.calls.append(("waiting", count))


def test_the_observer_hears_latencies_tokens_and_counts() -> None:
    recorder = Recorder()
    stats = GenerationStats()

    async def scenario() -> None:
        one = batcher_for(CountingModel(), observer=recorder)
        await events_of(one, request("a", 3))
        two = batcher_for(CountingModel(), max_running=2, observer=stats)
        await asyncio.gather(*(events_of(two, request("a", n)) for n in (4, 2, 3)))

    run(scenario)
    assert [name for name, _ in recorder.calls] == [
        "waiting",  # 1: queued
        "waiting",  # 0: admitted
        "running",  # 1
        "tokens",  # the prefill's
        "first_token",
        "tokens",
        "token_gap",
        "tokens",
        "token_gap",
        "running",  # 0: it left
    ]
    assert [value for name, value in recorder.calls if name in ("waiting", "running", "tokens")] == [
        1,
        0,
        1,
        1,
        1,
        1,
        0,
    ]
    assert all(value >= 0 for name, value in recorder.calls)
    assert stats.tokens_total == 9
    assert len(stats.first_token_s) == 3
    assert len(stats.token_gap_s) == 6
    assert stats.running_peak == 2
    assert stats.waiting_peak == 3
    assert (stats.running_now, stats.waiting_now) == (0, 0)


# -- several decode steps per model call ---------------------------------------------------------------


def test_decode_steps_give_the_same_text_in_fewer_calls() -> None:
    """Four steps per call: the same tokens as one step per call, never past max_tokens, a stop string
    inside a call drops the tokens after it, and a request that waits makes the next call one step."""

    async def texts(decode_steps: int) -> tuple[list[str], int, CountingModel]:
        model = CountingModel()
        batcher = ContinuousBatcher(model, 8, 8, 1024, decode_steps=decode_steps)
        jobs = [request("a", 10), request("c", 7), request("e", 12, stop=("kl",))]
        outs = await asyncio.gather(*(events_of(batcher, job) for job in jobs))
        await batcher.aclose()
        return ["".join(e.text for e in out) for out in outs], sum(map(len, outs)), model

    one, events_one, single = run(lambda: texts(1))
    four, events_four, multi = run(lambda: texts(4))
    assert one == four == ["bcdefghijk", "defghij", "fghij"]
    assert events_four < events_one  # tokens of one call reach their reader as one event
    # The same decode steps, but the stop inside a call of four wastes the steps after it.
    steps_one = [c for c in single.calls if c[0] == "decode"]
    steps_four = [c for c in multi.calls if c[0] == "decode"]
    assert len(steps_four) >= len(steps_one)
    assert sorted(multi.released) == [0, 1, 2]  # every slot freed


def test_a_waiting_request_is_admitted_at_the_next_call() -> None:
    async def scenario() -> list[str]:
        model = CountingModel(max_running=1)
        model.pace = threading.Semaphore(0)  # each model call waits for a permit
        batcher = ContinuousBatcher(model, 1, 8, 1024, decode_steps=4)
        first = asyncio.ensure_future(events_of(batcher, request("a", 9)))
        await until(lambda: model.waiting_calls == 1)  # the first prefill
        second = asyncio.ensure_future(events_of(batcher, request("m", 3)))
        await until(lambda: batcher.waiting_count == 1)
        model.pace.release(100)
        outs = [await first, await second]
        await batcher.aclose()
        return ["".join(e.text for e in out) for out in outs]

    assert run(scenario) == ["bcdefghij", "nop"]

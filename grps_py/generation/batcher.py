"""Continuous batching: sequences join and leave the running batch at every step.

One loop task per model runs the steps. Each step:

1. retires the sequences whose client went away (`cancelled()`, checked every step), and drops
   waiting ones whose client went away;
2. admits waiting requests, oldest first, while fewer than `max_running` run and the prompts admitted
   this step stay within `token_budget` tokens (one is always admitted, however long its prompt),
   and starts them with one `prefill` call: each gets its first token from it;
3. advances every sequence that ran before this step by one token with one `decode` call.

After each model call every sequence samples its next token (`sampling.py`), its new text is
emitted (`detokenize.py`: text that could begin a stop string is held back), and a sequence that
finished (eos, a stop string, `max_tokens`) leaves at once: its slot is released and the next
step may give it to a waiting request. So a short request never waits for a long one, and a new
request starts at the next step, not when the batch ends.

Model calls (and the sampling that follows them) run in one dedicated thread, one at a time, never on
the event loop; the loop task sleeps while nothing runs or waits. Each sequence's events wait for
its reader in its own list, which holds at most one event per token (`max_tokens` bounds it): a slow
reader never slows the others' steps.
"""

from __future__ import annotations

import asyncio
import copy
import heapq
import logging
import math
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol

import numpy as np

from grps_py.core.errors import GrpsError, InternalError, InvalidInput, ModelError, ModelNotReady, Overloaded
from grps_py.core.observer import Recent
from grps_py.generation.api import GenerationRequest, GenerativeModel
from grps_py.generation.detokenize import IncrementalDetokenizer
from grps_py.generation.sampling import Sampling, sample_tokens

log = logging.getLogger("grps_py.generation")

# Why a sequence ended (TokenEvent.finish_reason).
STOP = "stop"  # the model's eos token, or a stop string
LENGTH = "length"  # max_tokens
CANCELLED = "cancelled"  # the client went away

MAX_STOP_STRINGS = 16  # a request's stop strings are searched at every token: bound their cost
MAX_STOP_CHARS = 256


@dataclass(frozen=True)
class TokenEvent:
    """One step of one sequence: its new text ("" while held back) and the ids the step added. The
    last event has a `finish_reason`. `token_ids` never holds the eos token; the token that completes
    a stop string is in it (its text is not)."""

    text: str
    token_ids: tuple[int, ...]
    finish_reason: str | None = None


class GenerationObserver(Protocol):
    def first_token(self, seconds: float) -> None:
        """A sequence's first token came, `seconds` after its request was queued."""

    def token_gap(self, seconds: float) -> None:
        """A sequence's next token came, `seconds` after its previous one (inter-token latency)."""

    def tokens(self, count: int) -> None:
        """A model call produced `count` tokens (one per sequence in it)."""

    def running(self, count: int) -> None:
        """The number of running sequences changed to `count`."""

    def waiting(self, count: int) -> None:
        """The number of waiting requests changed to `count`."""


_RECENT = 4096  # samples GenerationStats keeps of each latency


class GenerationStats:
    """An in-memory observer (tests, the dashboard): totals, the present counts, recent latencies.
    Memory stays the same however long it runs. Called from the event loop thread only."""

    def __init__(self) -> None:
        self.first_token_s = Recent(_RECENT)
        self.token_gap_s = Recent(_RECENT)
        self.tokens_total = 0
        self.model_calls = 0
        self.running_now = 0
        self.running_peak = 0
        self.waiting_now = 0
        self.waiting_peak = 0

    def first_token(self, seconds: float) -> None:
        self.first_token_s.append(seconds)

    def token_gap(self, seconds: float) -> None:
        self.token_gap_s.append(seconds)

    def tokens(self, count: int) -> None:
        self.tokens_total += count
        self.model_calls += 1

    def running(self, count: int) -> None:
        self.running_now = count
        self.running_peak = max(self.running_peak, count)

    def waiting(self, count: int) -> None:
        self.waiting_now = count
        self.waiting_peak = max(self.waiting_peak, count)


@dataclass(eq=False)
class _Sequence:
    request: GenerationRequest
    cancelled: Callable[[], bool]
    sampling: Sampling
    detokenizer: IncrementalDetokenizer
    queued_at: float
    deadline: float = math.inf  # the loop's time at which it ends with LENGTH
    slot: int = -1
    last_token: int = -1
    generated: int = 0  # tokens in the output (eos excluded)
    last_token_at: float | None = None
    abandoned: bool = False  # its reader stopped reading
    done: bool = False  # its last event (or error) is delivered
    events: deque[TokenEvent] = field(default_factory=deque)
    error: BaseException | None = None
    ready: asyncio.Event = field(default_factory=asyncio.Event)

    def gone(self) -> bool:
        if self.abandoned:
            return True
        try:
            return self.cancelled()
        except Exception:  # the caller's check failed: its client cannot be reached either
            log.exception("a generation request's cancelled() check failed")
            return True

    def deliver(self, event: TokenEvent) -> None:
        if self.done:
            return
        self.done = event.finish_reason is not None
        if not self.abandoned:
            self.events.append(event)
            self.ready.set()

    def fail(self, error: BaseException) -> None:
        if self.done:
            return
        self.done = True
        self.error = error
        self.ready.set()


class ContinuousBatcher:
    """Runs a generative model's sequences with continuous batching (see the module's docstring)."""

    def __init__(
        self,
        model: GenerativeModel,
        max_running: int,
        max_waiting: int,
        token_budget: int,
        observer: GenerationObserver | None = None,
        decode_steps: int = 1,
    ) -> None:
        # Every request waits (until the loop's next step at least): max_waiting 0 would refuse all.
        if min(max_running, max_waiting, token_budget) < 1:
            raise ValueError(
                f"max_running ({max_running}), max_waiting ({max_waiting}) and token_budget "
                f"({token_budget}) must each be at least 1"
            )
        self.model = model
        # The model's KV cache holds `model.max_running` sequences: never more slots than that.
        self.max_running = min(max_running, model.max_running)
        self.max_waiting = max_waiting
        self.token_budget = token_budget
        # Decode steps one model call may run back to back while no request waits for a slot: the
        # per-token work on the event loop (events, messages, writes) is then shared by that many
        # tokens. 1: one step per call.
        self.decode_steps = max(1, decode_steps)
        self.observer: GenerationObserver = observer if observer is not None else GenerationStats()
        self._free_slots = list(range(self.max_running))  # a heap: the lowest free slot is reused first
        self._waiting: deque[_Sequence] = deque()
        self._running: dict[int, _Sequence] = {}  # by slot, in the order they started
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="grps-generate")

    @property
    def running_count(self) -> int:
        return len(self._running)

    @property
    def waiting_count(self) -> int:
        return len(self._waiting)

    # -- the caller's side -----------------------------------------------------------------------
    async def generate(
        self, request: GenerationRequest, cancelled: Callable[[], bool] = lambda: False
    ) -> AsyncIterator[TokenEvent]:
        """The sequence's events as its steps run, the last one with its finish_reason. Raises
        Overloaded when the waiting queue is full, InvalidInput for a request it cannot run, and
        the model's error (a GrpsError) if a model call fails. Leaving the iteration early (or
        `cancelled()` turning true) ends the sequence at the next step."""
        sequence = self._submit(request, cancelled)
        try:
            while True:
                if not sequence.events:
                    if sequence.error is not None:
                        raise sequence.error
                    sequence.ready.clear()
                    await sequence.ready.wait()
                    continue
                event = _merge(sequence.events)  # all that came since the reader last looked
                yield event
                if event.finish_reason is not None:
                    return
        finally:
            if not sequence.done:
                sequence.abandoned = True
                sequence.events.clear()
                if sequence.slot < 0:
                    self._leave_queue(sequence)
                self._wake.set()  # the loop retires it at its next step

    def _submit(self, request: GenerationRequest, cancelled: Callable[[], bool]) -> _Sequence:
        if self._closed:
            raise ModelNotReady("the model is shutting down")
        _check(request, self.model.tokenizer.vocab_size)
        if len(self._waiting) >= self.max_waiting:
            raise Overloaded(f"the generation queue is full ({len(self._waiting)} waiting); retry later")
        loop = asyncio.get_running_loop()
        if self._task is None:
            self._task = loop.create_task(self._loop(), name="grps-continuous-batcher")
            self._task.add_done_callback(self._loop_ended)
        sequence = _Sequence(
            request,
            cancelled,
            Sampling(
                request.temperature,
                request.top_p,
                _generator(request.seed),
                self.model.tokenizer.eos_id if request.ignore_eos else None,
            ),
            IncrementalDetokenizer(self.model.tokenizer, request.prompt_ids, request.stop),
            loop.time(),
        )
        if request.timeout_s is not None:
            sequence.deadline = sequence.queued_at + request.timeout_s
        self._waiting.append(sequence)
        self.observer.waiting(len(self._waiting))
        self._wake.set()
        return sequence

    def _leave_queue(self, sequence: _Sequence) -> None:
        try:
            self._waiting.remove(sequence)
        except ValueError:
            return
        self.observer.waiting(len(self._waiting))

    # -- the loop --------------------------------------------------------------------------------
    async def _loop(self) -> None:
        while not self._closed:
            if not self._running and not self._waiting:
                self._wake.clear()
                await self._wake.wait()
                continue
            try:
                await self._step()
            except Exception:  # a bug here must not leave every stream hanging
                log.exception("a continuous batching step failed")
                await self._fail(list(self._running.values()), InternalError("generation failed"))
            await asyncio.sleep(0)  # the readers run between steps even when no model call awaited

    def _loop_ended(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.error("the continuous batching loop ended", exc_info=task.exception())
        if not self._closed:  # it cannot end otherwise: answer everyone rather than leave them waiting
            self.close()

    async def _step(self) -> None:
        await self._retire_gone()
        decoding = list(self._running.values())  # those that started before this step
        admitted = self._admit()
        if admitted:
            await self._run(admitted, prefill=True)
        decoding = [s for s in decoding if not s.done]
        if decoding:
            await self._run(decoding, prefill=False)

    async def _retire_gone(self) -> None:
        """End the sequences whose client went away (CANCELLED) or whose time ran out (LENGTH, with
        the text held back for a possible stop string)."""
        now = asyncio.get_running_loop().time()
        for sequence in [s for s in self._waiting if s.gone() or s.deadline <= now]:
            self._leave_queue(sequence)
            sequence.deliver(_ended(sequence))
        ended = [(s, _ended(s)) for s in self._running.values() if s.gone() or s.deadline <= now]
        if ended:
            await self._retire(ended)

    def _admit(self) -> list[_Sequence]:
        admitted: list[_Sequence] = []
        tokens = 0
        while self._waiting and self._free_slots:
            prompt = len(self._waiting[0].request.prompt_ids)
            if admitted and tokens + prompt > self.token_budget:
                break
            sequence = self._waiting.popleft()
            sequence.slot = heapq.heappop(self._free_slots)
            self._running[sequence.slot] = sequence
            admitted.append(sequence)
            tokens += prompt
        if admitted:
            self.observer.waiting(len(self._waiting))
            self.observer.running(len(self._running))
        return admitted

    async def _run(self, sequences: list[_Sequence], prefill: bool) -> None:
        """One model call for `sequences` (prefill or decode), then each one's next token."""
        slots = [s.slot for s in sequences]
        rows = [s.sampling for s in sequences]
        if prefill:
            prompts = [s.request.prompt_ids for s in sequences]
            call = partial(self._model_call, self.model.prefill, slots, prompts)
        else:
            last_tokens = [s.last_token for s in sequences]
            steps = self._steps_for(sequences)
            call = partial(self._decode_call, slots, last_tokens, steps)
        try:
            tokens = await asyncio.get_running_loop().run_in_executor(self._thread, call, rows)
        except Exception as exc:  # the model's own failure: its sequences end, the others go on
            await self._fail(sequences, _model_error(exc))
            return
        finished: list[tuple[_Sequence, TokenEvent | None]] = []
        broken: list[_Sequence] = []
        error: GrpsError | None = None
        for step in tokens:  # one list of tokens per step run
            self.observer.tokens(len(step))
        for i, sequence in enumerate(sequences):
            try:
                for step in tokens:
                    event = self._advance(sequence, step[i])
                    if event is not None:  # it ended: the tokens after its end are dropped
                        finished.append((sequence, event))
                        break
            except Exception as exc:  # the tokenizer's failure (an id it cannot decode): this one ends
                broken.append(sequence)
                error = _model_error(exc)
        if finished:
            await self._retire(finished)
        if error is not None:
            await self._fail(broken, error)

    async def _fail(self, sequences: list[_Sequence], error: GrpsError) -> None:
        """End `sequences` with `error`, their slots released first (as `_retire` does)."""
        try:
            await self._retire([(s, None) for s in sequences])
        finally:
            for sequence in sequences:
                sequence.fail(_copy(error))

    def _model_call(
        self,
        method: Callable[[Sequence[int], Any], np.ndarray[Any, Any]],
        slots: list[int],
        inputs: Any,
        rows: list[Sampling],
    ) -> list[list[int]]:
        """On the model thread: the call, then sampling (no logits array crosses to the event loop)."""
        logits = method(slots, inputs)
        return [sample_tokens(logits, rows)]

    def _decode_call(
        self, slots: list[int], tokens: list[int], steps: int, rows: list[Sampling]
    ) -> list[list[int]]:
        """On the model thread: `steps` decode steps back to back, each fed the tokens the last sampled."""
        out: list[list[int]] = []
        for _ in range(steps):
            tokens = sample_tokens(self.model.decode(slots, tokens), rows)
            out.append(tokens)
        return out

    def _steps_for(self, sequences: list[_Sequence]) -> int:
        """Decode steps for this call: one while a request waits for a slot (it starts at the next step)
        or a deadline is near, else up to `decode_steps`, never past the fewest tokens any sequence
        still may generate (so none runs past its max_tokens)."""
        if self.decode_steps == 1 or self._waiting:
            return 1
        left = min(s.request.max_tokens - s.generated for s in sequences)
        if any(s.deadline < math.inf for s in sequences):
            return 1
        return max(1, min(self.decode_steps, left))

    def _advance(self, sequence: _Sequence, token: int) -> TokenEvent | None:
        """Add the sequence's new token and emit its text; its last event when this ends it."""
        now = asyncio.get_running_loop().time()
        if sequence.last_token_at is None:
            self.observer.first_token(now - sequence.queued_at)
        else:
            self.observer.token_gap(now - sequence.last_token_at)
        sequence.last_token_at = now
        sequence.last_token = token
        detokenizer = sequence.detokenizer
        if token == self.model.tokenizer.eos_id:
            text = detokenizer.finish()
            return TokenEvent(text, (), STOP)
        sequence.generated += 1
        text = detokenizer.add(token)
        if detokenizer.stopped:
            return TokenEvent(text, (token,), STOP)
        if sequence.generated >= sequence.request.max_tokens:
            text += detokenizer.finish()
            return TokenEvent(text, (token,), STOP if detokenizer.stopped else LENGTH)
        sequence.deliver(TokenEvent(text, (token,)))
        return None

    async def _retire(self, finished: Sequence[tuple[_Sequence, TokenEvent | None]]) -> None:
        """Release the slots of the sequences that ended (one call on the model thread), then deliver
        their last events: a slot is free when its reader hears the end."""
        slots = []
        for sequence, _ in finished:
            if self._running.get(sequence.slot) is sequence:
                del self._running[sequence.slot]
                slots.append(sequence.slot)
        try:
            if slots:
                self.observer.running(len(self._running))
                await asyncio.get_running_loop().run_in_executor(self._thread, self._release, slots)
        finally:  # close() cancelling the loop here: these are out of `_running`, so answer them here
            for slot in slots:
                heapq.heappush(self._free_slots, slot)
            for sequence, event in finished:
                if event is not None:
                    sequence.deliver(event)

    def _release(self, slots: list[int]) -> None:
        for slot in slots:
            try:
                self.model.release(slot)
            except Exception:  # the slot is reused anyway: the next prefill overwrites its state
                log.exception("the model failed to release slot %d", slot)

    async def call_model(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run another of the model's methods (its embeddings) on the model thread, between steps."""
        if self._closed:
            raise ModelNotReady("the model is shutting down")
        try:
            return await asyncio.get_running_loop().run_in_executor(self._thread, partial(fn, *args))
        except GrpsError:
            raise
        except Exception as exc:
            raise _model_error(exc) from exc

    # -- shutdown --------------------------------------------------------------------------------
    def close(self) -> None:
        """Stop the loop; every waiting and running sequence ends with ModelNotReady (the model is
        going away: its slots are not released). A model call in progress finishes in its thread:
        `aclose` waits for it."""
        if self._closed:
            return
        self._closed = True
        if self._task is not None and not self._task.done():
            self._task.cancel()
        if self._waiting:
            for sequence in self._waiting:
                sequence.fail(ModelNotReady("the model is shutting down"))
            self._waiting.clear()
            self.observer.waiting(0)
        if self._running:
            for sequence in self._running.values():
                sequence.fail(ModelNotReady("the model is shutting down"))
            self._running.clear()
            self.observer.running(0)
        self._thread.shutdown(wait=False, cancel_futures=True)

    async def aclose(self) -> None:
        """`close`, then wait until the model thread is idle (so the model can be unloaded)."""
        self.close()
        await asyncio.to_thread(self._thread.shutdown, wait=True)


def _merge(events: deque[TokenEvent]) -> TokenEvent:
    """Every event waiting in `events` (taken out) as one: their text and ids, the last one's end."""
    if len(events) == 1:
        return events.popleft()
    taken = list(events)
    events.clear()
    return TokenEvent(
        "".join(event.text for event in taken),
        tuple(token for event in taken for token in event.token_ids),
        taken[-1].finish_reason,
    )


def _ended(sequence: _Sequence) -> TokenEvent:
    if sequence.gone():
        return TokenEvent("", (), CANCELLED)
    return TokenEvent(sequence.detokenizer.finish(), (), LENGTH)  # its time ran out


def _check(request: GenerationRequest, vocab_size: int) -> None:
    if not request.prompt_ids:
        raise InvalidInput("the prompt is empty")
    if min(request.prompt_ids) < 0 or max(request.prompt_ids) >= vocab_size:
        raise InvalidInput(f"the prompt holds a token id outside the vocabulary (0 to {vocab_size - 1})")
    if request.timeout_s is not None and not request.timeout_s >= 0:
        raise InvalidInput(f"the timeout must be 0 s or more, not {request.timeout_s}")
    if request.max_tokens < 1:
        raise InvalidInput(f"max_tokens must be at least 1, not {request.max_tokens}")
    if not 0 <= request.temperature < math.inf:  # NaN fails too
        raise InvalidInput(f"temperature must be 0 or more, not {request.temperature}")
    if not 0 < request.top_p <= 1:
        raise InvalidInput(f"top_p must be above 0 and at most 1, not {request.top_p}")
    if len(request.stop) > MAX_STOP_STRINGS:
        raise InvalidInput(f"at most {MAX_STOP_STRINGS} stop strings, not {len(request.stop)}")
    if any(len(stop) > MAX_STOP_CHARS for stop in request.stop):
        raise InvalidInput(f"a stop string has at most {MAX_STOP_CHARS} characters")


def _generator(seed: int | None) -> np.random.Generator:
    """The sequence's own random generator: fresh entropy without a seed. Any integer is a seed
    (OpenAI's are signed 64-bit; numpy takes none below 0)."""
    return np.random.default_rng(None if seed is None else seed % 2**64)


def _model_error(exc: Exception) -> GrpsError:
    if isinstance(exc, GrpsError):
        return exc
    log.error("the generative model failed", exc_info=exc)
    return ModelError("the model failed while generating")


def _copy(error: GrpsError) -> GrpsError:
    """One exception object per reader: each raise writes its own traceback into it."""
    try:
        return copy.copy(error)
    except Exception:  # an error class that cannot be rebuilt from its args
        return ModelError(error.public_message)

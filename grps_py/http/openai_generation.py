"""The generations of one OpenAI completion request, run through the executor.

A request asks for `n` choices of each of its prompts (chat: one prompt). Each choice is one
generation: one `Executor.infer_stream` call on the model's key, its options as the request's
parameters, so it goes through the model's scheduler (queue bound, priorities, timeout) like any
request of any protocol. All the choices run at once, and their events arrive merged, tagged with the
choice's index (`merged`): prompt p's choice i has index p*n + i, and with a seed it samples with
seed + i (`Sampling.generation_request`), so the n choices differ and a request sent again repeats them.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

from grps_py.core.context import GrpsContext
from grps_py.core.errors import Cancelled
from grps_py.core.executor import Executor
from grps_py.core.telemetry import OPENAI_HTTP
from grps_py.core.types import InferRequest
from grps_py.generation.batcher import LENGTH, MAX_STOP_CHARS, MAX_STOP_STRINGS, STOP, TokenEvent
from grps_py.generation.served import (
    OpenAIModel,
    generation_parameters,
    generation_request_payload,
    read_event,
)
from grps_py.openai import InvalidParameter, Sampling
from grps_py.openai.answers import FinishReason
from grps_py.openai.fields import path


@dataclass(frozen=True)
class Scheduling:
    """How the request's generations are scheduled: its id, timeout and priority (the grps controls)."""

    request_id: str
    deadline_s: float | None = None
    priority: int = 0


@dataclass
class Choice:
    """One generation: its index among the answer's choices, its executor request, what it produced."""

    index: int
    request: InferRequest
    pieces: list[str] = field(default_factory=list)
    tokens: int = 0
    finish_reason: FinishReason | None = None

    @property
    def context(self) -> GrpsContext:
        return self.request.context

    @property
    def text(self) -> str:
        return "".join(self.pieces)

    def add(self, event: TokenEvent) -> None:
        """Take one of its events: its text, its tokens and, on the last, why it ended (a sequence cut
        off, e.g. by its client leaving, is `Cancelled`)."""
        if event.text:
            self.pieces.append(event.text)
        self.tokens += len(event.token_ids)
        reason = event.finish_reason
        if reason is None:
            return
        if reason == STOP:
            self.finish_reason = "stop"
        elif reason == LENGTH:
            self.finish_reason = "length"
        else:
            raise Cancelled(f"the generation ended: {reason}")


def check_sampling(model: OpenAIModel, sampling: Sampling, max_tokens_param: str) -> None:
    """What the API takes but the model does not, refused naming the parameter before anything runs."""
    limit = model.generator.generation.max_tokens_limit
    if sampling.max_tokens is not None and sampling.max_tokens > limit:
        raise InvalidParameter(
            f"'{max_tokens_param}' is {sampling.max_tokens}; this model takes at most {limit}",
            max_tokens_param,
        )
    if len(sampling.stop) > MAX_STOP_STRINGS:  # (the API's own bound, 4, is lower today)
        raise InvalidParameter(f"'stop' takes at most {MAX_STOP_STRINGS} sequences here", "stop")
    for index, sequence in enumerate(sampling.stop):
        if len(sequence) > MAX_STOP_CHARS:
            param = "stop" if len(sampling.stop) == 1 else path("stop", index)
            raise InvalidParameter(
                f"'{param}' is {len(sequence)} characters; this server takes at most {MAX_STOP_CHARS}", param
            )


def plan_choices(
    model: OpenAIModel,
    prompts: Sequence[list[int]],
    sampling: Sampling,
    stream: bool,
    scheduling: Scheduling,
) -> list[Choice]:
    """One Choice per prompt and per n, each with a context of its own (so each can be cancelled)."""
    default_max_tokens = model.generator.generation.max_tokens
    choices = []
    for p, prompt_ids in enumerate(prompts):
        payload = generation_request_payload(prompt_ids)
        for i in range(sampling.n):
            wanted = sampling.generation_request(prompt_ids, default_max_tokens, i)
            parameters = generation_parameters(
                max_tokens=wanted.max_tokens,
                temperature=wanted.temperature,
                top_p=wanted.top_p,
                seed=wanted.seed,
                stop=wanted.stop,
            )
            context = GrpsContext(
                streaming=stream,
                deadline_s=scheduling.deadline_s,
                request_id=scheduling.request_id,
                parameters=parameters,
                priority=scheduling.priority,
            )
            request = InferRequest(
                payload,
                context,
                model=model.model_key,
                request_id=scheduling.request_id,
                protocol=OPENAI_HTTP,
            )
            choices.append(Choice(p * sampling.n + i, request))
    return choices


async def token_events(executor: Executor, choice: Choice) -> AsyncGenerator[TokenEvent, None]:
    """The events of one choice's generation (one per streamed message; one in all when not streaming)."""
    async for response in executor.infer_stream(choice.request):
        yield read_event(response.payload)


_END = object()


async def merged(streams: Sequence[AsyncGenerator[Any, None]]) -> AsyncIterator[tuple[int, Any]]:
    """The items of several streams as they come, each with its stream's position; the first failure of
    any is raised. The hand-off holds one item per stream, so a consumer that stops taking items stops
    every stream's reader (the executor then sees its consumer stall, as for any stream). Leaving early
    cancels the readers."""
    queue: asyncio.Queue[tuple[int, Any, BaseException | None]] = asyncio.Queue(maxsize=len(streams))

    async def pump(position: int, stream: AsyncGenerator[Any, None]) -> None:
        try:
            async with aclosing(stream):  # cancelled while it waits to hand an item over: closed at once
                async for item in stream:
                    await queue.put((position, item, None))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            await queue.put((position, None, exc))
            return
        await queue.put((position, _END, None))

    tasks = [asyncio.ensure_future(pump(position, stream)) for position, stream in enumerate(streams)]
    try:
        running = len(tasks)
        while running:
            position, item, failure = await queue.get()
            if failure is not None:
                raise failure
            if item is _END:
                running -= 1
                continue
            yield position, item
    finally:
        for task in tasks:
            task.cancel()

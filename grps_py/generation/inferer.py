"""The inferer a generative model's node runs (`inferer_type: generative`): the user's GenerativeModel
behind a continuous batcher, reached from every protocol the same way.

A request is one sequence. It carries its prompt as a `text_input` (BYTES) or `input_ids` (INT64)
tensor (OIP, the OpenAI routes), a string (grps `str_data`) or a map (grps `gmap`: `s_s.prompt`), and
its options as request parameters (`generation_request.py`). Async model code: it runs on the event
loop, many requests side by side (its instance's `capacity`), and the batcher's thread runs the model.

Answers come in the shape of the request: for tensors, each streamed message (or the one unary answer)
holds `text_output` (BYTES [1]), `output_ids` (INT64 [k]) and, on the last, `finish_reason` (BYTES
[1]: stop, length); for a string or a map, text. Embeddings (parameter `task: embed`) answer
`embedding` (FP32 [d]).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from grps_py.core.config import ModelSettings
from grps_py.core.context import GrpsContext
from grps_py.core.errors import InvalidInput, ModelError
from grps_py.core.generation_config import GenerationSettings
from grps_py.core.model import ModelInferer
from grps_py.core.types import Payload, Tensor
from grps_py.generation.api import GenerativeModel, Tokenizer
from grps_py.generation.batcher import ContinuousBatcher, GenerationObserver, TokenEvent
from grps_py.generation.generation_request import Prompt, parse_prompt, sampling_options

TEXT_OUTPUT = "text_output"
OUTPUT_IDS = "output_ids"
FINISH_REASON = "finish_reason"
EMBEDDING = "embedding"


class GenerativeInferer(ModelInferer):
    """Runs a GenerativeModel's requests through a ContinuousBatcher (made when the model loads)."""

    def __init__(self, model: GenerativeModel, settings: ModelSettings, observer: GenerationObserver) -> None:
        super().__init__()
        self.model = model
        self.generation = settings.generation or GenerationSettings()
        self.timeout_s = settings.default_timeout_us / 1e6 or None
        self._observer = observer
        self.batcher: ContinuousBatcher | None = None

    # -- what the node and the OpenAI routes ask -------------------------------------------------
    @property
    def tokenizer(self) -> Tokenizer:
        return self.model.tokenizer

    @property
    def concurrent_requests(self) -> int:
        """Requests it takes side by side: its running sequences (the model's queue holds the rest)."""
        return self.batcher.max_running if self.batcher is not None else 1

    @property
    def can_embed(self) -> bool:
        return type(self.model).embed is not GenerativeModel.embed

    def chat_prompt(self, messages: Sequence[dict[str, str]]) -> str:
        return self.model.chat_prompt(messages)

    # -- the model's life ---------------------------------------------------------------------------
    def init(self, path: str | None, device: str | None = None, args: dict[str, Any] | None = None) -> None:
        super().init(path, device, args)
        self.model.init(path, device, args)

    def load(self) -> bool:
        if not self.model.load():
            return False
        gen = self.generation
        self.batcher = ContinuousBatcher(
            self.model, gen.max_running, gen.max_waiting, gen.token_budget, self._observer, gen.decode_steps
        )
        return True

    def close(self) -> None:
        if self.batcher is not None:
            self.batcher.close()

    # -- a request ------------------------------------------------------------------------------------
    async def infer(self, inp: Any, context: GrpsContext) -> Any:
        batcher = self.batcher
        if batcher is None:
            raise ModelError("the generative model is not loaded")
        prompt = parse_prompt(inp, context.parameters, self.tokenizer)
        if prompt.task == "embed":
            return await self._embed(batcher, prompt)
        request = sampling_options(prompt, self.generation, self._timeout(context))
        if not context.if_streaming():
            events = [event async for event in batcher.generate(request, context.if_disconnected)]
            return _merged(prompt, events) or Payload.of_text("".join(event.text for event in events))
        held: list[TokenEvent] = []
        async for event in batcher.generate(request, context.if_disconnected):
            held.append(event)
            # While the client has not taken the last message, tokens wait to go out together with the
            # next: one message (and one write) for several tokens, only when the client is behind.
            if event.finish_reason is None and context.stream_backlog() > 0:
                continue
            message = _merged(prompt, held)
            held.clear()
            if message is not None:
                context.stream_respond(message)
                await context.stream_drain()  # the client's pace: at most the stream's buffer waits
        return Payload.empty()

    def _timeout(self, context: GrpsContext) -> float | None:
        remaining = context.time_remaining()
        return self.timeout_s if remaining is None else max(remaining, 0.0)

    async def _embed(self, batcher: ContinuousBatcher, prompt: Prompt) -> Payload:
        if not self.can_embed:
            raise InvalidInput("this model makes no embeddings")
        vectors = await batcher.call_model(self.model.embed, [prompt.ids])
        vector = np.asarray(vectors, dtype=np.float32).reshape(len(vectors), -1)[0]
        return Payload.of_tensors([Tensor(EMBEDDING, vector)])


def _merged(prompt: Prompt, events: Sequence[TokenEvent]) -> Payload | None:
    """One message in the request's shape for `events`; None when there is nothing to say."""
    if not events:
        return None
    text = "".join(event.text for event in events)
    ids = [i for event in events for i in event.token_ids]
    finish = events[-1].finish_reason
    if not (text or ids or finish):
        return None
    return _answer(prompt, text, ids, finish)


def _answer(prompt: Prompt, text: str, ids: Sequence[int], finish: str | None) -> Payload | None:
    """A message in the request's shape; None for a text message with nothing to say."""
    if not prompt.tensors:
        return Payload.of_text(text) if text else None
    tensors = [
        Tensor(TEXT_OUTPUT, np.array([text], dtype=object)),
        Tensor(OUTPUT_IDS, np.asarray(ids, dtype=np.int64)),
    ]
    if finish is not None:
        tensors.append(Tensor(FINISH_REASON, np.array([finish], dtype=object)))
    return Payload.of_tensors(tensors)

"""TinyGpt behind grps-py's request-level dynamic batching: the baseline continuous batching is measured
against (bench/generation.py).

An ordinary `customized` inferer (`inferer_name: tiny_gpt_request_batching`, `converter_type: numpy`),
served with `batching: {type: dynamic, ...}` or without batching. `batch_infer` generates a whole batch
together: one prefill of every prompt, then decode steps until every member is done. A member that
finishes (end-of-text, a stop string, its `max_tokens`, its client gone, its deadline) stops streaming
and leaves the decode calls, but the batch (and the model instance) runs until its longest member
ends: a request that arrives meanwhile waits for the next batch. That wait is what continuous batching
(`inferer_type: generative`) removes.

Requests and answers are those of the generative inferer (grps_py/generation/inferer.py): a
`text_input` (BYTES) or `input_ids` (INT64) tensor, or a prompt string; options from the request
parameters (max_tokens, temperature, top_p, seed, stop, ignore_eos), parsed by the same code; each
streamed message holds `text_output`, `output_ids` and, on the last, `finish_reason` (a string prompt
gets text). Tokens are sampled and turned into text by the same code as the continuous batcher's, so
both do the same work per token and answer the same text.

inferer_args: `max_running` (KV-cache slots, the largest batch: at least the batching's
max_batch_size; default 16), `max_tokens` (a request's default, 256), `max_tokens_limit` (4096).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from tiny_gpt_model import TinyGpt

from grps_py import GrpsContext, ModelInferer, inferer_register
from grps_py.core.generation_config import GenerationSettings
from grps_py.core.types import Payload, Tensor
from grps_py.generation.api import GenerationRequest
from grps_py.generation.detokenize import IncrementalDetokenizer
from grps_py.generation.generation_request import Prompt, parse_prompt, sampling_options
from grps_py.generation.sampling import Sampling, sample_tokens

STOP, LENGTH, CANCELLED = "stop", "length", "cancelled"


@dataclass
class _Member:
    """One request of a batch: its slot, options, text so far, and why it ended (None while running)."""

    context: GrpsContext
    prompt: Prompt
    request: GenerationRequest
    slot: int
    sampling: Sampling
    detokenizer: IncrementalDetokenizer
    texts: list[str] = field(default_factory=list)  # kept for a unary answer only
    ids: list[int] = field(default_factory=list)
    finish: str | None = None


class TinyGptRequestBatching(ModelInferer):
    def init(self, path: str | None, device: str | None = None, args: dict[str, Any] | None = None) -> None:
        super().init(path, device, args)
        defaults = GenerationSettings()
        limit = int(self.args.get("max_tokens_limit", defaults.max_tokens_limit))
        self.settings = GenerationSettings(
            max_tokens=min(int(self.args.get("max_tokens", defaults.max_tokens)), limit),
            max_tokens_limit=limit,
        )
        self.model = TinyGpt()
        self.model.init(path, device, {"max_running": 16, **self.args})

    def load(self) -> bool:
        return self.model.load()

    def infer(self, inp: Any, context: GrpsContext) -> Any:
        return self.batch_infer([inp], [context])[0]

    def batch_infer(self, inp: Any, contexts: list[GrpsContext]) -> list[Any]:
        if len(contexts) > self.model.max_running:
            raise ValueError(
                f"a batch of {len(contexts)} exceeds max_running ({self.model.max_running}) slots: "
                "set inferer_args.max_running to at least the batching's max_batch_size"
            )
        # A bad request raises here, before anything ran: the server then runs the batch one by one,
        # and the bad request fails alone.
        members = [
            self._member(x, ctx, slot) for slot, (x, ctx) in enumerate(zip(inp, contexts, strict=True))
        ]
        try:
            self._generate(members)
        finally:
            for slot in self.model.running_slots():
                self.model.release(slot)
        return [self._answer(member) for member in members]

    # -- generation ---------------------------------------------------------------------------------
    def _member(self, inp: Any, context: GrpsContext, slot: int) -> _Member:
        prompt = parse_prompt(inp, context.parameters, self.model.tokenizer)
        remaining = context.time_remaining()
        request = sampling_options(prompt, self.settings, None if remaining is None else max(remaining, 0.0))
        seed = None if request.seed is None else request.seed % 2**64  # numpy takes no negative seed
        banned = self.model.tokenizer.eos_id if request.ignore_eos else None
        return _Member(
            context,
            prompt,
            request,
            slot,
            Sampling(request.temperature, request.top_p, np.random.default_rng(seed), banned),
            IncrementalDetokenizer(self.model.tokenizer, request.prompt_ids, request.stop),
        )

    def _generate(self, members: list[_Member]) -> None:
        """One prefill of every prompt, then one decode step of the members still going, until none is."""
        running = members
        logits = self.model.prefill([m.slot for m in running], [m.request.prompt_ids for m in running])
        while running:
            tokens = sample_tokens(logits, [m.sampling for m in running])
            going: list[_Member] = []
            for member, token in zip(running, tokens, strict=True):
                self._advance(member, token)
                if member.finish is None:
                    going.append(member)
                else:
                    self.model.release(member.slot)
            running = going
            if running:
                logits = self.model.decode([m.slot for m in running], [m.ids[-1] for m in running])

    def _advance(self, member: _Member, token: int) -> None:
        """Add the member's new token and send its text; as the continuous batcher's `_advance` does."""
        context = member.context
        if context.if_disconnected():
            member.finish = CANCELLED
            return
        detokenizer = member.detokenizer
        if token == self.model.tokenizer.eos_id:
            self._send(member, detokenizer.finish(), (), STOP)
            return
        member.ids.append(token)
        text = detokenizer.add(token)
        if detokenizer.stopped:
            self._send(member, text, (token,), STOP)
        elif len(member.ids) >= member.request.max_tokens or _expired(context):
            text += detokenizer.finish()
            self._send(member, text, (token,), STOP if detokenizer.stopped else LENGTH)
        else:
            self._send(member, text, (token,), None)

    def _send(self, member: _Member, text: str, ids: tuple[int, ...], finish: str | None) -> None:
        member.finish = finish
        context = member.context
        if not context.if_streaming():
            member.texts.append(text)
        elif text or ids or finish:
            message = _message(member.prompt, text, ids, finish)
            if message is not None:
                context.stream_respond(message)

    def _answer(self, member: _Member) -> Any:
        """The unary answer (None when streamed: every message went out already)."""
        if member.context.if_streaming():
            return None
        text = "".join(member.texts)
        finish = member.finish if member.finish != CANCELLED else None
        return _message(member.prompt, text, tuple(member.ids), finish) or Payload.of_text(text)


def _expired(context: GrpsContext) -> bool:
    remaining = context.time_remaining()
    return remaining is not None and remaining <= 0


def _message(prompt: Prompt, text: str, ids: tuple[int, ...], finish: str | None) -> Payload | None:
    """A message in the request's shape (the generative inferer's): tensors for a tensor prompt, else
    text (None when there is no text to send)."""
    if not prompt.tensors:
        return Payload.of_text(text) if text else None
    tensors = [
        Tensor("text_output", np.array([text], dtype=object)),
        Tensor("output_ids", np.asarray(ids, dtype=np.int64)),
    ]
    if finish is not None:
        tensors.append(Tensor("finish_reason", np.array([finish], dtype=object)))
    return Payload.of_tensors(tensors)


inferer_register.register("tiny_gpt_request_batching", TinyGptRequestBatching())

"""The OpenAI-compatible routes: `GET {prefix}/v1/models`, `GET {prefix}/v1/models/{id}`,
`POST {prefix}/v1/chat/completions`, `/v1/completions` and `/v1/embeddings` (server.yml
`openai.prefix`, "" by default; KServe serves them under `/openai`).

They serve the generative models whose inference.yml entry has an `openai:` block, under its
`served_name`, each endpoint only where the block enables it. Bodies are read and checked by
`grps_py.openai` (anything unknown or unsupported is a 400 naming the parameter) and answers built by
it. Every generation goes through the executor (`openai_generation.py`), so the model's scheduler,
limits and metrics apply as for any protocol; these handlers derive from `BaseHandler`, so the
request's lifecycle (id, access, body limit, record, access log) is the one every HTTP route has.

Errors answer in OpenAI's shape (`{"error": {"message", "type", "param", "code"}}`) with the status
of the one error table; an error after a stream began is its last event, and the stream then ends
without `[DONE]` (grps_py/openai/errors.py). A client that goes away cancels its generations: each
stops at the model's next step.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from contextlib import aclosing
from typing import Any

from tornado.iostream import StreamClosedError

from grps_py.codecs.answer_size import check_answer
from grps_py.core.errors import Cancelled, ModelNotFound
from grps_py.core.executor import Executor
from grps_py.core.telemetry import OPENAI_HTTP
from grps_py.core.untrusted import shown
from grps_py.generation.served import OpenAIModel, openai_models
from grps_py.http.base import BaseHandler
from grps_py.http.openai_answers import AnswerShape, ChatShape, CompletionShape
from grps_py.http.openai_embeddings import embed
from grps_py.http.openai_generation import (
    Choice,
    Scheduling,
    check_sampling,
    merged,
    plan_choices,
    token_events,
)
from grps_py.http.streaming import abort_on_stall
from grps_py.openai import (
    SSE_DONE,
    InvalidParameter,
    Sampling,
    Streaming,
    Usage,
    embedding_list,
    encode,
    error_document,
    error_event,
    model_list,
    model_object,
    parse_chat_request,
    parse_completion_request,
    parse_embedding_request,
    sse_event,
)
from grps_py.openai.errors import error_type

# The endpoints a model's `openai:` block enables (OpenAIModel's fields), and their paths.
CHAT, COMPLETIONS, EMBEDDINGS = "chat", "completions", "embeddings"
ENDPOINT_PATHS = {CHAT: "/v1/chat/completions", COMPLETIONS: "/v1/completions", EMBEDDINGS: "/v1/embeddings"}
EVENT_STREAM = "text/event-stream"


class OpenAIHandler(BaseHandler):
    """What every OpenAI route shares: OpenAI's error body, and the served models."""

    protocol = OPENAI_HTTP
    inference = True
    client_gone = False

    def error_body(self, http_status: int, message: str) -> bytes:
        """`{"error": {...}}` (BaseHandler.write_error's answer): from the exception that failed the
        request (its param and code), which write_error has just recorded; else (Tornado's own
        refusals) from the status and write_error's message."""
        failure = self.life.error
        if isinstance(failure, Exception):
            return encode(error_document(failure, self.request_id))
        return encode(
            {"error": {"message": message, "type": error_type(http_status), "param": None, "code": None}}
        )

    def on_connection_close(self) -> None:
        self.client_gone = True
        super().on_connection_close()

    def served_models(self) -> dict[str, OpenAIModel]:
        return openai_models(self.executor.models)

    def served_model(self, name: str, endpoint: str | None = None) -> OpenAIModel:
        """The model clients call `name`, which must serve `endpoint` (one of CHAT, COMPLETIONS,
        EMBEDDINGS): 404 when none has that name, 400 naming `model` when it does not serve it."""
        model = self.served_models().get(name)
        if model is None:
            raise ModelNotFound(f"the model '{shown(name, 128)}' does not exist")
        if endpoint is not None and not getattr(model, endpoint):
            raise InvalidParameter(
                f"the model '{shown(name, 128)}' is not served by {ENDPOINT_PATHS[endpoint]}", "model", None
            )
        self.life.start(model.model_key)
        return model


class ModelsHandler(OpenAIHandler):
    """GET /v1/models: the served models (metadata: open, as the other APIs' metadata is)."""

    protocol = "http"
    inference = False

    def get(self) -> None:
        models = self.served_models().values()
        self.write_json(encode(model_list(model_object(m.served_name, m.created) for m in models)))


class ModelHandler(OpenAIHandler):
    """GET /v1/models/{id}: one served model; 404 for any other name."""

    protocol = "http"
    inference = False

    def get(self, name: str) -> None:
        model = self.served_model(name)
        self.write_json(encode(model_object(model.served_name, model.created)))


class GenerationHandler(OpenAIHandler):
    """Runs a completion's choices and answers them whole, or streamed as server-sent events."""

    max_tokens_param = "max_tokens"  # the parameter named when max_tokens is over the model's limit

    async def generate(
        self,
        model: OpenAIModel,
        prompts: Sequence[list[int]],
        sampling: Sampling,
        streaming: Streaming,
        shape: AnswerShape,
    ) -> None:
        check_sampling(model, sampling, self.max_tokens_param)
        timeout_s, priority = self.scheduling()
        scheduling = Scheduling(self.request_id, timeout_s, priority)
        choices = plan_choices(model, prompts, sampling, streaming.stream, scheduling)
        for choice in choices:
            self.cancel_on_close(choice.context.cancel)
        prompt_tokens = sum(len(prompt) for prompt in prompts)
        try:
            if streaming.stream:
                await self.stream(choices, shape, prompt_tokens, streaming.include_usage)
            else:
                await self.answer(choices, shape, prompt_tokens)
        except Exception:
            if not self.client_gone:
                raise
            # Nobody to answer: its generations are cancelled (below, if not yet).
        finally:
            for choice in choices:  # (done already when they all finished)
                choice.context.cancel()

    def events(self, choices: list[Choice]) -> aclosing[Any]:
        return aclosing(merged([token_events(self.executor, choice) for choice in choices]))

    async def answer(self, choices: list[Choice], shape: AnswerShape, prompt_tokens: int) -> None:
        async with self.events(choices) as events:
            async for position, event in events:
                choices[position].add(event)
        for choice in choices:
            if choice.finish_reason is None:  # its stream ended early: its client went away
                raise Cancelled("the generation was cut off")
        usage = Usage(prompt_tokens, sum(choice.tokens for choice in choices))
        body = encode(shape.whole(choices, usage))
        check_answer(len(body), self.policy.answer_bytes)
        self.write_json(body)

    async def stream(
        self, choices: list[Choice], shape: AnswerShape, prompt_tokens: int, include_usage: bool
    ) -> None:
        """One event per generation step that has text, the role first (chat), each choice's finish,
        the usage when asked, then [DONE]. The headers go once the first step came: an error before it
        (a full queue, a timeout while queued) is still an answer of its own status."""
        for choice in choices:
            abort_on_stall(self, choice.context)
        started = False
        opened: set[int] = set()
        try:
            async with self.events(choices) as events:
                async for position, event in events:
                    choice = choices[position]
                    choice.add(event)
                    if not started:
                        self.set_header("Content-Type", EVENT_STREAM)
                        self.set_header("Cache-Control", "no-cache")
                        started = True
                    documents = []
                    if choice.index not in opened:
                        opened.add(choice.index)
                        documents += shape.opening(choice.index)
                    if event.text:
                        documents.append(shape.text(choice.index, event.text))
                    if choice.finish_reason is not None:
                        documents.append(shape.finish(choice.index, choice.finish_reason))
                    if documents:
                        self.write(b"".join(sse_event(document) for document in documents))
                        await self.flush()
            if any(choice.finish_reason is None for choice in choices):
                raise Cancelled("the generation was cut off")
            if include_usage:
                usage = Usage(prompt_tokens, sum(choice.tokens for choice in choices))
                self.write(sse_event(shape.usage(usage)))
            self.write(SSE_DONE)
        except (StreamClosedError, asyncio.CancelledError):
            self.cancel()
            return
        except Exception as exc:
            if self.client_gone:
                return  # nobody to tell (its generations are cancelled)
            if not started:
                raise
            # The headers are gone: the error is the stream's last event (and in the record).
            self.log_exception(type(exc), exc, exc.__traceback__)
            self.write(error_event(exc, self.request_id))
        if not self.answered:
            self.finish()


class ChatHandler(GenerationHandler):
    """POST /v1/chat/completions: the messages through the model's chat template."""

    max_tokens_param = "max_completion_tokens"

    async def post(self) -> None:
        request = parse_chat_request(self.body, self.policy.limits)
        model = self.served_model(request.model, CHAT)
        generator = model.generator
        prompt = generator.chat_prompt(request.template_input())
        shape = ChatShape.new(model.served_name, request.streaming.include_usage)
        await self.generate(
            model, [generator.tokenizer.encode(prompt)], request.sampling, request.streaming, shape
        )


class CompletionsHandler(GenerationHandler):
    """POST /v1/completions: each prompt as it is; prompt p's choices are indexes p*n .. p*n+n-1."""

    async def post(self) -> None:
        request = parse_completion_request(self.body, self.policy.limits)
        model = self.served_model(request.model, COMPLETIONS)
        tokenizer = model.generator.tokenizer
        prompts = [tokenizer.encode(prompt) for prompt in request.prompts]
        shape = CompletionShape.new(model.served_name, request.streaming.include_usage)
        await self.generate(model, prompts, request.sampling, request.streaming, shape)


class EmbeddingsHandler(OpenAIHandler):
    """POST /v1/embeddings: one vector per input, float or base64."""

    async def post(self) -> None:
        request = parse_embedding_request(self.body, self.policy.limits)
        model = self.served_model(request.model, EMBEDDINGS)
        tokenizer = model.generator.tokenizer
        prompts = [tokenizer.encode(text) for text in request.inputs]
        timeout_s, priority = self.scheduling()
        scheduling = Scheduling(self.request_id, timeout_s, priority)
        try:
            vectors = await embed(self.executor, model, prompts, scheduling, self.cancel_on_close)
        except (Exception, asyncio.CancelledError):
            if self.client_gone:
                return  # nobody to answer (the client's going cancelled its requests)
            raise
        prompt_tokens = sum(len(prompt) for prompt in prompts)
        body = encode(embedding_list(model.served_name, vectors, request.encoding_format, prompt_tokens))
        check_answer(len(body), self.policy.answer_bytes)
        self.write_json(body)


def openai_routes(executor: Executor, prefix: str) -> list[tuple[str, type[BaseHandler], dict[str, Any]]]:
    """The OpenAI routes under `prefix` ("" or a path such as /openai), matched literally."""
    v1 = re.escape(prefix) + "/v1"
    options = {"executor": executor}
    return [
        (v1 + "/models", ModelsHandler, options),
        (v1 + r"/models/([^/]+)", ModelHandler, options),
        (v1 + "/chat/completions", ChatHandler, options),
        (v1 + "/completions", CompletionsHandler, options),
        (v1 + "/embeddings", EmbeddingsHandler, options),
    ]

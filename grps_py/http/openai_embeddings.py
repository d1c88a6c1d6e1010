"""The embeddings of one OpenAI request: one executor request per input (parameter `task: embed`),
a bounded number at a time so a long `input` list does not fill the model's queue on its own."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from grps_py.core.context import GrpsContext
from grps_py.core.errors import ModelError
from grps_py.core.executor import Executor
from grps_py.core.telemetry import OPENAI_HTTP
from grps_py.core.types import InferRequest
from grps_py.generation.served import EMBED_PARAMETERS, OpenAIModel, embedding_payload, read_embedding
from grps_py.http.openai_generation import Scheduling

EMBED_AT_ONCE = 16  # inputs of one request in the model's queue at a time


def embedding_request(model: OpenAIModel, ids: list[int], scheduling: Scheduling) -> InferRequest:
    context = GrpsContext(
        deadline_s=scheduling.deadline_s,
        request_id=scheduling.request_id,
        parameters=dict(EMBED_PARAMETERS),
        priority=scheduling.priority,
    )
    return InferRequest(
        embedding_payload(ids),
        context,
        model=model.model_key,
        request_id=scheduling.request_id,
        protocol=OPENAI_HTTP,
    )


async def embed(
    executor: Executor,
    model: OpenAIModel,
    prompts: Sequence[list[int]],
    scheduling: Scheduling,
    watch: Callable[[Callable[[], None]], None],
) -> np.ndarray[Any, Any]:
    """The vectors of `prompts`, [inputs, dim] float32. `watch` is handed each request's cancel (the
    transport calls it when the client goes away). A failure waits for the inputs in flight, then is
    raised (the first one)."""
    vectors: list[np.ndarray[Any, Any]] = []
    for start in range(0, len(prompts), EMBED_AT_ONCE):
        requests = [
            embedding_request(model, ids, scheduling) for ids in prompts[start : start + EMBED_AT_ONCE]
        ]
        for request in requests:
            watch(request.context.cancel)
        answers = await asyncio.gather(*(executor.infer(r) for r in requests), return_exceptions=True)
        for answer in answers:
            if isinstance(answer, BaseException):
                for request in requests:
                    request.context.cancel()
                raise answer
            vectors.append(read_embedding(answer.payload))
    if len({vector.shape for vector in vectors}) != 1:
        raise ModelError("the model's embeddings differ in size")
    return np.stack(vectors)

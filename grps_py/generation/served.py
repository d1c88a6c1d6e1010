"""What the OpenAI-compatible routes need of the executor: the generative models served under an
`openai:` block, and the requests and answers that carry a generation through the executor (the
shapes `inferer.py` reads and writes), so the routes go through the same scheduler, limits and
lifecycle as every other protocol."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from grps_py.core.errors import ModelError
from grps_py.core.model_set import ModelSet
from grps_py.core.types import Payload, Tensor
from grps_py.generation.batcher import TokenEvent
from grps_py.generation.generation_request import INPUT_IDS
from grps_py.generation.inferer import EMBEDDING, FINISH_REASON, OUTPUT_IDS, TEXT_OUTPUT, GenerativeInferer

EMBED_PARAMETERS: dict[str, Any] = {"task": "embed"}
_STARTED = int(time.time())


@dataclass(frozen=True)
class OpenAIModel:
    served_name: str  # the `model` clients name
    model_key: str  # name-version: InferRequest.model
    chat: bool
    completions: bool
    embeddings: bool
    created: int  # unix seconds (the server's start: OpenAI's models list shows when each was made)
    generator: GenerativeInferer


def openai_models(models: ModelSet) -> dict[str, OpenAIModel]:
    """The loaded generative models with an `openai:` block, by served name."""
    served: dict[str, OpenAIModel] = {}
    for key, node in models.nodes.items():
        settings = node.settings.openai
        inferer = node.instances[0].inferer if node.instances else None
        if settings is None or not isinstance(inferer, GenerativeInferer) or not node.loaded:
            continue
        served[settings.served_name] = OpenAIModel(
            served_name=settings.served_name,
            model_key=key,
            chat=settings.chat,
            completions=settings.completions,
            embeddings=settings.embeddings and inferer.can_embed,
            created=_STARTED,
            generator=inferer,
        )
    return served


def generation_request_payload(prompt_ids: Sequence[int]) -> Payload:
    return Payload.of_tensors([Tensor(INPUT_IDS, np.asarray(prompt_ids, dtype=np.int64))])


def generation_parameters(
    *,
    max_tokens: int | None = None,
    temperature: float | None = None,
    top_p: float | None = None,
    seed: int | None = None,
    stop: Sequence[str] = (),
) -> dict[str, Any]:
    """The request parameters of one generation (those left None: the model's defaults)."""
    parameters: dict[str, Any] = {
        "max_tokens": max_tokens,
        "temperature": temperature,
        "top_p": top_p,
        "seed": seed,
        "stop": list(stop) or None,
    }
    return {key: value for key, value in parameters.items() if value is not None}


def read_event(payload: Payload) -> TokenEvent:
    """One streamed message (or a unary answer) of a generation, as the batcher's event."""
    tensors = {tensor.name: tensor.array for tensor in payload.tensors}
    if TEXT_OUTPUT not in tensors:
        raise ModelError("the generative model answered no text_output")
    finish = tensors.get(FINISH_REASON)
    ids = tensors.get(OUTPUT_IDS)
    return TokenEvent(
        text=str(tensors[TEXT_OUTPUT].reshape(-1)[0]),
        token_ids=() if ids is None else tuple(int(i) for i in ids.reshape(-1)),
        finish_reason=None if finish is None else str(finish.reshape(-1)[0]),
    )


def embedding_payload(ids: Sequence[int]) -> Payload:
    return generation_request_payload(ids)


def read_embedding(payload: Payload) -> np.ndarray[Any, Any]:
    for tensor in payload.tensors:
        if tensor.name == EMBEDDING:
            return tensor.array.astype(np.float32).reshape(-1)
    raise ModelError("the model answered no embedding")

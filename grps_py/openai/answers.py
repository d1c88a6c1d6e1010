"""OpenAI API answers as JSON documents: chat completions and their stream chunks, text completions and
theirs, embeddings, models; and Server-Sent Events framing.

Builders return plain dicts (embeddings may hold numpy rows, which `encode` writes natively); `encode`
makes the body, `sse_event` one stream event. Streams follow OpenAI's order:

- chat: the first chunk of each choice carries `delta: {"role": "assistant", "content": ""}`, then
  content deltas, then a chunk with an empty delta and the choice's `finish_reason`;
- text completion: text chunks, then a chunk with empty text and the `finish_reason`;
- with `stream_options.include_usage` every chunk carries `"usage": null`, and one last chunk has
  `choices: []` and the usage of the whole request;
- then `data: [DONE]` (`SSE_DONE`).
"""

from __future__ import annotations

import base64
import secrets
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from grps_py.codecs.json_values import dumps
from grps_py.core.errors import ModelError

__all__ = [
    "SSE_DONE",
    "ChatChoice",
    "ChatChunks",
    "CompletionChoice",
    "CompletionChunks",
    "Usage",
    "chat_completion",
    "embedding_list",
    "encode",
    "model_list",
    "model_object",
    "new_id",
    "now",
    "sse_event",
    "text_completion",
]

FinishReason = Literal["stop", "length"]
EncodingFormat = Literal["float", "base64"]
Document = dict[str, Any]

SSE_DONE = b"data: [DONE]\n\n"
CHAT_ID_PREFIX = "chatcmpl"
COMPLETION_ID_PREFIX = "cmpl"
OWNED_BY = "grps-py"


def new_id(prefix: str) -> str:
    """A fresh answer id: `chatcmpl-...` or `cmpl-...` and 24 random hex digits."""
    return f"{prefix}-{secrets.token_hex(12)}"


def now() -> int:
    """`created`: Unix seconds."""
    return int(time.time())


def encode(document: Document) -> bytes:
    """The JSON body of an answer (numpy rows written natively, float32 with float32's shortest digits)."""
    return dumps(document)


def sse_event(document: Document) -> bytes:
    """One Server-Sent Event: `data: {json}` and a blank line. The JSON is one line (a line break in a
    string is written `\\n`), so no text can end the event early."""
    return b"data: " + dumps(document) + b"\n\n"


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def document(self) -> Document:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
        }


@dataclass(frozen=True)
class ChatChoice:
    index: int
    content: str
    finish_reason: FinishReason


@dataclass(frozen=True)
class CompletionChoice:
    index: int
    text: str
    finish_reason: FinishReason


def _head(answer_id: str, kind: str, created: int, model: str) -> Document:
    return {"id": answer_id, "object": kind, "created": created, "model": model}


# --- whole answers -----------------------------------------------------------------------------


def chat_completion(
    answer_id: str, created: int, model: str, choices: Sequence[ChatChoice], usage: Usage
) -> Document:
    """A `chat.completion`: one assistant message per choice."""
    document = _head(answer_id, "chat.completion", created, model)
    document["choices"] = [
        {
            "index": choice.index,
            "message": {"role": "assistant", "content": choice.content},
            "logprobs": None,
            "finish_reason": choice.finish_reason,
        }
        for choice in choices
    ]
    document["usage"] = usage.document()
    return document


def text_completion(
    answer_id: str, created: int, model: str, choices: Sequence[CompletionChoice], usage: Usage
) -> Document:
    """A `text_completion`. With several prompts, prompt p's n choices have indexes p*n to p*n+n-1."""
    document = _head(answer_id, "text_completion", created, model)
    document["choices"] = [
        {"index": choice.index, "text": choice.text, "logprobs": None, "finish_reason": choice.finish_reason}
        for choice in choices
    ]
    document["usage"] = usage.document()
    return document


# --- stream chunks -----------------------------------------------------------------------------


@dataclass(frozen=True)
class ChatChunks:
    """The `chat.completion.chunk` documents of one streamed chat answer (all share id, created, model)."""

    answer_id: str
    created: int
    model: str
    include_usage: bool = False

    def _chunk(self, index: int, delta: Document, finish_reason: FinishReason | None) -> Document:
        document = _head(self.answer_id, "chat.completion.chunk", self.created, self.model)
        document["choices"] = [
            {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        ]
        if self.include_usage:
            document["usage"] = None
        return document

    def role(self, index: int) -> Document:
        """The first chunk of a choice: who speaks."""
        return self._chunk(index, {"role": "assistant", "content": ""}, None)

    def content(self, index: int, text: str) -> Document:
        return self._chunk(index, {"content": text}, None)

    def finish(self, index: int, finish_reason: FinishReason) -> Document:
        return self._chunk(index, {}, finish_reason)

    def usage(self, usage: Usage) -> Document:
        """The last chunk when `stream_options.include_usage`: no choices, the request's usage."""
        document = _head(self.answer_id, "chat.completion.chunk", self.created, self.model)
        document["choices"] = []
        document["usage"] = usage.document()
        return document


@dataclass(frozen=True)
class CompletionChunks:
    """The `text_completion` chunks of one streamed completion answer."""

    answer_id: str
    created: int
    model: str
    include_usage: bool = False

    def _chunk(self, index: int, text: str, finish_reason: FinishReason | None) -> Document:
        document = _head(self.answer_id, "text_completion", self.created, self.model)
        document["choices"] = [
            {"index": index, "text": text, "logprobs": None, "finish_reason": finish_reason}
        ]
        if self.include_usage:
            document["usage"] = None
        return document

    def text(self, index: int, text: str) -> Document:
        return self._chunk(index, text, None)

    def finish(self, index: int, finish_reason: FinishReason) -> Document:
        return self._chunk(index, "", finish_reason)

    def usage(self, usage: Usage) -> Document:
        document = _head(self.answer_id, "text_completion", self.created, self.model)
        document["choices"] = []
        document["usage"] = usage.document()
        return document


# --- embeddings and models ---------------------------------------------------------------------


def embedding_list(
    model: str, vectors: np.ndarray[Any, Any], encoding_format: EncodingFormat, prompt_tokens: int
) -> Document:
    """The embeddings answer for `vectors` ([inputs, dim], any float dtype; sent as float32).

    `float` writes each vector as a JSON array; `base64` as the base64 of its little-endian float32
    bytes (what the official clients ask for by default and decode with `np.frombuffer`). A vector
    that is not finite cannot be written in JSON, and is the model's error."""
    if vectors.ndim != 2:
        raise ModelError(f"the embeddings have shape {list(vectors.shape)}; expected [inputs, dim]")
    try:
        with np.errstate(over="ignore"):  # a float64 beyond float32 becomes inf, refused below
            rows = np.ascontiguousarray(vectors, dtype=np.float32)
    except (TypeError, ValueError):
        raise ModelError(f"the embeddings ({vectors.dtype}) are not numbers") from None
    if not np.isfinite(rows).all():
        raise ModelError("the embeddings hold NaN or infinity (or values beyond float32)")
    data: Sequence[Any] = list(rows) if encoding_format == "float" else [_base64(row) for row in rows]
    return {
        "object": "list",
        "data": [
            {"object": "embedding", "index": index, "embedding": vector} for index, vector in enumerate(data)
        ],
        "model": model,
        "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens},
    }


def _base64(row: np.ndarray[Any, Any]) -> str:
    return base64.b64encode(row.astype("<f4", copy=False).tobytes()).decode("ascii")


def model_object(model_id: str, created: int, owned_by: str = OWNED_BY) -> Document:
    """One entry of `/v1/models`, and the answer of `/v1/models/{id}`."""
    return {"id": model_id, "object": "model", "created": created, "owned_by": owned_by}


def model_list(models: Iterable[Document]) -> Document:
    """`/v1/models`: the `model_object`s served."""
    return {"object": "list", "data": list(models)}

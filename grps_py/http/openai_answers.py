"""How a completion's choices are written: as a chat or as a text completion, whole or as stream
chunks (`grps_py.openai.answers` builds the documents; this picks which for each step)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from grps_py.http.openai_generation import Choice
from grps_py.openai import (
    ChatChoice,
    ChatChunks,
    CompletionChoice,
    CompletionChunks,
    Usage,
    chat_completion,
    new_id,
    now,
    text_completion,
)
from grps_py.openai.answers import CHAT_ID_PREFIX, COMPLETION_ID_PREFIX, Document, FinishReason


class AnswerShape(Protocol):
    def whole(self, choices: Sequence[Choice], usage: Usage) -> Document:
        """The answer of a request that did not stream."""

    def opening(self, index: int) -> list[Document]:
        """The chunks that open choice `index`'s stream, before its first text."""

    def text(self, index: int, text: str) -> Document: ...

    def finish(self, index: int, finish_reason: FinishReason) -> Document: ...

    def usage(self, usage: Usage) -> Document:
        """The last chunk when `stream_options.include_usage`."""


def _finished(choice: Choice) -> FinishReason:
    assert choice.finish_reason is not None  # the answer is written once every choice finished
    return choice.finish_reason


@dataclass(frozen=True)
class ChatShape:
    """`chat.completion` and `chat.completion.chunk`: each choice's stream opens with its role."""

    chunks: ChatChunks

    @classmethod
    def new(cls, model: str, include_usage: bool) -> ChatShape:
        return cls(ChatChunks(new_id(CHAT_ID_PREFIX), now(), model, include_usage))

    def whole(self, choices: Sequence[Choice], usage: Usage) -> Document:
        chunks = self.chunks
        answers = [ChatChoice(choice.index, choice.text, _finished(choice)) for choice in choices]
        return chat_completion(chunks.answer_id, chunks.created, chunks.model, answers, usage)

    def opening(self, index: int) -> list[Document]:
        return [self.chunks.role(index)]

    def text(self, index: int, text: str) -> Document:
        return self.chunks.content(index, text)

    def finish(self, index: int, finish_reason: FinishReason) -> Document:
        return self.chunks.finish(index, finish_reason)

    def usage(self, usage: Usage) -> Document:
        return self.chunks.usage(usage)


@dataclass(frozen=True)
class CompletionShape:
    """`text_completion`, whole and in chunks."""

    chunks: CompletionChunks

    @classmethod
    def new(cls, model: str, include_usage: bool) -> CompletionShape:
        return cls(CompletionChunks(new_id(COMPLETION_ID_PREFIX), now(), model, include_usage))

    def whole(self, choices: Sequence[Choice], usage: Usage) -> Document:
        chunks = self.chunks
        answers = [CompletionChoice(choice.index, choice.text, _finished(choice)) for choice in choices]
        return text_completion(chunks.answer_id, chunks.created, chunks.model, answers, usage)

    def opening(self, index: int) -> list[Document]:
        return []

    def text(self, index: int, text: str) -> Document:
        return self.chunks.text(index, text)

    def finish(self, index: int, finish_reason: FinishReason) -> Document:
        return self.chunks.finish(index, finish_reason)

    def usage(self, usage: Usage) -> Document:
        return self.chunks.usage(usage)

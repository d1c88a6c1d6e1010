"""What a generative model gives the server: a tokenizer, and prefill and decode over slots it owns.

The server (its continuous batcher) decides which sequences run: at every step it may start new
ones (`prefill`, several at once), then advances every running one by one token (`decode`), samples
each sequence's next token from the logits itself (greedy, temperature, top-p, seed) and frees a
finished sequence's slot at once (`release`). The model keeps each slot's state (a KV cache row).
Every call comes from one model thread, never two at a time.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from grps_py.core.model import Registry


class Tokenizer(Protocol):
    eos_id: int | None
    vocab_size: int

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...


@dataclass(frozen=True)
class GenerationRequest:
    prompt_ids: list[int]
    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    # Seconds it may take from now: at its deadline it ends as if it reached max_tokens ("length").
    timeout_s: float | None = None
    ignore_eos: bool = False  # generate max_tokens whatever the model says (benchmarks, tests)


class GenerativeModel(ABC):
    """A model generating token by token, batched per step by the server."""

    tokenizer: Tokenizer
    max_running: int = 8  # sequences it can hold at once

    def init(self, path: str | None, device: str | None = None, args: dict[str, Any] | None = None) -> None:
        self.path, self.device, self.args = path, device, dict(args or {})

    def load(self) -> bool:
        return True

    def chat_prompt(self, messages: Sequence[dict[str, str]]) -> str:
        """The prompt a chat is (its chat template): by default `role: content` lines, then
        `assistant:`."""
        lines = [f"{m['role']}: {m['content']}" for m in messages]
        return "\n".join([*lines, "assistant:"])

    @abstractmethod
    def prefill(self, slots: Sequence[int], prompts: Sequence[Sequence[int]]) -> np.ndarray[Any, Any]:
        """Start a sequence in each slot from its prompt; the logits of each one's next token."""

    @abstractmethod
    def decode(self, slots: Sequence[int], tokens: Sequence[int]) -> np.ndarray[Any, Any]:
        """One step of every slot given: `tokens[i]` is slot i's last token; the next logits."""

    @abstractmethod
    def release(self, slot: int) -> None:
        """The slot's sequence ended: free what it holds."""

    def embed(self, ids: Sequence[Sequence[int]]) -> np.ndarray[Any, Any]:
        raise NotImplementedError(f"{type(self).__name__} makes no embeddings")


# The generative models a project's src/ registers by name (`inferer_name` of `inferer_type: generative`):
#     generative_register.register("tiny_gpt", TinyGpt())
generative_register: Registry[GenerativeModel] = Registry("inferer")

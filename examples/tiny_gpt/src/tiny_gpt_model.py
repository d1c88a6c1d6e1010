"""TinyGpt: the reference generative model (issue 23), a tiny byte-level GPT with a KV cache per slot.

The server's continuous batcher drives it (see grps_py/generation/api.py): `prefill` starts
sequences in slots (their prompts run together, right-padded), `decode` advances every given slot by
one token in one batched step, `release` frees a slot. Every sequence starts with the end-of-text
token, as every document did in training. A sequence that fills the context (256 positions) keeps
going: its slot is refilled from the last half of its text and the step goes on from there.

Registered as `tiny_gpt` (conf/inference.yml: `inferer_type: generative`, `inferer_name: tiny_gpt`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tiny_gpt_cache import KvCache
from tiny_gpt_network import TinyGptNetwork
from tiny_gpt_tokenizer import ByteTokenizer
from tiny_gpt_training import WEIGHTS, TrainingPlan, train

from grps_py.backends.devices import normalize_device
from grps_py.generation.api import GenerativeModel, generative_register

logger = logging.getLogger(__name__)

EMBED_BATCH = 32  # texts per forward pass in `embed`


class TinyGpt(GenerativeModel):
    tokenizer: ByteTokenizer

    def init(self, path: str | None, device: str | None = None, args: dict[str, Any] | None = None) -> None:
        """path: the weights (default models/tiny_gpt.pt); args: `max_running` (slots, default 16),
        `train_steps_if_missing` (default 100: a quick, rough model when the weights file is absent)."""
        super().init(path, device, args)
        self.max_running = int(self.args.get("max_running", 16))
        if not 1 <= self.max_running <= 1024:
            raise ValueError(f"max_running must be 1..1024, not {self.max_running}")
        self.train_steps_if_missing = int(self.args.get("train_steps_if_missing", 100))
        self.tokenizer = ByteTokenizer()
        self.steps = 0  # decode steps run so far: lets a test see generation stop

    def load(self) -> bool:
        cuda_count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        self.torch_device = normalize_device(self.device, cuda_count)
        weights = Path(self.path) if self.path else WEIGHTS
        if weights.is_file():
            network = TinyGptNetwork.from_file(weights, self.torch_device)
        else:
            logger.warning(
                "%s is missing: training a rough model for %d steps "
                "(examples/tiny_gpt/train.py makes the real one)",
                weights,
                self.train_steps_if_missing,
            )
            network = train(TrainingPlan(steps=self.train_steps_if_missing)).network
        self.network = network.to(self.torch_device).eval()
        self.config = self.network.config
        self.cache = KvCache(self.config, self.max_running, self.torch_device)
        self.histories: dict[int, list[int]] = {}  # slot -> its tokens, to refill a full context
        return True

    def chat_prompt(self, messages: Sequence[dict[str, str]]) -> str:
        """One `role: content` line per message (newlines inside content become spaces, so a message
        cannot start a turn of its own), then `assistant:`; the model answers after it and ends its
        answer with end-of-text. The training corpus has dialogues in this shape."""
        lines = [f"{m['role']}: {' '.join(m['content'].splitlines())}" for m in messages]
        return "\n".join([*lines, "assistant:"])

    # --- the batcher's calls ------------------------------------------------------------------------

    def prefill(self, slots: Sequence[int], prompts: Sequence[Sequence[int]]) -> np.ndarray[Any, Any]:
        if len(slots) != len(prompts):
            raise ValueError(f"{len(slots)} slots for {len(prompts)} prompts")
        self._check_distinct(slots)
        for slot in slots:
            self.cache.check(slot)
        sequences = [self._fit([self._eos, *self._checked_tokens(prompt)]) for prompt in prompts]
        if not sequences:
            return np.zeros((0, self.tokenizer.vocab_size), dtype=np.float32)
        with torch.no_grad():
            logits = self._start(list(slots), sequences)
        return logits.float().cpu().numpy()

    def decode(self, slots: Sequence[int], tokens: Sequence[int]) -> np.ndarray[Any, Any]:
        if len(slots) != len(tokens):
            raise ValueError(f"{len(slots)} slots for {len(tokens)} tokens")
        self._check_distinct(slots)
        self._checked_tokens(tokens)
        lengths = [self.cache.length(slot) for slot in slots]
        if not slots:
            return np.zeros((0, self.tokenizer.vocab_size), dtype=np.float32)
        with torch.no_grad():
            for slot, length in zip(slots, lengths, strict=True):
                if length >= self.config.context:  # full: keep the last half and go on
                    self._start([slot], [self.histories[slot][-(self.config.context // 2) :]])
            positions = [self.cache.length(slot) for slot in slots]
            logits = self.network.step(
                self._tensor(tokens),
                self.cache.keys,
                self.cache.values,
                self._tensor(slots),
                self._tensor(positions),
            )
        self.cache.advance(list(slots))
        for slot, token in zip(slots, tokens, strict=True):
            self.histories[slot].append(int(token))
        self.steps += 1
        return logits.float().cpu().numpy()

    def release(self, slot: int) -> None:
        self.cache.release(slot)
        self.histories.pop(slot, None)

    def running_slots(self) -> list[int]:
        return sorted(self.cache.lengths)

    def embed(self, ids: Sequence[Sequence[int]]) -> np.ndarray[Any, Any]:
        """Mean of the final hidden states over each text's tokens ([n, d_model] float32). A text longer
        than the context is cut to its first context - 1 tokens; an empty one is its start token."""
        sequences = [[self._eos, *self._checked_tokens(text)][: self.config.context] for text in ids]
        rows: list[torch.Tensor] = []
        with torch.no_grad():
            for first in range(0, len(sequences), EMBED_BATCH):
                chunk = sequences[first : first + EMBED_BATCH]
                hidden = self.network.run(self._padded(chunk)).hidden
                for row, sequence in zip(hidden, chunk, strict=True):
                    text = row[1 : len(sequence)] if len(sequence) > 1 else row[:1]
                    rows.append(text.mean(dim=0))
        if not rows:
            return np.zeros((0, self.config.d_model), dtype=np.float32)
        return torch.stack(rows).float().cpu().numpy()

    # --- internals -----------------------------------------------------------------------------------

    @property
    def _eos(self) -> int:
        assert self.tokenizer.eos_id is not None
        return self.tokenizer.eos_id

    def _start(self, slots: list[int], sequences: list[list[int]]) -> torch.Tensor:
        """Run whole sequences together, keep each one's keys and values in its slot's row, and
        return each one's next-token logits [len(slots), vocab]."""
        run = self.network.run(self._padded(sequences))
        last = torch.tensor([len(s) - 1 for s in sequences], device=self.torch_device)
        for row, (slot, sequence) in enumerate(zip(slots, sequences, strict=True)):
            self.cache.store(slot, [k[row] for k in run.keys], [v[row] for v in run.values], len(sequence))
            self.histories[slot] = list(sequence)
        hidden = run.hidden[torch.arange(len(sequences), device=self.torch_device), last]
        return self.network.head(hidden)  # type: ignore[no-any-return]

    def _fit(self, sequence: list[int]) -> list[int]:
        """A prompt longer than the context keeps its last `context` tokens."""
        return sequence[-self.config.context :]

    def _padded(self, sequences: list[list[int]]) -> torch.Tensor:
        """Right-padded with end-of-text: the causal mask keeps real tokens from seeing the padding."""
        width = max(len(s) for s in sequences)
        return self._tensor([[*s, *[self._eos] * (width - len(s))] for s in sequences])

    def _tensor(self, values: Sequence[Any]) -> torch.Tensor:
        return torch.tensor(values, dtype=torch.long, device=self.torch_device)

    def _checked_tokens(self, ids: Sequence[int]) -> list[int]:
        vocab = self.tokenizer.vocab_size
        bad = [i for i in ids if not isinstance(i, int | np.integer) or not 0 <= int(i) < vocab]
        if bad:
            raise ValueError(f"token ids must be 0..{vocab - 1}; got {bad[0]!r:.40}")
        return [int(i) for i in ids]

    @staticmethod
    def _check_distinct(slots: Sequence[int]) -> None:
        if len(set(slots)) != len(slots):
            raise ValueError("a slot appears twice in one call")


generative_register.register("tiny_gpt", TinyGpt())

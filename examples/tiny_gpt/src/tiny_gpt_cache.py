"""The tiny GPT's key/value cache: one preallocated row per slot, and how much of each row is filled.

Rows are allocated once at load (layers x slots x heads x context x head_dim, for keys and for
values), so starting and ending sequences never allocates; a released row is simply reused.
"""

from __future__ import annotations

import torch
from tiny_gpt_network import GptConfig
from torch import Tensor


class KvCache:
    def __init__(self, config: GptConfig, rows: int, device: str) -> None:
        shape = (config.layers, rows, config.heads, config.context, config.d_model // config.heads)
        self.keys = torch.zeros(shape, device=device)
        self.values = torch.zeros(shape, device=device)
        self.rows = rows
        self.lengths: dict[int, int] = {}  # slot -> positions filled, for the slots in use

    def check(self, slot: int) -> int:
        if not isinstance(slot, int) or not 0 <= slot < self.rows:
            raise ValueError(f"slot {slot!r} is not one of 0..{self.rows - 1}")
        return slot

    def length(self, slot: int) -> int:
        if self.check(slot) not in self.lengths:
            raise ValueError(f"slot {slot} holds no sequence: prefill it first")
        return self.lengths[slot]

    def store(self, slot: int, keys: list[Tensor], values: list[Tensor], length: int) -> None:
        """Fill the slot's row from a whole-sequence pass: keys/values per layer [heads, >= length, dim]."""
        self.check(slot)
        for layer, (k, v) in enumerate(zip(keys, values, strict=True)):
            self.keys[layer, slot, :, :length] = k[:, :length]
            self.values[layer, slot, :, :length] = v[:, :length]
        self.lengths[slot] = length

    def advance(self, slots: list[int]) -> None:
        """A decode step wrote one more position into each of these rows."""
        for slot in slots:
            self.lengths[slot] += 1

    def release(self, slot: int) -> None:
        self.lengths.pop(self.check(slot), None)

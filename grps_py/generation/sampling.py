"""Choosing each sequence's next token from its logits: greedy, temperature and top-p (nucleus).

One call samples a whole step's batch: the softmax is computed for all rows at once, then each row
draws with its own `numpy.random.Generator`, so a sequence's draws depend on its seed alone, never on
which other sequences share its steps. Logits a model got wrong (NaN, infinities) give a token, not
an exception: NaN counts as impossible, infinities as the largest finite values.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

_FIRST_NUCLEUS = 64  # tokens sorted first when looking for the top-p nucleus


@dataclass
class Sampling:
    """How one sequence samples: `temperature` 0 is greedy; `rng` is its own seeded generator."""

    temperature: float
    top_p: float
    rng: np.random.Generator
    banned: int | None = None  # a token it never draws (the eos of a request that ignores it)


def sample_tokens(logits: np.ndarray[Any, Any], rows: Sequence[Sampling]) -> list[int]:
    """The next token of each row of `logits` ([len(rows), vocab])."""
    values = np.asarray(logits)
    if values.ndim != 2 or values.shape[0] != len(rows) or values.shape[1] == 0:
        raise ValueError(f"logits of shape {values.shape}; expected ({len(rows)}, vocab)")
    if values.dtype != np.float64:
        values = values.astype(np.float32, copy=False)  # integers, float16: exp() wants a wider type
    banned = [(i, row.banned) for i, row in enumerate(rows) if row.banned is not None]
    if banned:
        values = values.copy()  # the model's own array stays as it was
        for i, token in banned:
            values[i, token] = -np.inf
    greedy = np.argmax(values, axis=1)  # the rows sampled greedily keep these
    broken = np.flatnonzero(np.isnan(values[np.arange(len(rows)), greedy]))  # argmax stops at a NaN
    for row in broken:
        greedy[row] = np.argmax(_finite(values[row]))
    tokens: list[int] = greedy.tolist()
    drawn = [i for i, row in enumerate(rows) if row.temperature > 0]
    if not drawn:
        return tokens
    temperatures = np.array([rows[i].temperature for i in drawn], dtype=values.dtype)
    scaled = values[drawn]  # a copy: the rows to draw from
    if not np.isfinite(scaled).all():
        scaled = _finite(scaled)
    with np.errstate(over="ignore", invalid="ignore"):
        # Subtracting the maximum first keeps exp() finite; the top token's weight is exactly 1.
        scaled -= scaled.max(axis=1, keepdims=True)
        scaled /= temperatures[:, None]
        weights = np.exp(scaled, out=scaled)
    for k, i in enumerate(drawn):
        tokens[i] = _draw(weights[k], rows[i].top_p, rows[i].rng)
    return tokens


def _finite(values: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """NaN as impossible (-inf), infinities as the dtype's largest finite values."""
    limits = np.finfo(values.dtype)
    return np.clip(np.where(np.isnan(values), -np.inf, values), limits.min, limits.max)


def _draw(weights: np.ndarray[Any, Any], top_p: float, rng: np.random.Generator) -> int:
    """A token drawn in proportion to `weights` (unnormalised), from the smallest set of most likely
    tokens whose probability reaches `top_p`. One uniform draw per token, whatever the vocabulary."""
    u = rng.random()
    if top_p >= 1.0:
        cumulative = np.cumsum(weights, dtype=np.float64)
        index = int(np.searchsorted(cumulative, u * cumulative[-1], side="right"))
        return min(index, len(weights) - 1)
    order = _most_likely(weights, top_p * weights.sum(dtype=np.float64))
    cumulative = np.cumsum(weights[order], dtype=np.float64)
    # Keep each token whose predecessors' mass is still below top_p: at least the most likely one.
    keep = int(np.searchsorted(cumulative, top_p * weights.sum(dtype=np.float64), side="left")) + 1
    keep = min(keep, len(order))
    index = int(np.searchsorted(cumulative[:keep], u * cumulative[keep - 1], side="right"))
    return int(order[min(index, keep - 1)])


def _most_likely(weights: np.ndarray[Any, Any], mass: float) -> np.ndarray[Any, Any]:
    """Token ids by falling weight, as many as it takes to reach `mass` (or all). Sorting the whole
    vocabulary at every token is slow; the nucleus is usually a few tokens, so the largest `k` are
    taken first (argpartition), and `k` grows only while they fall short."""
    k = _FIRST_NUCLEUS
    while k < len(weights):
        top = np.argpartition(-weights, k - 1)[:k]
        top = top[np.argsort(-weights[top], kind="stable")]
        if weights[top].sum(dtype=np.float64) >= mass:
            return top
        k *= 8
    return np.argsort(-weights, kind="stable")

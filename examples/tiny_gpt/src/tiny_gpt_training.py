"""Training the tiny GPT on the example's corpus: seeded, a fixed number of steps, CPU by default.

The corpus is split into documents at blank lines; the token stream is every document preceded by
end-of-text, so the model learns both to start a text after end-of-text and to end one with it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from tiny_gpt_network import GptConfig, TinyGptNetwork
from tiny_gpt_tokenizer import ByteTokenizer

EXAMPLE = Path(__file__).resolve().parent.parent
CORPUS = EXAMPLE / "data" / "corpus.txt"
WEIGHTS = EXAMPLE / "models" / "tiny_gpt.pt"


@dataclass(frozen=True)
class TrainingPlan:
    steps: int = 2000  # about two minutes on one core: enough to learn the corpus nearly by heart
    batch: int = 4  # windows of `context + 1` tokens per step: many small steps learn it fastest
    threads: int = 1  # one thread: steady on a busy machine, and the same sums every run
    peak_rate: float = 3e-3
    warmup: int = 30
    seed: int = 23


@dataclass(frozen=True)
class TrainingResult:
    network: TinyGptNetwork
    loss: float  # mean cross-entropy (nats per byte) of the last 20 steps
    seconds: float


def documents(text: str) -> list[str]:
    return [part.strip() for part in text.split("\n\n") if part.strip()]


def token_stream(texts: list[str], tokenizer: ByteTokenizer) -> torch.Tensor:
    assert tokenizer.eos_id is not None
    ids: list[int] = []
    for text in texts:
        ids += [tokenizer.eos_id, *tokenizer.encode(text)]
    return torch.tensor([*ids, tokenizer.eos_id])


def learning_rate(step: int, plan: TrainingPlan) -> float:
    """Linear warm-up, then a cosine down to a tenth of the peak."""
    if step < plan.warmup:
        return plan.peak_rate * (step + 1) / plan.warmup
    progress = (step - plan.warmup) / max(1, plan.steps - plan.warmup)
    return plan.peak_rate * (0.1 + 0.45 * (1 + math.cos(math.pi * progress)))


def train(
    plan: TrainingPlan | None = None,
    config: GptConfig | None = None,
    corpus: Path = CORPUS,
    report: Callable[[int, float], None] | None = None,
) -> TrainingResult:
    """Train from the seed; the same plan, config and corpus give the same weights."""
    plan, config = plan or TrainingPlan(), config or GptConfig()
    threads = torch.get_num_threads()
    torch.set_num_threads(plan.threads)
    try:
        with torch.random.fork_rng(devices=[]):  # seeds its own draws; the caller's stay as they were
            return _train(plan, config, corpus, report)
    finally:
        torch.set_num_threads(threads)


def _train(
    plan: TrainingPlan, config: GptConfig, corpus: Path, report: Callable[[int, float], None] | None
) -> TrainingResult:
    started = time.perf_counter()
    torch.manual_seed(plan.seed)
    generator = torch.Generator().manual_seed(plan.seed)
    stream = token_stream(documents(corpus.read_text(encoding="utf-8")), ByteTokenizer())
    window = min(config.context, len(stream) - 1)
    network = TinyGptNetwork(config).train()
    optimizer = torch.optim.AdamW(
        network.parameters(), lr=plan.peak_rate, betas=(0.9, 0.95), weight_decay=0.01
    )
    recent: list[float] = []
    for step in range(plan.steps):
        starts = torch.randint(0, len(stream) - window, (plan.batch,), generator=generator)
        batch = torch.stack([stream[s : s + window + 1] for s in starts.tolist()])
        logits = network(batch[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, config.vocab_size), batch[:, 1:].reshape(-1))
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step, plan)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()  # type: ignore[no-untyped-call]
        torch.nn.utils.clip_grad_norm_(network.parameters(), 1.0)
        optimizer.step()
        recent = [*recent[-19:], loss.item()]
        if report is not None:
            report(step, recent[-1])
    return TrainingResult(network.eval(), sum(recent) / len(recent), time.perf_counter() - started)

"""Train the tiny GPT on data/corpus.txt and write models/tiny_gpt.pt (seeded: same steps, same weights).

`python examples/tiny_gpt/train.py` takes about two minutes on one CPU core; `--steps 50 --out
/tmp/tiny_gpt.pt` makes a quick, rough model elsewhere.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent / "src"))

from tiny_gpt_network import TinyGptNetwork
from tiny_gpt_tokenizer import ByteTokenizer
from tiny_gpt_training import WEIGHTS, TrainingPlan, train

SAMPLE_PROMPT = "Continuous batching decides"


def greedy(network: TinyGptNetwork, prompt: str, count: int) -> str:
    """A greedy continuation without a cache: enough for a sample after training."""
    tokenizer = ByteTokenizer()
    assert tokenizer.eos_id is not None
    ids = [tokenizer.eos_id, *tokenizer.encode(prompt)]
    added: list[int] = []
    with torch.no_grad():
        for _ in range(count):
            logits = network(torch.tensor([ids[-network.config.context :]]))
            token = int(logits[0, -1].argmax())
            if token == tokenizer.eos_id:
                break
            ids.append(token)
            added.append(token)
    return tokenizer.decode(added)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=TrainingPlan.steps)
    parser.add_argument("--seed", type=int, default=TrainingPlan.seed)
    parser.add_argument("--out", type=Path, default=WEIGHTS)
    options = parser.parse_args()

    def report(step: int, loss: float) -> None:
        if step % 50 == 0 or step == options.steps - 1:
            print(f"step {step:4d}  loss {loss:.3f}", flush=True)

    result = train(TrainingPlan(steps=options.steps, seed=options.seed), report=report)
    result.network.save(options.out)
    print(
        f"{result.network.parameter_count():,} parameters, {options.steps} steps in {result.seconds:.0f} s, "
        f"final loss {result.loss:.3f} nats/byte -> {options.out} ({options.out.stat().st_size:,} bytes)"
    )
    print(f"sample: {SAMPLE_PROMPT!r} -> {greedy(result.network, SAMPLE_PROMPT, 120)!r}")


if __name__ == "__main__":
    main()

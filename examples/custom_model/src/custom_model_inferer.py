"""The inferer of the sentiment model: a word lexicon, loaded from `inferer_path`, scores texts.

It stands for any Python model: `init` gets the settings, `load` reads the model file once at
start-up (returning False stops the server), and `infer` runs per request on a worker thread.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from grps_py import GrpsContext, ModelInferer, inferer_register

NEGATIONS = frozenset({"not", "no", "never", "isn't", "wasn't", "don't", "didn't"})


class SentimentInferer(ModelInferer):
    def init(self, path: str | None, device: str | None = None, args: dict[str, Any] | None = None) -> None:
        super().init(path, device, args)  # inferer_path, device and inferer_args from inference.yml
        self.threshold = float(self.args.get("threshold", 0.25))
        self.lexicon: dict[str, float] = {}

    def load(self) -> bool:
        if self.path is None:
            return False  # the lexicon file is required: refuse to start without it
        with open(self.path, encoding="utf-8") as lines:
            for line in lines:
                if line.strip() and not line.startswith("#"):
                    word, weight = line.split("\t")
                    self.lexicon[word] = float(weight)
        return bool(self.lexicon)

    def score(self, words: list[str]) -> float:
        """Sum of the words' weights, a negation flipping the next weighted word; length-normalised."""
        total, flip = 0.0, 1.0
        for word in words:
            if word in NEGATIONS:
                flip = -1.0
            elif word in self.lexicon:
                total += flip * self.lexicon[word]
                flip = 1.0
        return total / math.sqrt(max(len(words), 1))

    def infer(self, inp: list[list[str]], context: GrpsContext) -> dict[str, Any]:
        scores = np.array([self.score(words) for words in inp], dtype=np.float32)
        labels = [
            "positive" if s >= self.threshold else "negative" if s <= -self.threshold else "neutral"
            for s in scores
        ]
        return {"label": labels, "score": scores}


inferer_register.register("custom_model_inferer", SentimentInferer())

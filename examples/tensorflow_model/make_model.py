"""Write this example's SavedModel, `models/iris/` (seeded weights, not trained: the numbers only show
the mechanism). Run it once before serving: `python examples/tensorflow_model/make_model.py`.

The SavedModel has two signatures:
  serving_default  features float32 [batch, 4] -> probabilities float32 [batch, 3], label int64 [batch]
  describe         name string [batch]         -> greeting string [batch], length int32 [batch]
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf

HERE = Path(__file__).resolve().parent
SPECIES = ("setosa", "versicolor", "virginica")


def weights() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1929)
    return rng.normal(size=(4, 3)).astype(np.float32), rng.normal(size=3).astype(np.float32)


def reference(features: np.ndarray) -> np.ndarray:
    """The probabilities, in numpy: what the served model must answer."""
    w, b = weights()
    logits = features.astype(np.float32) @ w + b
    shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
    return shifted / shifted.sum(axis=1, keepdims=True)


class Iris(tf.Module):  # type: ignore[misc]
    def __init__(self) -> None:
        super().__init__()
        w, b = weights()
        self.w = tf.Variable(w, name="w")
        self.b = tf.Variable(b, name="b")

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="features")])
    def classify(self, features: Any) -> dict[str, Any]:
        probabilities = tf.nn.softmax(tf.matmul(features, self.w) + self.b)
        return {"probabilities": probabilities, "label": tf.argmax(probabilities, axis=1)}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="name")])
    def describe(self, name: Any) -> dict[str, Any]:
        greeting = tf.strings.join(["hello, ", name, "!"])
        return {"greeting": greeting, "length": tf.strings.length(name, unit="UTF8_CHAR")}


def make_model(directory: Path) -> Path:
    model = Iris()
    target = directory / "iris"
    signatures = {"serving_default": model.classify, "describe": model.describe}
    tf.saved_model.save(model, str(target), signatures=signatures)
    return target


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--out", type=Path, default=HERE / "models", help="where to write iris/ (%(default)s)"
    )
    print(f"wrote {make_model(parser.parse_args().out)}")


if __name__ == "__main__":
    main()

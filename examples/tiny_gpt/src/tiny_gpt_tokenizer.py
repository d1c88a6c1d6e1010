"""The tiny GPT's tokenizer: one token per UTF-8 byte, plus an end-of-text token.

Bytes need no vocabulary file and spell any text; the price is more tokens per word. The end-of-text
id (256) separates documents in training, starts every sequence the model runs, and ends answers.
"""

from __future__ import annotations

from collections.abc import Sequence

BYTES = 256


class ByteTokenizer:
    eos_id: int | None = BYTES
    vocab_size: int = BYTES + 1

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: Sequence[int]) -> str:
        """The text of the ids; end-of-text and unknown ids are dropped, a cut character is U+FFFD."""
        return bytes(i for i in ids if 0 <= i < BYTES).decode("utf-8", errors="replace")

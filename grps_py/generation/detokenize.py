"""A sequence's text, token by token: what each new token adds, and where a stop string ends it.

Each step decodes only a short window of ids (the last few tokens before the new ones, for the
context a tokenizer needs to place spaces), never the whole sequence again, and waits while the
window ends in an incomplete character (U+FFFD: a byte-level tokenizer's multi-byte character split
across tokens). Text that could be the start of a stop string is held back until the next tokens
show whether it is: a stop string split across tokens is found, and no part of it is ever emitted.
"""

from __future__ import annotations

from collections.abc import Sequence

from grps_py.generation.api import Tokenizer

CONTEXT_TOKENS = 5  # prompt tokens decoded before the first generated one (as vLLM does), never shown
_INCOMPLETE = "\ufffd"


class IncrementalDetokenizer:
    """Turns one sequence's generated ids into the text to emit at each step."""

    def __init__(self, tokenizer: Tokenizer, prompt_ids: Sequence[int], stop: Sequence[str] = ()) -> None:
        self._tokenizer = tokenizer
        self._ids = list(prompt_ids[-CONTEXT_TOKENS:])
        self._prefix_offset = 0  # the window decoded each step starts here
        self._read_offset = len(self._ids)  # ids before this are in `text` already
        self._stop = tuple(s for s in stop if s)
        self._longest_stop = max((len(s) for s in self._stop), default=0)
        self.text = ""  # the output's text so far: emitted and held back (cut at a stop once found)
        self._sent = 0  # characters of `text` emitted
        self._searched = 0  # characters of `text` searched for stop strings
        self.stopped = False  # a stop string was found: `text` ends before it

    def add(self, token_id: int) -> str:
        """Take the next generated token; the text to emit now (may be "": held back)."""
        if self.stopped:
            return ""
        self._ids.append(token_id)
        self._decode_window(final=False)
        return self._emit(final=False)

    def finish(self) -> str:
        """The sequence ended (eos, length): the text still held back, incomplete characters included,
        up to a stop string if it completes one (`stopped` then says so)."""
        if self.stopped:
            return ""
        self._decode_window(final=True)
        return self._emit(final=True)

    def _decode_window(self, final: bool) -> None:
        ids, decode = self._ids, self._tokenizer.decode
        before = decode(ids[self._prefix_offset : self._read_offset])
        after = decode(ids[self._prefix_offset :])
        if len(after) <= len(before) or (after.endswith(_INCOMPLETE) and not final):
            return  # nothing whole to show yet: the next token may complete it
        self.text += after[len(before) :]
        self._prefix_offset, self._read_offset = self._read_offset, len(ids)
        if self._prefix_offset > 4 * CONTEXT_TOKENS:  # keep the id list short on long outputs
            del ids[: self._prefix_offset]
            self._read_offset -= self._prefix_offset
            self._prefix_offset = 0

    def _emit(self, final: bool) -> str:
        text = self.text
        if self._stop:
            # Only a stop string that ends in the new text can be new.
            start = max(0, self._searched - self._longest_stop + 1)
            self._searched = len(text)
            hits = [at for s in self._stop if (at := text.find(s, start)) >= 0]
            if hits:
                end = min(hits)
                self.stopped = True
                self.text = text[:end]
                return self._take(end)
        end = len(text) if final else len(text) - self._held_back(text)
        return self._take(end)

    def _take(self, end: int) -> str:
        end = max(end, self._sent)
        new, self._sent = self.text[self._sent : end], end
        return new

    def _held_back(self, text: str) -> int:
        """How many characters at the end of `text` could begin a stop string (the longest such)."""
        held = 0
        for stop in self._stop:
            # Candidates start in the last len(stop) - 1 characters, with the stop's first character.
            at = text.find(stop[0], max(len(text) - len(stop) + 1, 0))
            while at >= 0 and len(text) - at > held:
                if stop.startswith(text[at:]):
                    held = len(text) - at
                    break
                at = text.find(stop[0], at + 1)
        return held

"""examples/tiny_gpt: the reference generative model, driven directly as the batcher will drive it.

The KV-cache path (prefill, then one decode step at a time, several slots batched) must give the
logits of the plain whole-sequence forward pass; the committed weights must continue corpus text.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from grps_py.project import import_sources

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tiny_gpt"
import_sources(EXAMPLE)  # puts examples/tiny_gpt/src on sys.path, as the server does

from tiny_gpt_model import TinyGpt  # noqa: E402

TOLERANCE = 1e-4
CORPUS = (EXAMPLE / "data" / "corpus.txt").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def model() -> Iterator[TinyGpt]:
    tiny = TinyGpt()
    tiny.init(str(EXAMPLE / "models" / "tiny_gpt.pt"), "cpu", {"max_running": 8})
    assert tiny.load()
    yield tiny


@pytest.fixture(autouse=True)
def free_slots(model: TinyGpt) -> Iterator[None]:
    yield
    for slot in model.running_slots():
        model.release(slot)


def eos(model: TinyGpt) -> int:
    assert model.tokenizer.eos_id is not None
    return model.tokenizer.eos_id


def ids(model: TinyGpt, text: str) -> list[int]:
    return model.tokenizer.encode(text)


def uncached(model: TinyGpt, sequence: list[int]) -> np.ndarray[Any, Any]:
    """Next-token logits after the last token of `sequence`, from the plain forward pass."""
    with torch.no_grad():
        logits = model.network(torch.tensor([sequence]))
    return logits[0, -1].numpy()  # type: ignore[no-any-return]


def test_prefill_then_decode_matches_the_whole_sequence_without_a_cache(model: TinyGpt) -> None:
    prompt = ids(model, "The prompt is read in a single pass")
    logits = model.prefill([3], [prompt])
    assert logits.shape == (1, model.tokenizer.vocab_size) and logits.dtype == np.float32
    sequence = [eos(model), *prompt]  # every sequence starts with end-of-text
    np.testing.assert_allclose(logits[0], uncached(model, sequence), atol=TOLERANCE)
    for forced in ids(model, " called the prefill."):  # teacher-forced: the same tokens either way
        logits = model.decode([3], [forced])
        sequence.append(forced)
        np.testing.assert_allclose(logits[0], uncached(model, sequence), atol=TOLERANCE)


def test_batched_decode_of_slots_of_different_lengths_equals_each_alone(model: TinyGpt) -> None:
    prompts = [ids(model, text) for text in ("Hi", "A slot is a row of the cache.", CORPUS[:150])]
    followers = [ids(model, text) for text in (" there", " is it", "!?*#x~")]  # 6 steps each

    alone = []
    for prompt, follow in zip(prompts, followers, strict=True):
        steps = [model.prefill([5], [prompt])[0]]
        steps += [model.decode([5], [token])[0] for token in follow]
        model.release(5)
        alone.append(np.stack(steps))

    together = [model.prefill([0, 6, 2], prompts)]  # one batched prefill, right-padded
    for step in range(len(followers[0])):
        together.append(model.decode([0, 6, 2], [follow[step] for follow in followers]))
    for index in range(3):
        np.testing.assert_allclose(np.stack([t[index] for t in together]), alone[index], atol=TOLERANCE)


def test_a_slot_may_join_and_leave_between_steps(model: TinyGpt) -> None:
    first, second = ids(model, "Streaming sends"), ids(model, "When a client")
    model.prefill([1], [first])
    model.decode([1], [ids(model, " ")[0]])
    model.prefill([4], [second])  # joins while slot 1 runs
    both = model.decode([4, 1], [ids(model, " ")[0], ids(model, "e")[0]])
    np.testing.assert_allclose(both[0], uncached(model, [eos(model), *second, 32]), atol=TOLERANCE)
    np.testing.assert_allclose(both[1], uncached(model, [eos(model), *first, 32, ord("e")]), atol=TOLERANCE)


def test_release_frees_the_slot(model: TinyGpt) -> None:
    prompt = ids(model, "A queue bound")
    fresh = model.prefill([7], [prompt])
    model.decode([7], [32])
    assert model.running_slots() == [7]
    model.release(7)
    assert model.running_slots() == []
    with pytest.raises(ValueError, match="holds no sequence"):
        model.decode([7], [32])
    model.release(7)  # releasing a free slot is harmless
    np.testing.assert_allclose(model.prefill([7], [prompt]), fresh, atol=TOLERANCE)  # reused as new


def test_a_sequence_longer_than_the_context_keeps_going(model: TinyGpt) -> None:
    context = model.config.context
    prompt = ids(model, CORPUS[: context + 40])  # longer than the context: the last 256 tokens stay
    logits = model.prefill([0], [prompt])
    np.testing.assert_allclose(logits[0], uncached(model, prompt[-context:]), atol=TOLERANCE)
    logits = model.decode([0], [32])  # the row is full: it is refilled from the last half, then stepped
    np.testing.assert_allclose(logits[0], uncached(model, [*prompt[-context // 2 :], 32]), atol=TOLERANCE)
    assert model.cache.length(0) == context // 2 + 1


def greedy(model: TinyGpt, prompt: str, count: int) -> str:
    logits = model.prefill([0], [ids(model, prompt)])
    out: list[int] = []
    for _ in range(count):
        token = int(logits[0].argmax())
        if token == model.tokenizer.eos_id:
            break
        out.append(token)
        logits = model.decode([0], [token])
    model.release(0)
    return model.tokenizer.decode(out)


def test_greedy_generation_continues_the_corpus(model: TinyGpt) -> None:
    for prompt in ("Continuous batching decides again", "user: What is a slot?\nassistant:"):
        start = CORPUS.index(prompt) + len(prompt)
        assert greedy(model, prompt, 24)[:16] == CORPUS[start : start + 16], prompt


def test_embed_gives_one_float32_row_per_text(model: TinyGpt) -> None:
    texts = [ids(model, "batching"), [], ids(model, "x" * 1000)]
    rows = model.embed(texts)
    assert rows.shape == (3, model.config.d_model) and rows.dtype == np.float32
    assert np.isfinite(rows).all()
    np.testing.assert_allclose(model.embed(texts[:1])[0], rows[0], atol=TOLERANCE)  # batch-independent
    assert model.embed([]).shape == (0, model.config.d_model)


def test_bad_calls_are_refused(model: TinyGpt) -> None:
    with pytest.raises(ValueError, match="token ids"):
        model.prefill([0], [[1, 999]])
    with pytest.raises(ValueError, match="slot"):
        model.prefill([8], [[1]])  # max_running is 8: slots 0..7
    with pytest.raises(ValueError, match="twice"):
        model.prefill([1, 1], [[1], [2]])
    model.prefill([2], [[65]])
    with pytest.raises(ValueError, match="token ids"):
        model.decode([2], [-1])
    assert model.running_slots() == [2]
    assert model.prefill([], []).shape == model.decode([], []).shape == (0, 257)


def test_tokenizer_and_chat_template(model: TinyGpt) -> None:
    tokenizer = model.tokenizer
    assert tokenizer.vocab_size == 257 and tokenizer.eos_id == 256
    assert tokenizer.decode([*tokenizer.encode("héllo ✓"), 256]) == "héllo ✓"
    assert tokenizer.decode(tokenizer.encode("é")[:1]) == "\ufffd"  # half a character
    prompt = model.chat_prompt(
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi\nthere"}]
    )
    assert prompt == "system: Be brief.\nuser: Hi there\nassistant:"


def test_missing_weights_train_a_rough_model(tmp_path: Path) -> None:
    tiny = TinyGpt()
    tiny.init(str(tmp_path / "absent.pt"), "cpu", {"max_running": 2, "train_steps_if_missing": 2})
    assert tiny.load()
    assert tiny.prefill([0, 1], [[65], [66, 67]]).shape == (2, 257)

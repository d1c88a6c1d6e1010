"""examples/tiny_gpt/src/tiny_gpt_request_batching.py, bench/generation.py's request-level baseline: a
batch generated together answers each request with TinyGpt's own greedy text, alone or batched, over
a real server's OIP generate_stream as from the inferer itself."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import orjson
import pytest

from grps_py.core.context import GrpsContext
from grps_py.core.types import Payload
from grps_py.project import import_sources
from support import ServerThread, start_project

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "tiny_gpt"
WEIGHTS = EXAMPLE / "models" / "tiny_gpt.pt"
PROJECT = REPO / "bench" / "projects" / "generation_tiny_gpt"
import_sources(EXAMPLE)  # puts examples/tiny_gpt/src on sys.path, as the server does

from tiny_gpt_model import TinyGpt  # noqa: E402
from tiny_gpt_request_batching import TinyGptRequestBatching  # noqa: E402

# (prompt, max_tokens, ignore_eos): answers that end at end-of-text, answers cut at max_tokens, and
# one that goes on past its end-of-text (bench/generation.py's requests)
Case = tuple[str, int, bool]
CASES: list[Case] = [
    ("user: What is the prefill?\nassistant:", 200, False),
    ("user: What is a slot?\nassistant:", 30, False),
    ("user: Tell me a joke\nassistant:", 60, False),
    ("Continuous batching decides", 90, False),
    ("user: Hello!\nassistant:", 1, False),
    ("user: Who are you?\nassistant:", 180, True),
]


def parameters(case: Case) -> dict[str, Any]:
    _, max_tokens, ignore_eos = case
    return {"max_tokens": max_tokens, "temperature": 0, "ignore_eos": ignore_eos}


@pytest.fixture(scope="module")
def greedy() -> dict[Case, tuple[list[int], str]]:
    """Each case's greedy ids and finish reason, from TinyGpt driven directly (its README's loop)."""
    model = TinyGpt()
    model.init(str(WEIGHTS), "cpu", {"max_running": 1})
    assert model.load()
    answers = {}
    for case in CASES:
        prompt, max_tokens, ignore_eos = case
        logits = model.prefill([0], [model.tokenizer.encode(prompt)])
        ids: list[int] = []
        finish = "length"
        while len(ids) < max_tokens:
            scores = logits[0, : model.tokenizer.eos_id] if ignore_eos else logits[0]
            token = int(scores.argmax())
            if token == model.tokenizer.eos_id:
                finish = "stop"
                break
            ids.append(token)
            logits = model.decode([0], [token])
        model.release(0)
        answers[case] = (ids, finish)
    return answers


def text_of(ids: list[int]) -> str:
    return bytes(ids).decode("utf-8", errors="replace")


def tensors(payload: Payload) -> dict[str, Any]:
    return {t.name: t.array for t in payload.value}


def test_a_batch_answers_each_member_with_its_greedy_text(greedy: dict[Case, Any]) -> None:
    inferer = TinyGptRequestBatching()
    inferer.init(str(WEIGHTS), "cpu", {"max_running": len(CASES)})
    assert inferer.load()
    inputs = [{"text_input": np.array([case[0].encode()], dtype=object)} for case in CASES]
    contexts = [GrpsContext(parameters=parameters(case)) for case in CASES]
    answers = inferer.batch_infer(inputs, contexts)
    for case, answer in zip(CASES, answers, strict=True):
        ids, finish = greedy[case]
        got = tensors(answer)
        assert got["output_ids"].tolist() == ids
        assert got["text_output"][0] == text_of(ids)
        assert got["finish_reason"][0] == finish
    assert inferer.model.running_slots() == []  # every slot released when the batch ends


@pytest.fixture(scope="module")
def server() -> Iterator[ServerThread]:
    running = start_project(PROJECT, inference_conf=PROJECT / "conf" / "inference_request_batching.yml")
    yield running
    running.stop()


def stream(base_url: str, case: Case) -> list[dict[str, Any]]:
    body = {"text_input": case[0], "parameters": parameters(case)}
    with (
        httpx.Client(base_url=base_url, timeout=60) as client,
        client.stream("POST", "/v2/models/tiny-gpt/generate_stream", json=body) as reply,
    ):
        assert reply.status_code == 200
        data = "".join(reply.iter_text())
    return [orjson.loads(event[6:]) for event in data.split("\n\n") if event.startswith("data: ")]


def test_concurrent_streams_each_get_their_greedy_text(server: ServerThread, greedy: dict[Case, Any]) -> None:
    with ThreadPoolExecutor(len(CASES)) as pool:
        streams = list(pool.map(lambda case: stream(server.http_url, case), CASES))
    for case, events in zip(CASES, streams, strict=True):
        ids, finish = greedy[case]
        assert "".join(e["text_output"] for e in events) == text_of(ids)
        streamed = [i for e in events for i in np.atleast_1d(e["output_ids"]).tolist()]
        assert streamed == ids
        assert events[-1]["finish_reason"] == finish
        assert all("finish_reason" not in e for e in events[:-1])


def test_a_bad_request_is_refused_alone(server: ServerThread) -> None:
    body = {"text_input": "user: Hello!\nassistant:", "parameters": {"max_tokens": 0}}
    reply = httpx.post(server.http_url + "/v2/models/tiny-gpt/generate", json=body, timeout=60)
    assert reply.status_code == 400
    assert "max_tokens" in reply.json()["error"]
    body["parameters"] = {"max_tokens": 3, "temperature": 0}
    reply = httpx.post(server.http_url + "/v2/models/tiny-gpt/generate", json=body, timeout=60)
    assert reply.status_code == 200
    assert reply.json()["finish_reason"] == "length"

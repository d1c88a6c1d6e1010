"""The OpenAI-compatible routes against a real server serving examples/tiny_gpt (its own conf), called
with the official `openai` client, sync and async, streaming and not, and with raw HTTP where the
wire itself is checked (`[DONE]`, errors, limits).

Greedy answers (temperature 0) and seeded ones are deterministic, so a request run among others must
get exactly what it gets alone (no cross-talk between the sequences batched together), and usage
must count what the model's own tokenizer counts (one token per byte).
"""

from __future__ import annotations

import asyncio
import base64
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import openai
import orjson
import pytest

from grps_py.core.telemetry import OPENAI_HTTP
from grps_py.generation.served import OpenAIModel, openai_models
from support import REPO, Recorder, ServerThread, start_project, wait_for

TINY_GPT = REPO / "examples" / "tiny_gpt"
MODEL = "tiny-gpt"
BODY_LIMIT = 256 << 10  # the test server's limits.http_body_bytes
SERVER_YML = f"""\
interface:
  host: 127.0.0.1
  port: 0,0
limits:
  http_body_bytes: {BODY_LIMIT}
"""
# A second project over the same model: the routes under KServe's prefix, embeddings not enabled.
PREFIXED_SERVER_YML = SERVER_YML + "openai:\n  prefix: /openai\n"
PREFIXED_INFERENCE_YML = """\
models:
  - name: tiny-gpt
    version: "1"
    device: cpu
    inferer_type: generative
    inferer_name: tiny_gpt
    inferer_path: ./models/tiny_gpt.pt
    inferer_args: {max_running: 4}
    generation: {max_running: 4, max_tokens: 16, max_tokens_limit: 64}
    openai: {chat: true, completions: true, embeddings: false, served_name: tiny-prefixed}
dag:
  name: tiny_gpt_dag
  nodes: [{name: tiny-gpt, type: model, model: tiny-gpt-1}]
"""
QUESTION = [{"role": "user", "content": "What is continuous batching?"}]
SENTENCE = "Continuous batching decides"  # its greedy continuation runs ~240 tokens, then ends


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    conf = tmp_path_factory.mktemp("openai") / "server.yml"
    conf.write_text(SERVER_YML)
    running = start_project(TINY_GPT, server_conf=conf)
    yield running
    running.stop()


@pytest.fixture(scope="module")
def recorder(server: ServerThread) -> Recorder:
    heard = Recorder()
    server.server.executor.telemetry.add(heard)
    return heard


@pytest.fixture(scope="module")
def served(server: ServerThread) -> OpenAIModel:
    return openai_models(server.server.executor.models)[MODEL]


@pytest.fixture
def client(server: ServerThread) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=server.http_url + "/v1", api_key="unused", max_retries=0) as made:
        yield made


@pytest.fixture
def http(server: ServerThread) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.http_url, timeout=30) as made:
        yield made


def async_client(server: ServerThread) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=server.http_url + "/v1", api_key="unused", max_retries=0)


def count(served: OpenAIModel, text: str) -> int:
    return len(served.generator.tokenizer.encode(text))


def chat_prompt_tokens(served: OpenAIModel, messages: list[dict[str, str]]) -> int:
    return count(served, served.generator.chat_prompt(messages))


def error_of(reply: httpx.Response) -> dict[str, Any]:
    document = reply.json()
    assert set(document) == {"error"}
    error: dict[str, Any] = document["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert f"[request_id={reply.headers['x-request-id']}]" in error["message"]
    return error


# --- models -------------------------------------------------------------------------------------


def test_models_lists_the_served_name(client: openai.OpenAI) -> None:
    assert [model.id for model in client.models.list()] == [MODEL]
    model = client.models.retrieve(MODEL)
    assert (model.id, model.object, model.owned_by) == (MODEL, "model", "grps-py")
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("tiny-gpt-1")  # the model's key is not its served name


# --- chat ---------------------------------------------------------------------------------------


def test_chat_whole_and_streamed_say_the_same_with_the_tokenizers_counts(
    server: ServerThread, client: openai.OpenAI, served: OpenAIModel
) -> None:
    whole = client.chat.completions.create(model=MODEL, messages=QUESTION, temperature=0, max_tokens=60)
    (choice,) = whole.choices
    text = choice.message.content
    assert whole.object == "chat.completion" and whole.model == MODEL
    assert choice.message.role == "assistant" and text and choice.finish_reason in ("stop", "length")
    assert whole.usage is not None
    assert whole.usage.prompt_tokens == chat_prompt_tokens(served, QUESTION)
    assert whole.usage.completion_tokens == count(served, text)
    assert whole.usage.total_tokens == whole.usage.prompt_tokens + whole.usage.completion_tokens

    async def streamed() -> list[Any]:
        async with async_client(server) as aclient:
            stream = await aclient.chat.completions.create(
                model=MODEL,
                messages=QUESTION,
                temperature=0,
                max_completion_tokens=60,
                stream=True,
                stream_options={"include_usage": True},
            )
            return [chunk async for chunk in stream]

    chunks = asyncio.run(streamed())
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == text
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == choice.finish_reason
    assert len({c.id for c in chunks}) == 1 and chunks[0].id.startswith("chatcmpl-")
    assert chunks[-1].choices == [] and chunks[-1].usage == whole.usage
    assert all(c.usage is None for c in chunks[:-1])


def test_chat_async_whole_and_sync_stream(server: ServerThread, client: openai.OpenAI) -> None:
    messages = [
        {"role": "system", "content": "Answer in one sentence."},
        {"role": "user", "content": "What is the decode?"},
    ]

    async def whole() -> str:
        async with async_client(server) as aclient:
            answer = await aclient.chat.completions.create(
                model=MODEL, messages=messages, temperature=0, max_tokens=40
            )
            return answer.choices[0].message.content or ""

    text = asyncio.run(whole())
    stream = client.chat.completions.create(
        model=MODEL, messages=messages, temperature=0, max_tokens=40, stream=True
    )
    chunks = list(stream)
    assert all(chunk.usage is None for chunk in chunks)  # not asked for
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == text


# --- completions ----------------------------------------------------------------------------------


def test_completions_of_several_prompts_and_n(client: openai.OpenAI, served: OpenAIModel) -> None:
    prompts = [SENTENCE, "The prompt is read"]
    alone = [
        client.completions.create(model=MODEL, prompt=prompt, temperature=0, max_tokens=12).choices[0].text
        for prompt in prompts
    ]
    both = client.completions.create(model=MODEL, prompt=prompts, temperature=0, max_tokens=12, n=2)
    assert [choice.index for choice in both.choices] == [0, 1, 2, 3]
    assert [choice.text for choice in both.choices] == [alone[0], alone[0], alone[1], alone[1]]
    assert both.usage is not None
    assert both.usage.prompt_tokens == sum(count(served, prompt) for prompt in prompts)
    assert both.usage.completion_tokens == sum(count(served, c.text) for c in both.choices) == 48


def test_completions_streamed_async(server: ServerThread, client: openai.OpenAI) -> None:
    asked: dict[str, Any] = {"model": MODEL, "prompt": SENTENCE, "temperature": 0, "max_tokens": 20}
    text = client.completions.create(**asked).choices[0].text

    async def streamed() -> list[Any]:
        async with async_client(server) as aclient:
            stream = await aclient.completions.create(**asked, stream=True)
            return [chunk async for chunk in stream]

    chunks = asyncio.run(streamed())
    assert "".join(chunk.choices[0].text for chunk in chunks) == text
    assert chunks[-1].choices[0].finish_reason == "length"
    assert all(chunk.object == "text_completion" for chunk in chunks)


def test_n_choices_sample_with_seed_plus_their_index(client: openai.OpenAI) -> None:
    """Choice i of a seeded request samples with seed + i: it is choice 0 of the request with that seed."""
    asked: dict[str, Any] = {"model": MODEL, "prompt": "A", "temperature": 1.0, "max_tokens": 24}
    three = [choice.text for choice in client.completions.create(**asked, n=3, seed=7).choices]
    assert three == [client.completions.create(**asked, seed=7 + i).choices[0].text for i in range(3)]
    assert len(set(three)) > 1  # sampled, not greedy
    again = [choice.text for choice in client.completions.create(**asked, n=3, seed=7).choices]
    assert again == three


def test_stop_sequences_end_the_text_before_them(client: openai.OpenAI) -> None:
    """Stops are honoured across token boundaries (every token is one byte here) and left out."""
    asked: dict[str, Any] = {"model": MODEL, "prompt": SENTENCE, "temperature": 0, "max_tokens": 60}
    full = client.completions.create(**asked).choices[0].text
    stop = full[20:26]
    expected = full[: full.index(stop)]
    whole = client.completions.create(**asked, stop=[stop, "no such text"]).choices[0]
    assert (whole.text, whole.finish_reason) == (expected, "stop")
    chunks = list(client.completions.create(**asked, stop=stop, stream=True))
    assert "".join(chunk.choices[0].text for chunk in chunks) == expected
    assert chunks[-1].choices[0].finish_reason == "stop"
    chat = client.chat.completions.create(model=MODEL, messages=QUESTION, temperature=0, stop="batch")
    assert "batch" not in (chat.choices[0].message.content or "")
    assert chat.choices[0].finish_reason == "stop"


# --- embeddings -----------------------------------------------------------------------------------


def test_embeddings_float_and_base64(client: openai.OpenAI, http: httpx.Client, served: OpenAIModel) -> None:
    texts = ["a model server", "continuous batching"]
    floats = client.embeddings.create(model=MODEL, input=texts, encoding_format="float")
    encoded = client.embeddings.create(model=MODEL, input=texts)  # the client asks for base64, decodes it
    assert [d.index for d in floats.data] == [0, 1]
    vectors = np.array([d.embedding for d in floats.data], dtype=np.float32)
    assert vectors.shape == (2, 128) and np.isfinite(vectors).all()
    assert not np.allclose(vectors[0], vectors[1])
    np.testing.assert_array_equal(np.array([d.embedding for d in encoded.data], dtype=np.float32), vectors)
    assert floats.usage.prompt_tokens == floats.usage.total_tokens == sum(count(served, t) for t in texts)
    one = {"model": MODEL, "input": "a model server", "encoding_format": "base64"}
    raw = http.post("/v1/embeddings", json=one)
    vector = np.frombuffer(base64.b64decode(raw.json()["data"][0]["embedding"]), dtype="<f4")
    np.testing.assert_array_equal(vector, vectors[0])


# --- the wire -------------------------------------------------------------------------------------


def test_a_stream_is_server_sent_events_ending_with_done(http: httpx.Client, recorder: Recorder) -> None:
    body = {"model": MODEL, "prompt": SENTENCE, "max_tokens": 8, "temperature": 0, "stream": True}
    with http.stream("POST", "/v1/completions", json=body, headers={"X-Request-Id": "sse-1"}) as reply:
        assert reply.status_code == 200
        assert reply.headers["content-type"].startswith("text/event-stream")
        assert reply.headers["x-request-id"] == "sse-1"
        raw = reply.read()
    events = raw.split(b"\n\n")
    assert events[-2:] == [b"data: [DONE]", b""]
    documents = [orjson.loads(event.removeprefix(b"data: ")) for event in events[:-2]]
    assert "".join(document["choices"][0]["text"] for document in documents)
    assert documents[-1]["choices"][0]["finish_reason"] == "length"
    record = recorder.record("sse-1")
    assert (record.protocol, record.model, record.status) == (OPENAI_HTTP, "tiny-gpt-1", 200)
    assert record.route == "POST /v1/completions"


@pytest.mark.parametrize(
    ("body", "status", "param", "code"),
    [
        ({"model": "nope", "prompt": "x"}, 404, None, "model_not_found"),
        ({"model": MODEL, "prompt": "x", "temperature": 5}, 400, "temperature", "invalid_value"),
        ({"model": MODEL, "prompt": "x", "max_tokens": 5000}, 400, "max_tokens", "invalid_value"),
        ({"model": MODEL, "prompt": "x", "stop": ["s" * 300]}, 400, "stop", "invalid_value"),
        ({"model": MODEL, "prompt": "x", "logprobs": 2}, 400, "logprobs", "unsupported_parameter"),
        ({"model": MODEL, "prompt": "x", "stream": True, "n": 0}, 400, "n", "invalid_value"),
        ({"model": MODEL, "prompt": "x", "temprature": 1}, 400, "temprature", "unknown_parameter"),
        ({"prompt": "x"}, 400, "model", "missing_required_parameter"),
    ],
)
def test_completion_errors_in_openais_shape(
    http: httpx.Client, body: dict[str, Any], status: int, param: str | None, code: str
) -> None:
    reply = http.post("/v1/completions", json=body)
    assert reply.status_code == status
    error = error_of(reply)
    assert (error["param"], error["code"]) == (param, code)
    assert error["type"] == ("not_found_error" if status == 404 else "invalid_request_error")


def test_chat_errors_name_the_parameter(client: openai.OpenAI, http: httpx.Client) -> None:
    tool = {"type": "function", "function": {"name": "f", "parameters": {}}}
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model=MODEL, messages=QUESTION, tools=[tool])
    assert refused.value.param == "tools" and refused.value.code == "unsupported_parameter"
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model=MODEL, messages=[{"role": "tool", "content": "x"}])
    assert refused.value.param == "messages[0].role"
    with pytest.raises(openai.NotFoundError) as missing:
        client.chat.completions.create(model="gpt-4o", messages=QUESTION, stream=True)
    assert missing.value.code == "model_not_found"
    malformed = http.post("/v1/chat/completions", content=b'{"model": "tiny-gpt", "messages": [', headers={})
    assert malformed.status_code == 400 and error_of(malformed)["code"] == "invalid_json"


def test_methods_the_routes_take(http: httpx.Client) -> None:
    refused = http.get("/v1/chat/completions")
    assert refused.status_code == 405 and refused.headers["allow"] == "POST, OPTIONS"
    assert error_of(refused)["type"] == "invalid_request_error"
    head = http.head("/v1/models")
    assert head.status_code == 200 and head.content == b""
    assert http.options("/v1/models/tiny-gpt").headers["allow"] == "GET, HEAD, OPTIONS"


def test_a_body_over_the_limit_is_413(http: httpx.Client) -> None:
    big = orjson.dumps({"model": MODEL, "prompt": "x" * BODY_LIMIT})
    reply = http.post("/v1/completions", content=big)
    assert reply.status_code == 413
    error = error_of(reply)
    assert (error["type"], error["code"]) == ("invalid_request_error", "request_too_large")


# --- generation and its clients -------------------------------------------------------------------


def settled_steps(served: OpenAIModel) -> int:
    """The model's step count once it stopped growing (3 reads 0.1 s apart the same)."""
    model: Any = served.generator.model
    seen = [model.steps]
    while len(seen) < 3 or len(set(seen[-3:])) != 1:
        time.sleep(0.1)
        seen.append(model.steps)
        assert len(seen) < 300, "the model never stopped"
    return int(seen[-1])


LONG_RUN: dict[str, Any] = {"model": MODEL, "prompt": SENTENCE, "temperature": 0, "max_tokens": 1000}


@pytest.fixture(scope="module")
def long_run_steps(server: ServerThread, served: OpenAIModel) -> int:
    """The model steps LONG_RUN takes when its client stays to the end."""
    before = settled_steps(served)
    with openai.OpenAI(base_url=server.http_url + "/v1", api_key="unused", max_retries=0) as client:
        full = client.completions.create(**LONG_RUN)
    steps = settled_steps(served) - before
    assert full.usage is not None and full.usage.completion_tokens > 150 and steps > 150
    return steps


def test_a_client_that_leaves_a_stream_stops_its_generation(
    client: openai.OpenAI, served: OpenAIModel, recorder: Recorder, long_run_steps: int
) -> None:
    before = settled_steps(served)
    stream = client.completions.create(**LONG_RUN, stream=True, extra_headers={"X-Request-Id": "leaves"})
    next(iter(stream))
    stream.close()
    assert settled_steps(served) - before < long_run_steps // 2  # it stopped long before its end
    assert recorder.record("leaves").status == 499


def test_a_client_that_leaves_before_its_answer_stops_its_generation(
    server: ServerThread, served: OpenAIModel, recorder: Recorder, long_run_steps: int
) -> None:
    model: Any = served.generator.model
    before = settled_steps(served)
    body = orjson.dumps(LONG_RUN)
    head = (
        "POST /v1/completions HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nX-Request-Id: leaves-early\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", server.server.http_port)) as sock:
        sock.sendall(head.encode() + body)
        wait_for(lambda: model.steps > before)  # generating: now leave
    assert settled_steps(served) - before < long_run_steps // 2
    assert recorder.record("leaves-early").status == 499


def test_an_error_after_the_stream_began_is_its_last_event(
    server: ServerThread, client: openai.OpenAI, http: httpx.Client
) -> None:
    """The server aborts what runs (the end of a drain) while a stream is under way: the error comes as
    an event in OpenAI's shape, and the stream ends without [DONE]; the official client raises it."""

    def abort_soon() -> None:
        server.loop.call_soon_threadsafe(server.server.executor.abort, "the server is going away")

    with http.stream("POST", "/v1/completions", json={**LONG_RUN, "stream": True}) as reply:
        pieces = reply.iter_bytes()
        assert next(pieces).startswith(b"data: {")
        abort_soon()
        rest = b"".join(pieces)
    last = rest.split(b"\n\n")[-2]
    assert b"[DONE]" not in rest and last.startswith(b"data: ")
    error = orjson.loads(last.removeprefix(b"data: "))["error"]
    assert (error["type"], error["code"]) == ("server_error", "model_not_ready")
    assert error["message"].startswith("the server is going away [request_id=")
    stream = client.chat.completions.create(model=MODEL, messages=QUESTION, temperature=0, stream=True)
    next(iter(stream))
    abort_soon()
    with pytest.raises(openai.APIError, match="the server is going away"):
        list(stream)
    after = client.completions.create(model=MODEL, prompt="The", max_tokens=4)
    assert after.choices[0].finish_reason == "length"  # served as before


def test_a_timeout_ends_generation_with_length(client: openai.OpenAI, long_run_steps: int) -> None:
    """The request's timeout (Grps-Timeout-Us) runs out while its 8 sequences generate (LONG_RUN takes
    ~240 steps): each ends there, with finish_reason length."""
    answer = client.completions.create(**LONG_RUN, n=8, extra_headers={"Grps-Timeout-Us": "100000"})
    assert [choice.finish_reason for choice in answer.choices] == ["length"] * 8
    assert answer.usage is not None and answer.usage.completion_tokens < 8 * long_run_steps


def test_concurrent_requests_each_get_their_own_text(server: ServerThread) -> None:
    """Ten requests batched together (chat and completions, streamed and not, greedy and seeded) answer
    exactly what each answers alone."""
    prompts = [SENTENCE, "The", "A", "Batching makes a server fast.", "xyz"]
    questions = ["What is continuous batching?", "What is the decode?", "How fast is the server?"]
    requests: list[tuple[str, dict[str, Any]]] = []
    for i, prompt in enumerate(prompts):
        requests.append(("completion", {"prompt": prompt, "temperature": 0, "max_tokens": 16 + 4 * i}))
    for i, question in enumerate(questions):
        messages = [{"role": "user", "content": question}]
        requests.append(("chat", {"messages": messages, "temperature": 0, "max_tokens": 20 + 4 * i}))
    requests.append(("completion", {"prompt": "The", "temperature": 1.0, "seed": 3, "max_tokens": 24}))
    requests.append(("chat", {"messages": [{"role": "user", "content": "hi"}], "seed": 9, "max_tokens": 24}))

    async def one(aclient: openai.AsyncOpenAI, kind: str, asked: dict[str, Any], stream: bool) -> str:
        if kind == "chat":
            if stream:
                chunks = await aclient.chat.completions.create(model=MODEL, stream=True, **asked)
                return "".join([c.choices[0].delta.content or "" async for c in chunks])
            answer = await aclient.chat.completions.create(model=MODEL, **asked)
            return answer.choices[0].message.content or ""
        if stream:
            pieces = await aclient.completions.create(model=MODEL, stream=True, **asked)
            return "".join([c.choices[0].text async for c in pieces])
        return (await aclient.completions.create(model=MODEL, **asked)).choices[0].text

    async def run() -> tuple[list[str], list[str]]:
        async with async_client(server) as aclient:
            alone = [await one(aclient, kind, asked, False) for kind, asked in requests]
            together = await asyncio.gather(
                *(one(aclient, kind, asked, i % 2 == 0) for i, (kind, asked) in enumerate(requests))
            )
            return alone, list(together)

    alone, together = asyncio.run(run())
    assert len(set(alone)) == len(alone)  # different prompts, different texts
    assert together == alone


# --- the prefix -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def prefixed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    root: Path = tmp_path_factory.mktemp("openai-prefixed")
    (root / "server.yml").write_text(PREFIXED_SERVER_YML)
    (root / "inference.yml").write_text(PREFIXED_INFERENCE_YML)
    running = start_project(TINY_GPT, inference_conf=root / "inference.yml", server_conf=root / "server.yml")
    yield running
    running.stop()


def test_the_routes_under_a_prefix(prefixed: ServerThread) -> None:
    base = prefixed.http_url + "/openai/v1"
    with openai.OpenAI(base_url=base, api_key="unused", max_retries=0) as client:
        assert [model.id for model in client.models.list()] == ["tiny-prefixed"]
        answer = client.completions.create(model="tiny-prefixed", prompt=SENTENCE, temperature=0)
        assert answer.usage is not None and answer.usage.completion_tokens == 16  # the model's max_tokens
        with pytest.raises(openai.BadRequestError) as refused:
            client.embeddings.create(model="tiny-prefixed", input="x")
        assert refused.value.param == "model" and "/v1/embeddings" in str(refused.value.message)
    with httpx.Client(base_url=prefixed.http_url) as http:
        assert http.get("/v1/models").status_code == 404
        reply = http.post(
            "/openai/v1/completions", json={"model": "tiny-prefixed", "prompt": "x", "max_tokens": 65}
        )
        assert reply.status_code == 400 and error_of(reply)["param"] == "max_tokens"

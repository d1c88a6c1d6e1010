"""examples/: each project served in-process on free ports, called through GrpsClient over HTTP and
gRPC, and its client.py run against it as a user would run it."""

from __future__ import annotations

import importlib.util
import json
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import numpy as np
import pytest
import tritonclient.grpc as triton
import tritonclient.http as triton_http
import yaml
from tritonclient.utils import InferenceServerException

from grps_py import inferer_register
from grps_py.client import GrpsClient, GrpsClientError
from support import ServerThread, start_project

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
NAMES = (
    "custom_model",
    "torch_batching",
    "onnx_model",
    "streaming",
    "custom_http_sse",
    "dag_graph",
    "sequence_accumulator",
    "tiny_gpt",
    "tensorflow_model",
    "tensorrt",
)


def load_script(path: Path, name: str) -> ModuleType:
    """A script as a module (`name`), for the numpy references that check the served answers."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


MODELS = load_script(ROOT / "scripts" / "make_example_models.py", "make_example_models")


class Examples:
    """Serves each example once, on first use, with its own server.yml but on 127.0.0.1:0,0."""

    def __init__(self, conf_dir: Path) -> None:
        self.conf_dir = conf_dir
        self.servers: dict[str, ServerThread] = {}

    def get(self, name: str) -> ServerThread:
        if name not in self.servers:
            root = EXAMPLES / name
            conf = yaml.safe_load((root / "conf" / "server.yml").read_text())
            conf["interface"] = {**conf["interface"], "host": "127.0.0.1", "port": "0,0"}
            path = self.conf_dir / f"{name}_server.yml"
            path.write_text(yaml.safe_dump(conf))
            self.servers[name] = start_project(root, server_conf=path)
        return self.servers[name]

    def stop(self) -> None:
        for server in self.servers.values():
            server.stop()


@pytest.fixture(scope="module")
def examples(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Examples]:
    served = Examples(tmp_path_factory.mktemp("examples_conf"))
    yield served
    served.stop()


@pytest.fixture(params=["http", "grpc"])
def protocol(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def connect(server: ServerThread, protocol: str) -> GrpsClient:
    port = server.server.http_port if protocol == "http" else server.server.grpc_port
    return GrpsClient(f"127.0.0.1:{port}", protocol=protocol, timeout=30.0)


def run_client(server: ServerThread, name: str, *extra: str) -> str:
    """Run examples/NAME/client.py against the served example; it must exit 0. Returns its output."""
    command = [
        sys.executable,
        str(EXAMPLES / name / "client.py"),
        "--url",
        f"127.0.0.1:{server.server.http_port}",
        "--grpc",
        f"127.0.0.1:{server.server.grpc_port}",
        *extra,
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=90, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def test_every_example_is_a_complete_project() -> None:
    for name in NAMES:
        root = EXAMPLES / name
        for part in ("conf/server.yml", "conf/inference.yml", "client.py", "README.md"):
            assert (root / part).is_file(), f"{name}: {part} is missing"
        assert f"grps-py serve examples/{name}" in (root / "README.md").read_text()
        assert f"({name}/)" in (EXAMPLES / "README.md").read_text()


def test_every_src_module_has_a_unique_name() -> None:
    """The server imports src/*.py by file stem into one process: two equal stems would collide."""
    stems = [p.stem for p in EXAMPLES.glob("*/src/*.py")]
    stems += [p.stem for p in (ROOT / "tests" / "projects").glob("*/src/*.py")]
    assert len(stems) == len(set(stems)), sorted(stems)


# --- the model files ------------------------------------------------------------------------------


def test_the_model_script_writes_the_committed_bytes(tmp_path: Path) -> None:
    written = MODELS.make_models(tmp_path)
    for path in written:
        committed = EXAMPLES / path.relative_to(tmp_path)
        assert path.read_bytes() == committed.read_bytes(), f"{committed} is stale: run the script"
        assert committed.stat().st_size < 64 * 1024


# --- custom_model ---------------------------------------------------------------------------------


def test_custom_model_scores_texts(examples: Examples, protocol: str) -> None:
    with connect(examples.get("custom_model"), protocol) as client:
        assert client.predict("fast delivery, great screen").startswith("positive (+")
        reviews = ["I love it", "awful and broken", "It is not bad", "It arrived on Tuesday"]
        answer = client.predict({"text": np.array(reviews)}, model="sentiment-1.0.0")
        assert [text(v) for v in answer["label"]] == ["positive", "negative", "positive", "neutral"]
        np.testing.assert_allclose(answer["score"], [2 / 3**0.5, -3.5 / 3**0.5, 0.5, 0.0], rtol=1e-6)
        with pytest.raises(GrpsClientError) as refused:
            client.predict(np.array([1.0], dtype=np.float32))
        assert refused.value.status == 400 and "text" in refused.value.message


def test_custom_model_client(examples: Examples) -> None:
    out = run_client(examples.get("custom_model"), "custom_model")
    assert out.count("-> positive (+1.59)") == 2 and out.count("-> negative -1.06") == 2
    assert out.count("error 400 INVALID_ARGUMENT") == 2


# --- torch_batching -------------------------------------------------------------------------------


def scheduler(client: GrpsClient) -> dict[str, Any]:
    return client.model_metadata("regressor-1")["scheduler"]  # type: ignore[no-any-return]


def test_torch_batching_answers_the_torchscript_model(examples: Examples, protocol: str) -> None:
    x = np.random.default_rng(1).normal(size=(3, 8)).astype(np.float32)
    with connect(examples.get("torch_batching"), protocol) as client:
        y = client.predict({"x": x}, model="regressor-1")["y"]
        np.testing.assert_allclose(y, MODELS.regressor_reference(x), rtol=1e-4, atol=1e-5)
        with pytest.raises(GrpsClientError) as refused:
            client.predict({"x": np.zeros((17, 8), dtype=np.float32)}, model="regressor-1")
        assert refused.value.status == 400


def test_torch_batching_merges_concurrent_requests(examples: Examples, protocol: str) -> None:
    server = examples.get("torch_batching")
    rows = np.random.default_rng(2).normal(size=(32, 1, 8)).astype(np.float32)
    answers: list[Any] = [None] * len(rows)
    clients = [connect(server, protocol) for _ in range(8)]
    start = threading.Barrier(len(clients))

    def send(k: int) -> None:
        start.wait()  # all at once, so requests meet in the batcher's 10 ms window
        for i in range(k, len(rows), len(clients)):
            answers[i] = clients[k].predict({"x": rows[i]}, model="regressor-1")["y"]

    before = scheduler(clients[0])
    threads = [threading.Thread(target=send, args=(k,)) for k in range(len(clients))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    after = scheduler(clients[0])
    for client in clients:
        client.close()
    for row, answer in zip(rows, answers, strict=True):
        assert answer is not None, "a request failed"
        np.testing.assert_allclose(answer, MODELS.regressor_reference(row), rtol=1e-4, atol=1e-5)
    assert after["rows_run"] - before["rows_run"] == len(rows)
    assert after["batches_run"] - before["batches_run"] < len(rows), "no request was batched with another"
    assert 1 < after["recent_batch_rows"]["max"] <= 16


def test_torch_batching_client(examples: Examples) -> None:
    server = examples.get("torch_batching")
    out = run_client(server, "torch_batching", "--requests", "32", "--concurrency", "8")
    assert out.count("one request of 3 rows -> y of shape (3, 2)") == 2
    assert out.count("32 concurrent one-row requests ran as") == 2


# --- onnx_model -----------------------------------------------------------------------------------


def test_onnx_model_classifies(examples: Examples, protocol: str) -> None:
    features = np.random.default_rng(3).normal(size=(4, 6)).astype(np.float32)
    probs, label = MODELS.weather_reference(features)
    with connect(examples.get("onnx_model"), protocol) as client:
        answer = client.predict({"features": features}, model="weather-1")
    np.testing.assert_allclose(answer["probs"], probs, rtol=1e-4, atol=1e-6)
    np.testing.assert_array_equal(answer["label"], label)
    classes = ["sunny", "cloudy", "rainy"]
    assert [text(v) for v in answer["class_name"]] == [classes[i] for i in label]


def test_onnx_model_client(examples: Examples) -> None:
    out = run_client(examples.get("onnx_model"), "onnx_model")
    assert out.count("-> rainy (label 2, probs 0.204 0.334 0.462)") == 2
    assert out.count("-> cloudy (label 1, probs 0.089 0.573 0.338)") == 2


# --- streaming ------------------------------------------------------------------------------------


def generations() -> Any:
    return sys.modules["streaming_generator"].GENERATIONS  # the example's src/, imported by the server


def generation(prompt: str) -> dict[str, Any]:
    found = [g for g in list(generations()) if g["prompt"] == prompt[:40]]
    assert len(found) == 1, found
    return found[0]  # type: ignore[no-any-return]


def wait_until_stopped(prompt: str) -> dict[str, Any]:
    """The generation's record once the model noticed the client left (or gave up on it)."""
    deadline = time.monotonic() + 15
    while generation(prompt)["stopped"] != "client left" and time.monotonic() < deadline:
        time.sleep(0.05)
    return generation(prompt)


def test_streaming_over_the_grps_api(examples: Examples, protocol: str) -> None:
    prompt = f"tokens one by one over {protocol}"
    with connect(examples.get("streaming"), protocol) as client:
        assert list(client.predict_stream(prompt, model="generator-1")) == prompt.split()
        assert client.predict(prompt, model="generator-1") == prompt
    assert generation(prompt) | {"request_id": ""} == {
        "request_id": "",
        "prompt": prompt,
        "planned": 6,
        "sent": 6,
        "stopped": "done",
    }


def oip_words(words: str) -> Any:
    item = triton.InferInput("text_input", [1], "BYTES")
    item.set_data_from_numpy(np.array([words.encode()], dtype=object))
    return item


def test_streaming_over_model_stream_infer(examples: Examples) -> None:
    prompt = "tokens one by one over ModelStreamInfer"
    client = triton.InferenceServerClient(examples.get("streaming").grpc_target)
    got: queue.Queue[Any] = queue.Queue()
    client.start_stream(callback=lambda result, error: got.put((result, error)))
    try:
        client.async_stream_infer("generator", [oip_words(prompt)], enable_empty_final_response=True)
        tokens = []
        while True:
            result, error = got.get(timeout=20)
            assert error is None, error
            output = result.as_numpy("text_output")
            if output is not None:
                tokens.append(output.reshape(-1)[0].decode())
            if result.get_response().parameters["triton_final_response"].bool_param:
                break
    finally:
        client.stop_stream()
        client.close()
    assert tokens == prompt.split()


def long_prompt(tag: str) -> str:
    return " ".join([tag, *(f"t{i}" for i in range(199))])  # 200 tokens: 10 s at 0.05 s each


def test_streaming_stops_when_a_grps_client_leaves(examples: Examples, protocol: str) -> None:
    prompt = long_prompt(f"leave-{protocol}")
    with connect(examples.get("streaming"), protocol) as client:
        stream = client.predict_stream(prompt, model="generator-1")
        assert next(stream) == f"leave-{protocol}"
        stream.close()  # a generator: closing it ends the call at once
    record = wait_until_stopped(prompt)
    assert record["stopped"] == "client left" and record["sent"] < 100, record


def test_streaming_stops_when_the_model_stream_infer_stream_closes(examples: Examples) -> None:
    prompt = long_prompt("leave-oip")
    client = triton.InferenceServerClient(examples.get("streaming").grpc_target)
    got: queue.Queue[Any] = queue.Queue()
    client.start_stream(callback=lambda result, error: got.put((result, error)))
    try:
        client.async_stream_infer("generator", [oip_words(prompt)])
        got.get(timeout=20)
    finally:
        client.stop_stream(cancel_requests=True)
        client.close()
    record = wait_until_stopped(prompt)
    assert record["stopped"] == "client left" and record["sent"] < 100, record


def test_streaming_client(examples: Examples) -> None:
    out = run_client(examples.get("streaming"), "streaming")
    answer = "streaming answers arrive one token at a time as the model makes them"
    for label in ("grps http", "grps grpc", "oip ModelStreamInfer"):
        assert any(line.startswith(label) and line.endswith(answer) for line in out.splitlines()), out
    assert f"unary: {answer!r}" in out
    assert "left early after ['token0', 'token1', 'token2']" in out


# --- custom_http_sse ------------------------------------------------------------------------------


def chat_url(server: ServerThread) -> str:
    return f"{server.http_url}/v1/chat/completions"


def test_chat_route_streams_server_sent_events(examples: Examples) -> None:
    body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hello there"}]}
    with httpx.stream("POST", chat_url(examples.get("custom_http_sse")), json=body, timeout=30) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in response.iter_lines() if line]
    assert all(line.startswith("data: ") for line in lines) and lines[-1] == "data: [DONE]"
    chunks = [json.loads(line[len("data: ") :]) for line in lines[:-1]]
    assert {(c["object"], c["model"]) for c in chunks} == {("chat.completion.chunk", "m")}
    deltas = [c["choices"][0]["delta"] for c in chunks]
    assert deltas[0] == {"role": "assistant", "content": ""} and deltas[-1] == {}
    assert "".join(d.get("content", "") for d in deltas) == "You said: hello there"
    assert [c["choices"][0]["finish_reason"] for c in chunks][-2:] == [None, "stop"]


def test_chat_route_answers_json_and_refuses_bad_bodies(examples: Examples) -> None:
    url = chat_url(examples.get("custom_http_sse"))
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "a b c"}]
    body = {"messages": messages, "max_tokens": 3}
    answer = httpx.post(url, json=body, timeout=30).json()
    assert answer["object"] == "chat.completion"
    assert answer["choices"][0]["message"] == {"role": "assistant", "content": "You said: a"}
    assert answer["choices"][0]["finish_reason"] == "length"
    assert answer["usage"] == {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6}
    refused = httpx.post(url, json={"messages": [], "stream": True}, timeout=30)
    assert refused.status_code == 400 and "messages" in refused.text


def test_chat_model_answers_the_grps_api(examples: Examples, protocol: str) -> None:
    with connect(examples.get("custom_http_sse"), protocol) as client:
        assert client.predict("hi there", model="chat-1") == "You said: hi there"
        assert list(client.predict_stream("hi", model="chat-1")) == ["You", " said:", " hi"]


def test_chat_alias_route_is_the_grps_api(examples: Examples) -> None:
    url = f"{examples.get('custom_http_sse').http_url}/chat?streaming=true"
    lines = httpx.post(url, json={"str_data": "hi"}, timeout=30).text.splitlines()
    assert [json.loads(line)["str_data"] for line in lines] == ["You", " said:", " hi"]


def test_custom_http_sse_client(examples: Examples) -> None:
    out = run_client(examples.get("custom_http_sse"), "custom_http_sse")
    question = "what does streaming with server-sent events look like"
    assert f"You said: {question}  [finish_reason=stop]" in out
    assert "'You said: what does' [length]" in out
    for protocol in ("http", "grpc"):
        assert f"grps {protocol} 127.0.0.1:" in out
        assert f"streamed: ['You', ' said:', ' streamed', ' over', ' {protocol}']" in out
    assert out.count(f"'You said: {question}'") == 2


# --- dag_graph ------------------------------------------------------------------------------------


def test_dag_graph_answers(examples: Examples, protocol: str) -> None:
    readings = np.array([[1.0, 2.0, 3.0, 4.5], [0.0, 0.0, 80.0, 0.0]], dtype=np.float32)
    with connect(examples.get("dag_graph"), protocol) as client:
        answer = client.predict({"readings": readings})  # the default DAG
    clean = np.clip(readings.astype(np.float64), -50, 50)
    slope = [np.polyfit(np.arange(4), row, 1)[0] for row in clean]
    peak_z = np.abs(clean - clean.mean(axis=1, keepdims=True)).max(axis=1) / clean.std(axis=1)
    np.testing.assert_allclose(answer["slope"], slope, rtol=1e-5)
    np.testing.assert_allclose(answer["peak_z"], peak_z, rtol=1e-5)
    assert answer["alert"].tolist() == [1, 1]  # steep rise; a clipped spike


def test_dag_graph_branches_run_in_parallel(examples: Examples) -> None:
    server = examples.get("dag_graph")
    timeline = sys.modules["dag_graph_models"].TIMELINE
    timeline.clear()
    with connect(server, "http") as client:
        client.predict({"readings": np.zeros((1, 5), dtype=np.float32)}, model="sensor_pipeline")
    runs = {node: (thread, start, end) for node, _, thread, start, end in list(timeline)}
    assert sorted(runs) == ["merge", "peaks", "prep", "trend"]
    trend_thread, trend_start, trend_end = runs["trend"]
    peaks_thread, peaks_start, peaks_end = runs["peaks"]
    assert trend_thread != peaks_thread
    assert max(trend_start, peaks_start) < min(trend_end, peaks_end), "the branches did not overlap"
    assert runs["prep"][2] <= min(trend_start, peaks_start)
    assert runs["merge"][1] >= max(trend_end, peaks_end)


def test_dag_graph_client(examples: Examples) -> None:
    out = run_client(examples.get("dag_graph"), "dag_graph")
    assert out.count("rising  slope +1.51/sample  peak 1.5 sd  alert=yes") == 2
    assert out.count("steady  slope -0.03/sample  peak 1.7 sd  alert=no") == 2


# --- sequence_accumulator -------------------------------------------------------------------------


def oip_client(server: ServerThread, protocol: str) -> Any:
    if protocol == "http":
        return triton_http.InferenceServerClient(server.http_url.removeprefix("http://"))
    return triton.InferenceServerClient(server.grpc_target)


def accumulate(client: Any, protocol: str, sequence_id: int, value: int, **flags: bool) -> int:
    """One request of a sequence: the model's running sum after `value`."""
    item = (triton_http if protocol == "http" else triton).InferInput("INPUT", [1, 1], "INT32")
    item.set_data_from_numpy(np.array([[value]], dtype=np.int32))
    result = client.infer("accumulator", [item], sequence_id=sequence_id, **flags)
    return int(result.as_numpy("OUTPUT").reshape(-1)[0])


def run_sequence(server: ServerThread, protocol: str, sequence_id: int, values: list[int]) -> list[int]:
    client = oip_client(server, protocol)  # its own: tritonclient's HTTP client stays in its thread
    try:
        last = len(values) - 1
        return [
            accumulate(client, protocol, sequence_id, v, sequence_start=i == 0, sequence_end=i == last)
            for i, v in enumerate(values)
        ]
    finally:
        client.close()


def test_sequence_accumulator_keeps_a_sum_per_sequence(examples: Examples, protocol: str) -> None:
    server = examples.get("sequence_accumulator")
    base = 7100 if protocol == "http" else 7200
    values = {base + n: [n * 10 + i for i in range(5)] for n in range(6)}
    results: dict[int, Any] = {}

    def run(sequence_id: int) -> None:
        try:
            results[sequence_id] = run_sequence(server, protocol, sequence_id, values[sequence_id])
        except Exception as exc:  # the assertion below shows it
            results[sequence_id] = exc

    threads = [threading.Thread(target=run, args=(sid,)) for sid in values]  # interleaved, at once
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    for sid, vals in values.items():
        assert results[sid] == list(np.cumsum(vals)), sid
    served: Any = inferer_register.get("sequence_accumulator")
    assert not set(values) & set(served.sums), "END did not drop the sequences' state"


def test_sequence_accumulator_restarts_and_refuses_ended_sequences(examples: Examples, protocol: str) -> None:
    client = oip_client(examples.get("sequence_accumulator"), protocol)
    sid = 7300 if protocol == "http" else 7400
    try:
        assert accumulate(client, protocol, sid, 5, sequence_start=True) == 5
        assert accumulate(client, protocol, sid, 2) == 7
        assert accumulate(client, protocol, sid, 1, sequence_start=True) == 1  # START resets the sum
        assert accumulate(client, protocol, sid, 3, sequence_end=True) == 4
        with pytest.raises(InferenceServerException) as refused:
            accumulate(client, protocol, sid, 1)
        assert refused.value.status() in ("400", "StatusCode.INVALID_ARGUMENT")
        assert "must specify 'sequence_start'" in refused.value.message()
    finally:
        client.close()


def test_sequence_accumulator_is_refused_by_the_grps_api(examples: Examples, protocol: str) -> None:
    """The grps API carries no sequence parameters: a sequence model answers 400 there."""
    with (
        connect(examples.get("sequence_accumulator"), protocol) as client,
        pytest.raises(GrpsClientError) as refused,
    ):
        client.predict({"INPUT": np.array([[1]], dtype=np.int32)}, model="accumulator-1")
    assert refused.value.status == 400 and "sequence_id" in refused.value.message


def test_sequence_accumulator_forgets_quiet_sequences(examples: Examples) -> None:
    """A sequence the server ended as idle never sends END: the model drops its sum after a while."""
    examples.get("sequence_accumulator")  # the server imports the example's src/
    model = sys.modules["sequence_accumulator"].RunningAccumulator()
    model.init(None, "cpu", {"forget_after_s": 1.0})

    def step(corrid: int, value: int, start: int = 0, end: int = 0) -> int:
        one = {"INPUT": value, "START": start, "END": end, "READY": 1, "CORRID": corrid}
        inp = {
            name: np.array([[v]], dtype=np.uint64 if name == "CORRID" else np.int32)
            for name, v in one.items()
        }
        return int(model.infer(inp, None)["OUTPUT"][0, 0])

    assert step(1, 4, start=1) == 4
    time.sleep(1.05)
    assert step(2, 1, start=1) == 1
    time.sleep(0.1)  # 1 is quiet for over 1.15 s; 2 for 0.1 s (a late wake-up has 0.9 s to spare)
    assert step(2, 1) == 2 and list(model.sums) == [2]  # 1 went quiet: forgotten; 2 was not yet
    assert step(2, 1, end=1) == 3 and not model.sums  # END drops it


def test_sequence_accumulator_client(examples: Examples) -> None:
    out = run_client(examples.get("sequence_accumulator"), "sequence_accumulator")
    assert out.count("inputs [1, 2, 3, 4] -> running sums [1, 3, 6, 10]") == 2
    assert out.count("inputs [100, -50, 25, 5] -> running sums [100, 50, 75, 80]") == 2
    assert "sequence 101 after its end: error 400: " in out
    assert "(one ModelStreamInfer stream, interleaved):" in out


# --- tiny_gpt -------------------------------------------------------------------------------------


def test_tiny_gpt_client(examples: Examples) -> None:
    out = run_client(examples.get("tiny_gpt"), "tiny_gpt")
    assert "models: ['tiny-gpt']" in out
    assert "chat (streamed) 'What is continuous batching?' -> Continuous batching lets sequences join" in out
    assert "usage: " in out and "embeddings: 2 vectors of 128 floats" in out
    assert "oip generate_stream -> Continuous batching lets sequences join" in out
    assert "grps http PredictStreaming" in out and "grps grpc PredictStreaming" in out


# --- tensorflow_model -----------------------------------------------------------------------------


def tensorflow_reference() -> ModuleType:
    """examples/tensorflow_model/make_model.py as a module (it imports TensorFlow): its numpy reference."""
    pytest.importorskip("tensorflow")
    return load_script(EXAMPLES / "tensorflow_model" / "make_model.py", "tensorflow_make_model")


def test_tensorflow_model_answers_as_numpy(examples: Examples, protocol: str) -> None:
    reference = tensorflow_reference().reference
    x = np.random.default_rng(3).normal(loc=4.0, size=(5, 4)).astype(np.float32)
    with connect(examples.get("tensorflow_model"), protocol) as client:
        answer = client.predict({"features": x}, model="iris-1")
        np.testing.assert_allclose(answer["probabilities"], reference(x), rtol=1e-5, atol=1e-6)
        assert answer["label"].tolist() == reference(x).argmax(axis=1).tolist()
        greeted = client.predict({"name": np.array(["caf\u00e9"], dtype=object)}, model="greeter-1")
        assert text(greeted["greeting"][0]) == "hello, caf\u00e9!" and greeted["length"].tolist() == [4]
        with pytest.raises(GrpsClientError) as refused:
            client.predict({"features": np.zeros((2, 3), dtype=np.float32)}, model="iris-1")
        assert refused.value.status == 400 and "features" in refused.value.message


def test_tensorflow_model_client(examples: Examples) -> None:
    tensorflow_reference()
    out = run_client(examples.get("tensorflow_model"), "tensorflow_model")
    assert out.count("[5.1 3.5 1.4 0.2] -> setosa (probabilities 0.927 0.068 0.005)") == 2
    assert out.count("[7.7 3.0 6.1 2.3] -> virginica") == 2
    assert out.count("hello, TensorFlow! (10 characters)") == 2


# --- tensorrt (a CUDA GPU and the tensorrt package) -----------------------------------------------------


def tensorrt_ready() -> bool:
    import torch

    return importlib.util.find_spec("tensorrt") is not None and torch.cuda.is_available()


@pytest.mark.gpu
@pytest.mark.skipif(not tensorrt_ready(), reason="needs a CUDA GPU and the tensorrt package")
def test_tensorrt_client(examples: Examples) -> None:
    """The README's steps: build the plan on this GPU (models/ ignores it), serve, run the client."""
    script = EXAMPLES / "tensorrt" / "build_engine.py"
    build = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=600, cwd=ROOT
    )
    assert build.returncode == 0, build.stdout + build.stderr
    out = run_client(examples.get("tensorrt"), "tensorrt")
    gaps = [float(line.split()[-1]) for line in out.splitlines() if "difference from ONNX Runtime" in line]
    assert len(gaps) == 2 and max(gaps) < 1e-4, out
    assert out.count("64 rows -> error 400: the request has 64 rows; model 'mlp-1' takes at most 32") == 2

"""`inferer_type: generative` served for real: the tiny_gpt example over every protocol gives the same
tokens; its options are checked; a timeout, a disconnect and a full queue end sequences as documented;
and the configuration refuses what a generative model cannot do."""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import numpy as np
import pytest
import tritonclient.grpc as triton
import yaml

from grps_py.core.config import parse_inference_settings
from grps_py.core.errors import ConfigError
from grps_py.protos import grps_pb2, grps_pb2_grpc
from support import ServerThread, start_project, wait_for

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tiny_gpt"
PROMPT = "user: what is a KV cache?\nassistant:"
GREEDY = {"max_tokens": 24, "temperature": 0}


def serve(conf_dir: Path, inference_conf: Path | None = None) -> ServerThread:
    """The example with its own server.yml, on 127.0.0.1:0,0."""
    conf = yaml.safe_load((EXAMPLE / "conf" / "server.yml").read_text())
    conf["interface"] = {**conf["interface"], "host": "127.0.0.1", "port": "0,0"}
    path = conf_dir / "server.yml"
    path.write_text(yaml.safe_dump(conf))
    return start_project(EXAMPLE, inference_conf=inference_conf, server_conf=path)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    srv = serve(tmp_path_factory.mktemp("tiny_gpt_conf"))
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def http(server: ServerThread) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.http_url, timeout=60) as client:
        yield client


def tiny_gpt(server: ServerThread) -> Any:
    """The running TinyGpt object (its `steps` counter, its tokenizer)."""
    return server.server.executor.models.nodes["tiny-gpt-1"].instances[0].inferer.model


def oip_generate(http: httpx.Client, prompt: str = PROMPT, **parameters: Any) -> dict[str, Any]:
    reply = http.post("/v2/models/tiny-gpt/generate", json={"text_input": prompt, "parameters": parameters})
    assert reply.status_code == 200, reply.text
    return reply.json()  # type: ignore[no-any-return]


def sse_events(reply: httpx.Response) -> Iterator[dict[str, Any]]:
    for line in reply.iter_lines():
        if line.startswith("data: "):
            yield json.loads(line[6:])


def gmap_message(prompt: str, **options: Any) -> dict[str, Any]:
    ints = {k: v for k, v in options.items() if isinstance(v, int) and not isinstance(v, bool)}
    floats = {k: float(v) for k, v in options.items() if isinstance(v, float)}
    return {"s_s": {"prompt": prompt}, "s_i32": ints, "s_f": floats}


# -- the same tokens over every protocol ------------------------------------------------------------


def test_every_protocol_streams_the_same_greedy_tokens(server: ServerThread, http: httpx.Client) -> None:
    unary = oip_generate(http, **GREEDY)
    expected = unary["text_output"]
    assert len(unary["output_ids"]) == 24 and unary["finish_reason"] == "length"
    assert tiny_gpt(server).tokenizer.decode(unary["output_ids"]) == expected
    texts: dict[str, str] = {}

    body = {"text_input": PROMPT, "parameters": GREEDY}
    with http.stream("POST", "/v2/models/tiny-gpt/generate_stream", json=body) as reply:
        events = list(sse_events(reply))
    texts["oip generate_stream"] = "".join(e["text_output"] for e in events)
    assert events[-1]["finish_reason"] == "length" and all("finish_reason" not in e for e in events[:-1])

    answer = http.post(
        "/v2/models/tiny-gpt/infer",
        json={
            "inputs": [{"name": "text_input", "shape": [1], "datatype": "BYTES", "data": [PROMPT]}],
            "parameters": GREEDY,
        },
    ).json()
    texts["oip infer"] = next(o["data"][0] for o in answer["outputs"] if o["name"] == "text_output")

    results: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client = triton.InferenceServerClient(server.grpc_target)
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    try:
        text = triton.InferInput("text_input", [1], "BYTES")
        text.set_data_from_numpy(np.array([PROMPT.encode()], dtype=object))
        client.async_stream_infer("tiny-gpt", [text], parameters=GREEDY, enable_empty_final_response=True)
        pieces = []
        while True:
            result, error = results.get(timeout=60)
            assert error is None, error
            output = result.as_numpy("text_output")
            if output is not None:
                pieces.append(output.reshape(-1)[0].decode())
            if result.get_response().parameters["triton_final_response"].bool_param:
                break
        texts["oip ModelStreamInfer"] = "".join(pieces)
    finally:
        client.stop_stream()
        client.close()

    gmap = gmap_message(PROMPT, max_tokens=24, temperature=0.0)
    with http.stream(
        "POST", "/grps/v1/infer/predict?streaming=true", json={"model": "tiny-gpt", "gmap": gmap}
    ) as reply:
        texts["grps http chunked"] = "".join(
            json.loads(line)["str_data"] for line in reply.iter_lines() if line
        )
    with grpc.insecure_channel(server.grpc_target) as channel:
        stub = grps_pb2_grpc.GrpsServiceStub(channel)
        message = grps_pb2.GrpsMessage(model="tiny-gpt", gmap=grps_pb2.GenericMapData(**gmap))
        texts["grps PredictStreaming"] = "".join(m.str_data for m in stub.PredictStreaming(message))
        texts["grps Predict"] = stub.Predict(message).str_data
    assert texts == dict.fromkeys(texts, expected)


def test_a_prompt_string_uses_the_model_defaults(http: httpx.Client) -> None:
    """grps str_data: the prompt alone; max_tokens from the model's `generation.max_tokens` (128)."""
    reply = http.post("/grps/v1/infer/predict", json={"model": "tiny-gpt", "str_data": PROMPT}).json()
    assert reply["status"]["code"] == 200 and 0 < len(reply["str_data"].encode()) <= 128


def test_input_ids_and_seeded_sampling(http: httpx.Client) -> None:
    ids = list(PROMPT.encode())
    body = {"inputs": [{"name": "input_ids", "shape": [len(ids)], "datatype": "INT64", "data": ids}]}

    def sampled(seed: int) -> list[int]:
        parameters = {"max_tokens": 16, "temperature": 1.5, "top_p": 0.95, "seed": seed}
        answer = http.post("/v2/models/tiny-gpt/infer", json={**body, "parameters": parameters}).json()
        return next(o["data"] for o in answer["outputs"] if o["name"] == "output_ids")  # type: ignore[no-any-return]

    assert sampled(7) == sampled(7)
    assert len({tuple(sampled(seed)) for seed in range(4)}) > 1


def test_a_stop_string_ends_the_text_before_it(http: httpx.Client) -> None:
    full = oip_generate(http, **GREEDY)["text_output"]
    stop = full[10:13]
    cut = oip_generate(http, **GREEDY, stop=json.dumps([stop, "never seen"]))
    assert cut["finish_reason"] == "stop" and cut["text_output"] == full[: full.index(stop)]


def test_embeddings_over_oip(http: httpx.Client) -> None:
    one = oip_generate(http, "hello", task="embed")["embedding"]
    again = oip_generate(http, "hello", task="embed")["embedding"]
    other = oip_generate(http, "a different text", task="embed")["embedding"]
    assert len(one) == 128 and one == again and one != other


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ({"text_input": PROMPT, "parameters": {"max_tokens": 0}}, "max_tokens"),
        ({"text_input": PROMPT, "parameters": {"max_tokens": 10**6}}, "max_tokens"),
        ({"text_input": PROMPT, "parameters": {"temperature": -1}}, "temperature"),
        ({"text_input": PROMPT, "parameters": {"top_p": 0}}, "top_p"),
        ({"text_input": PROMPT, "parameters": {"seed": "x"}}, "seed"),
        ({"text_input": PROMPT, "parameters": {"task": "x" * 5000}}, "task"),
        ({"prompt": PROMPT}, "text_input"),
        ({"text_input": ""}, "empty"),
    ],
)
def test_bad_options_answer_400_naming_them(http: httpx.Client, body: dict[str, Any], named: str) -> None:
    reply = http.post("/v2/models/tiny-gpt/generate", json=body)
    assert reply.status_code == 400 and named in reply.json()["error"], reply.text
    assert len(reply.text) < 1000  # a hostile value is shown cut short


def test_token_ids_outside_the_vocabulary_are_refused(http: httpx.Client) -> None:
    body = {"inputs": [{"name": "input_ids", "shape": [2], "datatype": "INT64", "data": [65, 9999]}]}
    reply = http.post("/v2/models/tiny-gpt/infer", json=body)
    assert reply.status_code == 400 and "vocabulary" in reply.json()["error"]


# -- ending sequences ---------------------------------------------------------------------------------


def test_a_client_leaving_the_stream_stops_its_generation(server: ServerThread, http: httpx.Client) -> None:
    model = tiny_gpt(server)
    before = model.steps
    body = {"text_input": PROMPT, "parameters": {"max_tokens": 1000, "temperature": 0, "ignore_eos": True}}
    with http.stream("POST", "/v2/models/tiny-gpt/generate_stream", json=body) as reply:
        events = sse_events(reply)
        for _ in range(3):
            next(events)
    wait_for(lambda: not model.running_slots())  # the batcher retired it and released its slot
    steps = model.steps
    assert steps - before < 200  # it stopped long before its 1000 tokens
    time.sleep(0.3)
    assert model.steps == steps  # nothing generates for nobody


def test_concurrent_requests_each_get_their_own_text(http: httpx.Client) -> None:
    prompts = [f"user: tell me about {topic}\nassistant:" for topic in ("tea", "slots", "GPUs", "queues")] * 3
    alone = {p: oip_generate(http, p, max_tokens=20, temperature=0)["text_output"] for p in set(prompts)}
    together: list[str] = [""] * len(prompts)

    def ask(i: int) -> None:
        with httpx.Client(base_url=str(http.base_url), timeout=60) as client:
            together[i] = oip_generate(client, prompts[i], max_tokens=20, temperature=0)["text_output"]

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(prompts))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert together == [alone[p] for p in prompts]


def write_project(tmp_path: Path, **changes: Any) -> Path:
    """inference.yml of the example with `changes` merged into its model's entry."""
    settings = yaml.safe_load((EXAMPLE / "conf" / "inference.yml").read_text())
    model = settings["models"][0]
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(model.get(key), dict):
            model[key] = {**model[key], **value}
        else:
            model[key] = value
    model["inferer_path"] = str(EXAMPLE / "models" / "tiny_gpt.pt")
    path = tmp_path / "inference.yml"
    path.write_text(yaml.safe_dump(settings))
    return path


def test_a_timeout_while_generating_ends_with_length(tmp_path: Path) -> None:
    conf = write_project(tmp_path, default_timeout_us=300_000)
    server = serve(tmp_path, conf)
    try:
        with httpx.Client(base_url=server.http_url, timeout=60) as http:
            answer = oip_generate(http, max_tokens=1000, temperature=0, ignore_eos=True)
            assert answer["finish_reason"] == "length" and 0 < len(answer["output_ids"]) < 1000
            assert oip_generate(http, **GREEDY)["finish_reason"] == "length"  # the model still serves
    finally:
        server.stop()


def test_sequences_beyond_max_running_wait_for_a_slot(tmp_path: Path) -> None:
    conf = write_project(tmp_path, generation={"max_running": 2}, batching={"max_queue_size": 3})
    server = serve(tmp_path, conf)
    try:
        model = tiny_gpt(server)
        peak = 0
        statuses: list[int] = []

        def ask() -> None:
            with httpx.Client(base_url=server.http_url, timeout=60) as http:
                body = {"text_input": PROMPT, "parameters": {"max_tokens": 40, "temperature": 0}}
                statuses.append(http.post("/v2/models/tiny-gpt/generate", json=body).status_code)

        threads = [threading.Thread(target=ask) for _ in range(8)]
        for thread in threads:
            thread.start()
        while any(t.is_alive() for t in threads):
            peak = max(peak, len(model.running_slots()))
            time.sleep(0.002)
        assert peak <= 2
        # 2 run, 3 wait in the model's queue: the others are refused at once (503), none fails otherwise.
        assert statuses.count(200) >= 5 and set(statuses) <= {200, 503}
    finally:
        server.stop()


# -- configuration ------------------------------------------------------------------------------------


def model_entry(**changes: Any) -> dict[str, Any]:
    entry = {"name": "g", "version": "1", "inferer_type": "generative", "inferer_name": "tiny_gpt"}
    return {**entry, **changes}


def parse(*models: dict[str, Any]) -> Any:
    dag = {"type": "sequential", "name": "d", "nodes": [{"name": "n", "type": "model", "model": "g-1"}]}
    return parse_inference_settings({"models": list(models), "dag": dag}, "inference.yml", EXAMPLE)


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"instances": 2}, "instances"),
        ({"batching": {"type": "dynamic"}}, "batching"),
        ({"converter_type": "torch"}, "converter_type"),
        ({"generation": {"max_tokens": 10, "max_tokens_limit": 5}}, "max_tokens"),
        ({"generation": {"max_runing": 2}}, "max_running"),
        ({"openai": {"served_name": "a/b"}}, "served_name"),
    ],
)
def test_the_configuration_refuses_what_a_generative_model_cannot_do(
    changes: dict[str, Any], words: str
) -> None:
    with pytest.raises(ConfigError, match=words):
        parse(model_entry(**changes))


def test_generation_blocks_belong_to_generative_models() -> None:
    with pytest.raises(ConfigError, match="generative"):
        parse(model_entry(inferer_type="customized", openai={"chat": True}))
    settings = parse(model_entry(openai={}))
    assert settings.models[0].openai.served_name == "g" and settings.models[0].streaming

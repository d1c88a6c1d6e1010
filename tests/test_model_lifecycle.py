"""Models loaded, reloaded and unloaded at runtime (model_control: explicit), through Triton's
repository API over HTTP and gRPC with tritonclient, as its users call it."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest
import tritonclient.grpc as tgrpc
import tritonclient.http as thttp
import yaml
from tritonclient.utils import InferenceServerException

from support import PROJECTS, ServerThread, start_project

LIFECYCLE = PROJECTS / "lifecycle"

X = np.arange(8, dtype=np.float32).reshape(2, 4)
SCALE = {
    "name": "scale",
    "version": "1",
    "inferer_type": "customized",
    "inferer_name": "lifecycle_scale",
    "inferer_path": "data/three.txt",
    "converter_type": "numpy",
    "inputs": [{"name": "x", "datatype": "FP32", "shape": [-1, 4]}],
    "outputs": [{"name": "y", "datatype": "FP32", "shape": [-1, 4]}],
    "batching": {"type": "dynamic", "max_batch_size": 8, "batch_timeout_us": 500},
}


@pytest.fixture
def server() -> Iterator[ServerThread]:
    running = start_project(LIFECYCLE)
    yield running
    running.stop()


class Clients:
    """tritonclient over one transport, as a test case sees it."""

    def __init__(self, server: ServerThread, protocol: str) -> None:
        self.protocol = protocol
        if protocol == "http":
            self.client: Any = thttp.InferenceServerClient(server.http_url.removeprefix("http://"))
            self.module: Any = thttp
        else:
            self.client = tgrpc.InferenceServerClient(server.grpc_target)
            self.module = tgrpc

    def scale(self, model: str = "scale") -> np.ndarray:
        x = self.module.InferInput("x", list(X.shape), "FP32")
        x.set_data_from_numpy(X)
        return self.client.infer(model, [x]).as_numpy("y")  # type: ignore[no-any-return]

    def index(self) -> list[tuple[str, str, str, str]]:
        if self.protocol == "http":
            models = self.client.get_model_repository_index()
        else:
            models = self.client.get_model_repository_index(as_json=True)["models"]
        return [(m["name"], m.get("version", ""), m.get("state", ""), m.get("reason", "")) for m in models]

    def close(self) -> None:
        self.client.close()


@pytest.fixture(params=["http", "grpc"])
def clients(request: pytest.FixtureRequest, server: ServerThread) -> Iterator[Clients]:
    made = Clients(server, request.param)
    yield made
    made.close()


def test_a_reload_with_a_new_file_serves_the_new_answers(clients: Clients) -> None:
    assert clients.scale().tolist() == (X * 2).tolist()
    clients.client.load_model("scale", config=json.dumps(SCALE))
    assert clients.scale().tolist() == (X * 3).tolist()
    assert ("scale", "1", "READY", "") in clients.index()
    clients.client.load_model("scale")  # without a config: inference.yml again (data/two.txt)
    assert clients.scale().tolist() == (X * 2).tolist()


def test_the_dag_follows_a_reloaded_model(server: ServerThread) -> None:
    chain = lambda: httpx.post(f"{server.http_url}/v2/models/chain/infer", json=_infer_body())  # noqa: E731
    assert chain().json()["outputs"][0]["data"] == (X * 2 + 1).ravel().tolist()
    _load(server, "scale", SCALE)
    assert chain().json()["outputs"][0]["data"] == (X * 3 + 1).ravel().tolist()
    plus = {"name": "plus", "version": "1", "inferer_type": "customized", "inferer_name": "lifecycle_plus",
            "converter_type": "numpy", "inferer_args": {"add": 10}}  # fmt: skip
    _load(server, "plus", plus)
    assert chain().json()["outputs"][0]["data"] == (X * 3 + 10).ravel().tolist()


def test_a_new_model_loads_from_a_config_and_unloads(clients: Clients, server: ServerThread) -> None:
    clients.client.load_model("triple", config=json.dumps({**SCALE, "name": "triple", "version": "7"}))
    assert clients.scale("triple").tolist() == (X * 3).tolist()
    assert ("triple", "7", "READY", "") in clients.index()
    meta = yaml.safe_load(httpx.get(f"{server.http_url}/grps/v1/metadata/server").json()["str_data"])
    assert "triple-7" in meta["models"] and meta["model_control"] == "explicit"
    assert {"name": "triple", "version": "7", "state": "READY", "reason": ""} in meta["repository"]
    clients.client.unload_model("triple")
    assert ("triple", "7", "UNAVAILABLE", "unloaded") in clients.index()
    with pytest.raises(InferenceServerException, match="unknown model 'triple'"):
        clients.scale("triple")
    assert httpx.get(f"{server.http_url}/v2/models/triple/ready").status_code == 404
    assert clients.scale().tolist() == (X * 2).tolist()  # the others are untouched
    clients.client.unload_model("triple")  # unloading it again is no error (as Triton)


def test_a_dag_model_unloads_only_with_its_dependents(clients: Clients, server: ServerThread) -> None:
    with pytest.raises(InferenceServerException, match="the DAG 'chain' runs model 'plus-1'"):
        clients.client.unload_model("plus")
    assert clients.client.is_model_ready("chain")
    clients.client.unload_model("plus", unload_dependents=True)
    index = clients.index()
    assert ("plus", "1", "UNAVAILABLE", "unloaded") in index
    assert ("chain", "1", "UNAVAILABLE", "its model 'plus-1' is not loaded") in index
    assert httpx.post(f"{server.http_url}/grps/v1/infer/predict", json={"str_data": "x"}).status_code == 404
    clients.client.load_model("plus")  # back from inference.yml: the DAG with it
    assert ("chain", "1", "READY", "") in clients.index()
    assert clients.client.is_model_ready("chain")


def test_the_dag_unloads_and_loads_by_its_name(clients: Clients) -> None:
    clients.client.unload_model("chain")
    assert ("chain", "1", "UNAVAILABLE", "unloaded") in clients.index()
    assert clients.scale().tolist() == (X * 2).tolist()  # its models still serve
    clients.client.load_model("chain")
    assert ("chain", "1", "READY", "") in clients.index()


def test_a_failed_load_leaves_the_serving_version(clients: Clients) -> None:
    broken = json.dumps({**SCALE, "inferer_path": "data/broken.txt"})
    with pytest.raises(InferenceServerException, match="failed to load: model 'scale-1' failed to load"):
        clients.client.load_model("scale", config=broken)
    assert clients.scale().tolist() == (X * 2).tolist()
    (entry,) = [m for m in clients.index() if m[0] == "scale"]
    assert entry[2] == "READY" and entry[3].startswith("a new load failed, this one keeps serving: ")
    assert "ValueError" in entry[3]
    clients.client.load_model("scale", config=json.dumps(SCALE))  # a good load clears the reason
    assert ("scale", "1", "READY", "") in clients.index()


@pytest.mark.parametrize(
    ("config", "words"),
    [
        ("{not json", "parameter 'config' is not JSON"),
        ("[1]", "parameter 'config' must be a JSON object"),
        (json.dumps({**SCALE, "name": "other"}), "the config's name 'other' is not the model loaded"),
        (json.dumps({**SCALE, "colour": 1}), "colour: unknown key"),
        (json.dumps({**SCALE, "inferer_path": "data/none.txt"}), "inferer_path"),
    ],
)
def test_a_bad_config_is_refused(clients: Clients, config: str, words: str) -> None:
    with pytest.raises(InferenceServerException) as refused:
        clients.client.load_model("scale", config=config)
    assert words in str(refused.value)
    assert clients.scale().tolist() == (X * 2).tolist()


def test_an_unknown_model_is_not_found(server: ServerThread) -> None:
    for action in ("load", "unload"):
        reply = httpx.post(f"{server.http_url}/v2/repository/models/nothing/{action}")
        assert reply.status_code == 404 and "nothing" in reply.json()["error"]


def test_load_parameters_are_checked(server: ServerThread) -> None:
    url = f"{server.http_url}/v2/repository/models/scale"
    cases = [
        ("load", {"parameters": {"file:1/model.onnx": "AAAA"}}, "model files cannot be sent with a load"),
        ("load", {"parameters": {"colour": "red"}}, "unknown load parameter 'colour'"),
        ("unload", {"parameters": {"unload_dependents": "yes"}}, "must be a boolean"),
        ("load", {"other": 1}, "unknown key 'other'"),
    ]
    for action, body, words in cases:
        reply = httpx.post(f"{url}/{action}", json=body)
        assert reply.status_code == 400 and words in reply.json()["error"], reply.text


def test_server_readiness_stays_through_changes(server: ServerThread) -> None:
    _load(server, "scale", SCALE)
    httpx.post(f"{server.http_url}/v2/repository/models/chain/unload").raise_for_status()
    assert httpx.get(f"{server.http_url}/v2/health/ready").status_code == 200


def test_statistics_go_on_across_a_reload(server: ServerThread) -> None:
    with thttp.InferenceServerClient(server.http_url.removeprefix("http://")) as client:
        _scale_over(client)
        before = client.get_inference_statistics("scale")["model_stats"][0]["inference_count"]
        _load(server, "scale", SCALE)
        _scale_over(client)
        after = client.get_inference_statistics("scale")["model_stats"][0]["inference_count"]
    assert after == before + 2  # two rows each: no reset, no warmup rows counted


def test_a_reload_gets_its_own_model_object(server: ServerThread) -> None:
    made = sys.modules["lifecycle_models"].MADE
    registered = server.server.executor.nodes["scale-1"].inferer
    _load(server, "scale", SCALE)
    serving = server.server.executor.nodes["scale-1"].inferer
    assert serving is not registered and type(serving) is type(registered) and serving in made
    assert registered.factor == 2.0  # the object the old version ran was never re-initialised


def test_an_unloaded_model_leaves_the_metrics(server: ServerThread) -> None:
    _load(server, "triple", {**SCALE, "name": "triple", "version": "7"})
    httpx.post(f"{server.http_url}/v2/models/triple/infer", json=_infer_body()).raise_for_status()
    assert 'model="triple"' in httpx.get(f"{server.http_url}/metrics").text
    httpx.post(f"{server.http_url}/v2/repository/models/triple/unload").raise_for_status()
    assert 'model="triple"' not in httpx.get(f"{server.http_url}/metrics").text


def _infer_body() -> dict[str, Any]:
    return {"inputs": [{"name": "x", "shape": [2, 4], "datatype": "FP32", "data": X.ravel().tolist()}]}


def _scale_over(client: thttp.InferenceServerClient) -> None:
    x = thttp.InferInput("x", list(X.shape), "FP32")
    x.set_data_from_numpy(X)
    client.infer("scale", [x])


def _load(server: ServerThread, name: str, config: dict[str, Any]) -> None:
    body = {"parameters": {"config": json.dumps(config)}}
    reply = httpx.post(f"{server.http_url}/v2/repository/models/{name}/load", json=body, timeout=60)
    assert reply.status_code == 200, reply.text

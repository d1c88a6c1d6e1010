"""One story of each model in both APIs: grps's model metadata and OIP's model config agree on
batching (max_batch_size 0: the server does not batch it) and on the device the model runs on."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import tritonclient.grpc as tgrpc
import tritonclient.http as thttp
from google.protobuf import json_format

from grps_py import GrpsContext, GrpsMessage, ModelInferer, inferer_register
from grps_py.client import GrpsClient
from support import BASIC, REPO, ServerThread, start_project


class AsyncUpper(ModelInferer):
    """`async def` model code: it runs on the event loop, one request at a time, so it is not batched."""

    async def infer(self, inp: GrpsMessage, context: GrpsContext) -> GrpsMessage:
        return GrpsMessage(str_data=inp.str_data.upper())


# Registered under a name of this test's own: the registry is process-wide, and other test projects
# register other models as "upper".
inferer_register.register("metadata_test_async_upper", AsyncUpper())

ONNX_MODEL = REPO / "models" / "default.onnx"
INFERENCE = f"""\
models:
  - {{name: echo, version: "1.0", inferer_type: customized, inferer_name: echo, converter_type: none}}
  - {{name: batched, version: "1.0", inferer_type: customized, inferer_name: batched, converter_type: none,
     batching: {{type: dynamic, max_batch_size: 4, batch_timeout_us: 2000, preferred_batch_size: [4, 2]}}}}
  # async model code runs requests one by one, whatever batching says
  - {{name: upper, version: "1.0", inferer_type: customized, inferer_name: metadata_test_async_upper,
     converter_type: none,
     batching: {{type: dynamic, max_batch_size: 8}}}}
  - {{name: classifier, version: "1.0.0", inferer_type: onnx, inferer_path: {ONNX_MODEL},
     converter_type: numpy, device: auto, instances: 2}}
dag: {{name: d, nodes: [{{name: echo, type: model, model: echo-1.0}}]}}
"""
UNBATCHED = {"type": "none", "max_batch_size": 0}
BATCHING = {
    "echo-1.0": UNBATCHED,
    "batched-1.0": {
        "type": "dynamic",
        "max_batch_size": 4,
        "batch_timeout_us": 2000,
        "preferred_batch_size": [2, 4],
    },
    "upper-1.0": UNBATCHED,
    "classifier-1.0.0": UNBATCHED,
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    conf = tmp_path_factory.mktemp("conf") / "inference.yml"
    conf.write_text(INFERENCE)
    server = start_project(BASIC, conf)
    yield server
    server.stop()


def grps_metadata(server: ServerThread, key: str) -> list[dict[str, Any]]:
    """The model's grps metadata over HTTP and over gRPC."""
    found = []
    for protocol, url in (("http", server.http_url), ("grpc", server.grpc_target)):
        with GrpsClient(url, protocol=protocol, timeout=30) as client:
            found.append(client.model_metadata(key))
    return found


def oip_configs(server: ServerThread, key: str) -> list[dict[str, Any]]:
    """The model's OIP config over HTTP and over gRPC, both in Triton's JSON form."""
    name, version = key.rsplit("-", 1)
    http = thttp.InferenceServerClient(server.http_url.removeprefix("http://"))
    grpc = tgrpc.InferenceServerClient(server.grpc_target)
    try:
        reply = grpc.get_model_config(name, version).config
        as_json = json_format.MessageToDict(
            reply, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
        )
        return [http.get_model_config(name, version), as_json]
    finally:
        http.close()
        grpc.close()


@pytest.mark.parametrize("key", list(BATCHING))
def test_batching_reads_the_same_in_both_apis(server: ServerThread, key: str) -> None:
    expected = BATCHING[key]
    for meta in grps_metadata(server, key):
        assert meta["batching"] == expected
    for config in oip_configs(server, key):
        assert int(config["max_batch_size"]) == expected["max_batch_size"]
        if expected["max_batch_size"]:
            assert config["dynamic_batching"]["max_queue_delay_microseconds"] in (2000, "2000")
            assert config["dynamic_batching"]["preferred_batch_size"] == [2, 4]
        else:  # the queue's settings only (Triton's dynamic batcher with batching off)
            scheduling = config["dynamic_batching"]
            assert int(scheduling.get("max_queue_delay_microseconds", 0)) == 0
            assert not scheduling.get("preferred_batch_size")
            assert "default_queue_policy" in scheduling


def test_the_device_a_model_runs_on(server: ServerThread) -> None:
    """`device: auto` is shown resolved, with what inference.yml asked for beside it; OIP's instance
    group says the same."""
    for meta in grps_metadata(server, "classifier-1.0.0"):
        assert meta["device"] in ("cpu", "cuda:0") and meta["configured_device"] == "auto"
        assert meta["instances"] == 2
        kind = "KIND_GPU" if meta["device"].startswith("cuda") else "KIND_CPU"
        for config in oip_configs(server, "classifier-1.0.0"):
            assert [(group["count"], group["kind"]) for group in config["instance_group"]] == [(2, kind)]
    for meta in grps_metadata(server, "echo-1.0"):  # the user's own code is given `auto` to resolve
        assert (meta["device"], meta["configured_device"]) == ("auto", "auto")

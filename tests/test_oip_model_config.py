"""What OIP's model configuration tells tritonclient, over HTTP and gRPC: instances, batching, the queue
(Triton's ModelQueuePolicy), priorities, labels and whether a model streams, as the server runs it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import tritonclient.grpc as tgrpc
import tritonclient.http as thttp

from support import PROJECTS, ServerThread, start_project


@pytest.fixture(scope="module")
def server() -> Iterator[ServerThread]:
    running = start_project(PROJECTS / "oip_ext")
    yield running
    running.stop()


@pytest.fixture(params=["http", "grpc"])
def config_of(request: pytest.FixtureRequest, server: ServerThread) -> Iterator[Any]:
    """name -> the model's configuration as tritonclient parses it, in Triton's JSON form (over gRPC,
    64-bit integers come as strings and fields at their default are left out)."""
    if request.param == "http":
        client: Any = thttp.InferenceServerClient(server.http_url.removeprefix("http://"))
        yield lambda name: client.get_model_config(name)
    else:
        client = tgrpc.InferenceServerClient(server.grpc_target)
        yield lambda name: client.get_model_config(name, as_json=True)["config"]
    client.close()


def test_a_batched_model_tells_its_batching_and_queue(config_of: Any) -> None:
    config = config_of("scores")
    assert int(config["max_batch_size"]) == 4
    batching = config["dynamic_batching"]
    assert [int(s) for s in batching["preferred_batch_size"]] == [2, 4]
    assert int(batching["max_queue_delay_microseconds"]) == 1000
    policy = batching["default_queue_policy"]
    assert int(policy["max_queue_size"]) == 64 and policy["allow_timeout_override"] is True
    assert policy.get("timeout_action", "REJECT") == "REJECT"  # gRPC's JSON leaves the default out
    assert "priority_levels" not in batching  # one level: no priorities
    assert "model_transaction_policy" not in config


def test_a_streaming_model_tells_its_instances_priorities_timeout_and_that_it_streams(
    config_of: Any,
) -> None:
    config = config_of("rows")
    assert int(config.get("max_batch_size", 0)) == 0
    assert [(int(g["count"]), g["kind"]) for g in config["instance_group"]] == [(2, "KIND_CPU")]
    batching = config["dynamic_batching"]  # a queue, not batching: no delay, no preferred sizes
    assert "max_queue_delay_microseconds" not in batching and "preferred_batch_size" not in batching
    assert (int(batching["priority_levels"]), int(batching["default_priority_level"])) == (3, 2)
    policy = batching["default_queue_policy"]
    assert int(policy["max_queue_size"]) == 7
    assert int(policy["default_timeout_microseconds"]) == 5_000_000
    assert config["parameters"] == {"priority_aging_us": {"string_value": "250000"}}
    assert config["model_transaction_policy"] == {"decoupled": True}


def test_the_dag_streams_when_a_node_does(config_of: Any) -> None:
    config = config_of("pipeline")
    assert config["platform"] == "ensemble" and "dynamic_batching" not in config
    assert config["model_transaction_policy"] == {"decoupled": True}


def test_a_plain_model_has_only_its_queue(config_of: Any) -> None:
    config = config_of("identity")
    assert int(config.get("max_batch_size", 0)) == 0
    assert int(config["dynamic_batching"]["default_queue_policy"]["max_queue_size"]) == 1024
    assert "default_timeout_microseconds" not in config["dynamic_batching"]["default_queue_policy"]
    assert "model_transaction_policy" not in config and "parameters" not in config


def test_labels_are_named_as_inference_yml_names_them(config_of: Any) -> None:
    (output,) = config_of("scores")["output"]
    assert output["label_filename"] == "labels/scores.txt"

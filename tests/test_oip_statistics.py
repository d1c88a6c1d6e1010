"""Triton's statistics extension on a live server: known traffic, then what tritonclient reads back over
HTTP (JSON) and gRPC: the same counts, exactly, and consistent durations. Each test sends its own
models (tests/projects/stats) their traffic, so one server serves them all."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import grpc
import httpx
import numpy as np
import pytest
import tritonclient.grpc as tgrpc
import tritonclient.http as thttp
from tritonclient.utils import InferenceServerException

from grps_py.protos import open_inference_pb2, open_inference_pb2_grpc
from support import PROJECTS, ServerThread, start_project

STATS = PROJECTS / "stats"
DURATIONS = (
    "success",
    "fail",
    "queue",
    "compute_input",
    "compute_infer",
    "compute_output",
    "cache_hit",
    "cache_miss",
)
STEPS = ("compute_input", "compute_infer", "compute_output")


@pytest.fixture(scope="module")
def server() -> Iterator[ServerThread]:
    running = start_project(STATS)
    yield running
    running.stop()


def http_client(server: ServerThread) -> Any:
    return thttp.InferenceServerClient(server.http_url.removeprefix("http://"))


def infer(server: ServerThread, model: str, x: np.ndarray, version: str = "") -> bool:
    """One request over tritonclient's HTTP client (its own: the client is not shared between threads);
    whether it succeeded."""
    client = http_client(server)
    tensor = thttp.InferInput("x", list(x.shape), "FP32")
    tensor.set_data_from_numpy(x.astype(np.float32))
    try:
        client.infer(model, [tensor], model_version=version)
        return True
    except InferenceServerException:
        return False
    finally:
        client.close()


def infer_together(server: ServerThread, model: str, count: int) -> list[bool]:
    """`count` single-row requests sent at once (each from its own thread)."""
    results: list[bool] = [False] * count
    start = threading.Barrier(count)

    def send(i: int) -> None:
        start.wait()
        results[i] = infer(server, model, np.ones((1, 3)))

    threads = [threading.Thread(target=send, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return results


# -- reading the statistics back, over both protocols, in one shape --------------------------------
def over_http(server: ServerThread, model: str = "", version: str = "") -> list[dict[str, Any]]:
    client = http_client(server)
    try:
        stats: list[dict[str, Any]] = client.get_inference_statistics(model, version)["model_stats"]
        return stats
    finally:
        client.close()


def over_grpc(server: ServerThread, model: str = "", version: str = "") -> list[dict[str, Any]]:
    """tritonclient's gRPC answer (a protobuf message) in the HTTP answer's shape."""
    client = tgrpc.InferenceServerClient(server.grpc_target)
    try:
        answer = client.get_inference_statistics(model, version)
    finally:
        client.close()
    return [
        {
            "name": m.name,
            "version": m.version,
            "last_inference": m.last_inference,
            "inference_count": m.inference_count,
            "execution_count": m.execution_count,
            "inference_stats": {
                name: {
                    "count": getattr(m.inference_stats, name).count,
                    "ns": getattr(m.inference_stats, name).ns,
                }
                for name in DURATIONS
            },
            "batch_stats": [
                {
                    "batch_size": b.batch_size,
                    **{step: {"count": getattr(b, step).count, "ns": getattr(b, step).ns} for step in STEPS},
                }
                for b in m.batch_stats
            ],
        }
        for m in answer.model_stats
    ]


def both(server: ServerThread, model: str = "", version: str = "") -> list[dict[str, Any]]:
    """The statistics over HTTP, once gRPC answered the same (nothing runs between the two reads)."""
    http = over_http(server, model, version)
    compared = [{k: v for k, v in m.items() if k not in ("response_stats", "memory_usage")} for m in http]
    assert compared == over_grpc(server, model, version)
    return http


def counts(stat: dict[str, Any]) -> dict[str, int]:
    return {name: d["count"] for name, d in stat["inference_stats"].items()}


def batch_counts(stat: dict[str, Any]) -> dict[int, int]:
    counted = {}
    for batch in stat["batch_stats"]:
        assert {batch[step]["count"] for step in STEPS} == {batch["compute_infer"]["count"]}
        counted[batch["batch_size"]] = batch["compute_infer"]["count"]
    return counted


def assert_consistent(stat: dict[str, Any], requests_per_execution: dict[int, int]) -> None:
    """Every duration counted is > 0; a request's queue and compute fit in its duration; each request
    counts the steps of the execution that ran it (`requests_per_execution`: by batch size)."""
    inference = stat["inference_stats"]
    for name in ("success", "queue", *STEPS):
        assert inference[name]["ns"] > 0, name
    spent = sum(inference[name]["ns"] for name in ("queue", *STEPS))
    assert spent <= inference["success"]["ns"]
    for step in STEPS:
        by_batch = sum(b[step]["ns"] * requests_per_execution[b["batch_size"]] for b in stat["batch_stats"])
        assert inference[step]["ns"] == by_batch, step
    assert stat["last_inference"] > 1_600_000_000_000  # ms since the epoch


# -- the tests -------------------------------------------------------------------------------------
def test_counts_match_the_traffic_exactly(server: ServerThread) -> None:
    # scale (batched): four single-row requests at once run as one batch of 4; a 3-row request alone.
    assert infer_together(server, "scale", 4) == [True] * 4
    assert infer(server, "scale", np.ones((3, 3)))
    # picky (not batched): two answered, one refused by the model.
    assert infer(server, "picky", np.ones((1, 3)))
    assert infer(server, "picky", np.ones((2, 3)))
    assert not infer(server, "picky", -np.ones((1, 3)))

    (scale,) = both(server, "scale")
    assert (scale["name"], scale["version"]) == ("scale", "1")
    assert scale["inference_count"] == 7  # rows of the successful requests
    assert scale["execution_count"] == 2  # a batch is one execution
    assert counts(scale) == {
        **dict.fromkeys(DURATIONS, 0),
        "success": 5,
        "queue": 5,
        **dict.fromkeys(STEPS, 5),
    }
    assert batch_counts(scale) == {3: 1, 4: 1}
    assert_consistent(scale, {4: 4, 3: 1})

    (picky,) = both(server, "picky")
    assert picky["inference_count"] == 2  # a model the server does not batch: one per request
    assert picky["execution_count"] == 2
    assert counts(picky) == {
        **dict.fromkeys(DURATIONS, 0),
        "success": 2,
        "fail": 1,
        "queue": 2,
        **dict.fromkeys(STEPS, 2),
    }
    assert picky["inference_stats"]["fail"]["ns"] > 0
    assert batch_counts(picky) == {1: 2}
    assert_consistent(picky, {1: 1})


def test_a_dag_counts_under_its_models_and_under_its_name(server: ServerThread) -> None:
    assert infer(server, "pipeline", np.ones((1, 3)))
    assert not infer(server, "pipeline", -np.ones((1, 3)))  # refused by its first model

    (dag,) = both(server, "pipeline")
    assert (dag["name"], dag["version"]) == ("pipeline", "1")
    # The DAG's own entry: its requests' outcomes and durations; it executes nothing itself.
    assert counts(dag) == {**dict.fromkeys(DURATIONS, 0), "success": 1, "fail": 1}
    assert (dag["inference_count"], dag["execution_count"], dag["batch_stats"]) == (1, 0, [])
    assert dag["last_inference"] > 0
    (first,) = both(server, "first")
    (second,) = both(server, "second")
    assert (counts(first)["success"], counts(first)["fail"]) == (1, 1)
    assert (counts(second)["success"], counts(second)["fail"]) == (1, 0)  # the failed request never got here
    assert first["execution_count"] == second["execution_count"] == 1
    # The DAG's run holds both of its models' (success durations add up within it).
    nodes_ns = first["inference_stats"]["success"]["ns"] + second["inference_stats"]["success"]["ns"]
    assert nodes_ns <= dag["inference_stats"]["success"]["ns"]


def test_versions_are_counted_apart(server: ServerThread) -> None:
    assert infer(server, "multi", np.ones((1, 3)), version="2")
    assert [(m["version"], counts(m)["success"]) for m in both(server, "multi")] == [("1", 0), ("2", 1)]
    (v2,) = both(server, "multi", "2")
    assert (v2["name"], v2["version"], v2["inference_count"]) == ("multi", "2", 1)
    (v1,) = both(server, "multi", "1")
    assert (v1["inference_count"], v1["last_inference"], v1["batch_stats"]) == (0, 0, [])


def test_all_models_are_listed_in_name_and_version_order(server: ServerThread) -> None:
    listed = [(m["name"], m["version"]) for m in both(server)]
    assert listed == [
        ("counted", "1"),
        ("first", "1"),
        ("multi", "1"),
        ("multi", "2"),
        ("picky", "1"),
        ("pipeline", "1"),  # the DAG
        ("scale", "1"),
        ("second", "1"),
        ("warm", "1"),
    ]


def test_warmup_runs_are_not_counted(server: ServerThread) -> None:
    (warm,) = both(server, "warm")
    assert counts(warm) == dict.fromkeys(DURATIONS, 0)
    assert (warm["inference_count"], warm["execution_count"], warm["batch_stats"]) == (0, 0, [])


def test_the_json_answer_has_tritons_fields_and_integers(server: ServerThread) -> None:
    reply = httpx.get(f"{server.http_url}/v2/models/picky/versions/1/stats")
    assert reply.status_code == 200 and reply.headers["content-type"] == "application/json"
    (stat,) = reply.json()["model_stats"]
    assert set(stat) == {
        "name",
        "version",
        "last_inference",
        "inference_count",
        "execution_count",
        "inference_stats",
        "response_stats",
        "batch_stats",
        "memory_usage",
    }
    assert isinstance(stat["version"], str) and stat["memory_usage"] == [] and stat["response_stats"] == {}
    assert set(stat["inference_stats"]) == set(DURATIONS)
    numbers = [stat["last_inference"], stat["inference_count"], stat["execution_count"]]
    numbers += [v for d in stat["inference_stats"].values() for v in (d["count"], d["ns"])]
    for batch in stat["batch_stats"]:
        numbers += [batch["batch_size"], *(batch[step][field] for step in STEPS for field in ("count", "ns"))]
    assert all(type(n) is int for n in numbers)


@pytest.mark.parametrize(("model", "version"), [("ghost", ""), ("multi", "3"), ("ghost", "1")])
def test_an_unknown_model_or_version_is_not_found(server: ServerThread, model: str, version: str) -> None:
    path = f"/v2/models/{model}" + (f"/versions/{version}" if version else "") + "/stats"
    reply = httpx.get(server.http_url + path)
    assert reply.status_code == 404
    assert set(reply.json()) == {"error"} and reply.json()["error"].startswith("unknown ")
    with grpc.insecure_channel(server.grpc_target) as channel:
        stub = open_inference_pb2_grpc.GRPCInferenceServiceStub(channel)
        with pytest.raises(grpc.RpcError) as raised:
            stub.ModelStatistics(open_inference_pb2.ModelStatisticsRequest(name=model, version=version))
    assert raised.value.code() == grpc.StatusCode.NOT_FOUND
    for read in (over_http, over_grpc):
        with pytest.raises(InferenceServerException):
            read(server, model, version)


def test_other_requests_are_unaffected_by_a_bad_one(server: ServerThread) -> None:
    assert httpx.get(f"{server.http_url}/v2/models/%ff/stats").status_code == 400  # not UTF-8
    assert httpx.post(f"{server.http_url}/v2/models/stats").status_code == 405
    assert both(server, "warm")  # still answered

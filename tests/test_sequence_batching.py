"""Sequence batching (Triton's `sequence_batching`), with tritonclient over HTTP and gRPC: a running
accumulator whose OUTPUT is the sum of its sequence's INPUTs so far (tests/projects/sequence).

Interleaved concurrent sequences each get their own running sum (the control inputs START, END and
CORRID reach the model per row); `direct` keeps a sequence on one instance, `oldest` batches the
sequences' requests together; a request for a sequence that is not running is refused 400; a new
sequence waits for a slot while every slot is taken; an idle sequence is ended.
"""

from __future__ import annotations

import queue
import sys
import threading
import time
from collections.abc import Iterator
from functools import partial
from types import ModuleType
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as tgrpc
import tritonclient.http as thttp
from tritonclient.utils import InferenceServerException

from support import PROJECTS, ServerThread, start_project

PROTOCOLS = ["http", "grpc"]


@pytest.fixture(scope="module")
def server() -> Iterator[ServerThread]:
    running = start_project(PROJECTS / "sequence")
    yield running
    running.stop()


@pytest.fixture(scope="module")
def models(server: ServerThread) -> ModuleType:
    return sys.modules["accumulators"]


def client(server: ServerThread, protocol: str) -> Any:
    if protocol == "http":
        return thttp.InferenceServerClient(url=server.http_url.removeprefix("http://"), concurrency=8)
    return tgrpc.InferenceServerClient(url=server.grpc_target)


def send(
    tc: Any,
    protocol: str,
    model: str,
    value: int,
    sequence_id: int | str,
    start: bool = False,
    end: bool = False,
) -> int:
    mod: Any = thttp if protocol == "http" else tgrpc
    item = mod.InferInput("INPUT", [1, 1] if model != "acc_one" else [1], "INT32")
    item.set_data_from_numpy(np.array([[value]] if model != "acc_one" else [value], dtype=np.int32))
    result = tc.infer(model, [item], sequence_id=sequence_id, sequence_start=start, sequence_end=end)
    return int(result.as_numpy("OUTPUT").reshape(-1)[0])


def run_sequence(
    server: ServerThread, protocol: str, model: str, sequence_id: int | str, values: list[int]
) -> list[int]:
    tc = client(server, protocol)
    try:
        return [
            send(tc, protocol, model, value, sequence_id, start=i == 0, end=i == len(values) - 1)
            for i, value in enumerate(values)
        ]
    finally:
        tc.close()


def run_concurrently(jobs: dict[Any, Any]) -> dict[Any, Any]:
    results: dict[Any, Any] = {}

    def run(key: Any, job: Any) -> None:
        try:
            results[key] = job()
        except Exception as exc:  # the test reports it
            results[key] = exc

    threads = [threading.Thread(target=run, args=(key, job)) for key, job in jobs.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return results


def running_sums(values: list[int]) -> list[int]:
    return [sum(values[: i + 1]) for i in range(len(values))]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_interleaved_sequences_each_keep_their_sum_and_their_instance(
    server: ServerThread, models: ModuleType, protocol: str
) -> None:
    base = 1000 if protocol == "http" else 2000
    values = {base + n: [n * 10 + i for i in range(1, 7)] for n in range(1, 7)}
    jobs = {
        sid: partial(run_sequence, server, protocol, "acc_direct", sid, vals) for sid, vals in values.items()
    }
    results = run_concurrently(jobs)
    for sid, vals in values.items():
        assert results[sid] == running_sums(vals), sid
        # direct: every request of a sequence ran on one instance's thread
        assert len(models.THREADS[sid]) == 1, models.THREADS[sid]
    used = set().union(*(models.THREADS[sid] for sid in values))
    assert used == {"model-acc_direct-1-0", "model-acc_direct-1-1"}  # both instances took sequences


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_oldest_batches_the_requests_of_several_sequences(
    server: ServerThread, models: ModuleType, protocol: str
) -> None:
    values = {f"{protocol}-seq-{n}": [n, n, n, n, n] for n in range(1, 5)}
    before = len(models.BATCHES)
    jobs = {
        sid: partial(run_sequence, server, protocol, "acc_oldest", sid, vals) for sid, vals in values.items()
    }
    results = run_concurrently(jobs)
    for sid, vals in values.items():
        assert results[sid] == running_sums(vals), sid
    assert max(models.BATCHES[before:]) > 1  # rows of different sequences ran in one batch


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_sequence_not_started_or_already_ended_is_refused(server: ServerThread, protocol: str) -> None:
    tc = client(server, protocol)
    sid = 3000 if protocol == "http" else 4000
    try:
        with pytest.raises(InferenceServerException) as refused:
            send(tc, protocol, "acc_direct", 1, sid)
        assert "must specify 'sequence_start'" in refused.value.message()
        assert refused.value.status() in ("400", "StatusCode.INVALID_ARGUMENT")
        assert send(tc, protocol, "acc_direct", 5, sid, start=True) == 5
        assert send(tc, protocol, "acc_direct", 2, sid, end=True) == 7
        with pytest.raises(InferenceServerException) as ended:
            send(tc, protocol, "acc_direct", 1, sid)
        assert "must specify 'sequence_start'" in ended.value.message()
        with pytest.raises(InferenceServerException) as no_id:
            send(tc, protocol, "acc_direct", 1, 0, start=True)
        assert "non-zero or non-empty 'sequence_id'" in no_id.value.message()
    finally:
        tc.close()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_sequence_parameters_on_a_model_without_sequence_batching_are_refused(
    server: ServerThread, protocol: str
) -> None:
    tc = client(server, protocol)
    mod: Any = thttp if protocol == "http" else tgrpc
    item = mod.InferInput("INPUT", [1], "INT32")
    item.set_data_from_numpy(np.array([1], dtype=np.int32))
    try:
        with pytest.raises(InferenceServerException) as refused:
            tc.infer("plain", [item], sequence_id=7, sequence_start=True)
        assert "sequence_id" in refused.value.message()
        assert refused.value.status() in ("400", "StatusCode.INVALID_ARGUMENT")
    finally:
        tc.close()


def test_a_new_sequence_waits_for_a_slot_and_an_idle_one_is_ended(server: ServerThread) -> None:
    """acc_one runs one sequence at a time and ends it after 0.3 s without a request."""
    tc = client(server, "http")
    try:
        assert send(tc, "http", "acc_one", 1, 11, start=True) == 1
        waited: queue.Queue[tuple[float, int]] = queue.Queue()
        began = time.monotonic()

        def start_second() -> None:  # its own client: tritonclient's HTTP client stays in its thread
            other = client(server, "http")
            total = send(other, "http", "acc_one", 40, 12, start=True)
            waited.put((time.monotonic(), total))
            other.close()

        second = threading.Thread(target=start_second)
        second.start()
        time.sleep(0.1)
        assert send(tc, "http", "acc_one", 2, 11, end=True) == 3  # sequence 11 ends: 12 takes its slot
        second.join(10)
        answered_at, total = waited.get_nowait()
        assert total == 40 and answered_at - began >= 0.1
        time.sleep(0.6)  # sequence 12 sends nothing more: ended as idle
        with pytest.raises(InferenceServerException) as ended:
            send(tc, "http", "acc_one", 1, 12)
        assert "must specify 'sequence_start'" in ended.value.message()
        assert send(tc, "http", "acc_one", 3, 13, start=True, end=True) == 3  # the slot is free again
    finally:
        tc.close()


def test_interleaved_sequences_on_one_grpc_stream(server: ServerThread) -> None:
    """Triton's sequence clients stream: several sequences' requests interleaved on one
    ModelStreamInfer, each answer matched by its request id."""
    answers: queue.Queue[Any] = queue.Queue()
    tc = tgrpc.InferenceServerClient(url=server.grpc_target)
    tc.start_stream(callback=lambda result, error: answers.put(error or result))
    sequences = {5001: [1, 2, 3], 5002: [10, 20, 30], 5003: [100, 200, 300]}
    try:
        for step in range(3):
            for sid, vals in sequences.items():
                item = tgrpc.InferInput("INPUT", [1, 1], "INT32")
                item.set_data_from_numpy(np.array([[vals[step]]], dtype=np.int32))
                tc.async_stream_infer(
                    "acc_direct",
                    [item],
                    request_id=f"{sid}-{step}",
                    sequence_id=sid,
                    sequence_start=step == 0,
                    sequence_end=step == 2,
                )
        got = {}
        for _ in range(9):
            result = answers.get(timeout=20)
            assert not isinstance(result, InferenceServerException), result
            got[result.get_response().id] = int(result.as_numpy("OUTPUT").reshape(-1)[0])
    finally:
        tc.stop_stream()
        tc.close()
    for sid, vals in sequences.items():
        assert [got[f"{sid}-{step}"] for step in range(3)] == running_sums(vals)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_the_model_config_shows_the_sequence_batching(server: ServerThread, protocol: str) -> None:
    tc = client(server, protocol)
    try:
        direct = tc.get_model_config("acc_direct", **({"as_json": True} if protocol == "grpc" else {}))
        oldest = tc.get_model_config("acc_oldest", **({"as_json": True} if protocol == "grpc" else {}))
        metadata = tc.get_server_metadata(**({"as_json": True} if protocol == "grpc" else {}))
    finally:
        tc.close()
    direct = direct.get("config", direct)
    oldest = oldest.get("config", oldest)
    assert "dynamic_batching" not in direct and "dynamicBatching" not in direct
    sequence = direct.get("sequence_batching") or direct["sequenceBatching"]
    assert "direct" in sequence
    assert (
        str(sequence.get("max_sequence_idle_microseconds", sequence.get("maxSequenceIdleMicroseconds")))
        == "5000000"
    )
    controls = sequence.get("control_input") or sequence["controlInput"]
    assert [c["name"] for c in controls] == ["START", "END", "READY", "CORRID"]
    corrid = controls[3]["control"][0]
    assert corrid.get("data_type", corrid.get("dataType")) == "TYPE_UINT64"
    assert controls[0]["control"][0].get(
        "int32_false_true", controls[0]["control"][0].get("int32FalseTrue")
    ) == [0, 1]
    old = oldest.get("sequence_batching") or oldest["sequenceBatching"]
    strategy = old["oldest"]
    assert strategy.get("max_candidate_sequences", strategy.get("maxCandidateSequences")) == 4
    corrid = (old.get("control_input") or old["controlInput"])[3]["control"][0]
    assert corrid.get("data_type", corrid.get("dataType")) == "TYPE_STRING"
    assert "sequence" in metadata["extensions"]


def test_a_control_input_named_as_a_declared_input_stops_start_up(tmp_path: Any) -> None:
    from grps_py.core.config import parse_inference_settings
    from grps_py.core.errors import ConfigError

    model = {
        "name": "m",
        "version": "1.0",
        "inferer_type": "customized",
        "inferer_name": "m",
        "inputs": [{"name": "START", "datatype": "INT32", "shape": [1]}],
        "sequence_batching": {"control_inputs": {"start": "START"}},
    }
    data = {"models": [model], "dag": {"name": "d", "nodes": [{"name": "n", "model": "m-1.0"}]}}
    with pytest.raises(ConfigError, match="control tensor names that are not declared inputs"):
        parse_inference_settings(data, "inference.yml", tmp_path)

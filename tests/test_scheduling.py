"""Scheduling over HTTP and gRPC: batch formation, error isolation, mixed shapes, instances, the
bounded queue, timeouts while queued, priorities, cancellation, batched streaming, warmup."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
import httpx
import numpy as np
import pytest
import yaml

from grps_py.protos import grps_pb2, grps_pb2_grpc
from oip_clients import OipClient
from support import GRPC_CATEGORY, HTTP_CATEGORY, PROJECTS, ServerThread, start_project

SCHED = PROJECTS / "sched"


@pytest.fixture(scope="module")
def sched() -> Iterator[ServerThread]:
    server = start_project(SCHED)
    yield server
    server.stop()


def models() -> Any:
    return sys.modules["sched_models"]


def log(name: str) -> list[Any]:
    return list(models().LOG.get(name, []))


@pytest.fixture(autouse=True)
def fresh_log(sched: ServerThread) -> Iterator[None]:
    models().LOG.clear()
    models().RELEASE.clear()
    yield
    models().RELEASE.set()  # never leave a held instance behind
    # ...and let its holder finish: a HOLDING still set from this test would let the next test's
    # hold() return before its own request holds the instance.
    deadline = time.monotonic() + 10
    while models().HOLDING.is_set() and time.monotonic() < deadline:
        time.sleep(0.01)


class Grps:
    """The grps API over one protocol: (category, str_data or error message)."""

    def __init__(self, protocol: str, server: ServerThread) -> None:
        self.protocol = protocol
        self.server = server

    def predict(
        self, model: str, text: str = "", priority: int = 0, timeout_s: float | None = None
    ) -> tuple[str, str, dict[str, str]]:
        if self.protocol == "http":
            headers = {}
            if priority:
                headers["Grps-Priority"] = str(priority)
            if timeout_s:
                headers["Grps-Timeout-Us"] = str(int(timeout_s * 1e6))
            reply = httpx.post(
                f"{self.server.http_url}/grps/v1/infer/predict?model={model}-1",
                json={"str_data": text},
                headers=headers,
                timeout=30,
            )
            body = reply.json()
            category = HTTP_CATEGORY[reply.status_code]
            message = body.get("str_data", "") if category == "ok" else body["status"]["msg"]
            return category, message, dict(reply.headers)
        with grpc.insecure_channel(self.server.grpc_target) as channel:
            stub = grps_pb2_grpc.GrpsServiceStub(channel)
            metadata = [("grps-priority", str(priority))] if priority else None
            try:
                msg = grps_pb2.GrpsMessage(model=f"{model}-1", str_data=text)
                reply = stub.Predict(msg, timeout=timeout_s, metadata=metadata)  # None: no deadline
            except grpc.RpcError as err:  # the client's own deadline
                return GRPC_CATEGORY[err.code()], err.details(), {}
            if reply.status.status == grps_pb2.Status.FAILURE:  # grps's failure answer: its HTTP status
                return HTTP_CATEGORY[reply.status.code], reply.status.msg, {}
            return "ok", reply.str_data, {}


@pytest.fixture(params=["http", "grpc"])
def grps(request: pytest.FixtureRequest, sched: ServerThread) -> Grps:
    return Grps(request.param, sched)


class Oip:
    """tritonclient over one protocol; a client per call, since tritonclient's are not thread-safe."""

    def __init__(self, protocol: str, server: ServerThread) -> None:
        self.protocol = protocol
        self.server = server

    def infer(self, model: str, arrays: dict[str, np.ndarray]) -> Any:
        client = OipClient(self.protocol, self.server)
        try:
            return client.infer(model, arrays)
        finally:
            client.close()


@pytest.fixture(params=["http", "grpc"])
def oip(request: pytest.FixtureRequest, sched: ServerThread) -> Oip:
    return Oip(request.param, sched)


def concurrently(calls: list[Callable[[], Any]], stagger_s: float = 0.0) -> list[Any]:
    with ThreadPoolExecutor(len(calls)) as pool:
        futures = []
        for call in calls:
            futures.append(pool.submit(call))
            time.sleep(stagger_s)
        return [f.result(timeout=60) for f in futures]


def hold(grps: Grps, model: str) -> threading.Thread:
    """Occupy the model's single instance until RELEASE is set."""
    thread = threading.Thread(target=grps.predict, args=(model, "hold"), daemon=True)
    thread.start()
    assert models().HOLDING.wait(10)
    return thread


def wait_submitted(sched: ServerThread, key: str, before: int) -> None:
    """Until one more request reached the model's scheduler than `before`."""
    stats = sched.server.executor.stats
    deadline = time.monotonic() + 10
    while stats.model(key).queued <= before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert stats.model(key).queued > before


# -- batch formation ---------------------------------------------------------------------------


def test_batches_never_exceed_max_rows_and_answers_split_back(oip: Oip) -> None:
    inputs = [np.full((3, 2), i, np.float32) for i in range(12)]
    answers = concurrently([lambda x=x: oip.infer("rows", {"x": x}) for x in inputs])
    for x, answer in zip(inputs, answers, strict=True):
        np.testing.assert_array_equal(answer.outputs["y"], x * 2)
    rows = [r for r, _ in log("rows")]
    assert sum(rows) == 36 and max(rows) <= 8 and max(rows) == 6  # two 3-row requests fit, three do not


def test_model_metadata_reports_the_batches_formed(oip: Oip, sched: ServerThread) -> None:
    def scheduler_stats() -> dict[str, Any]:
        reply = httpx.post(
            f"{sched.http_url}/grps/v1/metadata/model", json={"str_data": "rows-1"}, timeout=30
        )
        return yaml.safe_load(reply.json()["str_data"])["scheduler"]  # type: ignore[no-any-return]

    before = scheduler_stats()
    concurrently([lambda: oip.infer("rows", {"x": np.ones((2, 2), np.float32)}) for _ in range(4)])
    after = scheduler_stats()
    assert after["rows_run"] - before["rows_run"] == 8
    assert 1 <= after["batches_run"] - before["batches_run"] < 4  # at least two of them went together
    assert after["recent_batch_rows"]["max"] >= 4


def test_a_preferred_size_goes_before_the_timeout(oip: Oip) -> None:
    # The batch timeout is an hour: the four requests are answered (within the test's timeout) only
    # because the preferred size sent them, and they went as one batch.
    concurrently([lambda: oip.infer("preferred", {"x": np.ones((1, 2), np.float32)}) for _ in range(4)])
    assert log("preferred") == [(4, (2,))]


def test_a_lone_request_goes_when_its_timeout_passes(oip: Oip) -> None:
    answer = oip.infer("rows", {"x": np.ones((2, 2), np.float32)})
    assert not answer.error and log("rows") == [(2, (2,))]


def test_more_rows_than_a_batch_holds_is_invalid(oip: Oip) -> None:
    answer = oip.infer("rows", {"x": np.ones((9, 2), np.float32)})
    assert answer.error == "invalid" and "9 rows" in answer.message


def test_mixed_shapes_batch_only_with_compatible_ones(oip: Oip) -> None:
    inputs = [np.full((1, 2 + i % 2), i, np.float32) for i in range(8)]
    answers = concurrently([lambda x=x: oip.infer("rows", {"x": x}) for x in inputs])
    for x, answer in zip(inputs, answers, strict=True):
        np.testing.assert_array_equal(answer.outputs["y"], x * 2)
    shapes = {shape for _, shape in log("rows")}
    assert shapes == {(2,), (3,)} and max(r for r, _ in log("rows")) > 1


# -- errors stay with their request --------------------------------------------------------------


def test_pre_and_post_processing_failures_fail_alone(grps: Grps) -> None:
    texts = ["ok1", "bad-pre", "bad-post", "ok2"]
    results = concurrently([lambda t=t: grps.predict("fragile", t) for t in texts])
    assert results[0][:2] == ("ok", "ok1!") and results[3][:2] == ("ok", "ok2!")
    assert results[1][0] == "internal" and "preprocess refused" in results[1][1]
    assert results[2][0] == "internal" and "postprocess refused" in results[2][1]
    assert max(log("fragile")) >= 2  # they really were batched together


# -- instances ---------------------------------------------------------------------------------


def test_instances_run_in_parallel_on_their_own_threads(grps: Grps) -> None:
    results = concurrently([lambda: grps.predict("sleepy") for _ in range(3)])
    assert all(category == "ok" for category, _, _ in results)
    assert len({text for _, text, _ in results}) == 3  # three worker threads
    assert log("sleepy_peak") == [3]


# -- admission control -----------------------------------------------------------------------------


def test_a_full_queue_answers_at_once(grps: Grps, sched: ServerThread) -> None:
    """gate: one instance holding a request, the next one handed to its thread, a queue of two."""
    holder = hold(grps, "gate")
    threading.Timer(1.5, models().RELEASE.set).start()  # the accepted ones run after this
    results = concurrently([lambda i=i: grps.predict("gate", f"q{i}") for i in range(5)], stagger_s=0.05)
    refused = [r for r in results if r[0] == "unavailable"]
    assert len(refused) == 2 and all("queue is full" in r[1] for r in refused)
    if grps.protocol == "http":
        assert all(r[2].get("retry-after") == "1" for r in refused)
    holder.join(10)
    assert sorted(log("gate")) == sorted(r[1] for r in results if r[0] == "ok")
    assert len(log("gate")) == 3


def test_a_request_that_times_out_in_the_queue_never_runs(grps: Grps, sched: ServerThread) -> None:
    holder = hold(grps, "gate")
    queued = sched.server.executor.stats.model("gate-1").queued
    # A timeout long enough for the request to reach the server on a loaded machine: one that ran out
    # on the client before the server read it would test nothing.
    stats = sched.server.executor.stats.model("gate-1")
    dropped = sum(stats.dropped.values())
    category, _, _ = grps.predict("gate", "late", timeout_s=1.0)
    assert category == "timeout"
    assert stats.queued > queued  # it was queued, then dropped
    # The client's deadline and the server's end together: release the instance once the server
    # dropped the request (its deadline, or the client's cancel over gRPC), not before.
    deadline = time.monotonic() + 10
    while sum(stats.dropped.values()) == dropped and time.monotonic() < deadline:
        time.sleep(0.02)
    models().RELEASE.set()
    holder.join(10)
    assert grps.predict("gate", "after")[0] == "ok"
    assert "late" not in log("gate") and "after" in log("gate")


def test_the_model_default_timeout(grps: Grps, sched: ServerThread) -> None:
    holder = hold(grps, "gate_timeout")
    category, message, _ = grps.predict("gate_timeout", "late")
    assert category == "timeout" and "gate_timeout" in message
    models().RELEASE.set()
    holder.join(10)
    assert "late" not in log("gate_timeout")


def test_oip_timeout_parameter(sched: ServerThread, grps: Grps) -> None:
    holder = hold(grps, "gate")
    for protocol in ("http", "grpc"):
        client = OipClient(protocol, sched)
        x = client.inputs({"t": np.array([b"late"], dtype=object)})
        with pytest.raises(Exception) as info:
            client.client.infer("gate", x, timeout=100_000)
        assert "timed out" in str(info.value) or "Deadline" in str(info.value)
        client.close()
    models().RELEASE.set()
    holder.join(10)
    assert log("gate") == []


# -- priorities ------------------------------------------------------------------------------------


def test_higher_priority_runs_first(grps: Grps, sched: ServerThread) -> None:
    holder = hold(grps, "prio")
    calls = [lambda i=i: grps.predict("prio", f"low{i}") for i in range(3)]
    calls += [lambda i=i: grps.predict("prio", f"high{i}", priority=1) for i in range(3)]
    threading.Timer(1.0, models().RELEASE.set).start()
    concurrently(calls, stagger_s=0.05)
    holder.join(10)
    ran = log("prio")  # within a level the order is arrival order, which a loaded machine may shuffle
    assert set(ran[:3]) == {"high0", "high1", "high2"} and set(ran[3:]) == {"low0", "low1", "low2"}


def test_lower_levels_age_instead_of_starving(grps: Grps, sched: ServerThread) -> None:
    """aging: priority_aging_us is 200 ms, so a level-2 request that waited 500 ms counts as level 0."""
    holder = hold(grps, "aging")
    threading.Timer(1.2, models().RELEASE.set).start()
    concurrently(
        [lambda: grps.predict("aging", "old-low"), lambda: grps.predict("aging", "new-high", priority=1)], 0.5
    )
    holder.join(10)
    assert log("aging") == ["old-low", "new-high"]


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_oip_priority_parameter(sched: ServerThread, protocol: str) -> None:
    holder = hold(Grps("grpc", sched), "prio")

    def send(name: str, priority: int) -> None:
        client = OipClient(protocol, sched)
        client.client.infer("prio", client.inputs({name: np.array([1], np.int32)}), priority=priority)
        client.close()

    threading.Timer(1.0, models().RELEASE.set).start()
    concurrently([lambda: send("low", 0), lambda: send("high", 1)], stagger_s=0.1)
    holder.join(10)
    assert log("prio") == ["high", "low"]  # the gate model records the input's name


# -- cancellation --------------------------------------------------------------------------------


def test_a_client_that_goes_away_leaves_the_queue(grps: Grps, sched: ServerThread) -> None:
    holder = hold(grps, "gate")
    before = sched.server.executor.stats.model("gate-1").dropped["cancelled"]
    before_submitted = sched.server.executor.stats.model("gate-1").queued
    if grps.protocol == "http":
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(
                f"{sched.http_url}/grps/v1/infer/predict?model=gate-1", json={"str_data": "gone"}, timeout=0.3
            )
    else:
        with grpc.insecure_channel(sched.grpc_target) as channel:
            call = grps_pb2_grpc.GrpsServiceStub(channel).Predict.future(
                grps_pb2.GrpsMessage(model="gate-1", str_data="gone")
            )
            wait_submitted(sched, "gate-1", before_submitted)
            call.cancel()
    deadline = time.monotonic() + 10
    while (
        sched.server.executor.stats.model("gate-1").dropped["cancelled"] == before
        and time.monotonic() < deadline
    ):
        time.sleep(0.02)
    assert sched.server.executor.stats.model("gate-1").dropped["cancelled"] == before + 1
    models().RELEASE.set()
    holder.join(10)
    assert "gone" not in log("gate")


# -- streaming ---------------------------------------------------------------------------------------


def test_batched_streaming_streams_per_context(sched: ServerThread) -> None:
    def stream_http(text: str) -> list[str]:
        with httpx.stream(
            "POST",
            f"{sched.http_url}/grps/v1/infer/predict?model=stream_batch-1&streaming=true",
            json={"str_data": text},
            timeout=30,
        ) as reply:
            return [
                httpx.Response(200, content=line).json()["str_data"] for line in reply.iter_lines() if line
            ]

    def stream_grpc(text: str) -> list[str]:
        with grpc.insecure_channel(sched.grpc_target) as channel:
            stub = grps_pb2_grpc.GrpsServiceStub(channel)
            msg = grps_pb2.GrpsMessage(model="stream_batch-1", str_data=text)
            return [part.str_data for part in stub.PredictStreaming(msg, timeout=30)]

    results = concurrently([lambda: stream_http("a"), lambda: stream_grpc("b"), lambda: stream_http("c")])
    assert results == [["a:0", "a:1"], ["b:0", "b:1"], ["c:0", "c:1"]]
    assert max(log("stream_batch")) >= 2


# -- warmup --------------------------------------------------------------------------------------------


def test_warmup_gates_readiness() -> None:
    server = ServerThread(lambda: _warm_server())
    started = server.start_in_background()
    try:
        deadline = time.monotonic() + 30
        while not server.server.http_port and time.monotonic() < deadline:
            time.sleep(0.01)
        seen_not_ready = False
        while not started.done() and time.monotonic() < deadline:
            ready = httpx.get(f"{server.http_url}/v2/health/ready", timeout=5).status_code
            seen_not_ready |= ready == 503
            assert ready == 503 or started.done()
            time.sleep(0.05)
        started.result(30)
        assert seen_not_ready
        assert httpx.get(f"{server.http_url}/v2/health/ready", timeout=5).status_code == 200
        assert log("warm") == [(2, (3,))] * 3
    finally:
        server.stop()


def test_a_failing_warmup_stops_start_up() -> None:
    from grps_py.core.errors import ModelLoadError

    conf = SCHED / "conf" / "inference_warmup_bad.yml"
    with pytest.raises(
        ModelLoadError, match="model 'warm-1' failed its warmup: model 'warm-1' failed: KeyError: 'x'"
    ):
        start_project(SCHED, inference_conf=conf)


def _warm_server() -> Any:
    from grps_py.server import GrpsServer

    return GrpsServer.from_project(SCHED, inference_conf=SCHED / "conf" / "inference_warmup.yml")

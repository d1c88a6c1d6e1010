"""Streams are bounded end to end: a client that does not read holds at most a few buffers' worth of
messages, its model's push waits, and after `limits.stream_stall_timeout_s` without progress the stream
is stopped (the model sees `if_disconnected()`, the request ends and is recorded as client-gone).

Each attack below grew the server by hundreds of MB before streams were bounded. The server runs in
this process, so its memory is this process's resident set (/proc/self/statm)."""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import grpc
import httpx
import numpy as np
import orjson
import pytest

from grps_py.protos import grps_pb2, grps_pb2_grpc
from grps_py.protos import open_inference_pb2 as oip_pb2
from grps_py.protos import open_inference_pb2_grpc as oip_pb2_grpc
from support import PROJECTS, Recorder, ServerThread, start_project, wait_for

PROJECT = PROJECTS / "backpressure"
STALL_S = 1.5  # limits.stream_stall_timeout_s in the project's server.yml
BUFFER = 8  # limits.stream_buffer_messages
MAX_GROWTH_MB = 50  # unbounded, each attack grew the server by hundreds of MB within seconds
CLIENT_GONE = 499
PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_mb() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * PAGE / 2**20


def models() -> Any:
    return sys.modules["backpressure_models"]


@pytest.fixture(scope="module")
def server() -> Iterator[ServerThread]:
    running = start_project(PROJECT)
    yield running
    running.stop()


@pytest.fixture(scope="module")
def records(server: ServerThread) -> Recorder:
    recorder = Recorder()
    server.server.executor.telemetry.add(recorder)
    return recorder


class Peak:
    """The resident set's growth over a baseline, sampled until `done` (or `limit_s`)."""

    def __init__(self) -> None:
        self.base = rss_mb()
        self.peak = self.base

    def watch(self, done: threading.Event, limit_s: float) -> float:
        """Sample until `done` is set; the seconds it took (`limit_s` when it never was)."""
        started = time.monotonic()
        while not done.is_set() and time.monotonic() - started < limit_s:
            self.peak = max(self.peak, rss_mb())
            time.sleep(0.02)
        self.peak = max(self.peak, rss_mb())
        return time.monotonic() - started

    @property
    def growth_mb(self) -> float:
        return self.peak - self.base


def serves_others(server: ServerThread) -> None:
    """A normal streaming request on each transport is answered whole while (or after) one stalls."""
    with httpx.Client(base_url=server.http_url, timeout=10) as http:
        lines = http.post(
            "/grps/v1/infer/predict?streaming=true", json={"model": "bp_count-1", "str_data": "3"}
        ).text.splitlines()
    assert [orjson.loads(line)["str_data"] for line in lines] == ["0", "1", "2"]
    with grpc.insecure_channel(server.grpc_target) as channel:
        stub = grps_pb2_grpc.GrpsServiceStub(channel)
        got = stub.PredictStreaming(grps_pb2.GrpsMessage(model="bp_count-1", str_data="3"), timeout=10)
        assert [m.str_data for m in got] == ["0", "1", "2"]


def check_flood_stopped(run: Any, took_s: float, peak: Peak) -> None:
    assert run.done.is_set(), f"the model still streams after {took_s:.1f} s ({run.pushes} messages pushed)"
    assert run.saw_disconnect, f"the model stopped without seeing if_disconnected() ({run.pushes} pushed)"
    # Its pushes waited: only what the transport's buffers hold got out, not the cap (30000 messages).
    assert run.pushes < 2000, run.pushes
    assert peak.growth_mb < MAX_GROWTH_MB, f"grew {peak.growth_mb:.0f} MB"


# -- (a) HTTP ?streaming=true, a client that never reads -------------------------------------------
@pytest.mark.parametrize("model", ["bp_flood-1", "bp_async_flood-1"])  # on a thread; async, on the loop
def test_http_stream_to_a_client_that_never_reads_is_bounded_and_stopped(
    server: ServerThread, records: Recorder, model: str
) -> None:
    run_name, rid = f"http-never-reads-{model}", f"bp-http-stall-{model}"
    peak = Peak()
    body = orjson.dumps({"model": model, "str_data": run_name})
    head = (
        "POST /grps/v1/infer/predict?streaming=true HTTP/1.1\r\nHost: test\r\n"
        f"Content-Type: application/json\r\nX-Request-Id: {rid}\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)
    try:
        sock.connect(("127.0.0.1", server.server.http_port))
        sock.sendall(head.encode() + body)
        run = wait_for(lambda: models().FLOODS.get(run_name))
        took_s = peak.watch(run.done, STALL_S + 8)
        check_flood_stopped(run, took_s, peak)
        # The request ended: the connection was aborted, and the record says the client went away.
        assert records.record(rid).status == CLIENT_GONE
        sock.settimeout(10)
        received = 0
        with contextlib.suppress(ConnectionResetError):
            while chunk := sock.recv(1 << 20):  # what the kernel held, then the end (or a reset)
                received += len(chunk)
        assert received < run.pushes * len(models().CHUNK) + 4096
    finally:
        sock.close()
    serves_others(server)


# -- (b) gRPC PredictStreaming, a client that never reads -------------------------------------------
def test_grpc_stream_to_a_client_that_never_reads_is_bounded_and_stopped(
    server: ServerThread, records: Recorder
) -> None:
    run_name, rid = "grpc-never-reads", "bp-grpc-stall"
    peak = Peak()
    with grpc.insecure_channel(server.grpc_target) as channel:
        stub = grps_pb2_grpc.GrpsServiceStub(channel)
        call = stub.PredictStreaming(
            grps_pb2.GrpsMessage(model="bp_flood-1", str_data=run_name), metadata=(("x-request-id", rid),)
        )
        try:
            run = wait_for(lambda: models().FLOODS.get(run_name))
            took_s = peak.watch(run.done, STALL_S + 8)
            check_flood_stopped(run, took_s, peak)
            assert records.record(rid).status == CLIENT_GONE
            # Read now: what was in flight arrives, then the RPC's end, which says why.
            received = 0
            with pytest.raises(grpc.RpcError) as ended:
                for _ in call:
                    received += 1
            assert ended.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
            assert "did not read" in (ended.value.details() or "")
            assert received <= run.pushes
        finally:
            call.cancel()
    serves_others(server)


# -- (c) ModelStreamInfer, a client that sends forever and never reads ------------------------------
def infer_request(values: np.ndarray) -> oip_pb2.ModelInferRequest:
    request = oip_pb2.ModelInferRequest(model_name="bp_echo", model_version="1")
    request.inputs.add(name="x", datatype="FP32", shape=list(values.shape))
    request.raw_input_contents.append(values.tobytes())
    return request


def test_model_stream_infer_client_that_never_reads_is_bounded_and_stopped(
    server: ServerThread, records: Recorder
) -> None:
    sent, stop = [0], threading.Event()
    rid = "bp-bidi-stall"
    payload = np.arange(4096, dtype=np.float32)  # 16 KiB per request, and per answer

    def requests() -> Iterator[oip_pb2.ModelInferRequest]:
        while not stop.is_set() and sent[0] < 20_000:  # unbounded, the server read them all
            sent[0] += 1
            yield infer_request(payload)

    echoed_before = models().ECHOED[0]
    peak = Peak()
    with grpc.insecure_channel(server.grpc_target) as channel:
        stub = oip_pb2_grpc.GRPCInferenceServiceStub(channel)
        call = stub.ModelStreamInfer(requests(), metadata=(("x-request-id", rid),))
        try:
            # Just short of the stall timeout: the server stopped reading, and the client's sends wait on
            # HTTP/2 flow control (unbounded, the server had read ~2000 requests a second).
            took_s = peak.watch(stop, STALL_S * 0.9)
            echoed = models().ECHOED[0] - echoed_before
            assert echoed < 1000, f"the server took {echoed} requests of a client that reads nothing"
            assert sent[0] < 2000, f"the client could send {sent[0]} requests"
            assert peak.growth_mb < MAX_GROWTH_MB, f"grew {peak.growth_mb:.0f} MB in {took_s:.1f} s"
            # After the stall timeout the RPC is ended: its requests still in flight are cancelled (and
            # recorded as such), and the client gets a status that says why once it reads what was sent.
            wait_for(
                lambda: any(
                    r.request_id.startswith(rid) and r.status == CLIENT_GONE for r in records.records
                ),
                STALL_S * 4,
            )
            received = 0
            with pytest.raises(grpc.RpcError) as ended:
                for _ in call:
                    received += 1
            assert ended.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED, ended.value
            assert "did not read" in (ended.value.details() or "")
            assert received <= echoed
        finally:
            stop.set()
            call.cancel()
    serves_others(server)


# -- (d) a client that reads gets every message, in order -------------------------------------------
def test_a_client_that_reads_gets_every_message_in_order(server: ServerThread) -> None:
    count = 3000  # far more than the stream's buffer (8): the model's pushes wait for the client
    with (
        httpx.Client(base_url=server.http_url, timeout=30) as http,
        http.stream(
            "POST",
            "/grps/v1/infer/predict?streaming=true",
            json={"model": "bp_count-1", "str_data": str(count)},
        ) as reply,
    ):
        got = [orjson.loads(line)["str_data"] for line in reply.iter_lines()]
    assert got == [str(i) for i in range(count)]
    with grpc.insecure_channel(server.grpc_target) as channel:
        stub = grps_pb2_grpc.GrpsServiceStub(channel)
        stream = stub.PredictStreaming(
            grps_pb2.GrpsMessage(model="bp_count-1", str_data=str(count)), timeout=30
        )
        assert [m.str_data for m in stream] == [str(i) for i in range(count)]
        # ModelStreamInfer: many more requests than the stream's bound, every answer back, each once.
        oip = oip_pb2_grpc.GRPCInferenceServiceStub(channel)
        sent = [np.full(4, i, dtype=np.float32) for i in range(200)]
        answers = oip.ModelStreamInfer((infer_request(x) for x in sent), timeout=30)
        firsts = []
        for answer in answers:
            assert not answer.error_message, answer.error_message
            firsts.append(int(np.frombuffer(answer.infer_response.raw_output_contents[0], np.float32)[0]))
    assert sorted(firsts) == list(range(200))

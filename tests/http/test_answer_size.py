"""limits.http_answer_bytes: an HTTP answer is judged from its tensors before it is encoded.

A model answering more than an HTTP answer may take (a broadcast view of 4 bytes claiming 4 GiB made
orjson fail an allocation and the process die) answers 500 naming the limit on every HTTP path, the
server goes on serving, gRPC refuses the same answers as before (RESOURCE_EXHAUSTED), and answers under
the limit are unchanged. The estimators are held to the encoders: never below what they write.
"""

from __future__ import annotations

import base64
import re
import subprocess
import sys
import threading
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import ml_dtypes
import numpy as np
import orjson
import pytest

from grps_py.codecs import answer_size, grps_json, oip_generate, oip_json
from grps_py.codecs.answer_size import AnswerTooLarge, check_answer
from grps_py.core.config import InterfaceSettings, ServerSettings
from grps_py.core.oip import OipResponse
from grps_py.core.protection import LimitsSettings
from grps_py.core.types import Payload, Tensor
from grps_py.http.policy import http_answer_limit
from grps_py.protos import grps_pb2, grps_pb2_grpc, open_inference_pb2, open_inference_pb2_grpc
from support import PROJECTS, ServerThread, start_project

PROJECT = PROJECTS / "answer_size"
MIB = 1 << 20
LIMIT = MIB  # conf/server.yml's limits.http_answer_bytes
LISTENING = re.compile(r"listening: http \S+:(\d+) grpc (\S+)")
X = {"gtensors": {"tensors": [{"name": "x", "dtype": "DT_FLOAT32", "shape": [1], "flat_float32": [1.0]}]}}
OIP_X = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1], "data": [1.0]}]}
BINARY = {**OIP_X, "parameters": {"binary_data_output": True}}
OCTET = {"Content-Type": "application/octet-stream"}
TOO_LARGE = re.compile(r"the answer could take (\d+) bytes .*over limits\.http_answer_bytes \((\d+) bytes\)")


def refused(message: str, limit: int = LIMIT, request_id: bool = True) -> int:
    """The estimate an AnswerTooLarge message names (checking it names the limit and the request id)."""
    found = TOO_LARGE.search(message)
    assert found is not None, message
    assert int(found.group(2)) == limit and int(found.group(1)) > limit
    assert ("[request_id=" in message) is request_id
    return int(found.group(1))


# --- the estimates, against the encoders -----------------------------------------------------------


def extreme_values() -> dict[str, np.ndarray]:
    """For each numeric dtype, the values whose JSON is longest (and a few ordinary ones)."""
    rng = np.random.default_rng(7)
    out: dict[str, np.ndarray] = {}
    for dtype in (np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64):
        info = np.iinfo(dtype)
        out[np.dtype(dtype).name] = np.array([info.min, info.max, 0, 1, info.min + 1], dtype=dtype)
    out["bool"] = np.array([False, True, False])
    floats = {
        "float16": np.arange(2**16, dtype=np.uint16).view(np.float16),  # every float16
        "float32": np.concatenate(
            [
                rng.integers(0, 2**32, 200_000, dtype=np.uint64).astype(np.uint32),
                np.arange(4096, dtype=np.uint32),  # the smallest subnormals
                np.arange(256, dtype=np.uint32) << np.uint32(23),  # powers of two
            ]
        ).view(np.float32),
        "float64": np.concatenate(
            [rng.integers(0, 2**64, 200_000, dtype=np.uint64), np.arange(4096, dtype=np.uint64)]
        ).view(np.float64),
    }
    for name, values in floats.items():
        values = np.concatenate([values, -np.abs(values)])
        small = -np.exp(rng.uniform(np.log(1e-8), np.log(1e-4), 100_000)).astype(values.dtype)
        out[name] = np.concatenate([values, small])  # fixed notation: "-0.0000063184107"
    out["bfloat16"] = np.arange(2**16, dtype=np.uint16).view(ml_dtypes.bfloat16)
    return out


STRINGS = {
    "escapes": np.array([bytes(range(256))[:128] * 3, b'"\\', b"\n\t\r\b\f", b"\x00\x1f", b""], dtype=object),
    "unicode": np.array(["h\u00e9llo", "\u2028\U0001f600", '\x01\x02 "q"', "x" * 100], dtype=object),
    "not_utf8": np.array([b"\xff\xfe\x80", b"ok"], dtype=object),
    "numpy_str": np.array(["abc", "\u00e9\u00e9", "\n"]),
    "numpy_bytes": np.array([b"abc", b"\x01\x02", b"\xc3\xa9"]),
}


def oip_response(*tensors: Tensor, **parameters: Any) -> OipResponse:
    return OipResponse("model-\u00e9", "1", list(tensors), id="req-\n1", parameters=dict(parameters))


def assert_bound(estimate: int, body: bytes) -> None:
    assert len(body) <= estimate, (len(body), estimate)


def test_numeric_estimates_bound_every_encoding() -> None:
    huge = 1 << 62
    for name, values in extreme_values().items():
        for shape in ((values.size,), (1, values.size), (values.size, 1)):
            tensor = Tensor(f"t_{name}", values.reshape(shape))
            response = oip_response(tensor, note="x" * 100, n=1.5)
            for binary in (set(), {tensor.name}):
                body, _ = oip_json.encode_response(response, binary)
                assert_bound(answer_size.oip_infer_bytes(response, binary, huge), body)
            assert_bound(
                answer_size.oip_generate_bytes(response, huge), oip_generate.encode_generate(response)
            )
            payload = Payload.of_tensors([tensor])
            for ndarray in (False, True):
                body = grps_json.encode_response(payload, return_ndarray=ndarray)
                assert_bound(answer_size.grps_json_bytes(payload, ndarray, huge), body)


def test_string_estimates_bound_every_encoding() -> None:
    huge = 1 << 62
    for name, values in STRINGS.items():
        tensor = Tensor(name, values)
        response = oip_response(tensor)
        for binary in (set(), {name}):
            body, _ = oip_json.encode_response(response, binary)
            assert_bound(answer_size.oip_infer_bytes(response, binary, huge), body)
        assert_bound(answer_size.oip_generate_bytes(response, huge), oip_generate.encode_generate(response))
        if name != "not_utf8":  # grps strings are UTF-8 (a model error otherwise)
            payload = Payload.of_tensors([tensor])
            assert_bound(
                answer_size.grps_json_bytes(payload, False, huge), grps_json.encode_response(payload)
            )
    long_text = '\x01\n"' * 1000 + "\u00e9" * 1000
    gmap = {"s_s": {"k" * 70: long_text}, "s_b": {"b": bytes(range(256)) * 10}, "s_i64": {"i": -(2**63)}}
    gmap |= {"s_i32": {"i": -(2**31)}, "s_f": {"f": 1e-40}, "s_d": {"d": float("-inf")}}
    for payload in (Payload.of_text(long_text), Payload.of_text("\x00"), Payload.of_map(gmap)):
        assert_bound(answer_size.grps_json_bytes(payload, False, huge), grps_json.encode_response(payload))
    payload = Payload.of_bytes(bytes(range(256)) * 100)
    assert_bound(answer_size.grps_json_bytes(payload, False, huge), grps_json.encode_response(payload))


def test_bin_data_base64_bound() -> None:
    for size in (0, 1, 2, 3, 4, 1000):
        payload = Payload.of_bytes(b"\xff" * size)
        body = grps_json.encode_response(payload)
        assert b'"' + base64.b64encode(b"\xff" * size) + b'"' in body
        assert_bound(answer_size.grps_json_bytes(payload, False, 1 << 62), body)


def test_estimates_are_close_for_ordinary_answers() -> None:
    """Within a small factor of the real size, so answers well under the limit are not refused."""
    values = np.random.default_rng(1).standard_normal(100_000).astype(np.float32)
    response = oip_response(Tensor("y", values))
    body, _ = oip_json.encode_response(response, set())
    assert answer_size.oip_infer_bytes(response, set(), 1 << 62) < 2 * len(body)
    binary, _ = oip_json.encode_response(response, {"y"})
    assert answer_size.oip_infer_bytes(response, {"y"}, 1 << 62) < len(binary) + 1024
    text = "line\n" * 100_000
    assert answer_size.grps_json_bytes(Payload.of_text(text), False, 1 << 62) < len(text) * 1.2 + 1024


def test_a_giant_view_is_judged_without_reading_it() -> None:
    giant = np.broadcast_to(np.ones(1, np.float32), (1 << 30,))
    many = np.broadcast_to(np.array([b"ab"], dtype=object), (1 << 30,))
    tracemalloc.start()
    try:
        for tensor in (Tensor("y", giant), Tensor("s", many)):
            response = oip_response(tensor)
            assert answer_size.oip_infer_bytes(response, set(), LIMIT) >= 3 << 30  # 3 bytes an element
            assert answer_size.oip_infer_bytes(response, {tensor.name}, LIMIT) > LIMIT
            assert answer_size.oip_generate_bytes(response, LIMIT) > LIMIT
            assert answer_size.grps_json_bytes(Payload.of_tensors([tensor]), True, LIMIT) > LIMIT
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < MIB  # nothing of the 4 GiB (or the 2**30 strings) was read or copied
    with pytest.raises(AnswerTooLarge, match=r"limits\.http_answer_bytes \(1048576 bytes\)"):
        check_answer(answer_size.oip_infer_bytes(oip_response(Tensor("y", giant)), set(), LIMIT), LIMIT)
    check_answer(LIMIT, LIMIT)  # at the limit is fine


def test_the_default_limit_is_the_grpc_message_limit() -> None:
    def limit(**limits: int) -> int:
        interface = InterfaceSettings(max_message_bytes=5000)
        return http_answer_limit(ServerSettings(interface=interface, limits=LimitsSettings(**limits)))

    assert limit() == 5000
    assert limit(grpc_message_bytes=3000) == 3000
    assert limit(grpc_message_bytes=3000, http_answer_bytes=2000) == 2000


# --- a server with limits.http_answer_bytes: 1 MiB (gRPC: 2 MiB) -----------------------------------


@pytest.fixture(scope="module")
def server() -> Iterator[ServerThread]:
    server = start_project(PROJECT, server_conf=PROJECT / "conf" / "server.yml")
    yield server
    server.stop()


@pytest.fixture
def http(server: ServerThread) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.http_url, timeout=60) as client:
        yield client


def assert_small_answers(http: httpx.Client) -> None:
    """The server still serves, and answers under the limit are as they were."""
    reply = http.post("/v2/models/small/infer", json=OIP_X)
    assert reply.status_code == 200
    assert reply.json()["outputs"] == [{"name": "y", "datatype": "FP32", "shape": [4], "data": [0, 1, 2, 3]}]
    binary = http.post("/v2/models/small/infer", json=BINARY)
    length = int(binary.headers["Inference-Header-Content-Length"])
    assert np.frombuffer(binary.content[length:], np.float32).tolist() == [0, 1, 2, 3]
    grps = http.post("/grps/v1/infer/predict", json={"model": "small", **X}).json()
    assert grps["gtensors"]["tensors"][0]["flat_float32"] == [0, 1, 2, 3]
    ndarray = http.post("/grps/v1/infer/predict?return-ndarray=true", json={"model": "small", **X}).json()
    assert ndarray["ndarray"] == [0, 1, 2, 3]
    assert http.post("/v2/models/small/generate", json={"x": 1.0}).json()["y"] == [0, 1, 2, 3]


@pytest.mark.parametrize(
    ("model", "doc"),
    [
        ("big", OIP_X),
        ("big", BINARY),
        ("bytes", OIP_X),
        ("bytes", BINARY),
        ("text", OIP_X),
        ("strings", OIP_X),
    ],
)
def test_oip_infer_over_the_limit_answers_500(http: httpx.Client, model: str, doc: dict[str, Any]) -> None:
    reply = http.post(f"/v2/models/{model}/infer", json=doc)
    assert reply.status_code == 500, reply.text
    refused(reply.json()["error"])
    assert_small_answers(http)


def test_oip_generate_over_the_limit_answers_500(http: httpx.Client) -> None:
    for model in ("big", "text", "strings", "stream"):
        reply = http.post(f"/v2/models/{model}/generate", json={"x": 1.0})
        assert reply.status_code == 500, reply.text
        refused(reply.json()["error"])
    assert_small_answers(http)


def test_generate_stream_ends_with_the_error_at_the_message_over_the_limit(http: httpx.Client) -> None:
    reply = http.post("/v2/models/stream/generate_stream", json={"x": 1.0})
    assert reply.status_code == 200
    events = [orjson.loads(line[6:]) for line in reply.text.split("\n\n") if line.startswith("data: ")]
    assert len(events) == 2 and events[0]["output"] == "small"
    refused(events[1]["error"], request_id=False)  # an event's error carries no request id
    assert_small_answers(http)


@pytest.mark.parametrize("query", ["", "?return-ndarray=true"])
def test_grps_predict_over_the_limit_answers_500(http: httpx.Client, query: str) -> None:
    for model in ("big", "text", "strings"):
        reply = http.post(f"/grps/v1/infer/predict{query}", json={"model": model, **X})
        assert reply.status_code == 500, reply.text
        status = reply.json()["status"]
        assert status["code"] == 500 and status["status"] == "FAILURE"
        refused(status["msg"])
    assert_small_answers(http)


def test_grps_bin_data_answered_raw_over_the_limit_answers_500(http: httpx.Client) -> None:
    for headers in (OCTET, {}):
        body = b"\x00\x00\x80\x3f" if headers else orjson.dumps({"model": "bytes", **X})
        reply = http.post("/grps/v1/infer/predict?model=bytes", content=body, headers=headers)
        assert reply.status_code == 500, reply.text
        estimate = refused(reply.json()["status"]["msg"])
        assert estimate == 5 * MIB  # a raw answer is its length
    assert_small_answers(http)


def test_grpc_still_refuses_the_same_answers(server: ServerThread) -> None:
    with grpc.insecure_channel(server.grpc_target) as channel:
        grps = grps_pb2_grpc.GrpsServiceStub(channel)
        msg = grps_pb2.GrpsMessage(model="big")
        msg.gtensors.tensors.add(name="x", dtype=grps_pb2.DT_FLOAT32, shape=[1], flat_float32=[1.0])
        with pytest.raises(grpc.RpcError) as err:
            grps.Predict(msg)
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        oip = open_inference_pb2_grpc.GRPCInferenceServiceStub(channel)
        request = open_inference_pb2.ModelInferRequest(model_name="big")
        request.inputs.add(name="x", datatype="FP32", shape=[1]).contents.fp32_contents.append(1.0)
        with pytest.raises(grpc.RpcError) as err:
            oip.ModelInfer(request)
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        msg.model = "small"
        assert list(grps.Predict(msg).gtensors.tensors[0].flat_float32) == [0, 1, 2, 3]  # under it: as before


def test_answers_just_under_the_limit_are_sent(http: httpx.Client) -> None:
    """900 KiB of text and 800 KiB of float32 in binary fit 1 MiB; the estimate of the same floats in
    JSON (18 bytes each at most) does not: the limit holds the worst case of the format asked for."""
    reply = http.post("/grps/v1/infer/predict", json={"model": "under_text", **X})
    assert reply.status_code == 200 and reply.json()["str_data"] == "a" * (900 * 1024)
    reply = http.post("/v2/models/under/infer", json=BINARY)
    assert reply.status_code == 200
    length = int(reply.headers["Inference-Header-Content-Length"])
    assert len(reply.content) - length == 800 * 1024
    assert (np.frombuffer(reply.content[length:], np.float32) == 0.5).all()
    reply = http.post("/v2/models/under/infer", json=OIP_X)
    assert reply.status_code == 500
    refused(reply.json()["error"])


# --- Tornado's predict handler (streaming asked by a body key) and an alias route -------------------


def test_tornado_predict_and_alias_routes_hold_the_limit() -> None:
    server = start_project(PROJECT, server_conf=PROJECT / "conf" / "server_body_ctrl.yml")
    try:
        with httpx.Client(base_url=server.http_url, timeout=60) as http:
            for path in ("/grps/v1/infer/predict", "/answer/predict"):
                for doc in ({"model": "big", **X}, {"model": "big", "stream": False, **X}):
                    reply = http.post(path, json=doc)
                    assert reply.status_code == 500, reply.text
                    refused(reply.json()["status"]["msg"])
                reply = http.post(f"{path}?model=bytes", content=b"\x00", headers=OCTET)
                assert reply.status_code == 500
                assert refused(reply.json()["status"]["msg"]) == 5 * MIB
                small = http.post(path, json={"model": "small", **X}).json()
                assert small["gtensors"]["tensors"][0]["flat_float32"] == [0, 1, 2, 3]
    finally:
        server.stop()


# --- the crash: a 4 GiB view answered over HTTP, in a server process of its own ---------------------


@pytest.fixture(scope="module")
def default_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """The project served with no limit of its own (1 GiB: the gRPC message limit), in a subprocess,
    so that a regression kills that process rather than the test run."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "grps_py.cli",
            "serve",
            str(PROJECT),
            "--server-conf",
            str(PROJECT / "conf" / "server_default.yml"),
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    port = ""
    for line in proc.stderr:
        match = LISTENING.search(line)
        if match:
            port = match.group(1)
            break
    if not port:
        proc.wait(30)
        pytest.fail(f"server did not start (exit {proc.returncode})")
    threading.Thread(target=lambda: [None for _ in proc.stderr or ()], daemon=True).start()
    try:
        yield proc, f"http://127.0.0.1:{port}"
    finally:
        proc.kill()
        proc.wait(10)


def peak_rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads the server's peak RSS from /proc")
def test_a_giant_answer_is_refused_and_the_server_lives(
    default_server: tuple[subprocess.Popen[str], str],
) -> None:
    proc, url = default_server
    limit = 1 << 30
    with httpx.Client(base_url=url, timeout=60) as http:
        calls = [
            ("/v2/models/giant/infer", OIP_X, "error"),
            ("/v2/models/giant/infer", BINARY, "error"),
            ("/v2/models/giant/generate", {"x": 1.0}, "error"),
            ("/grps/v1/infer/predict", {"model": "giant", **X}, "status"),
            ("/grps/v1/infer/predict?return-ndarray=true", {"model": "giant", **X}, "status"),
        ]
        for path, doc, key in calls:
            reply = http.post(path, json=doc)
            assert reply.status_code == 500, reply.text
            error = reply.json()[key]
            refused(error if key == "error" else error["msg"], limit)
        assert proc.poll() is None  # alive
        assert http.post("/v2/models/small/infer", json=OIP_X).status_code == 200
    assert peak_rss_bytes(proc.pid) < limit  # the 4 GiB were never built

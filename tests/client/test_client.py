"""grps_py.client against a real server: the same cases over HTTP and gRPC, plus the wire decoders."""

from __future__ import annotations

import asyncio
import socket
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc
import numpy as np
import pytest

from grps_py import status
from grps_py.client import GrpsClient, GrpsClientError, GrpsConnectionError, GrpsTimeoutError
from grps_py.client.errors import code_for_status, status_for_code
from grps_py.client.http_wire import ChunkedDecoder, StreamDecoder
from grps_py.core.types import PayloadKind
from grps_py.protos import grps_pb2
from support import ServerThread

Msg = grps_pb2.GrpsMessage
PROTOCOLS = ("http", "grpc")


def stream_log() -> dict[str, object]:
    return sys.modules["serving_models"].STREAM_LOG  # type: ignore[no-any-return]


def url_of(server: ServerThread, protocol: str) -> str:
    return server.http_url if protocol == "http" else server.grpc_target


@pytest.fixture(params=PROTOCOLS)
def client(request: pytest.FixtureRequest, basic_server: ServerThread) -> Iterator[GrpsClient]:
    with GrpsClient(url_of(basic_server, request.param), protocol=request.param, timeout=30) as c:
        yield c


def collect(stream: AsyncIterator[Any]) -> list[Any]:
    async def gather() -> list[Any]:
        return [item async for item in stream]

    return asyncio.run(gather())


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# --- predict: every kind of value comes back as the same kind --------------------------------------


def test_str_and_bytes(client: GrpsClient) -> None:
    assert client.predict("hi", model="echo-1.0") == "hi"
    assert client.predict("hi", model="upper-1.0") == "HI"
    data = bytes(range(256)) * 3
    assert client.predict(data, model="echo-1.0") == data
    assert client.predict(b"", model="echo-1.0") == b""


@pytest.mark.parametrize(
    "array",
    [
        np.arange(6, dtype=np.float32).reshape(2, 3),
        np.array([0.5, -1e300, np.inf], dtype=np.float64),
        np.array([[1.5, 2.25]], dtype=np.float16),
        np.array([-128, 127], dtype=np.int8),
        np.array([-(2**15), 2**15 - 1], dtype=np.int16),
        np.array([[-(2**31)], [2**31 - 1]], dtype=np.int32),
        np.array([-(2**63), 2**63 - 1], dtype=np.int64),
        np.array([0, 255], dtype=np.uint8),
        np.array(["a", "bé", ""], dtype=object),
        np.array(3.5, dtype=np.float32),
    ],
    ids=lambda a: str(a.dtype),
)
def test_ndarray_round_trip_keeps_dtype_and_shape(client: GrpsClient, array: np.ndarray) -> None:
    answer = client.predict(array, model="identity-1")
    assert isinstance(answer, np.ndarray)
    assert answer.dtype == array.dtype and answer.shape == array.shape
    assert answer.tolist() == array.tolist()


def test_unicode_arrays_and_bools_travel_as_grps_dtypes(client: GrpsClient) -> None:
    text = client.predict(np.array(["x", "yz"]), model="identity-1")
    assert text.dtype == object and text.tolist() == ["x", "yz"]
    flags = client.predict(np.array([True, False]), model="identity-1")
    assert flags.dtype == np.uint8 and flags.tolist() == [1, 0]  # grps has no bool dtype


def test_dict_of_arrays_and_model_selection(client: GrpsClient) -> None:
    x = np.array([[1, 2], [3, 4]], dtype=np.float32)
    dag = client.predict({"x": x})  # no model: the default DAG, double then add_one
    assert list(dag) == ["y"] and dag["y"].tolist() == (x * 2 + 1).tolist()
    doubled = client.predict({"x": x}, model="double-1.0")
    assert list(doubled) == ["x"] and doubled["x"].tolist() == (x * 2).tolist()
    pair = {"a": np.ones((1, 3), np.float32), "b": np.array([2], np.int64)}
    summed = client.predict(pair, model="typed-1")
    assert summed["sum"].tolist() == [[3.0, 3.0, 3.0]]
    both = client.predict(pair, model="identity-1")
    assert both.keys() == pair.keys() and both["b"].dtype == np.int64


def test_grps_message_in_and_out(client: GrpsClient) -> None:
    msg = Msg(model="echo-1.0")
    msg.gmap.s_s["k"] = "v"
    msg.gmap.s_i64["big"] = 2**40
    msg.gmap.s_b["raw"] = b"\x00\xff"
    reply = client.predict(msg)
    assert isinstance(reply, Msg)
    assert (reply.status.code, reply.status.status) == (200, grps_pb2.Status.SUCCESS)
    assert dict(reply.gmap.s_s) == {"k": "v"} and reply.gmap.s_i64["big"] == 2**40
    assert reply.gmap.s_b["raw"] == b"\x00\xff"


def test_model_argument_overrides_the_message_and_leaves_it_alone(client: GrpsClient) -> None:
    msg = Msg(model="echo-1.0", str_data="up")
    assert client.predict(msg, model="upper-1.0").str_data == "UP"
    assert msg.model == "echo-1.0" and not msg.HasField("status")
    tensors = Msg()
    tensors.gtensors.tensors.add(name="x", dtype=grps_pb2.DT_FLOAT32, shape=[2], flat_float32=[1, 2])
    assert list(client.predict(tensors).gtensors.tensors[0].flat_float32) == [3.0, 5.0]


def test_the_server_gets_the_timeout_as_the_request_deadline(client: GrpsClient) -> None:
    reply = client.predict(Msg(model="probe-1.0", str_data="0"), timeout=5)
    assert 0 < reply.gmap.s_d["remaining_s"] <= 5.1
    client.timeout = None  # no timeout: the server gets no deadline either
    assert client.predict(Msg(model="probe-1.0", str_data="0")).gmap.s_d["remaining_s"] == -1.0


# --- streaming --------------------------------------------------------------------------------------


def test_predict_stream_of_each_kind(client: GrpsClient) -> None:
    assert list(client.predict_stream("4", model="stream-1.0")) == [f"chunk {i}" for i in range(4)]
    rows = list(client.predict_stream({"x": np.ones((3, 2), np.float32)}, model="postprocess_streamer-1.0"))
    assert [list(row) for row in rows] == [["row"]] * 3
    assert all(row["row"].tolist() == [10.0, 10.0] for row in rows)
    assert list(client.predict_stream(b"\x00{raw}\n", model="echo-1.0")) == [b"\x00{raw}\n"]
    array = np.arange(4, dtype=np.int32)
    [answer] = list(client.predict_stream(array, model="identity-1"))
    assert answer.tolist() == array.tolist() and answer.dtype == np.int32
    messages = list(client.predict_stream(Msg(model="stream-1.0", str_data="2")))
    assert [m.str_data for m in messages] == ["chunk 0", "chunk 1"]
    assert all(m.status.status == grps_pb2.Status.SUCCESS for m in messages)


def test_predict_stream_async_of_each_kind(client: GrpsClient) -> None:
    assert collect(client.predict_stream_async("3", model="stream-1.0")) == ["chunk 0", "chunk 1", "chunk 2"]
    rows = collect(
        client.predict_stream_async({"x": np.ones((2, 2), np.float32)}, model="postprocess_streamer-1.0")
    )
    assert [row["row"].tolist() for row in rows] == [[10.0, 10.0]] * 2
    assert collect(client.predict_stream_async(b"bytes", model="echo-1.0")) == [b"bytes"]
    messages = collect(client.predict_stream_async(Msg(model="stream-1.0", str_data="2")))
    assert [m.str_data for m in messages] == ["chunk 0", "chunk 1"]


def wait_for_disconnect() -> None:
    deadline = time.monotonic() + 10
    while not stream_log()["disconnected"] and time.monotonic() < deadline:
        time.sleep(0.02)
    assert stream_log()["disconnected"] is True
    assert int(stream_log()["sent"]) < 300  # type: ignore[call-overload]


def test_leaving_a_stream_early_stops_the_model(client: GrpsClient) -> None:
    stream = client.predict_stream("300", model="stream-1.0")
    assert [next(stream), next(stream)] == ["chunk 0", "chunk 1"]
    stream.close()
    wait_for_disconnect()
    assert client.predict("after", model="echo-1.0") == "after"


def test_leaving_an_async_stream_early_stops_the_model(client: GrpsClient) -> None:
    async def two_then_leave() -> list[str]:
        stream = client.predict_stream_async("300", model="stream-1.0")
        first = [await stream.__anext__(), await stream.__anext__()]
        await stream.aclose()
        return first

    assert asyncio.run(two_then_leave()) == ["chunk 0", "chunk 1"]
    wait_for_disconnect()


# --- health and metadata ------------------------------------------------------------------------------


def test_offline_online_round_trip(client: GrpsClient) -> None:
    assert client.live() is True and client.ready() is True
    assert client.offline() is None  # type: ignore[func-returns-value]
    try:
        assert client.ready() is False
        assert client.live() is True
        assert client.predict("still served", model="echo-1.0") == "still served"
    finally:
        client.online()
    assert client.ready() is True


def test_server_and_model_metadata(client: GrpsClient) -> None:
    server = client.server_metadata()
    assert server["server"] == "grps-py" and "classifier-1.0.0" in server["models"]
    assert server["dag"]["name"] == "double_then_add_one"
    model = client.model_metadata("classifier-1.0.0")
    assert model["name"] == "classifier" and model["inferer_type"] == "onnx"


# --- errors --------------------------------------------------------------------------------------------


def test_unknown_model_is_404_with_the_servers_message(client: GrpsClient) -> None:
    for call in (
        lambda: client.predict("x", model="nope-1"),
        lambda: list(client.predict_stream("x", model="nope-1")),
        lambda: collect(client.predict_stream_async("x", model="nope-1")),
        lambda: client.model_metadata("nope-1"),
    ):
        with pytest.raises(GrpsClientError) as err:
            call()
        assert (err.value.status, err.value.code) == (404, "NOT_FOUND")
        assert err.value.message.startswith("unknown model 'nope-1'") and "request_id=" in err.value.message
        assert str(err.value).startswith("404 NOT_FOUND: unknown model 'nope-1'")


def test_bad_input_is_400(client: GrpsClient) -> None:
    wrong_shape = {"a": np.zeros((2, 2), np.float32), "b": np.zeros(2, np.int64)}
    for call in (
        lambda: client.predict(wrong_shape, model="typed-1"),
        lambda: list(client.predict_stream(wrong_shape, model="typed-1")),
    ):
        with pytest.raises(GrpsClientError) as err:
            call()
        assert (err.value.status, err.value.code) == (400, "INVALID_ARGUMENT")
        assert "input 'a' expects shape [-1, 3], got [2, 2]" in err.value.message


def test_a_message_the_server_would_refuse_is_400_on_both_protocols(client: GrpsClient) -> None:
    msg = Msg(model="echo-1.0")
    msg.gtensors.tensors.add(name="x", shape=[1], flat_float32=[1.0])  # dtype left DT_INVALID
    with pytest.raises(GrpsClientError) as err:
        client.predict(msg)
    assert err.value.status == 400 and "tensor 'x': dtype is not set" in err.value.message


def test_data_grps_cannot_carry_is_refused_before_sending(client: GrpsClient) -> None:
    with pytest.raises(GrpsClientError) as err:
        client.predict(np.array([1 + 2j]), model="identity-1")
    assert (err.value.status, err.value.code) == (400, "INVALID_ARGUMENT")
    with pytest.raises(TypeError, match="not list"):
        client.predict([1, 2], model="identity-1")  # type: ignore[type-var]


def test_model_failure_is_500_unary_and_streaming(client: GrpsClient) -> None:
    for call in (
        lambda: client.predict("x", model="raiser-1.0"),
        lambda: list(client.predict_stream("x", model="raiser-1.0")),
    ):
        with pytest.raises(GrpsClientError) as err:
            call()
        assert (err.value.status, err.value.code) == (500, "INTERNAL") and "boom" in err.value.message


def test_an_answer_of_another_kind_says_so(client: GrpsClient) -> None:
    with pytest.raises(GrpsClientError, match="answered a gmap where str was expected") as err:
        client.predict("0", model="probe-1.0")
    assert err.value.status == 500
    with pytest.raises(GrpsClientError, match="answered str_data where a numpy array was expected"):
        client.predict(np.ones(1, np.float32), model="upper-1.0")


def test_timeout_is_504(client: GrpsClient) -> None:
    with pytest.raises(GrpsClientError) as err:  # had the client waited, the gmap answer would be a 500
        client.predict("1.5", model="probe-1.0", timeout=0.2)
    assert (err.value.status, err.value.code) == (504, "DEADLINE_EXCEEDED")
    # The client's own deadline or the server's (which answers a request still running at its deadline).
    assert "within" in err.value.message
    assert client.predict("on time", model="echo-1.0") == "on time"  # the client recovers


def test_client_default_timeout_and_per_call_override(basic_server: ServerThread) -> None:
    for protocol in PROTOCOLS:
        with GrpsClient(url_of(basic_server, protocol), protocol=protocol, timeout=0.2) as impatient:
            with pytest.raises(GrpsClientError) as err:
                impatient.predict(Msg(model="probe-1.0", str_data="1.5"))
            assert err.value.code == "DEADLINE_EXCEEDED"
            assert impatient.predict(Msg(model="probe-1.0", str_data="0.4"), timeout=10).HasField("gmap")


def test_a_stream_past_its_timeout_is_504(client: GrpsClient) -> None:
    """300 messages 20 ms apart take 6 s; the deadline (1 s: time for the first ones even on a busy
    machine) ends the stream after some."""
    received: list[str] = []
    with pytest.raises(GrpsClientError) as err:
        for part in client.predict_stream("300", model="stream-1.0", timeout=1.0):
            received.append(part)
    assert err.value.code == "DEADLINE_EXCEEDED" and 0 < len(received) < 300
    with pytest.raises(GrpsClientError) as async_err:
        collect(client.predict_stream_async("300", model="stream-1.0", timeout=1.0))
    assert async_err.value.status == 504


NAMED = {"http": "HTTP", "grpc": "gRPC"}


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_connection_refused_is_a_connection_error_with_status_503(protocol: str) -> None:
    """No server answered: a GrpsConnectionError whose text says so, still 503 UNAVAILABLE for callers
    that retry on it."""
    url = f"127.0.0.1:{free_port()}"
    with GrpsClient(url, protocol=protocol, timeout=5) as nobody:
        for call in (
            lambda: nobody.predict("x"),
            lambda: list(nobody.predict_stream("x")),
            lambda: collect(nobody.predict_stream_async("x")),
            nobody.live,
            nobody.server_metadata,
        ):
            with pytest.raises(GrpsConnectionError) as err:
                call()
            assert isinstance(err.value, GrpsClientError)
            assert (err.value.status, err.value.code) == (503, "UNAVAILABLE")
            assert (err.value.connecting, err.value.reason) == (True, "connection refused")
            assert str(err.value) == f"cannot connect to {url} ({NAMED[protocol]}): connection refused"


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_an_unknown_host_is_a_connection_error(protocol: str) -> None:
    nobody = GrpsClient("no-such-host.invalid:7080", protocol=protocol, timeout=5)
    with nobody, pytest.raises(GrpsConnectionError) as err:
        nobody.live()
    named = NAMED[protocol]
    assert (
        str(err.value)
        == f"cannot connect to no-such-host.invalid:7080 ({named}): cannot resolve the host name"
    )


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_no_answer_in_time_is_a_timeout_error_with_status_504(protocol: str) -> None:
    with socket.socket() as silent:  # takes connections (the kernel does) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"127.0.0.1:{silent.getsockname()[1]}"
        with GrpsClient(url, protocol=protocol, timeout=0.3) as mute:
            for call in (lambda: mute.predict("x"), lambda: list(mute.predict_stream("x")), mute.ready):
                with pytest.raises(GrpsTimeoutError) as err:
                    call()
                assert (err.value.status, err.value.code, err.value.timeout_s) == (
                    504,
                    "DEADLINE_EXCEEDED",
                    0.3,
                )
                assert str(err.value) == f"no answer from {url} ({NAMED[protocol]}) within 0.3 s"


def test_an_error_the_server_answered_is_neither(client: GrpsClient) -> None:
    with pytest.raises(GrpsClientError) as err:
        client.predict("x", model="nope-1")
    assert not isinstance(err.value, (GrpsConnectionError, GrpsTimeoutError))


def test_bad_url_or_protocol() -> None:
    with pytest.raises(ValueError, match="protocol"):
        GrpsClient("127.0.0.1:1", protocol="ftp")
    with pytest.raises(ValueError, match="not an HTTP URL"):
        GrpsClient("ftp://127.0.0.1:1")


def test_statuses_and_codes_agree_with_the_servers_table() -> None:
    """Where rows share a status or a code, the first row says what it means (errors.ERROR_TABLE)."""
    code_of: dict[int, str] = {}
    status_of: dict[grpc.StatusCode, int] = {}
    for wire in status.ERROR_TABLE.values():
        code_of.setdefault(wire.http, wire.grpc.name)
        status_of.setdefault(wire.grpc, wire.http)
    for wire in status.ERROR_TABLE.values():
        assert code_for_status(wire.http) == code_of[wire.http]
        assert status_for_code(wire.grpc) == status_of[wire.grpc]
    assert (code_for_status(404), status_for_code(grpc.StatusCode.INVALID_ARGUMENT)) == ("NOT_FOUND", 400)
    assert code_for_status(418) == "UNKNOWN" and status_for_code(grpc.StatusCode.UNKNOWN) == 500


# --- HTTP: the keep-alive connection, and the wire decoders ----------------------------------------------


def read_request(conn: socket.socket) -> tuple[str, dict[str, str], bytes]:
    """The request line, headers (lower-cased names) and body of one request."""
    reader = conn.makefile("rb")
    request_line = reader.readline().decode().strip()
    headers = {}
    while (line := reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode().partition(":")
        headers[name.strip().lower()] = value.strip()
    return request_line, headers, reader.read(int(headers.get("content-length", 0)))


def test_http_reconnects_when_the_server_dropped_the_idle_connection() -> None:
    """A server that closes every connection after one answer, without saying so (no Connection: close)."""
    requests: list[tuple[str, dict[str, str], bytes]] = []
    with socket.create_server(("127.0.0.1", 0)) as listener:

        def serve() -> None:
            for answer in (b"one", b"two"):
                conn, _ = listener.accept()
                with conn:
                    requests.append(read_request(conn))
                    body = b'{"str_data": "%s"}' % answer
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        with GrpsClient(f"http://127.0.0.1:{listener.getsockname()[1]}/gw", timeout=5) as client:
            assert client.predict("a", model="m-1") == "one"
            time.sleep(0.1)  # the server has closed the connection by now
            assert client.predict("b", model="m-1") == "two"
        thread.join(5)
    assert [line for line, _, _ in requests] == ["POST /gw/grps/v1/infer/predict?model=m-1 HTTP/1.1"] * 2
    assert [b'"str_data":"a"' in requests[0][2], b'"str_data":"b"' in requests[1][2]] == [True, True]
    timeout_us = int(requests[0][1]["grps-timeout-us"])
    assert 4_000_000 < timeout_us <= 5_000_000 and requests[0][1]["content-type"] == "application/json"


def test_chunked_decoder_gives_whole_chunks_however_the_bytes_arrive() -> None:
    wire = b"5;ext=1\r\nhello\r\n1a\r\n" + b"x" * 26 + b"\r\n0\r\nTrailer: t\r\n\r\n"
    decoder = ChunkedDecoder()
    chunks = [chunk for i in range(len(wire)) for chunk in decoder.feed(wire[i : i + 1])]
    assert chunks == [b"hello", b"x" * 26] and decoder.done
    with pytest.raises(GrpsClientError, match="bad chunk size"):
        ChunkedDecoder().feed(b"zz\r\n")


def test_stream_decoder_reads_json_lines_raw_chunks_and_a_late_error() -> None:
    decoder = StreamDecoder()
    doc = b'{"status":{"code":200,"msg":"OK","status":"SUCCESS"},"str_data":"a"}\n'
    assert decoder.feed(doc[:10]) == [] and [p.value for p in decoder.feed(doc[10:] + doc)] == ["a", "a"]
    [raw] = decoder.feed(b'{"not": "an envelope"}')  # bin_data that happens to be JSON stays raw
    assert raw.kind is PayloadKind.BYTES and raw.value == b'{"not": "an envelope"}'
    with pytest.raises(GrpsClientError) as err:
        decoder.feed(b'{"status":{"code":500,"msg":"model failed","status":"FAILURE"}}\n')
    assert (err.value.status, err.value.code, err.value.message) == (500, "INTERNAL", "model failed")

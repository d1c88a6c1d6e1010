"""Custom HTTP routes (`interface.customized_predict_http` as a list): both body modes, every
streaming control, the answer forms model code may set, SSE end to end, and path collisions."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest

from grps_py.core.config import CustomizedPredictHttp, InterfaceSettings, ServerSettings
from grps_py.core.errors import ConfigError
from grps_py.server import GrpsServer
from support import PROJECTS, ServerThread, start_project

PROJECT = PROJECTS / "custom_http"


@pytest.fixture(scope="module")
def server() -> Iterator[ServerThread]:
    running = start_project(PROJECT)
    yield running
    running.stop()


@pytest.fixture
def http(server: ServerThread) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.http_url, timeout=30) as client:
        yield client


# -- customized_body: false (an alias of /grps/v1/infer/predict) ----------------------------------


def test_alias_route_serves_its_pinned_model(http: httpx.Client) -> None:
    reply = http.post("/echo.json", json={"str_data": "hello grps"})
    assert reply.status_code == 200
    assert reply.json()["str_data"] == "HELLO GRPS"


def test_alias_route_takes_only_its_methods(http: httpx.Client) -> None:
    reply = http.get("/echo.json")
    assert reply.status_code == 405
    assert reply.headers["allow"] == "POST"
    assert "takes POST, not GET" in reply.json()["status"]["msg"]


@pytest.mark.parametrize(
    ("url", "body", "headers"),
    [
        pytest.param("/echo.json", {"str_data": "a b", "stream": True}, {}, id="body_param"),
        pytest.param("/alias/query?stream=true", {"str_data": "a b"}, {}, id="query_param"),
        pytest.param("/alias/header", {"str_data": "a b"}, {"X-Stream": "yes"}, id="header_param"),
    ],
)
def test_alias_route_streams_on_its_control(
    http: httpx.Client, url: str, body: dict[str, object], headers: dict[str, str]
) -> None:
    with http.stream("POST", url, json=body, headers=headers) as reply:
        assert reply.headers["content-type"] == "application/x-ndjson"
        lines = [orjson.loads(line)["str_data"] for line in reply.iter_lines() if line]
    assert lines == ["A", "B"]
    unary = http.post(url.split("?")[0], json={"str_data": "a b"})  # without the control: one answer
    assert unary.json()["str_data"] == "A B"


# -- customized_body: true: what model code sees and the answers it may set ------------------------


def test_model_code_sees_the_raw_request(http: httpx.Client) -> None:
    reply = http.put(
        "/raw?form=json&a=1&a=2&b=x",
        content=b'{"k": [1, 2]}',
        headers={"Content-Type": "application/json; charset=utf-8", "X-Probe": "seen"},
    )
    assert reply.status_code == 200
    assert reply.headers["content-type"] == "application/json"
    assert reply.json() == {
        "method": "PUT",
        "path": "/raw",
        "content_type": "application/json; charset=utf-8",  # Flask's: the header as sent
        "mimetype": "application/json",
        "header": "seen",
        "args": {"form": "json", "a": "1", "b": "x"},  # Flask's: the first value of each
        "remote_addr": "127.0.0.1",
        "size": 13,
        "json": {"k": [1, 2]},
    }


@pytest.mark.parametrize(
    ("form", "status", "content_type", "body"),
    [
        ("str", 200, "text/plain; charset=utf-8", b"POST /raw"),
        ("bytes", 200, "application/octet-stream", b"\x00\x01raw"),
        ("tuple", 201, "text/x-made", b"made"),
        ("pair", 404, "application/json", b'{"error":"no such thing"}'),
        ("pair_headers", 200, "text/plain; charset=utf-8", b"made"),
        ("generator", 200, "application/octet-stream", b"a\nb\n"),
        ("reported", 422, "text/plain; charset=utf-8", b"refused"),
    ],
)
def test_answer_forms(http: httpx.Client, form: str, status: int, content_type: str, body: bytes) -> None:
    reply = http.post(f"/raw?form={form}", content=b"x")
    assert (reply.status_code, reply.headers["content-type"], reply.content) == (status, content_type, body)
    if form in ("tuple", "pair_headers"):
        assert reply.headers["x-made"] == "yes"


def test_an_error_reported_without_an_answer_is_the_500_envelope(http: httpx.Client) -> None:
    reply = http.post("/raw?form=reported_only", content=b"x")
    assert reply.status_code == 500
    assert reply.json()["status"]["msg"].startswith("refused on purpose")


def test_malformed_json_read_by_the_model_is_a_400(http: httpx.Client) -> None:
    reply = http.post("/raw?form=json", content=b"{not json", headers={"Content-Type": "application/json"})
    assert reply.status_code == 400
    assert "not valid JSON" in reply.json()["status"]["msg"]


@pytest.mark.parametrize("form", ["raise", "bad"])
def test_model_failures_answer_500_without_a_traceback(http: httpx.Client, form: str) -> None:
    reply = http.post(f"/raw?form={form}", content=b"x")
    assert reply.status_code == 500
    assert "model 'inspect-1' failed" in reply.json()["status"]["msg"]
    assert "Traceback" not in reply.text and "custom_http_models.py" not in reply.text
    assert http.post("/raw?form=str", content=b"x").status_code == 200  # the route still serves


def test_unlisted_method_is_405(http: httpx.Client) -> None:
    assert http.delete("/raw").status_code == 405


def test_query_model_selects_another_model(http: httpx.Client) -> None:
    reply = http.post("/raw?model=words-1", content=b"one two three")
    assert reply.text == "3 words"
    missing = http.post("/raw?model=ghost-1", content=b"x")
    assert missing.status_code == 404


# -- streaming controls on customized_body routes -------------------------------------------------


STREAM_CASES = [
    pytest.param("/words/query?streaming=true", {}, b"one two three", id="query_param"),
    pytest.param("/words/header", {"X-Stream": "1"}, b"one two three", id="header_param"),
    pytest.param(
        "/words/body",
        {"Content-Type": "application/json"},
        orjson.dumps({"text": "one two three", "stream": True}),
        id="body_param",
    ),
]


@pytest.mark.parametrize(("url", "headers", "body"), STREAM_CASES)
def test_each_streaming_control_streams_raw_chunks(
    http: httpx.Client, url: str, headers: dict[str, str], body: bytes
) -> None:
    with http.stream("POST", url, content=body, headers=headers) as reply:
        assert reply.status_code == 200
        assert reply.headers["content-type"] == "text/plain"
        chunks = b"".join(reply.iter_raw())
    assert chunks == b"one\ntwo\nthree\n"  # the chunk sent after final=True was dropped


@pytest.mark.parametrize(
    ("url", "headers", "body"),
    [
        ("/words/query?streaming=false", {}, b"one two three"),
        ("/words/header", {"X-Stream": "no"}, b"one two three"),
        ("/words/body", {"Content-Type": "application/json"}, b'{"text": "one two three"}'),
        ("/words/body", {}, b"one two three"),  # not JSON: cannot ask to stream
    ],
)
def test_without_the_control_the_answer_is_unary(
    http: httpx.Client, url: str, headers: dict[str, str], body: bytes
) -> None:
    assert http.post(url, content=body, headers=headers).text == "3 words"


# -- server-sent events: an OpenAI-style chat completions route -----------------------------------


def chat(content: str, stream: bool, delay_s: float = 0.0) -> dict[str, object]:
    return {
        "model": "echo",
        "messages": [{"role": "user", "content": content}],
        "stream": stream,
        "delay_s": delay_s,
    }


def test_chat_completions_unary(http: httpx.Client) -> None:
    reply = http.post("/v1/chat/completions", json=chat("hi there", stream=False))
    assert reply.json()["choices"][0]["message"] == {"role": "assistant", "content": "hi there"}


def test_chat_completions_stream_as_server_sent_events(http: httpx.Client) -> None:
    arrivals: list[float] = []
    events: list[str] = []
    with http.stream("POST", "/v1/chat/completions", json=chat("a b c", True, 0.3)) as reply:
        assert reply.headers["content-type"] == "text/event-stream"
        assert reply.headers["cache-control"] == "no-cache"
        for line in reply.iter_lines():
            if line.startswith("data: "):
                events.append(line.removeprefix("data: "))
                arrivals.append(time.monotonic())
    assert events[-1] == "[DONE]"
    words = [orjson.loads(e)["choices"][0]["delta"]["content"] for e in events[:-1]]
    assert words == ["a", "b", "c"]
    # Each event is written as it is made, not when the model returns (it sleeps 0.3 s per word).
    assert arrivals[-1] - arrivals[0] > 0.5


@pytest.mark.parametrize("stream", [False, True])
def test_an_answer_set_instead_of_a_stream_is_sent_whole(http: httpx.Client, stream: bool) -> None:
    reply = http.post("/v1/chat/completions", json=chat("", stream=stream))
    assert reply.status_code == 400
    assert reply.headers["content-type"] == "application/json"
    assert "cache-control" not in reply.headers
    assert reply.json()["error"]["type"] == "invalid_request_error"


def test_chat_stream_stops_when_the_client_goes_away(http: httpx.Client, server: ServerThread) -> None:
    body = chat(" ".join(["w"] * 200), True, 0.02)
    with http.stream("POST", "/v1/chat/completions", json=body) as reply:
        for line in reply.iter_lines():
            if line.startswith("data: "):
                break  # leave after the first event
    # The server is still fine, and answers the next request at once.
    assert http.post("/v1/chat/completions", json=chat("ok", stream=False)).status_code == 200


# -- start-up checks -------------------------------------------------------------------------------


def test_a_path_in_a_builtin_api_space_stops_start_up(tmp_path: Path) -> None:
    conf = tmp_path / "server.yml"
    conf.write_text(
        "interface:\n  port: '0,0'\n"
        "  customized_predict_http:\n    path: /v2/health/live\n    customized_body: true\n"
    )
    with pytest.raises(ConfigError, match=r"customized_predict_http\.path: '/v2/health/live'"):
        GrpsServer.from_project(PROJECT, server_conf=conf)


def test_a_path_that_a_builtin_route_matches_stops_start_up() -> None:
    """Beyond the reserved prefixes, the route table itself is checked (settings built in code)."""
    from grps_py.http.app import HttpRoutes

    probe = GrpsServer.from_project(PROJECT)
    route = CustomizedPredictHttp(path="/v2", customized_body=True)
    settings = ServerSettings(interface=InterfaceSettings(customized_predict_http=(route,)))
    with pytest.raises(ConfigError, match=r"path '/v2' is a built-in route"):
        HttpRoutes(probe.executor, settings, probe.metrics)


def test_model_code_sees_only_its_own_request(http: httpx.Client) -> None:
    """The request a custom route hands model code is data about that request alone: nothing it refers
    to leads to the handler, the application, the executor or the server."""
    reached = http.post("/raw?form=reach", content=b"x", headers={"X-A": "1"}).json()
    assert reached
    forbidden = ("Handler", "Application", "Executor", "GrpsServer", "HTTPServer", "IOStream", "Connection")
    assert not [name for name in reached if name.endswith(forbidden) or "grps_py.http" in name], reached

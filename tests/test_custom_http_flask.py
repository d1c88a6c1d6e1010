"""grps's customized-HTTP example runs unchanged: its model code reads a Flask request and answers with
`flask.Response` or a tuple (tests/projects/grps_custom_http, served for real and called with httpx).
The request reads as Flask's (`args`, `form`, `files`, `cookies`, `get_json(force/silent)`...), answers
may be any werkzeug Response (whole or streamed from a generator), and hostile form bodies answer a
short 400/413. Without Flask installed, everything but flask.Response still works (a subprocess)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from support import PROJECTS, ServerThread, run_project_test_py, start_project, wait_for

ROOT = Path(__file__).resolve().parent.parent
PROJECT = PROJECTS / "grps_custom_http"
ROUTE = "/custom_predict"
PROBE = f"{ROUTE}?model=flask_probe-1.0.0"


@pytest.fixture(scope="module")
def server() -> Iterator[ServerThread]:
    running = start_project(PROJECT)
    yield running
    running.stop()


@pytest.fixture
def http(server: ServerThread) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.http_url, timeout=30) as client:
        yield client


def probe_module() -> object:
    return sys.modules["flask_probe"]


# -- grps's example, as its client calls it ---------------------------------------------------------


@pytest.mark.parametrize("doc", [{"a": 1, "b": 2}, {"a": "1", "b": "2.0"}])
def test_the_example_adds_a_and_b(http: httpx.Client, doc: dict[str, object]) -> None:
    reply = http.post(ROUTE, json=doc)
    assert (reply.status_code, reply.headers["content-type"]) == (200, "application/json")
    assert reply.json() == {"c": 3.0}


@pytest.mark.parametrize(
    ("body", "headers", "reason"),
    [
        (b'{"a": "1"}', {"Content-Type": "application/json"}, "need key a and b"),
        (
            b'{"a": "1", "b": "ccc"}',
            {"Content-Type": "application/json"},
            "could not convert string to float",
        ),
        (b"a=1&b=2", {"Content-Type": "application/x-www-form-urlencoded"}, "content_type error"),
    ],
)
def test_the_example_answers_its_errors_itself(
    http: httpx.Client, body: bytes, headers: dict[str, str], reason: str
) -> None:
    """grps's rule: the converter reported the error (set_err_msg) and set its own answer (a 500
    flask.Response with the traceback it chose to show): that answer is sent."""
    reply = http.post(ROUTE, content=body, headers=headers)
    assert (reply.status_code, reply.headers["content-type"]) == (500, "text/plain")
    assert reason in reply.text
    assert http.post(ROUTE, json={"a": 2, "b": 2}).json() == {"c": 4.0}  # the route still serves


def test_the_examples_own_test_py_passes(tmp_path: Path) -> None:
    """Its test.py builds a flask.Request, runs the DAG in-process and reads the answer as a Flask
    response (`status_code`, `headers["Content-Type"]`, `response[0]`)."""
    done = run_project_test_py(PROJECT, tmp_path / "customized_http")
    assert done.returncode == 0, done.stderr
    assert "Ran 2 tests" in done.stderr and done.stderr.rstrip().endswith("OK")


# -- the request, as Flask's reads -------------------------------------------------------------------

BOUNDARY = "grps-py-boundary"


def multipart(*parts: tuple[str, str | None, str | None, bytes], boundary: str = BOUNDARY) -> bytes:
    """(field name, filename or None, part Content-Type or None, content) each."""
    out = b""
    for name, filename, content_type, content in parts:
        disposition = f'form-data; name="{name}"' + (
            f'; filename="{filename}"' if filename is not None else ""
        )
        out += f"--{boundary}\r\nContent-Disposition: {disposition}\r\n".encode()
        if content_type:
            out += f"Content-Type: {content_type}\r\n".encode()
        out += b"\r\n" + content + b"\r\n"
    return out + f"--{boundary}--\r\n".encode()


def test_a_multipart_request_reads_as_flasks(http: httpx.Client) -> None:
    body = multipart(
        ("caption", None, None, "héllo".encode()),
        ("caption", None, None, b"again"),
        ("upload", "a.txt", "text/plain", b"first file"),
        ("upload", "b.csv", "text/csv; charset=utf-8", b"x,y\r\n1,2"),
    )
    reply = http.post(
        f"{PROBE}&a=1&a=2&n=7",
        content=body,
        headers=[
            ("Content-Type", f"multipart/form-data; boundary={BOUNDARY}"),
            ("X-Probe", "one"),
            ("x-probe", "two"),
            ("Cookie", 'session=abc; theme="dark mode"'),
        ],
    )
    assert reply.status_code == 200, reply.text
    seen = reply.json()
    assert seen["form"] == {"caption": ["héllo", "again"]}
    assert seen["files"] == {
        "upload": [
            {"filename": "a.txt", "mimetype": "text/plain", "size": 10, "text": "first file"},
            {"filename": "b.csv", "mimetype": "text/csv", "size": 8, "text": "x,y\r\n1,2"},
        ]
    }
    assert seen["args"] == {"model": ["flask_probe-1.0.0"], "a": ["1", "2"], "n": ["7"]}
    assert (seen["first_a"], seen["n"]) == ("1", 7)
    assert seen["values"] == {"model": "flask_probe-1.0.0", "a": "1", "n": "7", "caption": "héllo"}
    assert seen["cookies"] == {"session": "abc", "theme": "dark mode"}
    assert (seen["header"], seen["header_all"]) == ("one", ["one", "two"])
    assert seen["content_type"] == f"multipart/form-data; boundary={BOUNDARY}"
    assert (seen["mimetype"], seen["is_json"], seen["data_size"]) == ("multipart/form-data", False, len(body))
    assert seen["query_string"] == "model=flask_probe-1.0.0&a=1&a=2&n=7"
    assert seen["url"] == str(http.base_url).rstrip("/") + f"{PROBE}&a=1&a=2&n=7"
    assert (seen["method"], seen["path"], seen["remote_addr"]) == ("POST", ROUTE, "127.0.0.1")


def test_a_urlencoded_form_and_a_get_read_as_flasks(http: httpx.Client) -> None:
    form = http.post(PROBE, data={"q": "a b", "k": "é"}).json()
    assert form["form"] == {"q": ["a b"], "k": ["é"]} and form["text"] == "q=a+b&k=%C3%A9"
    got = http.get(f"{PROBE}&n=x").json()
    assert (got["method"], got["n"], got["form"], got["files"]) == ("GET", None, {}, {})  # n: not an int


@pytest.mark.parametrize(
    ("probe", "content_type", "body", "status", "answer"),
    [
        ("json", "application/json", b'{"k": 1}', 200, {"json": {"k": 1}}),
        ("json", "application/merge-patch+json", b"[1]", 200, {"json": [1]}),
        ("json", "text/plain", b'{"k": 1}', 415, "not application/json"),  # as Flask
        ("json", "application/json", b"{not json", 400, "not valid JSON"),
        ("force", "text/plain", b'{"k": 1}', 200, {"json": {"k": 1}}),
        ("silent", "text/plain", b'{"k": 1}', 200, {"json": None}),
        ("silent", "application/json", b"{not json", 200, {"json": None}),
        ("missing", "application/x-www-form-urlencoded", b"a=1", 400, "no form field nowhere"),
    ],
)
def test_get_json_and_missing_keys_answer_as_flask(
    http: httpx.Client, probe: str, content_type: str, body: bytes, status: int, answer: object
) -> None:
    reply = http.post(f"{PROBE}&probe={probe}", content=body, headers={"Content-Type": content_type})
    assert reply.status_code == status
    if status == 200:
        assert reply.json() == answer
    else:
        assert isinstance(answer, str) and answer in reply.json()["status"]["msg"]
        assert "Traceback" not in reply.text


# -- answers: werkzeug Responses, whole and streamed ------------------------------------------------


def test_a_flask_response_is_sent_with_its_status_headers_and_cookies(http: httpx.Client) -> None:
    reply = http.post(f"{PROBE}&probe=response")
    assert (reply.status_code, reply.headers["content-type"], reply.text) == (
        201,
        "text/x-made; charset=utf-8",
        "made",
    )
    assert reply.headers["x-made"] == "yes"
    assert [c.split(";")[0] for c in reply.headers.get_list("set-cookie")] == ["a=1", "b=2"]


def test_a_tuple_lays_its_status_and_headers_over_a_flask_response(http: httpx.Client) -> None:
    reply = http.post(f"{PROBE}&probe=override")
    assert (reply.status_code, reply.text, reply.headers["x-why"]) == (410, "gone", "moved")


def test_a_generator_body_is_streamed_as_it_is_made(http: httpx.Client) -> None:
    probe = probe_module()
    with http.stream("POST", f"{PROBE}&probe=stream") as reply:
        assert reply.headers["content-type"] == "text/plain; charset=utf-8"
        lines = reply.iter_lines()
        assert next(lines) == "first"  # arrived while the generator still waits for the gate
        probe.STREAM_GATE.set()  # type: ignore[attr-defined]
        assert list(lines) == ["second"]
    wait_for(probe.CLOSED.is_set)  # type: ignore[attr-defined]  # werkzeug's close() reached the generator


def test_a_generator_failing_mid_stream_cuts_the_answer_short(http: httpx.Client) -> None:
    with pytest.raises(httpx.RemoteProtocolError), http.stream("POST", f"{PROBE}&probe=stream_fail") as reply:
        assert reply.status_code == 200
        list(reply.iter_lines())  # a cut chunked body: never taken for a whole one
    wait_for(probe_module().CLOSED.is_set)  # type: ignore[attr-defined]
    assert http.post(ROUTE, json={"a": 1, "b": 1}).json() == {"c": 2.0}


def test_a_generator_failing_before_its_first_chunk_is_a_500(http: httpx.Client) -> None:
    reply = http.post(f"{PROBE}&probe=fail_first")
    assert reply.status_code == 500
    assert "streamed answer failed: TypeError" in reply.json()["status"]["msg"]
    assert "Traceback" not in reply.text


# -- hostile forms: bounded, a short 400/413, never a traceback ----------------------------------------

MULTIPART = f"multipart/form-data; boundary={BOUNDARY}"
TOO_MANY_PARTS = multipart(*[("f", None, None, b"x")] * 1001)
LONG_HEADER = (
    f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="{"n" * 9000}"\r\n\r\nx\r\n--{BOUNDARY}--'
)
MANY_HEADERS = f"--{BOUNDARY}\r\n" + "X-A: 1\r\n" * 40 + f"\r\nx\r\n--{BOUNDARY}--"


@pytest.mark.parametrize(
    ("content_type", "body", "status", "reason"),
    [
        pytest.param(MULTIPART, TOO_MANY_PARTS, 413, "more than 1000 parts", id="part-count"),
        pytest.param(MULTIPART, LONG_HEADER.encode(), 413, "headers exceed 8192 bytes", id="header-bytes"),
        pytest.param(MULTIPART, MANY_HEADERS.encode(), 413, "more than 32 headers", id="header-count"),
        pytest.param(
            "application/x-www-form-urlencoded",
            b"&".join([b"a=1"] * 1001),
            413,
            "more than 1000",
            id="fields",
        ),
        pytest.param(
            MULTIPART, multipart(("f", None, None, b"x"))[:-12], 400, "closing boundary", id="unclosed"
        ),
        pytest.param(
            "multipart/form-data", multipart(("f", None, None, b"x")), 400, "no valid boundary", id="none"
        ),
        pytest.param(
            f"{MULTIPART}x", multipart(("f", None, None, b"x")), 400, "no boundary line", id="other"
        ),
        pytest.param(
            MULTIPART, f"--{BOUNDARY}junk\r\n".encode(), 400, "boundary line is malformed", id="line"
        ),
        pytest.param(
            MULTIPART,
            f"--{BOUNDARY}\r\nno colon\r\n\r\nx\r\n--{BOUNDARY}--".encode(),
            400,
            "header line",
            id="head",
        ),
    ],
)
def test_a_hostile_form_answers_short_and_alone(
    http: httpx.Client, content_type: str, body: bytes, status: int, reason: str
) -> None:
    reply = http.post(PROBE, content=body, headers={"Content-Type": content_type})
    assert reply.status_code == status
    message = reply.json()["status"]["msg"]
    assert reason in message and len(message) < 300
    assert "Traceback" not in reply.text and "multipart.py" not in reply.text
    assert http.post(ROUTE, json={"a": 1, "b": 2}).json() == {"c": 3.0}  # others are unaffected


# -- without Flask -----------------------------------------------------------------------------------

WITHOUT_FLASK = """
import sys

class NoFlask:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("flask", "werkzeug"):
            raise ImportError(f"{name} is made unimportable for this test")
        return None

sys.meta_path.insert(0, NoFlask())
try:
    import flask
except ImportError:
    pass
else:
    raise SystemExit("the blocker let flask through")

import httpx
from support import PROJECTS, start_project

server = start_project(PROJECTS / "custom_http")
try:
    with httpx.Client(base_url=server.http_url, timeout=30) as http:
        seen = http.put("/raw?form=json&a=1", json={"k": 1}, headers={"X-Probe": "p"}).json()
        assert seen["json"] == {"k": 1} and seen["args"]["a"] == "1" and seen["header"] == "p", seen
        made = http.post("/raw?form=tuple", content=b"x")
        assert (made.status_code, made.headers["x-made"], made.text) == (201, "yes", "made"), made
        streamed = http.post("/raw?form=generator", content=b"x")
        assert streamed.content == b"a\\nb\\n", streamed
        with http.stream("POST", "/words/query?streaming=true", content=b"one two") as reply:
            assert b"".join(reply.iter_raw()) == b"one\\ntwo\\n"
finally:
    server.stop()
loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("flask", "werkzeug"))
assert not loaded, loaded
print("served without flask")
"""


def test_custom_routes_serve_without_flask_installed() -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_FLASK], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "served without flask" in done.stdout

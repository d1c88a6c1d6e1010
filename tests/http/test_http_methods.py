"""Methods over HTTP (RFC 9110): a 405 says in `Allow` which methods its route takes, OPTIONS answers
the same list, HEAD is GET without the body, and an unknown path is a 404 whatever the method."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
import yaml

from support import PROJECTS, REPO, ServerThread, start_project

OPENAPI = REPO / "openapi.yaml"
IMPLICIT = {"HEAD", "OPTIONS"}  # answered for every route that takes GET (HEAD) or any method (OPTIONS)


def allowed(reply: httpx.Response) -> set[str]:
    return {method.strip() for method in reply.headers["allow"].split(",")}


@pytest.mark.parametrize(
    ("method", "path", "expected"),
    [
        ("TRACE", "/grps/v1/health/live", "GET, HEAD, POST, OPTIONS"),
        ("PUT", "/grps/v1/infer/predict", "POST, OPTIONS"),
        ("HEAD", "/grps/v1/infer/predict", "POST, OPTIONS"),
        ("GET", "/v2/models/identity/infer", "POST, OPTIONS"),  # POST: the direct route (http/direct.py)
        ("QUERY", "/v2/models/identity/versions/1/infer", "POST, OPTIONS"),
        ("DELETE", "/v2/health/live", "GET, HEAD, OPTIONS"),
        ("PATCH", "/grps/v1/monitor/series", "GET, HEAD, OPTIONS"),
        ("POST", "/metrics", "GET, HEAD, OPTIONS"),
        ("PUT", "/", "GET, HEAD, OPTIONS"),
    ],
)
def test_a_405_lists_the_methods_its_route_takes(
    http: httpx.Client, method: str, path: str, expected: str
) -> None:
    reply = http.request(method, path)
    assert reply.status_code == 405
    assert reply.headers["allow"] == expected
    if method != "HEAD":  # the route's own error form: OIP's {"error"} or the grps envelope
        body = reply.json()
        assert "[request_id=" in (body["error"] if path.startswith("/v2") else body["status"]["msg"])


@pytest.mark.parametrize("method", ["GET", "POST", "PUT", "DELETE", "OPTIONS", "TRACE", "QUERY"])
def test_an_unknown_path_is_404_whatever_the_method(http: httpx.Client, method: str) -> None:
    reply = http.request(method, "/no/such/route")
    assert reply.status_code == 404
    assert "allow" not in reply.headers
    assert "no route /no/such/route" in reply.json()["status"]["msg"]


def test_options_answers_the_methods_openapi_yaml_declares(http: httpx.Client) -> None:
    """For each path of the description: OPTIONS lists its operations' methods (and HEAD with GET)."""
    paths = yaml.safe_load(OPENAPI.read_text())["paths"]
    for template, item in paths.items():
        path = template.replace("{model_name}", "identity").replace("{model_version}", "1")
        declared = {key.upper() for key in item if key != "parameters"}
        reply = http.options(path)
        assert reply.status_code == 204, path
        implicit = {"OPTIONS"} | ({"HEAD"} if "GET" in declared else set())
        assert allowed(reply) == declared | implicit, path


def test_head_is_get_without_the_body(http: httpx.Client) -> None:
    got, head = http.get("/v2/health/live"), http.head("/v2/health/live")
    assert head.status_code == got.status_code == 200
    assert head.content == b""
    assert head.headers["content-length"] == got.headers["content-length"] == str(len(got.content))
    assert head.headers["content-type"] == got.headers["content-type"]
    assert http.get("/v2/health/live").json() == {"live": True}  # the connection is still in step


@pytest.fixture(scope="module")
def custom() -> Iterator[httpx.Client]:
    running: ServerThread = start_project(PROJECTS / "custom_http")
    with httpx.Client(base_url=running.http_url, timeout=30) as client:
        yield client
    running.stop()


@pytest.mark.parametrize("method", ["GET", "HEAD", "OPTIONS", "TRACE"])
def test_a_custom_route_takes_only_its_configured_methods(custom: httpx.Client, method: str) -> None:
    """/echo.json is configured with `methods: [POST]`; a method Tornado itself refuses says so too."""
    reply = custom.request(method, "/echo.json")
    assert reply.status_code == 405
    assert reply.headers["allow"] == "POST"

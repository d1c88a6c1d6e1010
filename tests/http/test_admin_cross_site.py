"""Admin routes refuse what a browser sends for another site's page (403), with or without a token.

Without an admin token, `/grps/v1/health/offline` answers loopback callers, and a browser on the
server's host is one: any page could make it take the server offline (`<img src=".../offline">`).
A request a browser marks as cross-site (`Sec-Fetch-Site` other than `same-origin` or `none`), or
whose `Origin` is not the server's own, is refused whatever its method; clients that send neither
header (curl, load balancers, grps clients) keep working with GET and POST.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import pytest

from grps_py.access import refuse_cross_site
from grps_py.core.errors import PermissionDenied
from grps_py.protos import grps_pb2, grps_pb2_grpc
from support import BASIC, LIGHT_INFERENCE, ServerThread, start_project

ADMIN = "admin-secret-x1"
EVIL = {"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"}


# --- the rule ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("origin", "site", "scheme", "host"),
    [
        (None, None, "http", "127.0.0.1:7000"),  # curl, a load balancer, a grps client
        (None, "same-origin", "http", "127.0.0.1:7000"),
        (None, "none", "http", "127.0.0.1:7000"),  # typed into the address bar
        ("http://127.0.0.1:7000", "same-origin", "http", "127.0.0.1:7000"),
        ("HTTP://LocalHost:7000", None, "http", "localhost:7000"),
        ("http://localhost", None, "http", "localhost:80"),  # the default port, said or not
        ("https://server.example:443", None, "https", "server.example"),
        ("http://[::1]:7000", None, "http", "[::1]:7000"),
        ("http://[::1]", None, "http", "[::1]:80"),
    ],
)
def test_same_origin_and_plain_clients_pass(
    origin: str | None, site: str | None, scheme: str, host: str
) -> None:
    refuse_cross_site(origin, site, scheme, host)


@pytest.mark.parametrize(
    ("origin", "site", "scheme", "host", "said"),
    [
        (None, "cross-site", "http", "127.0.0.1:7000", "Sec-Fetch-Site: cross-site"),
        (None, "same-site", "http", "127.0.0.1:7000", "Sec-Fetch-Site: same-site"),
        (None, "Cross-Site ", "http", "127.0.0.1:7000", "Sec-Fetch-Site: cross-site"),
        (None, "somewhere", "http", "127.0.0.1:7000", "neither same-origin nor none"),
        ("http://evil.example", None, "http", "127.0.0.1:7000", "Origin"),
        ("http://evil.example", "same-origin", "http", "127.0.0.1:7000", "Origin"),
        ("null", None, "http", "127.0.0.1:7000", "Origin"),  # a sandboxed page, a file
        ("http://127.0.0.1:7001", None, "http", "127.0.0.1:7000", "Origin"),  # another port
        ("https://127.0.0.1:7000", None, "http", "127.0.0.1:7000", "Origin"),  # another scheme
        ("http://127.0.0.1:7000/", None, "http", "127.0.0.1:7000", "Origin"),  # not an origin
        ("http://127.0.0.1:7000", None, "http", None, "Origin"),  # no Host to compare with
    ],
)
def test_cross_site_browser_requests_are_refused(
    origin: str | None, site: str | None, scheme: str, host: str | None, said: str
) -> None:
    with pytest.raises(PermissionDenied, match="admin operations are not accepted from") as refused:
        refuse_cross_site(origin, site, scheme, host)
    assert said in refused.value.public_message


# --- against a server ----------------------------------------------------------------------------


def start(tmp_path: Path, extra: str = "") -> ServerThread:
    server_conf = tmp_path / "server.yml"
    server_conf.write_text("interface:\n  host: 127.0.0.1\n  port: 0,0\n" + extra)
    inference_conf = tmp_path / "inference.yml"
    inference_conf.write_text(LIGHT_INFERENCE)
    return start_project(BASIC, inference_conf=inference_conf, server_conf=server_conf)


@pytest.fixture
def open_server(tmp_path: Path) -> Iterator[ServerThread]:
    """No admin token: admin routes answer loopback callers (a browser on this host is one)."""
    server = start(tmp_path)
    yield server
    server.stop()


@pytest.fixture
def token_server(tmp_path: Path) -> Iterator[ServerThread]:
    server = start(tmp_path, f"security:\n  admin_token: {ADMIN}\n")
    yield server
    server.stop()


def assert_refused(reply: httpx.Response) -> None:
    assert reply.status_code == 403, reply.text
    if reply.request.method != "HEAD":
        msg = reply.json()["status"]["msg"]
        assert "admin operations are not accepted from" in msg and "[request_id=" in msg


def cross_site_cases(own: str) -> list[dict[str, str]]:
    return [
        EVIL,
        {"Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "same-site"},  # another subdomain of the same site
        {"Origin": "http://evil.example"},  # a browser that sends no Sec-Fetch-Site
        {"Origin": "null"},
        {"Origin": own, "Sec-Fetch-Site": "cross-site"},
    ]


def test_cross_site_requests_cannot_switch_an_open_server(open_server: ServerThread) -> None:
    own = open_server.http_url
    with httpx.Client(base_url=own, timeout=30) as http:
        for headers in cross_site_cases(own):
            for method in ("GET", "POST", "HEAD", "PUT", "OPTIONS"):
                for action in ("offline", "online"):
                    assert_refused(http.request(method, f"/grps/v1/health/{action}", headers=headers))
            assert open_server.server.executor.is_ready()  # nothing switched it off
            # Probes stay open to everyone.
            assert http.get("/grps/v1/health/ready", headers=headers).status_code == 200
            assert http.get("/grps/v1/health/live", headers=headers).status_code == 200


def test_plain_clients_and_same_origin_pages_still_switch_it(open_server: ServerThread) -> None:
    own = open_server.http_url
    executor = open_server.server.executor
    with httpx.Client(base_url=own, timeout=30) as http:
        cases = [{}, {"Sec-Fetch-Site": "same-origin", "Origin": own}, {"Sec-Fetch-Site": "none"}]
        for headers in cases:
            for method in ("GET", "POST"):
                reply = http.request(method, "/grps/v1/health/offline", headers=headers)
                assert reply.status_code == 200 and not executor.is_ready()
                reply = http.request(method, "/grps/v1/health/online", headers=headers)
                assert reply.status_code == 200 and executor.is_ready()


def test_cross_site_requests_are_refused_even_with_the_admin_token(token_server: ServerThread) -> None:
    own = token_server.http_url
    token = {"Authorization": f"Bearer {ADMIN}"}
    with httpx.Client(base_url=own, timeout=30) as http:
        for headers in cross_site_cases(own):
            for method in ("GET", "POST"):
                assert_refused(http.request(method, "/grps/v1/health/offline", headers={**headers, **token}))
                assert_refused(http.request(method, "/grps/v1/health/offline", headers=headers))
        assert token_server.server.executor.is_ready()
        assert http.get("/grps/v1/health/offline").status_code == 401  # a plain client: the token rule
        assert http.post("/grps/v1/health/offline", headers=token).status_code == 200
        assert not token_server.server.executor.is_ready()
        same_origin = {"Origin": own, "Sec-Fetch-Site": "same-origin", **token}
        assert http.get("/grps/v1/health/online", headers=same_origin).status_code == 200
        assert token_server.server.executor.is_ready()


def test_grpc_admin_calls_are_unchanged(open_server: ServerThread) -> None:
    with grpc.insecure_channel(open_server.grpc_target) as channel:
        stub = grps_pb2_grpc.GrpsServiceStub(channel)
        assert stub.Offline(grps_pb2.GrpsMessage()).status.code == 200
        assert stub.Online(grps_pb2.GrpsMessage()).status.code == 200

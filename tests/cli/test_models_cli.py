"""`grps-py models list | load | reload | unload` against real servers (in this process), over HTTP and
gRPC alike; and what the command line refuses before it sends anything."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from grps_py.cli import build_parser, main
from grps_py.cli.models import TOKEN_ENV, table
from support import PROJECTS, ServerThread, start_project

PROJECT = PROJECTS / "lifecycle_cli"
ADMIN_TOKEN = "lifecycle-cli-admin"  # conf/server_token.yml
SPARE_V2_YAML = """\
# one model entry, as in inference.yml's models (the name may be left out: it is NAME)
version: "2"
inferer_type: customized
inferer_name: lifecycle_cli_spare_v2
converter_type: none
"""


def serve(server_conf: str) -> Iterator[ServerThread]:
    running = start_project(PROJECT, server_conf=PROJECT / "conf" / server_conf)
    yield running
    running.stop()


@pytest.fixture(scope="module")
def server() -> Iterator[ServerThread]:
    yield from serve("server.yml")


@pytest.fixture(scope="module")
def token_server() -> Iterator[ServerThread]:
    yield from serve("server_token.yml")


@pytest.fixture(scope="module")
def static_server() -> Iterator[ServerThread]:
    yield from serve("server_static.yml")


@pytest.fixture(autouse=True)
def no_token_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TOKEN_ENV, raising=False)


def options(server: ServerThread, protocol: str) -> list[str]:
    url = server.http_url if protocol == "http" else server.grpc_target
    return ["--url", url, "--protocol", protocol]


@pytest.fixture(params=["http", "grpc"])
def protocol(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def remote(server: ServerThread, protocol: str) -> list[str]:
    return options(server, protocol)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def listed(
    capsys: pytest.CaptureFixture[str], remote: list[str], *more: str
) -> dict[tuple[str, str], dict[str, str]]:
    """`models list --json`, by (name, version)."""
    code, out, err = run(capsys, "models", "list", *remote, "--json", *more)
    assert (code, err) == (0, "")
    return {(row["name"], row["version"]): row for row in json.loads(out)}


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# --- against a server with model_control: explicit ----------------------------------------------


def test_list_shows_the_models_ready(capsys: pytest.CaptureFixture[str], remote: list[str]) -> None:
    code, out, err = run(capsys, "models", "list", *remote)
    assert (code, err) == (0, "")
    header, *rows = out.splitlines()
    assert header.split() == ["NAME", "VERSION", "STATE", "REASON"]
    assert {tuple(row.split()) for row in rows} >= {
        ("greeter", "1", "READY"),
        ("spare", "1", "READY"),
        ("main", "1", "READY"),
    }
    for more in ((), ("--ready",)):
        index = listed(capsys, remote, *more)
        assert index[("spare", "1")] == {"name": "spare", "version": "1", "state": "READY", "reason": ""}


def test_reload_prints_reloaded(capsys: pytest.CaptureFixture[str], remote: list[str]) -> None:
    assert run(capsys, "models", "reload", "greeter", *remote) == (0, "reloaded\n", "")
    assert run(capsys, "predict", *remote, "--model", "greeter-1", "--str", "hi") == (
        0,
        "greeter v1: hi\n",
        "",
    )


def test_unload_then_list_shows_it_unavailable(capsys: pytest.CaptureFixture[str], remote: list[str]) -> None:
    assert run(capsys, "models", "unload", "spare", *remote) == (0, "unloaded\n", "")
    row = listed(capsys, remote)[("spare", "1")]
    assert row["state"] == "UNAVAILABLE" and row["reason"]
    assert ("spare", "1") not in listed(capsys, remote, "--ready")
    code, out, _ = run(capsys, "models", "list", *remote)
    assert code == 0 and any(line.split()[:3] == ["spare", "1", "UNAVAILABLE"] for line in out.splitlines())
    assert run(capsys, "models", "load", "spare", *remote) == (0, "loaded\n", "")
    assert listed(capsys, remote)[("spare", "1")]["state"] == "READY"


@pytest.mark.parametrize("suffix", [".yml", ".json"])
def test_load_a_new_version_from_a_config_file(
    capsys: pytest.CaptureFixture[str], remote: list[str], tmp_path: Path, suffix: str
) -> None:
    config = tmp_path / f"spare_v2{suffix}"
    if suffix == ".json":  # YAML reads JSON too
        config.write_text(json.dumps({"name": "spare", **yaml.safe_load(SPARE_V2_YAML)}))
    else:
        config.write_text(SPARE_V2_YAML)
    load = ["models", "load", "spare", "--config", str(config), *remote]
    try:
        assert run(capsys, *load) == (0, "loaded\n", "")
        assert listed(capsys, remote, "--ready")[("spare", "2")]["state"] == "READY"
        predict = ["predict", *remote, "--model", "spare-2", "--str", "hi"]
        assert run(capsys, *predict) == (0, "spare v2: hi\n", "")
    finally:
        run(capsys, "models", "reload", "spare", *remote)  # as inference.yml says again


def test_a_model_the_dag_uses_needs_unload_dependents(
    capsys: pytest.CaptureFixture[str], remote: list[str]
) -> None:
    code, out, err = run(capsys, "models", "unload", "greeter", *remote)
    assert (
        (code, out) == (1, "") and err.startswith("grps-py: 400 INVALID_ARGUMENT: ") and err.count("\n") == 1
    )
    assert listed(capsys, remote)[("greeter", "1")]["state"] == "READY"


def test_an_unknown_model_is_not_found(capsys: pytest.CaptureFixture[str], remote: list[str]) -> None:
    for action in ("load", "reload", "unload"):
        code, out, err = run(capsys, "models", action, "ghost", *remote)
        assert (code, out) == (1, "") and err.startswith("grps-py: 404 NOT_FOUND: "), (action, err)


# --- access, and a server that has no model control ---------------------------------------------


def test_not_admin_is_refused(
    capsys: pytest.CaptureFixture[str],
    token_server: ServerThread,
    protocol: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    remote = options(token_server, protocol)
    for more in ((), ("--token", "not-the-token")):
        code, out, err = run(capsys, "models", "reload", "greeter", *remote, *more)
        assert (code, out) == (1, "") and err.startswith("grps-py: 401 UNAUTHENTICATED: "), err
        assert err.count("\n") == 1
    assert err.endswith(f"; give the admin token with --token or ${TOKEN_ENV}\n")
    assert "admin token" in run(capsys, "models", "unload", "spare", *remote)[2]
    assert run(capsys, "models", "reload", "greeter", *remote, "--token", ADMIN_TOKEN) == (
        0,
        "reloaded\n",
        "",
    )
    monkeypatch.setenv(TOKEN_ENV, ADMIN_TOKEN)
    assert run(capsys, "models", "reload", "greeter", *remote) == (0, "reloaded\n", "")


def test_without_model_control_load_is_not_implemented(
    capsys: pytest.CaptureFixture[str], static_server: ServerThread, protocol: str
) -> None:
    remote = options(static_server, protocol)
    for argv in (["load", "greeter"], ["reload", "greeter"], ["unload", "spare"]):
        code, out, err = run(capsys, "models", *argv, *remote)
        assert (code, out) == (1, "") and err.startswith("grps-py: 501 UNIMPLEMENTED: "), err
        assert err.count("\n") == 1
    assert listed(capsys, remote)[("spare", "1")]["state"] == "READY"  # listing still works


# --- refused before anything is sent -----------------------------------------------------------


def test_a_config_that_cannot_be_read_is_bad_input(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    remote = ["--url", f"127.0.0.1:{closed_port()}"]  # never reached
    files = {
        "missing.yml": None,
        "broken.yml": "name: [greeter\n",
        "list.yml": "- name: greeter\n",
        "whole.yml": "models:\n  - {name: greeter, version: '2'}\n",
        "other.yml": "name: spare\nversion: '2'\n",
        "nan.json": '{"name": "greeter", "inferer_args": {"x": .nan}}',
        "binary.yml": b"\xff\xfe\x00",
    }
    for name, content in files.items():
        path = tmp_path / name
        if isinstance(content, bytes):
            path.write_bytes(content)
        elif content is not None:
            path.write_text(content)
        code, out, err = run(capsys, "models", "load", "greeter", "--config", str(path), *remote)
        assert (code, out) == (2, "") and err.startswith("grps-py: --config: "), (name, err)
        assert err.count("\n") == 1, (name, err)


def test_bad_options_are_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    port = closed_port()
    assert run(capsys, "models", "list", "--url", "http://")[0] == 2
    code, _, err = run(capsys, "models", "list", "--url", f"127.0.0.1:{port}", "--token", "two words")
    assert code == 2 and err.startswith("grps-py: --token: ")
    code, _, err = run(capsys, "models", "unload", "", "--url", f"127.0.0.1:{port}")
    assert code == 2 and "model name" in err
    with pytest.raises(SystemExit) as caught:
        main(["models"])  # an action is required
    assert caught.value.code == 2
    args = build_parser().parse_args(["models", "unload", "m", "--unload-dependents", "--protocol", "grpc"])
    assert (args.name, args.unload_dependents, args.protocol, args.timeout) == ("m", True, "grpc", 300.0)


def test_no_server_is_one_line_and_exit_1(capsys: pytest.CaptureFixture[str], protocol: str) -> None:
    remote = ["--url", f"127.0.0.1:{closed_port()}", "--protocol", protocol, "--timeout", "10"]
    code, out, err = run(capsys, "models", "list", *remote)
    assert (code, out) == (1, "") and "connection refused; is the server running?" in err
    assert err.count("\n") == 1


def test_the_table_shows_the_servers_text_escaped() -> None:
    index = [
        {"name": "m", "version": "1", "state": "READY", "reason": ""},
        {
            "name": "long_name",
            "version": "22",
            "state": "UNAVAILABLE",
            "reason": "load failed:\n\x1b[31mboom",
        },
    ]
    assert table(index).splitlines() == [
        "NAME       VERSION  STATE        REASON",
        "m          1        READY",
        "long_name  22       UNAVAILABLE  load failed:\\n\\x1b[31mboom",
    ]

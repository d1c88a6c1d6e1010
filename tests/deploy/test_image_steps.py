"""The container images' steps, checked where no container engine runs (nor can pull a base image):
what deploy/Dockerfile and deploy/Dockerfile.cuda declare, and deploy/install.sh, the install both RUN,
run here into a clean venv whose grps-py then serves the bundled project as the image's ENTRYPOINT
would. The first install downloads about 300 MB (onnxruntime-gpu); later ones take pip's cache."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from support import REPO

DEPLOY = REPO / "deploy"
INSTALL = DEPLOY / "install.sh"
DOCKERFILES = [DEPLOY / "Dockerfile", DEPLOY / "Dockerfile.cuda"]
READY_PATH = "/grps/v1/health/ready"
LISTENING = re.compile(r"listening: http \S+:(\d+) grpc (\S+)")
INSTALL_TIMEOUT_S = 900
WHERE_AND_TORCH = "import grps_py, torch; print(grps_py.__file__, torch.__version__)"

Instruction = tuple[str, str]


def instructions(dockerfile: Path) -> list[Instruction]:
    """(INSTRUCTION, arguments) in order: continuation lines joined, comments and directives dropped."""
    found: list[Instruction] = []
    pending = ""
    for line in dockerfile.read_text().splitlines():
        if line.lstrip().startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        whole = (pending + line).strip()
        pending = ""
        if whole:
            op, _, args = whole.partition(" ")
            found.append((op.upper(), " ".join(args.split())))
    return found


def final_stage(found: list[Instruction]) -> list[Instruction]:
    """The instructions of the image that runs: those after the last FROM."""
    last_from = max(i for i, (op, _) in enumerate(found) if op == "FROM")
    return found[last_from + 1 :]


def resolved(args: str, stage: list[Instruction]) -> str:
    """`args` with the stage's ARG defaults put in for ${NAME} and $NAME."""
    defaults = dict(arg.partition("=")[::2] for op, arg in stage if op == "ARG")
    return re.sub(r"\$\{?(\w+)\}?", lambda m: defaults.get(m.group(1), m.group(0)), args)


def the(op: str, stage: list[Instruction]) -> str:
    """The arguments of the stage's last `op` (the one that counts for USER, CMD, ENTRYPOINT, ...)."""
    found = [args for name, args in stage if name == op]
    assert found, f"no {op}"
    return found[-1]


def healthcheck_command(dockerfile: Path) -> list[str]:
    check = the("HEALTHCHECK", final_stage(instructions(dockerfile)))
    _, _, exec_form = check.partition(" CMD ")
    command: list[str] = json.loads(exec_form)
    return command


def server_ports() -> list[int]:
    server = yaml.safe_load((REPO / "conf" / "server.yml").read_text())
    return [int(port) for port in str(server["interface"]["port"]).split(",")]


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda path: path.name)
def test_the_dockerfile_installs_with_the_script_and_serves_as_a_non_root_user(dockerfile: Path) -> None:
    found = instructions(dockerfile)
    runs = [args for op, args in found if op == "RUN"]
    # The install is the script and only the script, so the image cannot drift from what the tests run.
    assert any("/src/deploy/install.sh --venv /opt/grps-py --source /src" in run for run in runs)
    assert not any("pip install" in run for run in runs)

    final = final_stage(found)
    assert "--from=build /opt/grps-py /opt/grps-py" in [args for op, args in final if op == "COPY"]
    user = resolved(the("USER", final), final).split(":")
    assert user[0].isdigit() and int(user[0]) != 0, "numeric and not root, for runAsNonRoot"
    assert json.loads(the("ENTRYPOINT", final)) == ["grps-py", "serve"]
    assert json.loads(the("CMD", final)) == ["/project"]
    assert [int(port) for port in the("EXPOSE", final).split()] == server_ports()
    assert READY_PATH in the("HEALTHCHECK", final)
    assert healthcheck_command(dockerfile)[0] == "python"  # no curl in a slim image


def test_the_build_context_leaves_out_environments_and_vcs_data() -> None:
    ignored = (REPO / ".dockerignore").read_text().split()
    assert {".git", ".venv", "**/__pycache__", "**/logs"} <= set(ignored)


def test_install_script_refuses_bad_arguments_before_it_installs(tmp_path: Path) -> None:
    for args in ([], ["--venv"], ["--venv", str(tmp_path)], ["--frobnicate"]):
        proc = subprocess.run([str(INSTALL), *args], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2, args
        assert "install.sh:" in proc.stderr
    assert not any(tmp_path.iterdir()), "nothing installed into an existing directory"


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """deploy/install.sh into a new venv, as the images RUN it (but for the torch index: the CPU
    image names PyTorch's, which this machine cannot reach; constraints.txt's torch pin holds both)."""
    where = tmp_path_factory.mktemp("image-steps")
    venv = where / "venv"
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV", "PIP_NO_CACHE_DIR"}}
    proc = subprocess.run(
        [str(INSTALL), "--venv", str(venv), "--python", sys.executable],
        capture_output=True,
        text=True,
        timeout=INSTALL_TIMEOUT_S,
        cwd=where,
        env=env,
    )
    assert proc.returncode == 0, f"{shlex.join(proc.args)}:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    yield venv
    subprocess.run(["rm", "-rf", str(venv)], check=False)  # about 1.4 GB


@pytest.fixture(scope="module")
def http_port(venv: Path) -> Iterator[int]:
    """The image's ENTRYPOINT from the venv's bin (the image's PATH), serving the repository root (the
    image's default project) on free ports."""
    entrypoint = json.loads(the("ENTRYPOINT", final_stage(instructions(DOCKERFILES[0]))))
    proc = subprocess.Popen(
        [str(venv / "bin" / entrypoint[0]), *entrypoint[1:], str(REPO), "--port", "0,0"],
        stderr=subprocess.PIPE,
        text=True,
        cwd=venv.parent,
    )
    assert proc.stderr is not None
    port = 0
    for line in proc.stderr:
        match = LISTENING.search(line)
        if match:
            port = int(match.group(1))
            break
    if not port:
        proc.wait(30)
        pytest.fail(f"the installed grps-py did not start (exit {proc.returncode})")
    # Keep draining stderr so the server never blocks on a full pipe.
    threading.Thread(target=lambda: [None for _ in proc.stderr or ()], daemon=True).start()
    try:
        wait_ready(port)
        yield port
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def wait_ready(port: int, want: int = 200) -> None:
    for _ in range(600):
        try:
            if httpx.get(f"http://127.0.0.1:{port}{READY_PATH}").status_code == want:
                return
        except httpx.TransportError:
            pass
        threading.Event().wait(0.1)
    raise AssertionError(f"readiness never answered {want}")


@pytest.mark.timeout(INSTALL_TIMEOUT_S + 120)
def test_the_installed_package_is_the_venvs_own(venv: Path) -> None:
    where = subprocess.run(
        [str(venv / "bin" / "python"), "-c", WHERE_AND_TORCH],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=venv.parent,
        check=True,
    ).stdout.split()
    assert Path(where[0]).is_relative_to(venv / "lib"), "installed, not the checkout (no editable install)"
    constraints = (REPO / "constraints.txt").read_text().splitlines()
    (torch_pin,) = [line.removeprefix("torch==") for line in constraints if line.startswith("torch==")]
    assert where[1].split("+")[0] == torch_pin
    assert not (REPO / "build").exists(), "the install built from a copy, leaving the checkout clean"


@pytest.mark.timeout(INSTALL_TIMEOUT_S + 120)
def test_the_installed_server_is_ready_and_answers_an_oip_infer(http_port: int) -> None:
    reply = httpx.post(
        f"http://127.0.0.1:{http_port}/v2/models/classifier/infer",
        json={"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}]},
        timeout=30,
    )
    assert reply.status_code == 200, reply.text
    (probs,) = reply.json()["outputs"]
    assert probs["name"] == "probs" and probs["datatype"] == "FP32" and probs["shape"] == [1, 3]
    assert abs(sum(probs["data"]) - 1) < 1e-5


@pytest.mark.timeout(INSTALL_TIMEOUT_S + 120)
@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda path: path.name)
def test_the_images_healthcheck_follows_readiness(dockerfile: Path, venv: Path, http_port: int) -> None:
    """The HEALTHCHECK's own command, run with the image's PATH: healthy while ready, unhealthy offline."""
    command = healthcheck_command(dockerfile)
    env = {**os.environ, "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    env["GRPS_HTTP_PORT"] = str(http_port)  # as a user who moves the port sets it

    def healthcheck() -> int:
        return subprocess.run(command, env=env, capture_output=True, timeout=60).returncode

    base = f"http://127.0.0.1:{http_port}/grps/v1/health"
    assert healthcheck() == 0
    assert httpx.get(f"{base}/offline").status_code == 200  # loopback is an admin
    try:
        wait_ready(http_port, want=503)
        assert healthcheck() != 0
    finally:
        assert httpx.get(f"{base}/online").status_code == 200
    wait_ready(http_port)
    assert healthcheck() == 0

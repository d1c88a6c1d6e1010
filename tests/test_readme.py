"""README.md runs as written: its Quick start serves with `make serve`, and every bash and python block
after it runs unchanged, in order, against that server, as a user in a second terminal would run them.

The blocks run in a folder that mirrors the checkout (a symlink per top-level entry), so what they
write (`my_project`, `logs/`) lands there and not in the checkout. Bash blocks run under
`bash -e -o pipefail` in an environment without the virtualenv on PATH (a fresh shell: a block that
needs `grps-py` must activate it, as the README says); python blocks run with `.venv/bin/python`,
as the README says. curl is made to fail on an HTTP error status, which a user would see as an error
in the answer. The server uses the README's ports (7080, 7081; 8080, 8081 for `my_project`): the test
fails at once, saying so, when another process holds one of them.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PORTS = (7080, 7081, 8080, 8081)
SERVE_BLOCK = "make serve"
BLOCK_TIMEOUT_S = 120
LEFTOVER_S = 30
START_TIMEOUT_S = 300  # `make serve` installs first when .venv is stale
# Stricter than the README: a curl answered with an HTTP error status fails its block.
CURL_FAILS_ON_ERROR = 'curl() { command curl --fail-with-body "$@"; }\n'
FENCE = re.compile(r"^```(\w*)\n(.*?)^```\s*$", re.DOTALL | re.MULTILINE)


@dataclass(frozen=True)
class Block:
    language: str
    text: str
    line: int  # where the block starts in README.md, for failure messages


def readme_blocks(text: str) -> list[Block]:
    return [
        Block(match.group(1), match.group(2), text.count("\n", 0, match.start()) + 1)
        for match in FENCE.finditer(text)
    ]


def runnable(blocks: list[Block]) -> list[Block]:
    return [block for block in blocks if block.language in ("bash", "python")]


def test_the_readme_starts_with_make_serve_and_every_block_after_it_can_run() -> None:
    """The parse this test relies on: the first runnable block is `make serve`, alone; no block runs
    `make test` (it would run this test again) and none is in a language the test cannot run."""
    blocks = readme_blocks(README.read_text())
    code = runnable(blocks)
    assert code and code[0].text.strip() == SERVE_BLOCK
    assert len(code) >= 6, "the README lost its curl, gRPC, client, tritonclient or CLI blocks"
    assert not any("make test" in block.text for block in code)
    assert not [b.line for b in blocks if b.language in ("sh", "shell", "console", "py", "python3")]


def port_holder(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("0.0.0.0", port))
        except OSError:
            return True
    return False


def mirror_checkout(into: Path) -> Path:
    """A folder that looks like the checkout to a user's commands, but keeps what they write."""
    for entry in ROOT.iterdir():
        if entry.name not in (".git", "logs", "my_project"):
            (into / entry.name).symlink_to(entry)
    return into


def user_environment() -> dict[str, str]:
    """A fresh shell's environment: no virtualenv active, nothing of pytest's."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    paths = [p for p in env.get("PATH", "").split(os.pathsep) if not p.rstrip("/").endswith(".venv/bin")]
    env["PATH"] = os.pathsep.join(paths)
    return env


def wait_until_ready(server: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        assert server.poll() is None, f"make serve exited {server.returncode}:\n{log.read_text()[-3000:]}"
        try:
            if httpx.get("http://127.0.0.1:7080/grps/v1/health/ready", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.3)
    pytest.fail(f"make serve was not ready within {START_TIMEOUT_S} s:\n{log.read_text()[-3000:]}")


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def stop(server: subprocess.Popen[bytes]) -> None:
    """Ctrl-C in the user's terminal: SIGINT to make and the server it started. make dies of the
    signal, as it does in a terminal; the server drains and exits."""
    if server.poll() is None:
        os.killpg(server.pid, signal.SIGINT)
    deadline = time.monotonic() + 60
    while (server.poll() is None or group_alive(server.pid)) and time.monotonic() < deadline:
        time.sleep(0.2)  # poll() reaps make: a zombie still counts as a member of its group
    if group_alive(server.pid):
        os.killpg(server.pid, signal.SIGKILL)
        pytest.fail("make serve did not stop within 60 s of Ctrl-C")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """`make serve` in a mirror of the checkout; yields the folder the blocks run in."""
    busy = [port for port in PORTS if port_holder(port)]
    if busy:
        pytest.fail(f"the README's ports {busy} are in use: stop what holds them (e.g. a `make serve`)")
    # Set up from the checkout itself: a `make serve` that found .venv stale would install from the
    # mirror, and the shared .venv's entry points would then name a folder that is about to vanish.
    install = subprocess.run(["make", "install"], cwd=ROOT, env=user_environment(), capture_output=True)
    assert install.returncode == 0, install.stdout.decode()[-3000:] + install.stderr.decode()[-3000:]
    workdir = mirror_checkout(tmp_path_factory.mktemp("readme"))
    log = workdir.parent / "make-serve.log"
    with log.open("wb") as out:
        server = subprocess.Popen(
            ["make", "serve"],
            cwd=workdir,
            env=user_environment(),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        wait_until_ready(server, log)
        yield workdir
        assert server.poll() is None, f"make serve died during the README:\n{log.read_text()[-3000:]}"
    finally:
        stop(server)
    text = log.read_text()
    assert "grps_py.server: stopped" in text and "Traceback" not in text, text[-3000:]


def run_block(block: Block, workdir: Path, index: int) -> tuple[int, str, str]:
    """Run a block in a session of its own; its exit status, stdout and stderr. What it started in the
    background must be gone within LEFTOVER_S of its end (a server it stopped drains first)."""
    if block.language == "bash":
        script = workdir.parent / f"block{index}.sh"
        script.write_text(CURL_FAILS_ON_ERROR + block.text)
        command = ["bash", "-e", "-o", "pipefail", str(script)]
    else:
        script = workdir.parent / f"block{index}.py"
        script.write_text(block.text)
        command = [str(workdir / ".venv" / "bin" / "python"), str(script)]
    out, err = script.with_suffix(".out"), script.with_suffix(".err")
    with out.open("wb") as stdout, err.open("wb") as stderr:
        process = subprocess.Popen(
            command,
            cwd=workdir,
            env=user_environment(),
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=stderr,
            start_new_session=True,
        )
        try:
            code = process.wait(BLOCK_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            code = -1
        deadline = time.monotonic() + LEFTOVER_S
        while group_alive(process.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        leftover = group_alive(process.pid)
        if leftover:
            os.killpg(process.pid, signal.SIGKILL)
    stdout_text, stderr_text = out.read_text(), err.read_text()
    if leftover:
        stderr_text += f"\n[test] processes the block started were still running {LEFTOVER_S} s after it"
        code = code or -2
    return code, stdout_text, stderr_text


@pytest.mark.timeout(900)
def test_every_readme_block_runs_against_make_serve(served: Path) -> None:
    blocks = runnable(readme_blocks(README.read_text()))[1:]
    for index, block in enumerate(blocks):
        code, stdout, stderr = run_block(block, served, index)
        assert code == 0, (
            f"README.md line {block.line} ({block.language}) exited {code}\n"
            f"--- stdout\n{stdout[-3000:]}\n--- stderr\n{stderr[-3000:]}"
        )
        assert "Traceback" not in stderr, stderr[-3000:]

"""openapi.yaml as the docs have a user check it: `grps-py serve .` in the checkout, then, from the
repository root, `st run openapi.yaml --url http://127.0.0.1:PORT` with schemathesis's default checks
and phases (and schemathesis.toml, which it finds there). No failure, no error, and nothing left behind
in the checkout.

A fixed seed and fewer examples than the default keep it short; the plain command is the same run.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from support import REPO

ROOT = REPO
ST = Path(sys.executable).parent / "st"
LISTENING = re.compile(r"listening: http \S+:(\d+) ")
# Where schemathesis and Hypothesis would write in the working directory if the settings let them.
CACHE_DIRS = (".schemathesis", ".hypothesis")


@pytest.fixture(scope="module")
def bundled_url() -> Iterator[str]:
    """`grps-py serve <repo root> --port 0,0`: the bundled project on free ports, once it is ready."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "grps_py.cli", "serve", str(ROOT), "--port", "0,0"],
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    port = next((int(m.group(1)) for line in proc.stderr if (m := LISTENING.search(line))), 0)
    # Keep reading the log, so a full pipe never blocks the server.
    threading.Thread(target=proc.stderr.read, daemon=True).start()
    try:
        assert port, f"the server did not start (exit {proc.wait(30)})"
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while httpx.get(f"{url}/grps/v1/health/ready").status_code != 200:
            assert time.monotonic() < deadline, "the bundled project was not ready within 60 s"
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(30)


def checkout_entries() -> set[str]:
    """What git reports beside the tracked files (untracked and ignored, a directory as one entry), and
    every file in the cache directories (they may exist already, from the test suite's own Hypothesis)."""
    status = subprocess.run(
        ["git", "status", "--porcelain", "--ignored"], cwd=ROOT, capture_output=True, text=True, check=True
    )
    entries = set(status.stdout.splitlines())
    for name in CACHE_DIRS:
        entries |= {str(path.relative_to(ROOT)) for path in (ROOT / name).rglob("*")}
    # Python's bytecode cache of schemathesis.toml's hooks file, as for any module run from the checkout.
    return {entry for entry in entries if "__pycache__" not in entry}


@pytest.mark.timeout(150)
def test_the_documented_schemathesis_run_is_clean(bundled_url: str) -> None:
    env = {key: value for key, value in os.environ.items() if not key.startswith("HYPOTHESIS_")}
    before = checkout_entries()
    run = subprocess.run(
        [str(ST), "run", "openapi.yaml", "--url", bundled_url, "--seed", "1", "-n", "20", "--no-color"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    output = run.stdout + run.stderr
    summary = output.strip().splitlines()[-1]
    assert run.returncode == 0, output[-6000:]
    assert re.search(rf"Configuration:\s+{re.escape(str(ROOT / 'schemathesis.toml'))}\n", output)
    assert "Failures:" not in output and "Errors:" not in output, output[-6000:]
    assert not re.search(r"\d+ (failure|error)", summary), summary
    assert re.search(r"Operations:\s+(\d+) selected / \1 total", output)  # all of them were tested
    assert checkout_entries() - before == set()

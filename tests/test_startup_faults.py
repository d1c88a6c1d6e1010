"""A project that cannot start stops `grps-py serve` with one line on stderr naming the cause and a
non-zero exit: a missing model file, a file that is not ONNX, an error in the project's own code (an
import, a syntax error, a model whose load fails) and a port another process holds."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ (INFO|DEBUG) ")
SERVER_YML = "interface:\n  framework: http+grpc\n  host: 127.0.0.1\n  port: 0,0\n"
ONE_MODEL = """models:
  - {{name: m, version: "1", {model}}}
dag:
  type: sequential
  name: main
  nodes:
    - {{name: m, type: model, model: m-1}}
"""


def project(root: Path, model: str, sources: dict[str, str] | None = None) -> Path:
    (root / "conf").mkdir(parents=True)
    (root / "conf" / "server.yml").write_text(SERVER_YML)
    (root / "conf" / "inference.yml").write_text(ONE_MODEL.format(model=model))
    for name, text in (sources or {}).items():
        (root / "src").mkdir(exist_ok=True)
        (root / "src" / name).write_text(text)
    return root


def serve(root: Path, *args: str) -> tuple[int, str]:
    proc = subprocess.run(
        [sys.executable, "-m", "grps_py.cli", "serve", str(root), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return proc.returncode, proc.stderr


def the_one_line(stderr: str) -> str:
    """The failure's line: besides the server's own INFO lines, stderr holds exactly one, and no traceback."""
    assert "Traceback" not in stderr
    others = [line for line in stderr.splitlines() if line.strip() and not LOG_LINE.match(line)]
    assert len(others) == 1, stderr
    assert others[0].startswith("grps-py: ")
    return others[0]


ECHO = "inferer_type: customized, inferer_name: echo_ok, converter_type: none"
ECHO_SRC = """from grps_py import ModelInferer, inferer_register
inferer_register.register("echo_ok", ModelInferer())
"""


def test_a_missing_model_file(tmp_path: Path) -> None:
    root = project(tmp_path, "inferer_type: onnx, inferer_path: models/missing.onnx")
    code, stderr = serve(root)
    line = the_one_line(stderr)
    assert code == 2
    assert "models[0].inferer_path" in line and "missing.onnx" in line and "does not exist" in line


def test_a_file_that_is_not_onnx(tmp_path: Path) -> None:
    root = project(tmp_path, "inferer_type: onnx, inferer_path: models/m.onnx")
    (root / "models").mkdir()
    (root / "models" / "m.onnx").write_bytes(b"\x08\x07 this is not a model " * 20)
    code, stderr = serve(root)
    line = the_one_line(stderr)
    assert code == 2
    assert "cannot load ONNX model" in line and "m.onnx" in line


@pytest.mark.parametrize(
    ("source", "words"),
    [
        ("import numpy\nimport no_such_package_for_grps_py\n", "ModuleNotFoundError: No module named"),
        ("def broken(:\n    pass\n", "SyntaxError"),
        ("raise RuntimeError('the model registry is unreachable')\n", "RuntimeError: the model registry"),
    ],
)
def test_an_error_in_the_projects_code(tmp_path: Path, source: str, words: str) -> None:
    root = project(tmp_path, ECHO, {"models.py": ECHO_SRC, "broken.py": source})
    code, stderr = serve(root)
    line = the_one_line(stderr)
    assert code == 2
    assert words in line and "broken.py" in line


def test_a_model_whose_load_fails(tmp_path: Path) -> None:
    source = """from grps_py import ModelInferer, inferer_register


class Fails(ModelInferer):
    def load(self):
        raise OSError("the weights server said no")


inferer_register.register("echo_ok", Fails())
"""
    code, stderr = serve(project(tmp_path, ECHO, {"models.py": source}))
    line = the_one_line(stderr)
    assert code == 2
    assert "model 'm-1' failed to load: OSError: the weights server said no" in line


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder.getsockname()[1]


@pytest.mark.parametrize(("ports", "what"), [("{port},0", "HTTP"), ("0,{port}", "gRPC")])
def test_a_port_in_use(tmp_path: Path, taken_port: int, ports: str, what: str) -> None:
    root = project(tmp_path, ECHO, {"models.py": ECHO_SRC})
    code, stderr = serve(root, "--port", ports.format(port=taken_port))
    line = the_one_line(stderr)
    assert code == 2
    address = f"127.0.0.1:{taken_port}"
    assert line == f"grps-py: cannot listen on {address} ({what}, interface.port): address already in use"

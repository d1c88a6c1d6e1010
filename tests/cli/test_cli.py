"""The `grps-py` command line as a user runs it: serve, predict/online/offline/ready, init, check."""

from __future__ import annotations

import os
import pty
import re
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

from grps_py.cli import main
from grps_py.cli.messages import InputError, parse_tensor
from support import BASIC, REPO

ONNX_MODEL = REPO / "models" / "default.onnx"

LISTENING = re.compile(r"listening: http \S+:(\d+) grpc (\d+)")
# The basic project's test models, without the torch and onnx ones (quick to start).
MODELS = """\
models:
  - {name: echo, version: "1.0", inferer_type: customized, inferer_name: echo, converter_type: none}
  - {name: stream, version: "1.0", inferer_type: customized, inferer_name: stream, converter_type: none}
  - {name: raiser, version: "1.0", inferer_type: customized, inferer_name: raiser, converter_type: none}
  - {name: double, version: "1.0", inferer_type: customized, inferer_name: double, converter_type: numpy,
     inferer_args: {scale: 2.0, out: y}}
dag: {type: sequential, name: main, nodes: [{name: echo, type: model, model: echo-1.0}]}
"""


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "grps_py.cli", *args], capture_output=True, text=True, timeout=120
    )


@contextmanager
def serving(*args: str) -> Iterator[dict[str, int]]:
    """`grps-py serve ARGS` in a subprocess; yields its HTTP and gRPC ports, read from its log."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "grps_py.cli", "serve", *args], stderr=subprocess.PIPE, text=True
    )
    assert proc.stderr is not None
    ports: dict[str, int] = {}
    for line in proc.stderr:
        if match := LISTENING.search(line):
            ports = {"http": int(match.group(1)), "grpc": int(match.group(2))}
            break
    if not ports:
        pytest.fail(f"the server did not start (exit {proc.wait(30)})")
    threading.Thread(target=proc.stderr.read, daemon=True).start()  # never block it on a full pipe
    try:
        yield ports
    finally:
        proc.send_signal(signal.SIGTERM)
        if proc.wait(30) != 0:
            pytest.fail(f"the server exited {proc.returncode}")


@pytest.fixture(scope="module")
def ports(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, int]]:
    conf = tmp_path_factory.mktemp("conf") / "inference.yml"
    conf.write_text(MODELS)
    # BASIC's server.yml names ports 0,0 already; --port 0,0 shows the option reaches the server.
    with serving(str(BASIC), "--inference-conf", str(conf), "--port", "0,0") as found:
        _wait_ready(found["http"])
        yield found


def _wait_ready(port: int) -> None:
    for _ in range(300):
        if main(["ready", "--url", f"127.0.0.1:{port}"]) == 0:
            return
        threading.Event().wait(0.1)
    raise AssertionError("the server never became ready")


@pytest.fixture(params=["http", "grpc"])
def remote(request: pytest.FixtureRequest, ports: dict[str, int]) -> list[str]:
    """The options that point a remote command at the shared server over one protocol."""
    return ["--url", f"127.0.0.1:{ports[request.param]}", "--protocol", request.param]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# --- predict, online, offline, ready against a running server ------------------------------------


def test_predict_text_json_and_tensors(
    remote: list[str], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert run(capsys, "predict", *remote, "--model", "echo-1.0", "--str", "hello") == (0, "hello\n", "")
    assert run(capsys, "predict", *remote, "--json", '{"str_data": "from json"}') == (0, "from json\n", "")
    doc = tmp_path / "request.json"
    doc.write_text(
        '{"model": "double-1.0", "gtensors": {"tensors": [{"name": "x", "dtype": "DT_INT32", '
        '"shape": [3], "flat_int32": [1, 2, 3]}]}}'
    )
    assert run(capsys, "predict", *remote, "--json", f"@{doc}") == (
        0,
        "y float64 shape=[3]: [2., 4., 6.]\n",
        "",
    )
    code, out, _ = run(
        capsys, "predict", *remote, "--model", "double-1.0", "--tensor", "x:float32:2,2:1,2,3,4.5"
    )
    assert code == 0 and out == "y float32 shape=[2, 2]:\n[[2., 4.],\n [6., 9.]]\n"


def test_predict_bytes_preview_and_output_file(
    remote: list[str], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    data = bytes(range(40))
    (tmp_path / "in.bin").write_bytes(data)
    code, out, _ = run(capsys, "predict", *remote, "--model", "echo-1.0", "--file", str(tmp_path / "in.bin"))
    assert code == 0 and out == f"bin_data: 40 bytes: {data[:32].hex(' ')}...\n"
    target = tmp_path / "out.bin"
    args = [
        "predict",
        *remote,
        "--model",
        "echo-1.0",
        "--file",
        str(tmp_path / "in.bin"),
        "--output",
        str(target),
    ]
    code, out, _ = run(capsys, *args)
    assert code == 0 and target.read_bytes() == data and out == f"bin_data: 40 bytes written to {target}\n"


def test_predict_stream_shows_each_message(remote: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "predict", *remote, "--model", "stream-1.0", "--str", "3", "--stream")
    assert code == 0 and out.splitlines() == ["chunk 0", "chunk 1", "chunk 2"]


def test_predict_errors_are_one_line_with_the_status(
    remote: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, "predict", *remote, "--model", "raiser-1.0", "--str", "x")
    assert (code, out) == (1, "") and err.count("\n") == 1
    assert err.startswith("grps-py: 500 INTERNAL:") and "boom" in err and "Traceback" not in err
    code, _, err = run(capsys, "predict", *remote, "--model", "nope-1", "--str", "x")
    assert code == 1 and err.startswith("grps-py: 404 NOT_FOUND:") and "nope-1" in err


def test_offline_then_online_switches_readiness(
    remote: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    try:
        assert run(capsys, "offline", *remote) == (0, "offline\n", "")
        assert run(capsys, "ready", *remote) == (1, "not ready\n", "")
        assert run(capsys, "predict", *remote, "--model", "echo-1.0", "--str", "still served")[0] == 0
    finally:
        assert run(capsys, "online", *remote) == (0, "online\n", "")
    assert run(capsys, "ready", *remote) == (0, "ready\n", "")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize(("protocol", "named"), [("http", "HTTP"), ("grpc", "gRPC")])
def test_an_unreachable_server_is_one_line_that_says_so(
    protocol: str, named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """No server answered: the line says so, and does not read like a 503 the server sent."""
    url = f"127.0.0.1:{free_port()}"
    expected = (
        f"grps-py: cannot connect to {url} ({named}): connection refused; "
        "is the server running? (grps-py serve PROJECT_DIR)\n"
    )
    for command in (["predict", "--str", "x"], ["ready"], ["online"], ["offline"]):
        assert run(capsys, *command, "--url", url, "--protocol", protocol, "--timeout", "5") == (
            1,
            "",
            expected,
        )


@pytest.mark.parametrize(("protocol", "named"), [("http", "HTTP"), ("grpc", "gRPC")])
def test_no_answer_in_time_says_so(protocol: str, named: str, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as silent:  # takes connections (the kernel does) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"127.0.0.1:{silent.getsockname()[1]}"
        code, out, err = run(
            capsys, "predict", "--url", url, "--protocol", protocol, "--str", "x", "--timeout", "0.5"
        )
    assert (code, out) == (1, "")
    assert (
        err == f"grps-py: no answer from {url} ({named}) within 0.5 s; wait longer with --timeout SECONDS\n"
    )


GATED_SRC = """import time
from pathlib import Path

from grps_py import ModelInferer, inferer_register


class Gated(ModelInferer):
    \"\"\"Loads once the test creates the gate file: until then the server listens but is not ready.\"\"\"

    def load(self):
        deadline = time.monotonic() + 120
        while not Path(self.args["gate"]).exists():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True

    def infer(self, inp, context):
        return inp


inferer_register.register("gated", Gated())
"""


def gated_project(root: Path) -> Path:
    (root / "conf").mkdir(parents=True)
    (root / "src").mkdir()
    (root / "src" / "gated.py").write_text(GATED_SRC)
    (root / "conf" / "server.yml").write_text(
        "interface: {framework: http+grpc, host: 127.0.0.1, port: '0,0'}\n"
    )
    (root / "conf" / "inference.yml").write_text(
        "models:\n  - {name: m, version: '1', inferer_type: customized, inferer_name: gated,"
        f" converter_type: none, inferer_args: {{gate: '{root / 'gate'}'}}}}\n"
        "dag: {name: d, nodes: [{name: m, type: model, model: m-1}]}\n"
    )
    return root


@pytest.mark.parametrize(("protocol", "named"), [("http", "HTTP"), ("grpc", "gRPC")])
def test_ready_wait_until_the_server_listens_and_loads(
    protocol: str, named: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`ready --wait` counts no server yet, and a server still loading its models, as not ready; a real
    503 (a request while the models load) still reads as the server's answer."""
    root = gated_project(tmp_path / "project")
    ports = {"http": free_port(), "grpc": free_port()}
    url = ["--url", f"127.0.0.1:{ports[protocol]}", "--protocol", protocol]
    assert run(capsys, "ready", *url, "--wait", "0.5") == (
        1,
        "",
        f"grps-py: not ready after 0.5 s; last try: cannot connect to 127.0.0.1:{ports[protocol]} ({named}): "
        "connection refused\n",
    )
    waiter = subprocess.Popen(
        [sys.executable, "-m", "grps_py.cli", "ready", *url, "--wait", "120"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        with serving(str(root), "--port", f"{ports['http']},{ports['grpc']}"):
            try:
                assert run(capsys, "ready", *url) == (1, "not ready\n", "")
                assert run(capsys, "ready", *url, "--wait", "0.3") == (
                    1,
                    "",
                    "grps-py: not ready after 0.3 s; last try: the server answers not ready\n",
                )
                code, out, err = run(capsys, "predict", *url, "--str", "early")
                assert (code, out) == (1, "") and err.startswith(
                    "grps-py: 503 UNAVAILABLE: models are still loading"
                )
                assert waiter.poll() is None  # still waiting
            finally:
                (root / "gate").touch()
            assert waiter.wait(60) == 0 and waiter.communicate() == ("ready\n", "")
            assert run(capsys, "predict", *url, "--str", "served") == (0, "served\n", "")
    finally:
        if waiter.poll() is None:
            waiter.kill()
            waiter.wait()


def test_a_bad_port_option_stops_serve_with_one_line() -> None:
    result = cli("serve", str(BASIC), "--port", "7080")
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert "server.yml (interface.port from --port): interface.port: '7080' is not valid" in result.stderr
    assert 'expected "HTTP,GRPC"' in result.stderr


# --- building requests: what the options cannot describe is refused before anything is sent --------


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("x:float32:2,2", "expected NAME:DTYPE:SHAPE:VALUES"),
        (":float32:1:1", "expected NAME:DTYPE:SHAPE:VALUES"),
        ("x:flaot32:1:1", "unknown dtype 'flaot32'; use one of uint8, int8"),
        ("x:complex64:1:1", "unknown dtype 'complex64'"),
        ("x:float32:2,2:1,2,3", "3 value(s) do not fill shape [2, 2] (4 needed)"),
        ("x:float32:2,-1:1,2", "shape '2,-1' is not valid"),
        ("x:int32:2:1,1.5", "values do not fit dtype int32"),
        ("x:uint8:1:300", "values do not fit dtype uint8"),
        ("x:bool:1:maybe", "'maybe' is not true, false, 1 or 0"),
    ],
)
def test_tensor_option_errors_say_what_is_wrong(spec: str, message: str) -> None:
    with pytest.raises(InputError) as caught:
        parse_tensor(spec)
    assert str(caught.value).startswith(f"--tensor {spec!r}: ") and message in str(caught.value)


def test_tensor_option_dtypes_and_shapes() -> None:
    assert parse_tensor("s:str:2:a,b c").data.tolist() == ["a", "b c"]
    assert parse_tensor("b:bool:3:true,0,1").data.tolist() == [True, False, True]
    scalar = parse_tensor("k:int64::7").data
    assert scalar.shape == () and scalar.dtype == np.int64 and int(scalar) == 7
    assert parse_tensor("e:float16:0,3:").data.shape == (0, 3)


def test_bad_request_options_exit_2_without_calling(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    unused = ["--url", "127.0.0.1:1"]  # nothing listens there: these fail before any call
    code, _, err = run(capsys, "predict", *unused, "--tensor", "x:f32:1:1")
    assert (
        code == 2 and err.startswith("grps-py: --tensor 'x:f32:1:1': unknown dtype") and err.count("\n") == 1
    )
    code, _, err = run(capsys, "predict", *unused, "--tensor", "x:int8:1:1", "--tensor", "x:int8:1:2")
    assert code == 2 and "names must differ" in err
    code, _, err = run(capsys, "predict", *unused, "--json", '{"str_data": 1}')
    assert code == 2 and err.startswith("grps-py: --json: ")
    code, _, err = run(capsys, "predict", *unused, "--json", f"@{tmp_path / 'missing.json'}")
    assert code == 2 and err.startswith("grps-py: --json: cannot read")
    with pytest.raises(SystemExit) as usage:
        main(["predict", "--str", "a", "--file", "b"])
    assert usage.value.code == 2


# --- init, and the project it writes ------------------------------------------------------------


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("init") / "demo"
    assert main(["init", str(root)]) == 0
    return root


def test_init_writes_a_project_from_the_template(project: Path) -> None:
    files = sorted(str(p.relative_to(project)) for p in project.rglob("*") if p.is_file())
    assert files == [
        "README.md",
        "client.py",
        "conf/inference.yml",
        "conf/server.yml",
        "src/converter.py",
        "src/inferer.py",
        "test_project.py",
    ]
    assert "# demo" in (project / "README.md").read_text() and "{{" not in (project / "client.py").read_text()


def test_init_refuses_a_directory_that_is_not_empty(tmp_path: Path) -> None:
    (tmp_path / "mine.txt").write_text("keep me")
    result = cli("init", str(tmp_path))
    assert result.returncode == 2 and result.stdout == ""
    assert (
        result.stderr
        == f"grps-py: {tmp_path} already exists and is not an empty directory; choose another NAME\n"
    )
    assert [p.name for p in tmp_path.iterdir()] == ["mine.txt"]


def test_check_loads_the_new_project(project: Path) -> None:
    result = cli("check", str(project))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "model my_model-1.0.0: loaded (customized on cpu, 1 instance(s), warmed up (2 run(s)))",
        "ok",
    ]
    assert "loading model" not in result.stderr  # progress is for terminals only


def test_check_shows_progress_on_a_terminal(project: Path) -> None:
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "grps_py.cli", "check", str(project)], stdout=subprocess.PIPE, stderr=follower
    )
    os.close(follower)
    seen = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # EIO: the terminal's other end closed
            break
        if not chunk:
            break
        seen += chunk
    os.close(leader)
    assert proc.wait(60) == 0
    text = seen.decode().replace("\r\n", "\n")
    assert re.search(r"^loading model my_model-1\.0\.0 \.\.\. done \(\d+\.\d s\)$", text, re.M), text
    assert "warming up model my_model-1.0.0 (2 run(s)) ...\n" in text
    assert re.search(r"^warming up model my_model-1\.0\.0 \.\.\. done \(\d+\.\d s\)$", text, re.M), text


def test_the_new_project_serves_its_client_and_its_test(project: Path) -> None:
    with serving(str(project), "--port", "0,0") as found:
        _wait_ready(found["http"])
        for protocol in ("http", "grpc"):
            url = f"127.0.0.1:{found[protocol]}"
            result = subprocess.run(
                [sys.executable, str(project / "client.py"), "--url", url, "--protocol", protocol],
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert result.returncode == 0, result.stderr
            assert "ready: True" in result.stdout and "out: [2.0, 4.0, 6.0]" in result.stdout
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_project.py"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=project,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "8 passed" in result.stdout


# --- check on broken projects ---------------------------------------------------------------------


def broken_copy(project: Path, tmp_path: Path, file: str, old: str, new: str) -> Path:
    copy = tmp_path / "broken"
    for path in project.rglob("*"):
        if path.is_file() and "logs" not in path.parts:
            (copy / path.relative_to(project)).parent.mkdir(parents=True, exist_ok=True)
            (copy / path.relative_to(project)).write_bytes(path.read_bytes())
    text = (copy / file).read_text()
    assert old in text
    (copy / file).write_text(text.replace(old, new))
    return copy


@pytest.mark.parametrize(
    ("file", "old", "new", "message"),
    [
        (
            "conf/server.yml",
            "max_concurrency: 32",
            "max_concurrency: lots",
            "conf/server.yml: max_concurrency: 'lots' is not valid; expected an integer >= 1",
        ),
        (
            "conf/inference.yml",
            "    # inferer_path: ./data/model.pt",
            "    inferer_path: ./data/model.pt",
            "conf/inference.yml: models[0].inferer_path: './data/model.pt' is not valid; expected an",
        ),
        (
            "src/inferer.py",
            "return True",
            "raise OSError('weights are corrupt')",
            "model 'my_model-1.0.0' failed to load: OSError: weights are corrupt",
        ),
        (
            "src/converter.py",
            "import numpy as np",
            "import numpy as np\nimport no_such_module",
            "ModuleNotFoundError: No module named 'no_such_module' (at ",
        ),
    ],
)
def test_check_on_a_broken_project_is_one_line_and_exit_2(
    project: Path, tmp_path: Path, file: str, old: str, new: str, message: str
) -> None:
    result = cli("check", str(broken_copy(project, tmp_path, file, old, new)))
    assert result.returncode == 2 and result.stdout == ""
    assert (
        result.stderr.count("\n") == 1 and result.stderr.startswith("grps-py: ") and message in result.stderr
    )


@pytest.mark.parametrize("command", ["check", "serve"])
@pytest.mark.parametrize(
    ("file", "old", "new", "column", "message"),
    [
        (
            "conf/inference.yml",
            "  - name: my_model\n",
            "  - name: my_model: two\n",
            19,  # the second ':'
            "YAML syntax error: mapping values are not allowed here "
            "(check the indentation and the ':' on that line)",
        ),
        (
            "conf/server.yml",
            "\n  host: ",
            "\n   host: ",
            4,  # the key indented one space too far
            "YAML syntax error: expected <block end>, but found '<block mapping start>' "
            "(check the indentation: this line does not line up with the lines above)",
        ),
    ],
)
def test_a_yaml_syntax_error_is_one_line_with_its_place(
    project: Path, tmp_path: Path, command: str, file: str, old: str, new: str, column: int, message: str
) -> None:
    """FILE:LINE:COLUMN, PyYAML's problem and a hint, instead of PyYAML's several lines."""
    broken = broken_copy(project, tmp_path, file, old, new)
    text = (broken / file).read_text()
    line = text[: text.index(new.strip("\n"))].count("\n") + 1
    result = cli(command, str(broken), *(["--port", "0,0"] if command == "serve" else []))
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == f"grps-py: {broken / file}:{line}:{column}: {message}\n"


@pytest.mark.parametrize("command", ["check", "serve"])
def test_a_misspelt_key_gets_a_suggestion(project: Path, tmp_path: Path, command: str) -> None:
    broken = broken_copy(project, tmp_path, "conf/inference.yml", "    inferer_name: ", "    inferer_nmae: ")
    result = cli(command, str(broken))
    assert result.returncode == 2 and result.stdout == "" and result.stderr.count("\n") == 1
    assert result.stderr.startswith(
        f"grps-py: {broken / 'conf/inference.yml'}: models[0].inferer_nmae: unknown key; "
        "did you mean 'inferer_name'? (allowed keys: name, version, device, "
    )


# --- where models run: the device they really use, the same in check, the log and the metadata -------


def test_check_and_the_log_name_the_device_a_model_runs_on(tmp_path: Path) -> None:
    """`device: auto` is reported resolved (cpu, or cuda:0 where ONNX Runtime has a GPU), with the
    configured value beside it; a device that is used as configured is named once."""
    root = tmp_path / "project"
    (root / "conf").mkdir(parents=True)
    (root / "conf" / "server.yml").write_text("interface: {framework: http, host: 127.0.0.1, port: '0'}\n")
    onnx = "inferer_type: onnx, inferer_path: " + str(ONNX_MODEL) + ", converter_type: numpy"
    (root / "conf" / "inference.yml").write_text(
        "models:\n"
        f"  - {{name: auto, version: '1', device: auto, {onnx}}}\n"
        f"  - {{name: cpu, version: '1', device: cpu, {onnx}, instances: 2}}\n"
        "dag: {name: d, nodes: [{name: n, type: model, model: auto-1}]}\n"
    )
    result = cli("check", "-v", str(root))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[-1] == "ok" and len(lines) == 3
    auto = re.fullmatch(
        r"model auto-1: loaded \(onnx on (cpu|cuda:0) \(device: auto\), 1 instance\(s\)\)", lines[0]
    )
    assert auto, lines
    assert lines[1] == "model cpu-1: loaded (onnx on cpu, 2 instance(s))"
    # The server's log says the same, as `serve` writes it.
    assert (
        f"grps_py.repository: {lines[0]}" in result.stderr
        and f"grps_py.repository: {lines[1]}" in result.stderr
    )

"""Peer model servers for the benchmarks: KServe, MLServer and Triton, each serving one identity model.

    .venv/bin/python bench/peers.py [kserve|mlserver|triton ...]

Every peer serves the model `identity` (input `x`, FP32, any 2-D shape; output `y` = `x`) through the Open
Inference Protocol v2 over HTTP and gRPC on 127.0.0.1. Each peer lives in its own virtualenv under
`$GRPS_BENCH_CACHE/venvs/<name>` (default ~/.cache/grps-py-bench), installed on first use from the pins in
REQUIREMENTS; the model code is in bench/peer_models/. `start` returns a PeerServer once the server and the
model answer ready; its `pids` cover the whole process tree (MLServer's workers, Triton's python stub).

Run as a script, it installs and starts each named peer (default all), sends one [1, 16] and one
[1, 1048576] FP32 tensor over HTTP JSON, the HTTP binary tensor extension (where the peer has it) and gRPC
raw contents, checks that `y` equals `x`, prints the latency of each case and stops the peer.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import numpy as np
import proctree

from grps_py.protos import open_inference_pb2, open_inference_pb2_grpc

PEERS: tuple[str, ...] = ("kserve", "mlserver", "triton")

# What each peer's virtualenv gets. None of them needs torch.
REQUIREMENTS: dict[str, tuple[str, ...]] = {
    "kserve": ("kserve==0.21.0",),
    # uvloop 0.22+ raises in asyncio.get_event_loop() without a running loop, which MLServer 1.7.1's
    # inference worker calls at start-up: the worker dies and the model never loads.
    "mlserver": ("mlserver==1.7.1", "uvloop==0.21.0"),
    # Triton's python backend stub is built against the numpy 1.x C API.
    "triton": ("nvidia-pytriton==0.7.0", "numpy==1.26.4"),
}
# Should a dependency ever pull torch in, take the CPU wheel already in the local pip cache rather than
# downloading gigabytes of CUDA packages.
CONSTRAINTS: tuple[str, ...] = ("torch==2.13.0",)

CACHE = Path(os.environ.get("GRPS_BENCH_CACHE", Path.home() / ".cache/grps-py-bench"))
MODELS = Path(__file__).resolve().parent / "peer_models"
HOST = "127.0.0.1"
MAX_MESSAGE = 64 * 1024 * 1024  # gRPC message limit asked of every server and client
READY_TIMEOUT_S = 180.0
STOP_TIMEOUT_S = 10.0
STAMP = ".grps-bench-installed"

# Whether the peer implements the HTTP binary tensor data extension (Inference-Header-Content-Length).
# MLServer 1.7.1 has no such extension: its REST endpoint takes JSON only.
BINARY_HTTP: dict[str, bool] = {"kserve": True, "mlserver": False, "triton": True}


# ---------------------------------------------------------------------------------------------------------
# Process trees


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rindex(b")") + 2 :].split()[0] != b"Z"


def _signal_all(pids: list[int], sig: signal.Signals) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


@dataclass
class PeerServer:
    name: str
    http_port: int
    grpc_port: int
    binary_http: bool  # whether the HTTP binary tensor extension works on this peer
    proc: subprocess.Popen[bytes]  # the server's top process
    log_path: Path | None = None
    _stopped: bool = field(default=False, init=False, repr=False)

    def pids(self) -> list[int]:
        """The server process and all its descendants now, top process first."""
        if self.proc.poll() is not None:
            return []
        return proctree.tree(self.proc.pid)

    def stop(self) -> None:
        """SIGTERM the whole tree, wait up to 10 s, then SIGKILL whatever is left. Idempotent."""
        if self._stopped:
            return  # its pid, and so its group id, may belong to another process by now
        self._stopped = True
        pids = self.pids()
        # The server leads its own process group (start_new_session): signalling the group as well catches
        # descendants whose parent has already exited, which no longer show in the tree.
        group = self.proc.pid
        _signal_all(pids, signal.SIGTERM)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None and not any(map(_alive, pids)) and not _group_alive(group):
                break
            time.sleep(0.05)
        _signal_all([pid for pid in pids if _alive(pid)], signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signal.SIGKILL)
        self.proc.wait()


# ---------------------------------------------------------------------------------------------------------
# Installing


def _site_packages(venv: Path) -> Path:
    return next(venv.glob("lib/python3*/site-packages"))


def _run_logged(cmd: list[str], log: Path) -> None:
    with log.open("ab") as out:
        code = subprocess.call(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    if code != 0:
        raise RuntimeError(f"{' '.join(cmd[:4])} ... failed ({code}); last lines of {log}:\n{_tail(log)}")


def install(name: str) -> Path:
    """Ensure the peer's virtualenv exists and is complete; return its path."""
    requirements = REQUIREMENTS[name]
    venv = CACHE / "venvs" / name
    stamp = venv / STAMP
    want = "\n".join([*requirements, *CONSTRAINTS]) + "\n"  # other pins make another venv
    if stamp.is_file() and stamp.read_text() == want:
        return venv
    # A half-made venv, or one made from other pins, is rebuilt from scratch.
    shutil.rmtree(venv, ignore_errors=True)
    venv.mkdir(parents=True)
    log = venv / "install.log"
    print(f"peers: installing {name} ({' '.join(requirements)}) into {venv}", file=sys.stderr, flush=True)
    started = time.monotonic()
    _run_logged(["python3", "-m", "venv", str(venv)], log)
    constraints = venv / "constraints.txt"
    constraints.write_text("\n".join(CONSTRAINTS) + "\n")
    pip = [str(venv / "bin/python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    _run_logged([*pip, "-c", str(constraints), *requirements], log)
    if name == "triton":
        _place_triton_stub(venv)
    stamp.write_text(want)
    took = time.monotonic() - started
    print(f"peers: installed {name} in {took:.0f} s", file=sys.stderr, flush=True)
    return venv


def _place_triton_stub(venv: Path) -> None:
    """Put the python backend stub for this interpreter's version where the backend looks for it.

    The wheel ships one stub per Python version under python_backend_stubs/X.Y/; libtriton_python.so runs
    backends/python/triton_python_backend_stub (pytriton copies it there at run time too). The copy sits at
    the same depth, so the stub's $ORIGIN-relative RUNPATH to nvidia_pytriton.libs still resolves.
    """
    python = venv / "bin/python"
    version = subprocess.check_output(
        [str(python), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"]
    )
    dist = _site_packages(venv) / "pytriton/tritonserver"
    stub = dist / "python_backend_stubs" / version.decode().strip() / "triton_python_backend_stub"
    if not stub.is_file():
        raise RuntimeError(f"nvidia-pytriton ships no python backend stub for Python {version.decode()}")
    shutil.copy2(stub, dist / "backends/python/triton_python_backend_stub")


# ---------------------------------------------------------------------------------------------------------
# Starting


def _free_ports(count: int) -> list[int]:
    """`count` distinct free loopback ports (all held open at once, so none is handed out twice)."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in socks:
            sock.bind((HOST, 0))
        return [int(sock.getsockname()[1]) for sock in socks]


def _tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


@dataclass
class _Launch:
    cmd: list[str]
    env: dict[str, str]
    cwd: Path


def _kserve_launch(venv: Path, workdir: Path, http_port: int, grpc_port: int, metrics_port: int) -> _Launch:
    # Default ModelServer settings (1 uvicorn worker, 4 gRPC threads, metrics on the HTTP port); only the
    # gRPC message limits are raised from kserve's 8 MiB. uvicorn has no request body limit to raise.
    cmd = [
        str(venv / "bin/python"),
        str(MODELS / "kserve_identity.py"),
        f"--http_port={http_port}",
        f"--grpc_port={grpc_port}",
        f"--grpc_max_send_message_length={MAX_MESSAGE}",
        f"--grpc_max_receive_message_length={MAX_MESSAGE}",
        f"--host={HOST}",
    ]
    return _Launch(cmd, dict(os.environ), workdir)


def _mlserver_launch(venv: Path, workdir: Path, http_port: int, grpc_port: int, metrics_port: int) -> _Launch:
    folder = workdir / "mlserver"
    model = folder / "identity"
    model.mkdir(parents=True, exist_ok=True)
    # parallel_workers is left at MLServer's default, 1: inference runs in one worker process that the
    # main process (HTTP, gRPC) feeds over IPC. MLServer's REST side has no body limit to raise.
    settings = {
        "host": HOST,
        "http_port": http_port,
        "grpc_port": grpc_port,
        "metrics_port": metrics_port,
        "grpc_max_message_length": MAX_MESSAGE,
    }
    tensor = {"datatype": "FP32", "shape": [-1, -1]}
    model_settings = {
        "name": "identity",
        "implementation": "mlserver_identity.IdentityModel",
        "inputs": [{"name": "x", **tensor}],
        "outputs": [{"name": "y", **tensor}],
    }
    (folder / "settings.json").write_text(json.dumps(settings, indent=2))
    (model / "model-settings.json").write_text(json.dumps(model_settings, indent=2))
    # MLServer imports `implementation` from the folder of model-settings.json.
    shutil.copy2(MODELS / "mlserver_identity.py", model / "mlserver_identity.py")
    # cwd: MLServer keeps its .metrics and .envs folders there.
    return _Launch([str(venv / "bin/mlserver"), "start", str(folder)], dict(os.environ), folder)


def _triton_launch(venv: Path, workdir: Path, http_port: int, grpc_port: int, metrics_port: int) -> _Launch:
    dist = _site_packages(venv) / "pytriton/tritonserver"
    # A copy of the repository: the python stub writes __pycache__ next to model.py.
    repository = workdir / "triton-models"
    shutil.rmtree(repository, ignore_errors=True)
    shutil.copytree(MODELS / "triton", repository)
    libdir = subprocess.check_output(
        [str(venv / "bin/python"), "-c", "import sysconfig; print(sysconfig.get_config_var('LIBDIR'))"]
    )
    env = dict(os.environ)
    # The stub links libpython3.X.so.1.0: take this interpreter's (pyenv's), not a system copy of another
    # patch release that the loader would find otherwise. The wheel's own libraries need no path: the
    # binaries' $ORIGIN-relative RUNPATH finds nvidia_pytriton.libs.
    env["LD_LIBRARY_PATH"] = ":".join(p for p in (libdir.decode().strip(), env.get("LD_LIBRARY_PATH")) if p)
    # The stub's embedded interpreter finds its prefix through the first `python3` on PATH. The venv's gives
    # it the venv's numpy 1.x; the base interpreter's numpy 2 would make every output come back empty.
    env["PATH"] = f"{venv / 'bin'}:{env.get('PATH', '')}"
    cmd = [
        str(dist / "bin/tritonserver"),
        f"--model-repository={repository}",
        f"--backend-directory={dist / 'backends'}",
        f"--cache-directory={dist / 'caches'}",
        f"--http-address={HOST}",
        f"--http-port={http_port}",
        f"--grpc-address={HOST}",
        f"--grpc-port={grpc_port}",
        f"--metrics-address={HOST}",
        f"--metrics-port={metrics_port}",
        # CPU only: no pinned (CUDA host) memory pool, no GPU metrics.
        "--pinned-memory-pool-byte-size=0",
        "--allow-gpu-metrics=false",
    ]
    return _Launch(cmd, env, workdir)


# (venv, workdir, http port, gRPC port, metrics port) -> how to run the server
_LAUNCHERS: dict[str, Callable[[Path, Path, int, int, int], _Launch]] = {
    "kserve": _kserve_launch,
    "mlserver": _mlserver_launch,
    "triton": _triton_launch,
}


def _http_status(port: int, path: str) -> int:
    conn = http.client.HTTPConnection(HOST, port, timeout=2)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        response.read()
        return response.status
    except OSError:
        return 0
    finally:
        conn.close()


def _wait_ready(server: PeerServer, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            raise RuntimeError(f"{server.name} exited ({server.proc.returncode}) before it was ready")
        if (
            _http_status(server.http_port, "/v2/health/ready") == 200
            and _http_status(server.http_port, "/v2/models/identity/ready") == 200
        ):
            return
        time.sleep(0.25)
    raise RuntimeError(f"{server.name} was not ready within {timeout_s:.0f} s")


def start(name: str, workdir: Path) -> PeerServer:
    """Install the peer if needed, start it on free loopback ports and wait until the model is ready."""
    if name not in _LAUNCHERS:
        raise ValueError(f"unknown peer {name!r}; choose from {', '.join(PEERS)}")
    venv = install(name)
    workdir.mkdir(parents=True, exist_ok=True)
    http_port, grpc_port, metrics_port = _free_ports(3)
    launch = _LAUNCHERS[name](venv, workdir, http_port, grpc_port, metrics_port)
    log_path = workdir / f"{name}.log"
    # The log is a file, never a pipe that could fill and stall the server.
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            launch.cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=launch.env,
            cwd=launch.cwd,
            start_new_session=True,  # a Ctrl-C at the terminal goes to the benchmark, not to the peer
        )
    server = PeerServer(name, http_port, grpc_port, BINARY_HTTP[name], proc, log_path)
    try:
        _wait_ready(server, READY_TIMEOUT_S)
    except BaseException as exc:  # a timeout, an early exit, or Ctrl-C: leave no server behind
        server.stop()
        if isinstance(exc, RuntimeError):
            raise RuntimeError(f"{exc}; last lines of {log_path}:\n{_tail(log_path)}") from None
        raise
    return server


# ---------------------------------------------------------------------------------------------------------
# Check mode


def _post(server: PeerServer, body: bytes, headers: dict[str, str]) -> tuple[dict[str, str], bytes, float]:
    """POST an infer request on a fresh connection; the time covers sending it and reading the reply."""
    conn = http.client.HTTPConnection(HOST, server.http_port, timeout=60)
    try:
        conn.connect()
        t0 = time.perf_counter()
        conn.request("POST", "/v2/models/identity/infer", body=body, headers=headers)
        response = conn.getresponse()
        payload = response.read()
        seconds = time.perf_counter() - t0
    finally:
        conn.close()
    if response.status != 200:
        raise RuntimeError(f"HTTP {response.status}: {payload[:300]!r}")
    return {k.lower(): v for k, v in response.getheaders()}, payload, seconds


def _infer_http_json(server: PeerServer, x: np.ndarray) -> tuple[np.ndarray, float]:
    tensor = {"name": "x", "datatype": "FP32", "shape": list(x.shape), "data": x.ravel().tolist()}
    body = json.dumps({"inputs": [tensor]}).encode()
    _, payload, seconds = _post(server, body, {"Content-Type": "application/json"})
    output = json.loads(payload)["outputs"][0]
    return np.asarray(output["data"], dtype=np.float32).reshape(output["shape"]), seconds


def _infer_http_binary(server: PeerServer, x: np.ndarray) -> tuple[np.ndarray, float]:
    raw = x.tobytes()
    tensor = {
        "name": "x",
        "datatype": "FP32",
        "shape": list(x.shape),
        "parameters": {"binary_data_size": len(raw)},
    }
    # Binary output asked both ways the extension allows: per output and for the whole request.
    request = {
        "inputs": [tensor],
        "outputs": [{"name": "y", "parameters": {"binary_data": True}}],
        "parameters": {"binary_data_output": True},
    }
    header = json.dumps(request).encode()
    headers = {
        "Content-Type": "application/octet-stream",
        "Inference-Header-Content-Length": str(len(header)),
    }
    response_headers, payload, seconds = _post(server, header + raw, headers)
    json_length = int(response_headers.get("inference-header-content-length", len(payload)))
    output = json.loads(payload[:json_length])["outputs"][0]
    if "data" in output:
        raise RuntimeError("the output came back as JSON, not binary")
    data = payload[json_length : json_length + output["parameters"]["binary_data_size"]]
    return np.frombuffer(data, dtype=np.float32).reshape(output["shape"]), seconds


def _infer_grpc(server: PeerServer, x: np.ndarray) -> tuple[np.ndarray, float]:
    options = [
        ("grpc.max_send_message_length", MAX_MESSAGE),
        ("grpc.max_receive_message_length", MAX_MESSAGE),
    ]
    tensor = open_inference_pb2.ModelInferRequest.InferInputTensor(name="x", datatype="FP32", shape=x.shape)
    request = open_inference_pb2.ModelInferRequest(
        model_name="identity", inputs=[tensor], raw_input_contents=[x.tobytes()]
    )
    with grpc.insecure_channel(f"{HOST}:{server.grpc_port}", options=options) as channel:
        grpc.channel_ready_future(channel).result(timeout=10)
        stub = open_inference_pb2_grpc.GRPCInferenceServiceStub(channel)  # type: ignore[no-untyped-call]
        t0 = time.perf_counter()
        response = stub.ModelInfer(request, timeout=60)
        seconds = time.perf_counter() - t0
    output = response.outputs[0]
    if response.raw_output_contents:
        y = np.frombuffer(response.raw_output_contents[0], dtype=np.float32)
    else:
        y = np.asarray(output.contents.fp32_contents, dtype=np.float32)
    return y.reshape(list(output.shape)), seconds


CASES: tuple[tuple[str, Callable[[PeerServer, np.ndarray], tuple[np.ndarray, float]]], ...] = (
    ("http-json", _infer_http_json),
    ("http-binary", _infer_http_binary),
    ("grpc-raw", _infer_grpc),
)


def check(name: str) -> bool:
    """Start one peer, send each case once, print a line per case, stop it. True if every case passed."""
    ok = True
    with tempfile.TemporaryDirectory(prefix=f"peer-{name}-") as tmp:
        started = time.monotonic()
        server = start(name, Path(tmp))
        took = time.monotonic() - started
        print(f"{name}: ready in {took:.1f} s, processes: {len(server.pids())}", flush=True)
        try:
            for columns in (16, 1 << 20):
                x = (np.arange(columns, dtype=np.float32) - columns // 2).reshape(1, columns)
                for case, infer in CASES:
                    label = f"{name:9} {case:12} [1, {columns}]"
                    if case == "http-binary" and not server.binary_http:
                        print(f"{label:40} unsupported")
                        continue
                    try:
                        y, seconds = infer(server, x)
                    except Exception as exc:
                        print(f"{label:40} FAILED: {exc}")
                        ok = False
                        continue
                    same = y.dtype == np.float32 and y.shape == x.shape and np.array_equal(x, y)
                    ok = ok and same
                    print(f"{label:40} {seconds * 1000:8.2f} ms  {'ok' if same else 'MISMATCH'}", flush=True)
        finally:
            server.stop()
    return ok


if __name__ == "__main__":
    names = sys.argv[1:] or list(PEERS)
    results = {name: check(name) for name in names}
    sys.exit(0 if all(results.values()) else 1)

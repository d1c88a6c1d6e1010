"""The two servers of bench/reload.py, each serving model `m` and able to swap it for its other version.

grps-py: bench/projects/reload copied into a temporary directory, with the two ONNX files (y = z = x*0 + c,
c = 1 in data/a.onnx, 2 in data/b.onnx) written into its data/; a swap is the repository API's
`POST /v2/repository/models/m/load` with the model entry's inferer_path switched to the other file.

Triton (bench/peers.py's install of pytriton's tritonserver): `--model-control-mode=poll` over a copy of
bench/peer_models/triton_reload, a python-backend model whose constant is read from version.txt; a swap
rewrites that file and Triton's repository poll (every second) reloads the model.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
import onnx
import yaml
from compare import start_process, stopper
from onnx import TensorProto, helper, numpy_helper
from reload_clients import MODEL, OUTPUTS, VERSIONS, Target

BENCH = Path(__file__).resolve().parent
PROJECT = BENCH / "projects" / "reload"
TRITON_REPOSITORY = BENCH / "peer_models" / "triton_reload"
MODEL_FILES = {1: "data/a.onnx", 2: "data/b.onnx"}  # version -> file, relative to the project
POLL_S = 1
READY_TIMEOUT_S = 180.0
LOAD_TIMEOUT_S = 60.0


@dataclass
class Served:
    """A started server: where it listens, how to swap its model to a version, how to stop it."""

    name: str
    target: Target
    swap: Callable[[int], None]  # returns once the swap call returns (grps-py) or the file is swapped
    stop: Callable[[], None]
    log: Path


# -- grps-py ---------------------------------------------------------------------------------------
def constant_model(constant: float) -> onnx.ModelProto:
    """y = z = x*0 + constant, x FP32 [batch, 4]."""
    zero = numpy_helper.from_array(np.zeros((), np.float32), "zero")
    value = numpy_helper.from_array(np.asarray(constant, np.float32), "c")
    nodes = [helper.make_node("Mul", ["x", "zero"], ["x0"])]
    nodes += [helper.make_node("Add", ["x0", "c"], [name]) for name in OUTPUTS]
    shape: list[str | int | None] = ["batch", 4]
    graph = helper.make_graph(
        nodes,
        f"constant_{constant:g}",
        inputs=[helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        outputs=[helper.make_tensor_value_info(name, TensorProto.FLOAT, shape) for name in OUTPUTS],
        initializer=[zero, value],
    )
    # opset 17 at IR 8, as scripts/make_default_model.py: any onnxruntime >= 1.13 reads it
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model)
    return model


def start_grps(workdir: Path) -> Served:
    project = workdir / "reload-project"
    shutil.copytree(PROJECT, project)
    for version, path in MODEL_FILES.items():
        (project / path).parent.mkdir(exist_ok=True)
        onnx.save(constant_model(version), str(project / path))
    entry = yaml.safe_load((project / "conf/inference.yml").read_text())["models"][0]
    cmd = [str(Path(sys.executable).parent / "grps-py"), "serve", str(project)]
    proc, http_port, grpc_port = start_process(
        "grps-py", cmd, workdir, r"listening: http \S+:(\d+) grpc (\d+)[\s\S]*loaded models"
    )
    admin = httpx.Client(base_url=f"http://127.0.0.1:{http_port}", timeout=LOAD_TIMEOUT_S)

    def swap(version: int) -> None:
        config = json.dumps({**entry, "inferer_path": MODEL_FILES[version]})
        response = admin.post(f"/v2/repository/models/{MODEL}/load", json={"parameters": {"config": config}})
        if response.status_code != 200:
            raise RuntimeError(f"load answered {response.status_code}: {response.text[:200]}")

    stop = stopper(proc)

    def stop_all() -> None:
        admin.close()
        stop()

    return Served(
        "grps-py", Target("127.0.0.1", http_port, grpc_port), swap, stop_all, workdir / "grps-py.log"
    )


# -- Triton ----------------------------------------------------------------------------------------
def triton_unavailable() -> str | None:
    """Why Triton cannot run here, or None. (Installing it needs the network once; see bench/peers.py.)"""
    try:
        import peers

        peers.install("triton")
    except Exception as exc:
        return f"{type(exc).__name__}: {str(exc)[:300]}"
    return None


def _http_status(port: int, path: str) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        response.read()
        return response.status
    except OSError:
        return 0
    finally:
        conn.close()


def start_triton(workdir: Path) -> Served:
    import peers

    venv = peers.install("triton")
    repository = workdir / "triton-reload-models"
    shutil.copytree(TRITON_REPOSITORY, repository)
    version_file = repository / MODEL / "1" / "version.txt"
    version_file.write_text(f"{VERSIONS[0]}\n")
    http_port, grpc_port, metrics_port = peers._free_ports(3)
    launch = peers._triton_launch(venv, workdir, http_port, grpc_port, metrics_port)
    cmd = [arg for arg in launch.cmd if not arg.startswith("--model-repository=")]
    cmd += [
        f"--model-repository={repository}",
        "--model-control-mode=poll",
        f"--repository-poll-secs={POLL_S}",
    ]
    # No __pycache__ written next to model.py: a new file there would look like a change to the model.
    env = {**launch.env, "PYTHONDONTWRITEBYTECODE": "1"}
    log_path = workdir / "triton.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=launch.cwd,
            start_new_session=True,
        )
    server = peers.PeerServer("triton", http_port, grpc_port, True, proc, log_path)
    deadline = time.monotonic() + READY_TIMEOUT_S
    while _http_status(http_port, f"/v2/models/{MODEL}/ready") != 200:
        if proc.poll() is not None or time.monotonic() > deadline:
            server.stop()
            raise RuntimeError(f"triton did not start; last lines of {log_path}:\n{peers._tail(log_path)}")
        time.sleep(0.25)

    def swap(version: int) -> None:
        # a whole new file renamed over the old: the instance Triton starts reads one number or the other
        staged = workdir / "version.txt.new"  # written outside the model's folder, then renamed in
        staged.write_text(f"{version}\n")
        os.replace(staged, version_file)

    return Served("triton", Target("127.0.0.1", http_port, grpc_port), swap, server.stop, log_path)

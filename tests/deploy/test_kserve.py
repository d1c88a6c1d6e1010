"""deploy/kserve: the serving runtime and InferenceService examples, and a server started the way the
runtime starts it (a bare model directory, the model named by --model-name) passing the Open Inference
Protocol checks over HTTP and gRPC with tritonclient, answering as the ONNX model itself does."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import onnxruntime
import pytest
import tritonclient.grpc as tgrpc
import tritonclient.http as thttp
import yaml

from grps_py import model_dir
from grps_py.cli import build_parser
from grps_py.server import GrpsServer
from support import REPO, ServerThread

KSERVE = REPO / "deploy" / "kserve"
ONNX = REPO / "models" / "default.onnx"
MOUNT = "/mnt/models"  # where KServe's storage initializer puts the storageUri
RUNTIMES = {"cluster-serving-runtime.yaml": "ClusterServingRuntime", "serving-runtime.yaml": "ServingRuntime"}
SERVICES = ("inference-service.yaml", "inference-service-grpc.yaml")
LISTENING = re.compile(r"listening: http \S+:(\d+) grpc (\d+)")


def load(name: str) -> dict[str, Any]:
    (doc,) = yaml.safe_load_all((KSERVE / name).read_text())
    assert isinstance(doc, dict)
    return doc


def container(runtime: dict[str, Any]) -> dict[str, Any]:
    (kserve,) = [c for c in runtime["spec"]["containers"] if c["name"] == "kserve-container"]
    return kserve


def option(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


def runtime_args(model_dir_path: Path, name: str, http_port: int = 0, grpc_port: int = 0) -> list[str]:
    """The runtime's args as KServe fills them in, the mount and the ports swapped for the test's."""
    args = container(load("cluster-serving-runtime.yaml"))["args"]
    swaps = {MOUNT: str(model_dir_path), "8080": str(http_port), "8081": str(grpc_port), "{{.Name}}": name}
    return [swaps.get(arg, arg) for arg in args]


# --- the manifests ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "kind"), RUNTIMES.items())
def test_runtime_declares_what_kserve_needs(name: str, kind: str) -> None:
    runtime = load(name)
    assert (runtime["apiVersion"], runtime["kind"]) == ("serving.kserve.io/v1alpha1", kind)
    assert runtime["metadata"]["name"] == "grps-py"
    spec = runtime["spec"]
    assert spec["protocolVersions"] == ["v2", "grpc-v2"]
    assert {f["name"] for f in spec["supportedModelFormats"]} == {"onnx", "pytorch"}
    assert all(isinstance(f["version"], str) for f in spec["supportedModelFormats"])
    assert spec["annotations"] == {
        "serving.kserve.io/enable-prometheus-scraping": "true",
        "prometheus.kserve.io/port": "8080",
        "prometheus.kserve.io/path": "/metrics",
    }
    kserve = container(runtime)
    assert kserve["image"] == "grps-py:latest"
    assert kserve["command"] == ["grps-py"]
    args = kserve["args"]
    assert args[:2] == ["serve", MOUNT]
    assert (option(args, "--http-port"), option(args, "--grpc-port")) == ("8080", "8081")
    assert option(args, "--model-name") == "{{.Name}}"
    assert "ports" not in kserve  # Knative serves one port: 8080 unless an InferenceService names h2c
    probe = kserve["readinessProbe"]["httpGet"]
    assert (probe["path"], probe["port"]) == ("/v2/health/ready", 8080)


def test_namespaced_runtime_is_the_cluster_runtime() -> None:
    assert load("serving-runtime.yaml")["spec"] == load("cluster-serving-runtime.yaml")["spec"]


@pytest.mark.parametrize("name", SERVICES)
def test_inference_services_use_the_runtime_for_an_onnx_model(name: str) -> None:
    service = load(name)
    runtime = load("cluster-serving-runtime.yaml")
    assert (service["apiVersion"], service["kind"]) == ("serving.kserve.io/v1beta1", "InferenceService")
    model = service["spec"]["predictor"]["model"]
    assert model["runtime"] == runtime["metadata"]["name"]
    assert model["modelFormat"]["name"] == "onnx"
    assert model["modelFormat"]["name"] in {f["name"] for f in runtime["spec"]["supportedModelFormats"]}
    assert model["protocolVersion"] in runtime["spec"]["protocolVersions"]
    assert re.fullmatch(r"(gs|s3|pvc|https)://\S+", model["storageUri"])


def test_grpc_inference_service_routes_the_runtimes_grpc_port_as_h2c() -> None:
    model = load("inference-service-grpc.yaml")["spec"]["predictor"]["model"]
    assert model["protocolVersion"] == "grpc-v2"
    grpc_port = option(container(load("cluster-serving-runtime.yaml"))["args"], "--grpc-port")
    assert model["ports"] == [{"name": "h2c", "containerPort": int(grpc_port), "protocol": "TCP"}]
    assert "ports" not in load("inference-service.yaml")["spec"]["predictor"]["model"]


def serve_flags_known() -> bool:
    _, unknown = build_parser().parse_known_args(runtime_args(Path(MOUNT), "classifier", 8080, 8081))
    return not unknown


needs_wiring = pytest.mark.skipif(not serve_flags_known(), reason="needs the serve wiring")


@needs_wiring
def test_grps_py_serve_accepts_the_runtimes_args() -> None:
    args = build_parser().parse_args(runtime_args(Path(MOUNT), "classifier", 8080, 8081))
    assert (args.command, args.project_dir, args.model_name) == ("serve", Path(MOUNT), "classifier")
    assert (str(args.http_port), str(args.grpc_port)) == ("8080", "8081")


# --- a server started as the runtime starts it -------------------------------------------------------


def bare_model_dir(root: Path) -> Path:
    """What the storage initializer leaves for inference-service.yaml: the model as 1/model.onnx."""
    (root / "1").mkdir(parents=True)
    shutil.copy(ONNX, root / "1" / "model.onnx")
    return root


def model_name() -> str:
    return str(load("inference-service.yaml")["metadata"]["name"])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    project = model_dir.project(bare_model_dir(tmp_path_factory.mktemp("mnt-models")), model_name(), 0, 0)
    running = ServerThread(lambda: GrpsServer(project.server, project.inference)).start()
    yield running
    running.stop()


def reference_answer(x: np.ndarray) -> np.ndarray:
    session = onnxruntime.InferenceSession(str(ONNX), providers=["CPUExecutionProvider"])
    (probs,) = session.run(["probs"], {"x": x})
    return np.asarray(probs)


def oip_checks(client: Any, protocol: str, name: str) -> None:
    """What a KServe or Triton client asks of a v2 server, and one inference."""
    mod: Any = thttp if protocol == "http" else tgrpc
    assert client.is_server_live()
    assert client.is_server_ready()
    assert client.is_model_ready(name)
    assert client.is_model_ready(name, "1")
    as_json = {} if protocol == "http" else {"as_json": True}  # gRPC answers a protobuf unless asked
    metadata = client.get_model_metadata(name, **as_json)
    assert (metadata["name"], metadata["versions"]) == (name, ["1"])
    assert [(t["name"], t["datatype"]) for t in metadata["inputs"]] == [("x", "FP32")]
    assert [(t["name"], t["datatype"]) for t in metadata["outputs"]] == [("probs", "FP32")]
    x = np.random.default_rng(7).random((3, 4), dtype=np.float32)
    item = mod.InferInput("x", list(x.shape), "FP32")
    item.set_data_from_numpy(x)
    result = client.infer(name, [item], outputs=[mod.InferRequestedOutput("probs")])
    response = result.get_response()
    assert (response["model_name"] if protocol == "http" else response.model_name) == name
    np.testing.assert_allclose(result.as_numpy("probs"), reference_answer(x), rtol=1e-5, atol=1e-6)


def test_oip_over_http(server: ServerThread) -> None:
    client = thttp.InferenceServerClient(server.http_url.removeprefix("http://"))
    try:
        oip_checks(client, "http", model_name())
    finally:
        client.close()


def test_oip_over_grpc(server: ServerThread) -> None:
    client = tgrpc.InferenceServerClient(server.grpc_target)
    try:
        oip_checks(client, "grpc", model_name())
    finally:
        client.close()


def test_the_runtimes_probe_and_metrics_paths_answer(server: ServerThread) -> None:
    runtime = load("cluster-serving-runtime.yaml")
    probe = container(runtime)["readinessProbe"]["httpGet"]["path"]
    metrics = runtime["spec"]["annotations"]["prometheus.kserve.io/path"]
    with httpx.Client(base_url=server.http_url, timeout=30) as http:
        assert http.get(probe).status_code == 200
        reply = http.get(metrics)
        assert reply.status_code == 200
        assert "# TYPE" in reply.text


def test_the_model_is_the_only_oip_model(server: ServerThread) -> None:
    with httpx.Client(base_url=server.http_url, timeout=30) as http:
        index = http.post("/v2/repository/index").json()
    assert [(m["name"], m["version"], m["state"]) for m in index] == [(model_name(), "1", "READY")]


# --- through the CLI, as the container runs it -------------------------------------------------------


@contextmanager
def serve(args: list[str], workers: int) -> Iterator[tuple[subprocess.Popen[str], int, int]]:
    """`grps-py ARGS` in a subprocess; yields it with its HTTP and gRPC ports once it listens."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "grps_py.cli", *args],
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "GRPS_WORKERS": str(workers)},  # as the runtime's env sets it
    )
    assert proc.stderr is not None
    ports = None
    listening = 0
    for line in proc.stderr:  # each worker says where it listens (the same ports)
        match = LISTENING.search(line)
        if match:
            ports = int(match.group(1)), int(match.group(2))
            listening += 1
            if listening == workers:
                break
    if listening < workers or ports is None:
        proc.wait(30)
        pytest.fail(f"server did not start (exit {proc.returncode})")
    threading.Thread(target=lambda: [None for _ in proc.stderr or ()], daemon=True).start()
    try:
        yield proc, *ports
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(30)


@needs_wiring
@pytest.mark.parametrize("workers", [1, 2])
def test_grps_py_serve_with_the_runtimes_args_passes_oip_checks(tmp_path: Path, workers: int) -> None:
    """Every worker serves the model under --model-name (not the directory's name, `mnt-models`)."""
    name = "classifier-cli"
    args = runtime_args(bare_model_dir(tmp_path / "mnt-models"), name)
    with serve(args, workers) as (proc, http_port, grpc_port):
        ready = thttp.InferenceServerClient(f"127.0.0.1:{http_port}")
        for _ in range(600):  # listening comes first; models load after
            if ready.is_server_ready():
                break
            threading.Event().wait(0.1)
        ready.close()
        for _ in range(2 * workers):  # new connections, spread over the workers by the kernel
            for protocol, client in (
                ("http", thttp.InferenceServerClient(f"127.0.0.1:{http_port}")),
                ("grpc", tgrpc.InferenceServerClient(f"127.0.0.1:{grpc_port}")),
            ):
                try:
                    oip_checks(client, protocol, name)
                finally:
                    client.close()
        proc.terminate()
        assert proc.wait(60) == 0

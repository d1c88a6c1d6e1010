"""One MLP as TorchScript, ONNX and a TensorFlow SavedModel, served side by side by one grps-py server.

    .venv/bin/python bench/backends.py [--seconds 4] [--rounds 3] [--concurrency 1,16]

Writes the same network (seeded weights, `--layers` layers of `--width`, ReLU) in the three formats
into a temporary project, checks each served answer against numpy, then drives each model over OIP gRPC
(`ModelInfer` with `raw_input_contents`, pre-serialized: bench/load.py) at each concurrency, unbatched
and with dynamic batching, in turns (model by model, `--rounds` times; the table has the medians). Last,
each framework is called in this process with one row (torch under inference mode with one thread,
ONNX Runtime with one intra-op thread, the SavedModel's signature), and the calls per second are the
ceiling a server of that backend could reach at concurrency 1 if serving cost nothing.

What it answers: does the TensorFlow backend cost more per request than the other two, and does dynamic
batching pay for it as it does for them. The machine is shared and noisy: read the ratios. TensorFlow
picks its own thread pools (process-wide, set before its first use), so its model may use more cores.
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import IO, Any

import grpc
import numpy as np
import onnxruntime as ort
import tensorflow as tf
import torch
from onnx import TensorProto, helper, numpy_helper

from grps_py.protos import open_inference_pb2
from load import RawGrpc, drive

ROOT = Path(__file__).resolve().parent.parent
BACKENDS = ("torch", "onnx", "tensorflow")
SERVER_YML = "interface: {framework: http+grpc, host: 127.0.0.1, port: '0,0'}\nmax_concurrency: 64\n"
MODEL_YML = """\
  - name: {name}
    version: "1"
    inferer_type: {backend}
    inferer_path: {path}
    device: cpu
{args}    batching: {batching}
    inputs: [{{name: x, datatype: FP32, shape: [-1, {width}]}}]
"""
BATCHED = "{type: dynamic, max_batch_size: 32, batch_timeout_us: 1000}"
UNBATCHED = "{type: none}"
ARGS = {
    "torch": "    inferer_args: {num_threads: 1}\n",
    "onnx": "    inferer_args: {intra_op_num_threads: 1}\n",
}
FILES = {"torch": "mlp.pt", "onnx": "mlp.onnx", "tensorflow": "mlp_savedmodel"}


# -- the network in three formats --------------------------------------------------------------------


def weights(layers: int, width: int) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(11)
    scale = (2.0 / width) ** 0.5
    return [
        ((rng.standard_normal((width, width)) * scale).astype(np.float32), np.zeros(width, np.float32))
        for _ in range(layers)
    ]


def reference(x: np.ndarray, w: list[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    for i, (a, b) in enumerate(w):
        x = x @ a + b
        if i < len(w) - 1:
            x = np.maximum(x, 0)
    return x


def write_torch(path: Path, w: list[tuple[np.ndarray, np.ndarray]]) -> None:
    layers: list[torch.nn.Module] = []
    for i, (a, b) in enumerate(w):
        linear = torch.nn.Linear(a.shape[0], a.shape[1])
        with torch.no_grad():
            linear.weight.copy_(torch.from_numpy(a.T.copy()))
            linear.bias.copy_(torch.from_numpy(b))
        layers.append(linear)
        if i < len(w) - 1:
            layers.append(torch.nn.ReLU())
    module = torch.jit.trace(torch.nn.Sequential(*layers).eval(), torch.zeros(1, w[0][0].shape[0]))
    torch.jit.save(module, str(path))


def write_onnx(path: Path, w: list[tuple[np.ndarray, np.ndarray]]) -> None:
    nodes, inits, last = [], [], "x"
    for i, (a, b) in enumerate(w):
        inits += [numpy_helper.from_array(a, f"w{i}"), numpy_helper.from_array(b, f"b{i}")]
        final = i == len(w) - 1
        nodes.append(helper.make_node("Gemm", [last, f"w{i}", f"b{i}"], ["y" if final else f"g{i}"]))
        if not final:
            nodes.append(helper.make_node("Relu", [f"g{i}"], [f"h{i}"]))
            last = f"h{i}"
    width = w[0][0].shape[0]
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", w[-1][0].shape[1]])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    path.write_bytes(model.SerializeToString())


class Mlp(tf.Module):  # type: ignore[misc]
    def __init__(self, w: list[tuple[np.ndarray, np.ndarray]]) -> None:
        super().__init__()
        self.layers = [(tf.Variable(a), tf.Variable(b)) for a, b in w]
        width = w[0][0].shape[0]
        self.serve = tf.function(
            self._forward, input_signature=[tf.TensorSpec([None, width], tf.float32, name="x")]
        )

    def _forward(self, x: Any) -> dict[str, Any]:
        for i, (a, b) in enumerate(self.layers):
            x = tf.matmul(x, a) + b
            if i < len(self.layers) - 1:
                x = tf.nn.relu(x)
        return {"y": x}


def write_tensorflow(path: Path, w: list[tuple[np.ndarray, np.ndarray]]) -> None:
    module = Mlp(w)
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.serve})


# -- the server --------------------------------------------------------------------------------------


def write_project(root: Path, width: int) -> None:
    models = []
    for backend in BACKENDS:
        for suffix, batching in (("", UNBATCHED), ("_batched", BATCHED)):
            name = f"{backend}{suffix}"
            args = ARGS.get(backend, "")
            path = root / FILES[backend]
            models.append(
                MODEL_YML.format(
                    name=name, backend=backend, path=path, args=args, batching=batching, width=width
                )
            )
    conf = root / "conf"
    conf.mkdir()
    dag = "dag: {name: d, nodes: [{name: n, type: model, model: torch-1}]}\n"
    (conf / "inference.yml").write_text("models:\n" + "".join(models) + dag)
    (conf / "server.yml").write_text(SERVER_YML)


def start(root: Path) -> tuple[subprocess.Popen[str], int]:
    cmd = [str(ROOT / ".venv/bin/grps-py"), "serve", str(root)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    port = 0
    deadline = time.monotonic() + 180
    for line in proc.stdout:
        match = re.search(r"listening: http \S+:\d+ grpc (\d+)", line)
        port = int(match.group(1)) if match else port
        if "loaded models" in line or time.monotonic() > deadline:
            break
    if not port or proc.poll() is not None:
        proc.kill()
        raise SystemExit("the server did not start")
    threading.Thread(target=_drain, args=(proc.stdout,), daemon=True).start()
    return proc, port


def _drain(stream: IO[str]) -> None:
    for _ in stream:
        pass


def request(model: str, x: np.ndarray) -> bytes:
    message = open_inference_pb2.ModelInferRequest(model_name=model)
    tensor = message.inputs.add(name="x", datatype="FP32")
    tensor.shape.extend(x.shape)
    message.raw_input_contents.append(x.tobytes())
    return message.SerializeToString()


def answer(reply: bytes, width: int) -> np.ndarray:
    parsed = open_inference_pb2.ModelInferResponse.FromString(reply)
    return np.frombuffer(parsed.raw_output_contents[0], np.float32).reshape(-1, width)


# -- in-process ceilings -----------------------------------------------------------------------------


def calls_per_s(call: Callable[[], object], seconds: float = 1.0) -> float:
    for _ in range(20):
        call()
    count, began = 0, time.perf_counter()
    while time.perf_counter() - began < seconds:
        call()
        count += 1
    return count / (time.perf_counter() - began)


def ceilings(root: Path, x: np.ndarray) -> dict[str, float]:
    torch.set_num_threads(1)
    module = torch.jit.load(str(root / FILES["torch"]))
    tx = torch.from_numpy(x)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(str(root / FILES["onnx"]), options, providers=["CPUExecutionProvider"])
    signature = tf.saved_model.load(str(root / FILES["tensorflow"])).signatures["serving_default"]

    def run_torch() -> object:
        with torch.inference_mode():
            return module(tx)

    return {
        "torch": calls_per_s(run_torch),
        "onnx": calls_per_s(lambda: session.run(["y"], {"x": x})),
        "tensorflow": calls_per_s(lambda: signature(x=tf.constant(x))["y"].numpy()),
    }


# -- the run -----------------------------------------------------------------------------------------


async def measure(
    port: int, x: np.ndarray, w: Any, args: argparse.Namespace
) -> dict[tuple[str, int], list[float]]:
    levels = [int(c) for c in args.concurrency.split(",")]
    width = w[-1][0].shape[1]
    results: dict[tuple[str, int], list[float]] = {}
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        method = "/inference.GRPCInferenceService/ModelInfer"
        for backend in BACKENDS:
            for name in (backend, f"{backend}_batched"):
                got = answer(await RawGrpc(channel, method, request(name, x)).send(), width)
                np.testing.assert_allclose(got, reference(x, w), rtol=1e-3, atol=1e-4)
        for _ in range(args.rounds):
            for backend in BACKENDS:
                for name in (backend, f"{backend}_batched"):
                    client = RawGrpc(channel, method, request(name, x))
                    for level in levels:
                        await drive(client.send, 0.5, level)  # warm
                        load = await drive(client.send, args.seconds, level)
                        results.setdefault((name, level), []).append(load.requests_per_s)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", default="1,16")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--width", type=int, default=256)
    args = parser.parse_args()
    w = weights(args.layers, args.width)
    x = np.random.default_rng(3).standard_normal((1, args.width), dtype=np.float32)
    with tempfile.TemporaryDirectory(prefix="grps-bench-backends-") as tmp:
        root = Path(tmp)
        write_torch(root / FILES["torch"], w)
        write_onnx(root / FILES["onnx"], w)
        write_tensorflow(root / FILES["tensorflow"], w)
        write_project(root, args.width)
        proc, port = start(root)
        try:
            results = asyncio.run(measure(port, x, w, args))
        finally:
            proc.terminate()
            proc.wait(30)
        ceiling = ceilings(root, x)
    levels = [int(c) for c in args.concurrency.split(",")]
    lines = [
        f"# Backends: one MLP ({args.layers} x {args.width}, float32, one row a request) as TorchScript, "
        "ONNX and a TensorFlow SavedModel",
        "",
        f"{datetime.now():%Y-%m-%d %H:%M}, {platform.node()}, Python {sys.version.split()[0]}, torch "
        f"{torch.__version__}, onnxruntime {ort.__version__}, tensorflow {tf.__version__}; OIP gRPC "
        f"ModelInfer, {args.seconds} s per cell, median of {args.rounds} rounds. "
        "`bench/backends.py`.",
        "",
        "| backend | in-process calls/s | "
        + " | ".join(f"c={c} unbatched | c={c} batched | batched/unbatched" for c in levels)
        + " | served c=1 / in-process |",
        "|---|---:|" + "---:|---:|---:|" * len(levels) + "---:|",
    ]
    for backend in BACKENDS:
        cells = [backend, f"{ceiling[backend]:.0f}"]
        for level in levels:
            plain = statistics.median(results[(backend, level)])
            batched = statistics.median(results[(f"{backend}_batched", level)])
            cells += [f"{plain:.0f}", f"{batched:.0f}", f"{batched / plain:.2f}"]
        cells.append(f"{statistics.median(results[(backend, levels[0])]) / ceiling[backend]:.2f}")
        lines.append("| " + " | ".join(cells) + " |")
    text = "\n".join(lines) + "\n"
    print(text)
    out = ROOT / "bench" / "results" / f"backends-{datetime.now():%Y%m%d-%H%M}.md"
    out.write_text(text)
    print(f"written to {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()

"""The clients of bench/reload.py: each runs in a process of its own, on one connection, sending OIP infer
requests to model `m` back to back and noting, per answer, when it was sent, when it came back and which
version answered it.

The model under test answers `y` and `z` whose every element is its version's constant (1 or 2), so one
answer tells its version; an answer whose elements disagree is MIXED (two versions met in it).
"""

from __future__ import annotations

import os
import time
from collections import Counter
from dataclasses import dataclass, field

import grpc
import httpx
import numpy as np
import orjson

from grps_py.protos import open_inference_pb2, open_inference_pb2_grpc

MODEL = "m"
OUTPUTS = ("y", "z")
VERSIONS = (1, 2)  # the constants the two model files answer
MIXED, FAILED = 0, -1  # outcomes that are no version
X = np.arange(8, dtype=np.float32).reshape(2, 4)
REQUEST_TIMEOUT_S = 30.0
MESSAGE_CHARS = 120  # an error's message is cut to this length in the tally


@dataclass(frozen=True)
class Target:
    """Where a server listens (loopback)."""

    host: str
    http_port: int
    grpc_port: int


@dataclass
class ClientLog:
    """What one client saw: per request its send and answer times (time.monotonic, the same clock in
    every process) and its outcome (a version, MIXED or FAILED); failures tallied by status and message."""

    transport: str
    sent: list[float] = field(default_factory=list)
    done: list[float] = field(default_factory=list)
    outcome: list[int] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)


def version_of(outputs: dict[str, np.ndarray]) -> int:
    """The version every element of every output carries, or MIXED."""
    if set(outputs) != set(OUTPUTS):
        raise ValueError(f"outputs {sorted(outputs)[:4]}, expected {list(OUTPUTS)}")
    values = np.unique(np.concatenate([a.ravel() for a in outputs.values()]))
    if len(values) == 1 and float(values[0]) in VERSIONS:
        return int(values[0])
    return MIXED


class HttpClient:
    """OIP HTTP/JSON on one kept-alive connection."""

    def __init__(self, target: Target) -> None:
        self.client = httpx.Client(
            base_url=f"http://{target.host}:{target.http_port}",
            timeout=REQUEST_TIMEOUT_S,
            limits=httpx.Limits(max_connections=1),
        )
        tensor = {"name": "x", "datatype": "FP32", "shape": list(X.shape), "data": X.ravel().tolist()}
        self.body = orjson.dumps({"inputs": [tensor]})

    def infer(self) -> int:
        response = self.client.post(
            f"/v2/models/{MODEL}/infer", content=self.body, headers={"Content-Type": "application/json"}
        )
        if response.status_code != 200:
            raise RuntimeError(f"HTTP {response.status_code}: {response.text[:MESSAGE_CHARS]}")
        outputs = orjson.loads(response.content)["outputs"]
        return version_of({o["name"]: np.asarray(o["data"], dtype=np.float32) for o in outputs})

    def close(self) -> None:
        self.client.close()


class GrpcClient:
    """OIP gRPC ModelInfer (raw input contents) on one channel."""

    def __init__(self, target: Target) -> None:
        self.channel = grpc.insecure_channel(f"{target.host}:{target.grpc_port}")
        self.stub = open_inference_pb2_grpc.GRPCInferenceServiceStub(self.channel)  # type: ignore[no-untyped-call]
        self.request = open_inference_pb2.ModelInferRequest(model_name=MODEL)
        self.request.inputs.add(name="x", datatype="FP32", shape=list(X.shape))
        self.request.raw_input_contents.append(X.tobytes())

    def infer(self) -> int:
        try:
            response = self.stub.ModelInfer(self.request, timeout=REQUEST_TIMEOUT_S)
        except grpc.RpcError as exc:
            code, details = exc.code(), exc.details()
            raise RuntimeError(f"gRPC {code.name}: {(details or '')[:MESSAGE_CHARS]}") from None
        outputs = {}
        for i, output in enumerate(response.outputs):
            if response.raw_output_contents:
                outputs[output.name] = np.frombuffer(response.raw_output_contents[i], dtype=np.float32)
            else:
                outputs[output.name] = np.asarray(output.contents.fp32_contents, dtype=np.float32)
        return version_of(outputs)

    def close(self) -> None:
        self.channel.close()


def run_client(target: Target, transport: str, start_at: float, stop_at: float) -> ClientLog:
    """Connect, wait for `start_at`, then send back to back until `stop_at` (a process pool's task)."""
    client = HttpClient(target) if transport == "http" else GrpcClient(target)
    log = ClientLog(transport)
    try:
        time.sleep(max(0.0, start_at - time.monotonic()))
        while (sent := time.monotonic()) < stop_at:
            try:
                outcome = client.infer()
            except Exception as exc:
                outcome = FAILED
                message = str(exc) if isinstance(exc, RuntimeError) else f"{type(exc).__name__}: {exc}"
                log.errors[message[: MESSAGE_CHARS + 20]] += 1
            log.sent.append(sent)
            log.done.append(time.monotonic())
            log.outcome.append(outcome)
    finally:
        client.close()
    return log


def ping(seconds: float) -> int:
    """Keep a pool worker busy for `seconds`; its pid (so the pool is seen to have started them all)."""
    time.sleep(seconds)
    return os.getpid()

"""Steady load through the load balancer for scripts/lbtest.py: threads doing OIP HTTP infer and threads
doing OIP gRPC ModelInfer of the bundled classifier, each answer counted in the scenario window its
request started in, each failure kept with its times and message."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import grpc
import httpx
import numpy as np

from grps_py.core.untrusted import shown
from grps_py.protos import open_inference_pb2 as oip
from grps_py.protos import open_inference_pb2_grpc as oip_grpc

MODEL = "classifier"
X = np.array([[0.1, 0.2, 0.3, 0.4]], dtype=np.float32)
HTTP_BODY = {"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": X.ravel().tolist()}]}
PROBS_BYTES = 3 * 4  # probs float32 [1, 3]
TIMEOUT_S = 10.0


class WrongAnswer(Exception):
    """An answer that is not the classifier's."""


@dataclass(frozen=True)
class Failure:
    window: str
    kind: str  # "http" or "grpc"
    started: float  # time.monotonic()
    ended: float
    message: str


@dataclass
class Load:
    """`http_threads` + `grpc_threads` clients, each one request at a time, until `stop()`."""

    http_url: str
    grpc_target: str
    http_threads: int = 2
    grpc_threads: int = 2
    window: str = "start"  # set by the driver; a request counts in the window it started in
    answers: Counter[tuple[str, str]] = field(default_factory=Counter)  # (window, kind) -> answered
    failures: list[Failure] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)

    def start(self) -> None:
        loops = [self._http_loop] * self.http_threads + [self._grpc_loop] * self.grpc_threads
        self._threads = [threading.Thread(target=loop, daemon=True) for loop in loops]
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(TIMEOUT_S + 5)

    @property
    def threads(self) -> int:
        return self.http_threads + self.grpc_threads

    def _record(self, kind: str, call: Callable[[], None]) -> None:
        window, started = self.window, time.monotonic()
        try:
            call()
            message = None
        except WrongAnswer as exc:
            message = str(exc)
        except grpc.RpcError as exc:
            message = f"gRPC {exc.code().name}: {shown(exc.details())}"
        except httpx.HTTPError as exc:
            message = f"{type(exc).__name__}: {shown(str(exc))}"
        with self._lock:
            if message is None:
                self.answers[(window, kind)] += 1
            else:
                self.failures.append(Failure(window, kind, started, time.monotonic(), message))

    def _http_loop(self) -> None:
        with httpx.Client(base_url=self.http_url, timeout=TIMEOUT_S) as client:

            def infer() -> None:
                reply = client.post(f"/v2/models/{MODEL}/infer", json=HTTP_BODY)
                if reply.status_code != 200:
                    raise WrongAnswer(f"HTTP {reply.status_code}: {shown(reply.text)}")
                outputs = reply.json().get("outputs") or [{}]
                if outputs[0].get("shape") != [1, 3]:
                    raise WrongAnswer(f"HTTP 200 but not the classifier's answer: {shown(reply.text)}")

            while not self._stop.is_set():
                self._record("http", infer)

    def _grpc_loop(self) -> None:
        request = oip.ModelInferRequest(model_name=MODEL)
        request.inputs.add(name="x", datatype="FP32", shape=[1, 4])
        request.raw_input_contents.append(X.tobytes())
        with grpc.insecure_channel(self.grpc_target) as channel:
            stub = oip_grpc.GRPCInferenceServiceStub(channel)  # type: ignore[no-untyped-call]

            def infer() -> None:
                reply = stub.ModelInfer(request, timeout=TIMEOUT_S)
                if [len(raw) for raw in reply.raw_output_contents] != [PROBS_BYTES]:
                    raise WrongAnswer("gRPC OK but not the classifier's answer")

            while not self._stop.is_set():
                self._record("grpc", infer)

    def counts(self, window: str, kind: str) -> tuple[int, int]:
        """(answered, failed) in `window` for `kind`."""
        with self._lock:
            failed = sum(1 for f in self.failures if f.window == window and f.kind == kind)
            return self.answers[(window, kind)], failed

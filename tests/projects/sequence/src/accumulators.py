"""A running accumulator: each sequence's OUTPUT is the sum of its INPUTs so far (START resets it).

State is kept per CORRID; every batch row is one request of a different sequence. THREADS records
which instance thread ran each sequence's requests, and BATCHES each batch's rows."""

from __future__ import annotations

import threading

import numpy as np

from grps_py import GrpsContext, ModelInferer, inferer_register

LOCK = threading.Lock()
THREADS: dict[object, set[str]] = {}
BATCHES: list[int] = []


def _key(value: object) -> object:
    return value.decode() if isinstance(value, bytes) else int(value)  # type: ignore[call-overload]


class Accumulator(ModelInferer):
    def __init__(self) -> None:
        super().__init__()
        self.sums: dict[object, int] = {}

    def infer(self, inp: dict[str, np.ndarray], context: GrpsContext) -> dict[str, np.ndarray]:
        rows = inp["INPUT"].reshape(-1)
        starts = inp["START"].reshape(-1)
        ends = inp["END"].reshape(-1)
        ids = inp["CORRID"].reshape(-1)
        ready = inp["READY"].reshape(-1) if "READY" in inp else np.ones_like(starts)
        out = np.zeros(len(rows), dtype=np.int32)
        with LOCK:
            BATCHES.append(len(rows))
            for i, (value, start, end, corrid, on) in enumerate(
                zip(rows, starts, ends, ids, ready, strict=True)
            ):
                if not on:
                    continue
                key = _key(corrid)
                THREADS.setdefault(key, set()).add(threading.current_thread().name)
                total = (0 if start else self.sums.get(key, 0)) + int(value)
                self.sums[key] = total
                if end:
                    del self.sums[key]
                out[i] = total
        return {"OUTPUT": out.reshape(inp["INPUT"].shape)}


class Plain(ModelInferer):
    def infer(self, inp: dict[str, np.ndarray], context: GrpsContext) -> dict[str, np.ndarray]:
        return {"OUTPUT": inp["INPUT"]}


for name in ("acc_direct", "acc_oldest", "acc_one"):
    inferer_register.register(name, Accumulator())
inferer_register.register("plain", Plain())

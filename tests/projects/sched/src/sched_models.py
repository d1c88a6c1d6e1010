"""Models for the scheduling tests. Each records what the scheduler made it do."""

from __future__ import annotations

import threading
import time

import numpy as np

from grps_py import Converter, GrpsContext, GrpsMessage, ModelInferer, converter_register, inferer_register

# model name -> what it saw, in order
LOG: dict[str, list[object]] = {}
LOCK = threading.Lock()
# Set by a gate model while it holds its instance; cleared to let it go.
HOLDING = threading.Event()
RELEASE = threading.Event()


def record(model: str, item: object) -> None:
    with LOCK:
        LOG.setdefault(model, []).append(item)


class RowsInferer(ModelInferer):
    """numpy converter, merged batch: records each batch's rows and trailing shape; answers x * 2."""

    def infer(self, inp: dict[str, np.ndarray], context: GrpsContext) -> dict[str, np.ndarray]:
        x = inp["x"]
        record(str(self.args["name"]), (int(x.shape[0]), tuple(x.shape[1:])))
        time.sleep(float(self.args.get("delay_s", 0)))
        return {"y": x * 2}


class FragileConverter(Converter):
    """str_data "bad-pre" fails in preprocess, "bad-post" in postprocess."""

    def preprocess(self, inp: GrpsMessage, context: GrpsContext) -> str:
        if inp.str_data == "bad-pre":
            raise ValueError("preprocess refused it")
        return inp.str_data

    def postprocess(self, inp: object, context: GrpsContext) -> GrpsMessage:
        if inp == "bad-post!":
            raise ValueError("postprocess refused it")
        return GrpsMessage(str_data=str(inp))


class FragileInferer(ModelInferer):
    def batch_infer(self, inps: list[str], contexts: list[GrpsContext]) -> list[str]:
        record("fragile", len(inps))
        return [inp + "!" for inp in inps]


class SleepyInferer(ModelInferer):
    """Holds each request 0.3 s; records its thread and how many ran at once."""

    running = 0

    def infer(self, inp: GrpsMessage, context: GrpsContext) -> GrpsMessage:
        with LOCK:
            SleepyInferer.running += 1
            peak = LOG.setdefault("sleepy_peak", [0])
            peak[0] = max(int(peak[0]), SleepyInferer.running)  # type: ignore[call-overload]
        time.sleep(0.3)
        with LOCK:
            SleepyInferer.running -= 1
        record("sleepy", threading.current_thread().name)
        return GrpsMessage(str_data=threading.current_thread().name)


class GateInferer(ModelInferer):
    """str_data "hold" keeps the instance until RELEASE is set; every other request is recorded."""

    def infer(self, inp: GrpsMessage, context: GrpsContext) -> GrpsMessage:
        if inp.str_data == "hold":
            HOLDING.set()
            RELEASE.wait(20)
            HOLDING.clear()
        else:  # OIP requests arrive as gtensors: their first tensor's name labels them
            label = inp.str_data or (inp.gtensors.tensors[0].name if inp.HasField("gtensors") else "")
            record(str(self.args.get("name", "gate")), label)
        return GrpsMessage(str_data=inp.str_data)


class StreamBatchInferer(ModelInferer):
    """Batched and streaming: each context streams its own input back twice."""

    def batch_infer(self, inps: list[GrpsMessage], contexts: list[GrpsContext]) -> list[GrpsMessage]:
        record("stream_batch", len(inps))
        for inp, ctx in zip(inps, contexts, strict=True):
            for i in range(2):
                ctx.stream_respond(GrpsMessage(str_data=f"{inp.str_data}:{i}"))
        return [GrpsMessage() for _ in inps]


inferer_register.register("rows", RowsInferer())
inferer_register.register("preferred", RowsInferer())
inferer_register.register("warm", RowsInferer())
inferer_register.register("fragile", FragileInferer())
converter_register.register("fragile", FragileConverter())
inferer_register.register("sleepy", SleepyInferer())
inferer_register.register("gate", GateInferer())
inferer_register.register("gate_timeout", GateInferer())
inferer_register.register("prio", GateInferer())
inferer_register.register("aging", GateInferer())
inferer_register.register("stream_batch", StreamBatchInferer())

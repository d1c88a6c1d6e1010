"""Models that fail on purpose, one way each, for tests/test_faults.py."""

from __future__ import annotations

import threading
import time

import numpy as np

from grps_py import GrpsContext, GrpsMessage, ModelInferer, inferer_register

# Set by a test to let every hanging model return (so no thread outlives the test for long).
RELEASE = threading.Event()
SECRET = "infer-SECRET-91c2"  # the same token as conf/server.yml's security.inference_tokens


def _first(inp: dict[str, np.ndarray] | list[np.ndarray]) -> np.ndarray:
    return next(iter(inp.values())) if isinstance(inp, dict) else inp[0]


class Echo(ModelInferer):
    def infer(self, inp: GrpsMessage, context: GrpsContext) -> GrpsMessage:
        return GrpsMessage(str_data=inp.str_data or "ok")


class Streamer(ModelInferer):
    """Streams `str_data` parts ("count" or "count,delay_ms"; default 5 parts 10 ms apart) until the
    client goes away."""

    def infer(self, inp: GrpsMessage, context: GrpsContext) -> GrpsMessage:
        count, _, delay_ms = (inp.str_data or "5").partition(",")
        if not context.if_streaming():
            return GrpsMessage(str_data=f"{count} parts")
        for i in range(int(count)):
            if context.if_disconnected():
                break
            context.stream_respond(GrpsMessage(str_data=f"part {i}"))
            time.sleep(float(delay_ms or 10) / 1000)
        return GrpsMessage()


class Identity(ModelInferer):
    def infer(self, inp: object, context: GrpsContext) -> object:
        return inp


class Raiser(ModelInferer):
    def infer(self, inp: GrpsMessage, context: GrpsContext) -> GrpsMessage:
        raise RuntimeError(f"cannot open /home/alice/models/weights.pt (token {SECRET}) " + "x" * 2000)


class Memory(ModelInferer):
    def infer(self, inp: GrpsMessage, context: GrpsContext) -> GrpsMessage:
        raise MemoryError("cannot allocate 64 GiB")


class Hang(ModelInferer):
    """Holds its thread for `hang_s` (far past the model's timeout) unless released; requests whose
    str_data starts with "fast" answer at once, "slow" after 0.6 s."""

    def infer(self, inp: GrpsMessage, context: GrpsContext) -> GrpsMessage:
        if inp.str_data == "slow":
            time.sleep(0.6)
        elif not inp.str_data.startswith("fast"):
            RELEASE.wait(float(self.args.get("hang_s", 20)))
        return GrpsMessage(str_data=f"done {inp.str_data}")


# How long the last `patient` request waited (for tests/test_faults.py).
PATIENT_LOG: dict[str, float] = {}


class Patient(ModelInferer):
    """Waits `str_data` seconds in 10 ms steps, stopping early once its request is given up
    (`if_disconnected()`), as well-behaved long-running model code does."""

    def infer(self, inp: GrpsMessage, context: GrpsContext) -> GrpsMessage:
        began = time.monotonic()
        until = began + float(inp.str_data or 5)
        while time.monotonic() < until and not context.if_disconnected():
            time.sleep(0.01)
        PATIENT_LOG["waited_s"] = time.monotonic() - began
        return GrpsMessage(str_data="waited")


class WrongType(ModelInferer):
    def infer(self, inp: object, context: GrpsContext) -> object:
        return {"y": object()}


class WrongShape(ModelInferer):
    def infer(
        self, inp: dict[str, np.ndarray] | list[np.ndarray], context: GrpsContext
    ) -> dict[str, np.ndarray]:
        rows = _first(inp).shape[0]
        return {"y": np.zeros((rows, 5), np.float32)}


class WrongDtype(ModelInferer):
    def infer(
        self, inp: dict[str, np.ndarray] | list[np.ndarray], context: GrpsContext
    ) -> dict[str, np.ndarray]:
        rows = _first(inp).shape[0]
        return {"y": np.zeros((rows, 3), np.int64)}


class StreamThenFail(ModelInferer):
    def infer(self, inp: GrpsMessage, context: GrpsContext) -> GrpsMessage:
        for i in range(3):
            context.stream_respond(GrpsMessage(str_data=f"part {i}"))
            time.sleep(0.01)
        raise ValueError("the stream broke at /srv/app/src/fault_models.py:60")


class Reporter(ModelInferer):
    def infer(self, inp: GrpsMessage, context: GrpsContext) -> GrpsMessage:
        context.set_err_msg(f"bad config in /etc/app/secret.yml: {SECRET}")
        return GrpsMessage()


inferer_register.register("fault_echo", Echo())
inferer_register.register("fault_raiser", Raiser())
inferer_register.register("fault_memory", Memory())
inferer_register.register("fault_hang", Hang())
inferer_register.register("fault_wrong_type", WrongType())
inferer_register.register("fault_wrong_shape", WrongShape())
inferer_register.register("fault_wrong_dtype", WrongDtype())
inferer_register.register("fault_stream_fail", StreamThenFail())
inferer_register.register("fault_reporter", Reporter())
inferer_register.register("fault_streamer", Streamer())
inferer_register.register("fault_identity", Identity())
inferer_register.register("fault_patient", Patient())

"""Models for tests/test_stream_backpressure.py: a flood of streamed messages, an echo, a counter."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import numpy as np

from grps_py import GrpsContext, GrpsMessage, ModelInferer, inferer_register

CHUNK = b"x" * (16 << 10)
# Without backpressure the flood stops here (~470 MB): a test against an unfixed server ends too.
FLOOD_CAP = 30_000


@dataclass
class Flood:
    """What one flood run did, as the test reads it."""

    pushes: int = 0
    saw_disconnect: bool = False
    done: threading.Event = field(default_factory=threading.Event)
    ended_at: float = 0.0  # time.monotonic() when it returned


FLOODS: dict[str, Flood] = {}
ECHOED = [0]  # bp_echo's requests
_ECHO_LOCK = threading.Lock()


class BpFlood(ModelInferer):
    def infer(self, inp: GrpsMessage, context: GrpsContext) -> GrpsMessage:
        run = FLOODS.setdefault(inp.str_data, Flood())
        try:
            while run.pushes < FLOOD_CAP:
                if context.if_disconnected():
                    run.saw_disconnect = True
                    break
                context.stream_respond(GrpsMessage(bin_data=CHUNK))
                run.pushes += 1
        finally:
            run.ended_at = time.monotonic()
            run.done.set()
        return GrpsMessage()


class BpAsyncFlood(ModelInferer):
    """BpFlood as `async def` code, on the event loop: its push cannot wait, so it awaits stream_drain()."""

    async def infer(self, inp: GrpsMessage, context: GrpsContext) -> GrpsMessage:
        run = FLOODS.setdefault(inp.str_data, Flood())
        try:
            while run.pushes < FLOOD_CAP:
                if context.if_disconnected():
                    run.saw_disconnect = True
                    break
                context.stream_respond(GrpsMessage(bin_data=CHUNK))
                run.pushes += 1
                await context.stream_drain()
        finally:
            run.ended_at = time.monotonic()
            run.done.set()
        return GrpsMessage()


class BpEcho(ModelInferer):
    def infer(self, inp: dict[str, np.ndarray], context: GrpsContext) -> dict[str, np.ndarray]:
        with _ECHO_LOCK:
            ECHOED[0] += 1
        return dict(inp)


class BpCount(ModelInferer):
    def infer(self, inp: GrpsMessage, context: GrpsContext) -> GrpsMessage:
        for i in range(int(inp.str_data or "10")):
            if context.if_disconnected():
                break
            context.stream_respond(GrpsMessage(str_data=str(i)))
        return GrpsMessage()


inferer_register.register("bp_flood", BpFlood())
inferer_register.register("bp_async_flood", BpAsyncFlood())
inferer_register.register("bp_echo", BpEcho())
inferer_register.register("bp_count", BpCount())

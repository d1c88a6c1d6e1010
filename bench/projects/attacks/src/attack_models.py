"""The models bench/attacks.py attacks with: an echo, a giant answer, and a stream that never ends."""

from __future__ import annotations

from typing import Any

import numpy as np

from grps_py import GrpsContext, GrpsMessage, ModelInferer, inferer_register

STREAM_MESSAGE = GrpsMessage(bin_data=b"x" * 16384)


class Echo(ModelInferer):
    def infer(self, inp: GrpsMessage, context: GrpsContext) -> GrpsMessage:
        return inp


class Giant(ModelInferer):
    """4 bytes of memory that claim 4 GiB: an answer no encoder may be asked to write."""

    def infer(self, inp: Any, context: GrpsContext) -> Any:
        return {"y": np.broadcast_to(np.ones(1, np.float32), (1 << 30,))}


class Firehose(ModelInferer):
    """Streams 16 KiB messages as fast as it may until its client is gone; counts what it pushed."""

    def infer(self, inp: GrpsMessage, context: GrpsContext) -> GrpsMessage:
        while not context.if_disconnected():
            context.stream_respond(STREAM_MESSAGE)
        return GrpsMessage()


inferer_register.register("attack_echo", Echo())
inferer_register.register("attack_giant", Giant())
inferer_register.register("attack_firehose", Firehose())

"""Models whose answers are larger than an HTTP answer may be, for tests/http/test_answer_size.py."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from grps_py import GrpsContext, GrpsMessage, ModelInferer, inferer_register

MIB = 1 << 20
GIANT_ELEMENTS = 1 << 30  # float32: 4 GiB claimed by a view of 4 bytes


class Answers(ModelInferer):
    """Answers what `make` builds, whatever it is asked."""

    def __init__(self, make: Callable[[], object]) -> None:
        super().__init__()
        self.make = make

    def infer(self, inp: object, context: GrpsContext) -> object:
        return self.make()


class GrowingStream(ModelInferer):
    """converter none: streams a small message, then one of 2 MiB of text, then a small one again."""

    def infer(self, inp: GrpsMessage, context: GrpsContext) -> GrpsMessage:
        if not context.if_streaming():
            return GrpsMessage(str_data="x" * (2 * MIB))
        for text in ("small", "x" * (2 * MIB), "after"):
            if context.if_disconnected():
                break
            context.stream_respond(GrpsMessage(str_data=text))
        return GrpsMessage()


def giant() -> dict[str, np.ndarray]:
    return {"y": np.broadcast_to(np.ones(1, np.float32), (GIANT_ELEMENTS,))}


inferer_register.register("answer_size_giant", Answers(giant))
inferer_register.register("answer_size_big", Answers(lambda: {"y": np.ones(5 * MIB // 4, np.float32)}))
inferer_register.register("answer_size_small", Answers(lambda: {"y": np.arange(4, dtype=np.float32)}))
inferer_register.register("answer_size_bytes", Answers(lambda: b"\x00" * (5 * MIB)))
inferer_register.register("answer_size_text", Answers(lambda: "\x01" * (300 * 1024)))  # 6 bytes each in JSON
inferer_register.register(
    "answer_size_strings",
    Answers(lambda: {"y": np.broadcast_to(np.array([b"ab"], dtype=object), (1 << 20,))}),
)
inferer_register.register("answer_size_stream", GrowingStream())
# Just under 1 MiB: 900 KiB of plain text, 800 KiB of float32 (in binary)
inferer_register.register("answer_size_under_text", Answers(lambda: "a" * (900 * 1024)))
inferer_register.register("answer_size_under", Answers(lambda: {"y": np.full(200 * 1024, 0.5, np.float32)}))

"""A token-by-token generator: the shape of a language model's decode loop, without the model.

It "generates" the prompt's words back, one token per step, each step paced by `delay_s`. Between
steps it checks `context.if_disconnected()`: when the client goes away (a closed HTTP connection, a
cancelled gRPC call, a closed ModelStreamInfer stream) it stops at once instead of computing tokens
nobody will read.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterator
from typing import Any

from grps_py import DataType, GrpsContext, GrpsMessage, InvalidInput, ModelInferer, inferer_register

# One record per streamed request, newest last: the prompt's start, how many tokens it planned and
# sent, and why it stopped ("done" or "client left"). The example's test reads it; a real model would
# log or count this instead.
GENERATIONS: deque[dict[str, Any]] = deque(maxlen=100)
_GENERATIONS_LOCK = threading.Lock()


def prompt_of(inp: GrpsMessage) -> str:
    """The prompt: grps str_data, or the one string of the OIP input text_input."""
    which = inp.WhichOneof("data_oneof")
    if which == "str_data":
        return inp.str_data
    if which == "gtensors" and len(inp.gtensors.tensors) == 1:
        tensor = inp.gtensors.tensors[0]
        if tensor.dtype == DataType.DT_STRING and len(tensor.flat_string) == 1:
            return str(tensor.flat_string[0])
    raise InvalidInput("send the prompt as str_data, or as one BYTES element of text_input")


class TokenGenerator(ModelInferer):
    def init(self, path: str | None, device: str | None = None, args: dict[str, Any] | None = None) -> None:
        super().init(path, device, args)
        self.delay_s = float(self.args.get("delay_s", 0.05))
        self.max_tokens = int(self.args.get("max_tokens", 256))

    def tokens(self, prompt: str) -> Iterator[str]:
        yield from prompt.split()[: self.max_tokens]

    def infer(self, inp: GrpsMessage, context: GrpsContext) -> GrpsMessage:
        prompt = prompt_of(inp)
        if not context.if_streaming():  # a unary call gets the whole answer at once
            return GrpsMessage(str_data=" ".join(self.tokens(prompt)))
        record: dict[str, Any] = {
            "request_id": context.request_id,
            "prompt": prompt[:40],
            "planned": len(prompt.split()[: self.max_tokens]),
            "sent": 0,
            "stopped": "done",
        }
        with _GENERATIONS_LOCK:
            GENERATIONS.append(record)
        for token in self.tokens(prompt):
            if context.if_disconnected():  # the client went away: stop generating for it
                record["stopped"] = "client left"
                break
            context.stream_respond(GrpsMessage(str_data=token))  # sent and flushed at once
            record["sent"] += 1
            time.sleep(self.delay_s)  # one decode step's worth of work
        return GrpsMessage()  # ignored once something was streamed


inferer_register.register("streaming_generator", TokenGenerator())

"""The bundled project's streaming model: `streamer-1.0` answers a prompt word by word.

Send the prompt as `str_data` (grps API) or as one BYTES element of `text_input` (Open Inference
Protocol). A streamed request gets one message per word; a unary one gets the words joined. The
pause between words stands in for a language model's decode step; the loop stops as soon as the
client goes away.
"""

from __future__ import annotations

import time
from typing import Any

from grps_py import DataType, GrpsContext, GrpsMessage, InvalidInput, ModelInferer, inferer_register


def prompt_of(inp: GrpsMessage) -> str:
    which = inp.WhichOneof("data_oneof")
    if which == "str_data":
        return inp.str_data
    if which == "gtensors" and len(inp.gtensors.tensors) == 1:
        tensor = inp.gtensors.tensors[0]
        if tensor.dtype == DataType.DT_STRING and len(tensor.flat_string) == 1:
            return str(tensor.flat_string[0])
    raise InvalidInput("send the prompt as str_data, or as one BYTES element of text_input")


class Streamer(ModelInferer):
    def init(self, path: str | None, device: str | None = None, args: dict[str, Any] | None = None) -> None:
        super().init(path, device, args)
        self.delay_s = float(self.args.get("delay_s", 0.02))
        self.max_words = int(self.args.get("max_words", 256))

    def infer(self, inp: GrpsMessage, context: GrpsContext) -> GrpsMessage:
        words = prompt_of(inp).split()[: self.max_words]
        if not context.if_streaming():
            return GrpsMessage(str_data=" ".join(words))
        for word in words:
            if context.if_disconnected():  # the client left: stop working for nobody
                break
            context.stream_respond(GrpsMessage(str_data=word))
            time.sleep(self.delay_s)
        return GrpsMessage()  # ignored once something was streamed


inferer_register.register("streamer", Streamer())

"""The inferer: the model itself. Here y = x * scale; a streaming request gets one message per value."""

from __future__ import annotations

from typing import Any

import numpy as np

from grps_py import GrpsContext, ModelInferer, inferer_register


class MyInferer(ModelInferer):
    def init(self, path: str | None, device: str | None = None, args: dict[str, Any] | None = None) -> None:
        super().init(path, device, args)  # `inferer_path`, `device` and `inferer_args` from inference.yml
        self.scale = float(self.args.get("scale", 1.0))

    def load(self) -> bool:
        # Load weights from self.path here (torch.jit.load, onnxruntime, ...); False stops start-up.
        return True

    def infer(self, inp: np.ndarray, context: GrpsContext) -> np.ndarray:
        y = np.atleast_1d(inp * self.scale).astype(np.float32)
        if context.if_streaming():
            for i in range(len(y)):
                if context.if_disconnected():  # the client went away: stop working for it
                    break
                context.stream_respond_with_postprocess(y[i : i + 1])  # through the converter
        return y  # the answer when not streaming (ignored once something was streamed)


inferer_register.register("my_inferer", MyInferer())

"""Models for tests/core/test_declared_inputs.py: what a model that declares tensor inputs is sent."""

from __future__ import annotations

import numpy as np

from grps_py import GrpsContext, GrpsMessage, ModelInferer, inferer_register


class DeclaredSum(ModelInferer):
    """numpy converter, declared inputs a [-1, 3] FP32 and b [-1] INT64: anything but those tensors
    reaching it fails it (a 500: the server should have refused the request)."""

    def infer(self, inp: dict[str, np.ndarray], context: GrpsContext) -> np.ndarray:
        assert isinstance(inp, dict) and list(inp) == ["a", "b"], type(inp).__name__
        return inp["a"] + inp["b"][:, None].astype(np.float32)


class DeclaredEcho(ModelInferer):
    """converter none, or numpy without declared inputs: answers what it is given."""

    def infer(self, inp: object, context: GrpsContext) -> object:
        if isinstance(inp, GrpsMessage):
            out = GrpsMessage()
            out.CopyFrom(inp)
            out.ClearField("model")
            return out
        return inp


inferer_register.register("declared_inputs_sum", DeclaredSum())
inferer_register.register("declared_inputs_echo", DeclaredEcho())

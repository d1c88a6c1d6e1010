"""Models for the OIP extension tests (registered under names of their own: the registry is
process-wide)."""

from __future__ import annotations

import numpy as np

from grps_py import GrpsContext, ModelInferer, inferer_register


class Identity(ModelInferer):
    """numpy converter: the inputs, as they came."""

    def infer(self, inp: object, context: GrpsContext) -> object:
        return inp


class Rows(ModelInferer):
    """Streams x one row at a time (the whole of x when not streaming)."""

    def infer(self, inp: dict[str, np.ndarray], context: GrpsContext) -> dict[str, np.ndarray] | None:
        x = inp["x"]
        if not context.if_streaming():
            return {"x": x}
        for row in x:
            context.stream_respond_with_postprocess({"x": row[None]})
        return None


inferer_register.register("oipx_identity", Identity())
inferer_register.register("oipx_rows", Rows())

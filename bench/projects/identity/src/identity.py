"""The benchmark's identity model: tensors come back renamed to y, raw bytes come back as they are."""

from __future__ import annotations

from typing import Any

from grps_py import GrpsContext, ModelInferer, inferer_register


class Identity(ModelInferer):
    def infer(self, inp: Any, context: GrpsContext) -> Any:
        if isinstance(inp, dict):
            return {"y": inp["x"]}
        return inp


inferer_register.register("identity", Identity())

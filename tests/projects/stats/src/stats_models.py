"""Models for the statistics tests: each takes `x` and answers `x` changed, after a short sleep, so
every step of the execution takes measurable time."""

from __future__ import annotations

import time

import numpy as np

from grps_py import GrpsContext, ModelInferer, inferer_register

STEP_S = 0.002


class Scale(ModelInferer):
    """Batched (numpy converter, merged batch): answers x * 2."""

    def infer(self, inp: dict[str, np.ndarray], context: GrpsContext) -> dict[str, np.ndarray]:
        time.sleep(STEP_S)
        return {"x": inp["x"] * 2}


class Picky(ModelInferer):
    """Answers x + 1; refuses an input holding a negative value (the request fails)."""

    def infer(self, inp: dict[str, np.ndarray], context: GrpsContext) -> dict[str, np.ndarray]:
        time.sleep(STEP_S)
        x = inp["x"]
        if (x < 0).any():
            raise ValueError("negative values are refused")
        return {"x": x + 1}


inferer_register.register("stats_scale", Scale())
inferer_register.register("stats_picky", Picky())

"""Models for the model lifecycle tests (registered under names of their own: the registry is
process-wide)."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from grps_py import GrpsContext, ModelInferer, inferer_register

# Every object of these classes made in this process (a reloaded model gets a new one: never the
# registered object re-initialised while an older version may still run it).
MADE: list[ModelInferer] = []


class Scale(ModelInferer):
    """y = x * the number its model file (inferer_path) holds."""

    def __init__(self) -> None:
        super().__init__()
        self.factor: float | None = None
        MADE.append(self)

    def init(self, path: str | None, device: str | None = None, args: dict[str, Any] | None = None) -> None:
        super().init(path, device, args)
        assert path is not None
        with open(path, encoding="utf-8") as file:
            self.factor = float(file.read().strip())  # a file that is no number fails the load

    def infer(self, inp: dict[str, np.ndarray], context: GrpsContext) -> dict[str, np.ndarray]:
        assert self.factor is not None
        return {"y": (inp["x"] * self.factor).astype(np.float32)}


class Plus(ModelInferer):
    """Its one input plus inferer_args.add, after inferer_args.delay_s."""

    def __init__(self) -> None:
        super().__init__()
        self.add = 0.0
        self.delay_s = 0.0
        MADE.append(self)

    def init(self, path: str | None, device: str | None = None, args: dict[str, Any] | None = None) -> None:
        super().init(path, device, args)
        args = args or {}
        self.add = float(args.get("add", 0))
        self.delay_s = float(args.get("delay_s", 0))

    def infer(self, inp: dict[str, np.ndarray], context: GrpsContext) -> dict[str, np.ndarray]:
        if self.delay_s:
            time.sleep(self.delay_s)
        (value,) = inp.values()
        return {"z": (value + self.add).astype(np.float32)}


inferer_register.register("lifecycle_scale", Scale())
inferer_register.register("lifecycle_plus", Plus())

"""A running accumulator: a stateful model whose answer is the sum of its sequence's inputs so far.

The server sends each request as one batch row, with control inputs beside INPUT: START (1 on the
sequence's first request), END (1 on its last), READY (1: the row holds a request) and CORRID (the
sequence id). The model keeps one running sum per CORRID:

- START resets the sum (a sequence id used again starts from zero);
- END drops the sum after answering, so the state lives only as long as its sequence;
- a sum untouched for `forget_after_s` is dropped too: the server ends a sequence that idles past
  max_sequence_idle_us, and the model never hears of it, so its sum would otherwise stay forever.

The inferer is registered once and shared by the model's two instances, whose threads call `infer`
at the same time: the sums are changed under a lock.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from typing import Any

import numpy as np

from grps_py import GrpsContext, ModelInferer, inferer_register


class RunningAccumulator(ModelInferer):
    def init(self, path: str | None, device: str | None = None, args: dict[str, Any] | None = None) -> None:
        super().init(path, device, args)
        # Keep it well above max_sequence_idle_us: a running sequence's sum must never be forgotten.
        self.forget_after_s = float(self.args.get("forget_after_s", 60.0))
        self.sums: OrderedDict[int, tuple[int, float]] = OrderedDict()  # CORRID -> (sum, last used)
        self.lock = threading.Lock()

    def infer(self, inp: dict[str, np.ndarray], context: GrpsContext) -> dict[str, np.ndarray]:
        values = inp["INPUT"].reshape(-1)
        starts, ends = inp["START"].reshape(-1), inp["END"].reshape(-1)
        ready, ids = inp["READY"].reshape(-1), inp["CORRID"].reshape(-1)
        out = np.zeros(len(values), dtype=np.int64)
        with self.lock:
            now = time.monotonic()  # read under the lock, so the dict's times only grow
            self.forget_stale(now)
            for row, corrid in enumerate(ids.tolist()):
                if not ready[row]:  # a padding row (Triton pads batches; grps-py never does)
                    continue
                previous, _ = self.sums.pop(corrid, (0, now))
                total = (0 if starts[row] else previous) + int(values[row])
                if not ends[row]:
                    self.sums[corrid] = (total, now)  # put back last: the dict stays oldest first
                out[row] = total
        return {"OUTPUT": out.reshape(-1, 1)}

    def forget_stale(self, now: float) -> None:
        """Drop the sums of sequences that went quiet: the oldest come first in the dict."""
        while self.sums:
            corrid, (_, used) = next(iter(self.sums.items()))
            if now - used < self.forget_after_s:
                return
            del self.sums[corrid]


inferer_register.register("sequence_accumulator", RunningAccumulator())

"""The four models of the dag_graph example: prep -> (trend, peaks) side by side -> merge.

Each model records when and on which thread it ran (TIMELINE), which is how the example's test
shows that the two branches overlapped in time.
"""

from __future__ import annotations

import threading
import time
from collections import deque

import numpy as np

from grps_py import GrpsContext, InvalidInput, ModelInferer, inferer_register

Arrays = dict[str, np.ndarray]

# (node, request id, thread name, start, end) per model run, newest last; times from time.monotonic().
TIMELINE: deque[tuple[str, str, str, float, float]] = deque(maxlen=400)
_TIMELINE_LOCK = threading.Lock()


class TimedModel(ModelInferer):
    """Records each run in TIMELINE; `latency_s` (inferer_args) adds simulated compute time."""

    node = ""

    def infer(self, inp: Arrays, context: GrpsContext) -> Arrays:
        start = time.monotonic()
        out = self.compute(inp)
        time.sleep(float(self.args.get("latency_s", 0.0)))
        run = (self.node, context.request_id, threading.current_thread().name, start, time.monotonic())
        with _TIMELINE_LOCK:
            TIMELINE.append(run)
        return out

    def compute(self, inp: Arrays) -> Arrays:
        raise NotImplementedError


class Prep(TimedModel):
    """Readings [sensors, samples] -> clean: clipped to the sensor's range, as float64."""

    node = "prep"

    def compute(self, inp: Arrays) -> Arrays:
        readings = inp.get("readings") if isinstance(inp, dict) else None
        if readings is None or readings.ndim != 2 or readings.shape[1] < 3:
            raise InvalidInput("send 'readings' as a float tensor [sensors, samples] with at least 3 samples")
        low, high = float(self.args.get("low", -np.inf)), float(self.args.get("high", np.inf))
        return {"clean": np.clip(readings.astype(np.float64), low, high)}


class Trend(TimedModel):
    """clean -> slope: the least-squares slope of each row (change per sample)."""

    node = "trend"

    def compute(self, inp: Arrays) -> Arrays:
        y = inp["clean"]
        t = np.arange(y.shape[1], dtype=np.float64)
        t -= t.mean()
        slope = ((y - y.mean(axis=1, keepdims=True)) * t).sum(axis=1) / (t * t).sum()
        return {"slope": slope.astype(np.float32)}


class Peaks(TimedModel):
    """clean -> peak_z: the largest distance of a reading from its row's mean, in standard deviations."""

    node = "peaks"

    def compute(self, inp: Arrays) -> Arrays:
        y = inp["clean"]
        std = y.std(axis=1)
        z = np.abs(y - y.mean(axis=1, keepdims=True)).max(axis=1) / np.where(std > 0, std, 1.0)
        return {"peak_z": z.astype(np.float32)}


class Merge(TimedModel):
    """slope and peak_z (the two branches' outputs) -> the same plus alert (1 where either is too high)."""

    node = "merge"

    def compute(self, inp: Arrays) -> Arrays:
        slope, peak_z = inp["slope"], inp["peak_z"]
        max_slope = float(self.args.get("max_slope", 1.0))
        max_peak_z = float(self.args.get("max_peak_z", 2.5))
        alert = (np.abs(slope) > max_slope) | (peak_z > max_peak_z)
        return {"slope": slope, "peak_z": peak_z, "alert": alert.astype(np.int32)}


inferer_register.register("dag_graph_prep", Prep())
inferer_register.register("dag_graph_trend", Trend())
inferer_register.register("dag_graph_peaks", Peaks())
inferer_register.register("dag_graph_merge", Merge())

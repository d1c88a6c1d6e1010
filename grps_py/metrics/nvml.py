"""GPU utilisation and memory through NVML (nvidia-ml-py), or nothing at all.

pynvml is imported only when GPU sampling is asked for, and any failure (no package, no driver, no
device, a device that stops answering) means "no GPU" rather than an error: metrics must never be the
reason a server fails to start. Devices are NVML's, numbered as nvidia-smi numbers them.
"""

from __future__ import annotations

import importlib
import logging
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("grps_py.metrics")


@dataclass(frozen=True)
class GpuSample:
    index: int
    utilization_ratio: float  # 0..1 over NVML's last sample period
    memory_used_bytes: int
    memory_total_bytes: int


class Nvml:
    """The machine's GPUs as NVML sees them; `devices` is empty when there are none (or no NVML)."""

    def __init__(self, enabled: bool = True) -> None:
        self._nvml: Any = None
        self._handles: list[Any] = []
        if enabled:
            self._open()

    def _open(self) -> None:
        try:
            nvml = importlib.import_module("pynvml")
            nvml.nvmlInit()
        except Exception as exc:
            log.debug("no GPU metrics: NVML unavailable (%s)", exc)
            return
        try:
            count = int(nvml.nvmlDeviceGetCount())
            self._handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        except Exception as exc:
            log.debug("no GPU metrics: NVML could not list devices (%s)", exc)
            self._handles = []
        self._nvml = nvml
        if not self._handles:
            self.close()

    @property
    def devices(self) -> list[int]:
        return list(range(len(self._handles)))

    def sample(self) -> list[GpuSample]:
        """One sample per device that answered."""
        nvml, out = self._nvml, []
        for index, handle in enumerate(self._handles):
            try:
                utilization = nvml.nvmlDeviceGetUtilizationRates(handle).gpu
                memory = nvml.nvmlDeviceGetMemoryInfo(handle)
                out.append(GpuSample(index, float(utilization) / 100, int(memory.used), int(memory.total)))
            except Exception as exc:
                log.debug("GPU %d did not answer NVML (%s)", index, exc)
        return out

    def close(self) -> None:
        nvml, self._nvml, self._handles = self._nvml, None, []
        if nvml is not None:
            try:
                nvml.nvmlShutdown()
            except Exception as exc:
                log.debug("nvmlShutdown failed (%s)", exc)

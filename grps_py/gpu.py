"""The server.yml `gpu:` block: device checks, a memory limit and periodic cache release (torch)."""

from __future__ import annotations

import asyncio
import importlib.util
import logging

from grps_py.core.config import GpuSettings

log = logging.getLogger("grps_py.gpu")


def _torch_cuda_count() -> int:
    if importlib.util.find_spec("torch") is None:
        return 0
    import torch

    return int(torch.cuda.device_count()) if torch.cuda.is_available() else 0


def apply_gpu_settings(settings: GpuSettings | None) -> bool:
    """Apply the block; a block on a machine without a GPU is a warning, not a crash. True when applied."""
    if settings is None:
        return False
    count = _torch_cuda_count()
    if count == 0:
        log.warning("server.yml has a gpu block but no CUDA GPU is available; serving on CPU")
        return False
    missing = [d for d in settings.devices if d >= count]
    if missing:
        log.warning("gpu.devices %s do not exist (this machine has %d GPU(s)); ignoring them", missing, count)
    if settings.mem_manager_type == "torch" and settings.mem_limit_mib > 0:
        import torch

        for device in (d for d in settings.devices if d < count):
            total = torch.cuda.get_device_properties(device).total_memory
            fraction = min(1.0, settings.mem_limit_mib * (1 << 20) / total)
            torch.cuda.set_per_process_memory_fraction(fraction, device)
    return True


async def gpu_gc_loop(settings: GpuSettings) -> None:
    """Release torch's cached GPU memory every mem_gc_interval seconds."""
    import torch

    while True:
        await asyncio.sleep(settings.mem_gc_interval)
        torch.cuda.empty_cache()

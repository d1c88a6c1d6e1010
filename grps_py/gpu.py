"""The server.yml `gpu:` block: device checks, a memory limit and periodic cache release.

`mem_manager_type: torch` limits torch's share of each listed GPU (`mem_limit_mib`) and may release its
cache every `mem_gc_interval` seconds. `tensorflow` gives TensorFlow memory growth on each listed GPU, or
a hard limit of `mem_limit_mib` (TensorFlow keeps no cache to release, so `mem_gc_enable` does nothing).
It runs before any model loads: TensorFlow takes these settings only before it first uses a GPU.
"""

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


def _tensorflow_memory(settings: GpuSettings) -> bool:
    from grps_py.core import backend_registry

    limit_gpu_memory = backend_registry.resolve("grps_py.backends.tensorflow:limit_gpu_memory")
    configured = limit_gpu_memory(settings.devices, settings.mem_limit_mib)
    if not configured:
        log.warning("server.yml's gpu block names no GPU TensorFlow can see; serving on CPU")
        return False
    missing = [d for d in settings.devices if d not in configured]
    if missing:
        log.warning("gpu.devices %s are not GPUs TensorFlow can see; ignoring them", missing)
    what = f"a {settings.mem_limit_mib} MiB limit" if settings.mem_limit_mib > 0 else "memory growth"
    log.info("TensorFlow GPU memory: %s on GPU(s) %s", what, configured)
    return False  # nothing for the cache-release loop: TensorFlow has no cache to empty


def apply_gpu_settings(settings: GpuSettings | None) -> bool:
    """Apply the block; a block on a machine without a GPU is a warning, not a crash. True when torch's
    cache is to be released every `mem_gc_interval` seconds."""
    if settings is None:
        return False
    if settings.mem_manager_type == "tensorflow":
        return _tensorflow_memory(settings)
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

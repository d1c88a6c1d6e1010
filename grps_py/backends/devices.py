"""Device names: one normal form (`cpu` / `cuda:N`) for every backend, and the CPU fallback rule.

Pure: the caller passes the number of CUDA devices it sees, so this module imports no torch and
is table-tested without a GPU.
"""

from __future__ import annotations

import logging

from grps_py.core.errors import ModelLoadError

logger = logging.getLogger(__name__)

_GPU_PREFIXES = ("cuda", "gpu")


def _gpu_index(device: str) -> int | None:
    """The N of `cuda`, `gpu`, `cuda:N` or `gpu:N` (0 when omitted); None for a non-GPU name."""
    prefix, sep, index = device.partition(":")
    if prefix not in _GPU_PREFIXES:
        return None
    if not sep:
        return 0
    if not index.isdigit():
        raise ModelLoadError(f"invalid device {device!r}: expected cuda:N with N a non-negative integer")
    return int(index)


def normalize_device(device: str | None, cuda_count: int) -> str:
    """Map a configured device to `cpu` or `cuda:N`.

    `auto` (also what None means, as in the model config) picks cuda:0 when a GPU is present. A
    GPU device on a machine without one falls back to `cpu` with a warning, so a config written
    for a GPU host still starts elsewhere; a GPU index that does not exist on a GPU host is a
    configuration mistake and fails the load.
    """
    name = (device or "auto").strip().lower()
    if name == "cpu":
        return "cpu"
    if name == "auto":
        return "cuda:0" if cuda_count > 0 else "cpu"
    index = _gpu_index(name)
    if index is None:
        raise ModelLoadError(f"unknown device {device!r}: expected cpu, auto, cuda, cuda:N, gpu or gpu:N")
    if cuda_count <= 0:
        logger.warning("device %r requested but no CUDA device is available; falling back to cpu", device)
        return "cpu"
    if index >= cuda_count:
        raise ModelLoadError(
            f"device {device!r} does not exist: {cuda_count} CUDA device(s) available "
            f"(cuda:0..cuda:{cuda_count - 1})"
        )
    return f"cuda:{index}"


def is_cuda(device: str) -> bool:
    """True for a normalized `cuda:N` device."""
    return device.startswith("cuda")


def cuda_index(device: str) -> int:
    """The N of a normalized `cuda:N` device (0 for anything else)."""
    _, _, index = device.partition(":")
    return int(index) if index.isdigit() else 0


def visible_cuda_count(device_nodes: int | None, cuda_visible_devices: str | None) -> int | None:
    """CUDA devices a process may use, from the GPU count the driver exposes and CUDA_VISIBLE_DEVICES.

    For backends that must not import torch to ask. `device_nodes` None means "unknown" (the
    platform exposes no device nodes), and so does the result: the caller then lets CUDA decide.
    """
    if device_nodes is None:
        return None
    if cuda_visible_devices is None:
        return device_nodes
    visible: list[str] = []
    for entry in cuda_visible_devices.split(","):
        # CUDA stops at the first invalid entry; "-1" is the usual way to hide every device.
        if not entry.strip() or entry.strip().startswith("-"):
            break
        visible.append(entry.strip())
    return min(device_nodes, len(visible))

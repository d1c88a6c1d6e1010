"""Giving memory back: glibc's allocator knobs, and what runs after a model is unloaded."""

from __future__ import annotations

import ctypes
import gc
import sys
from typing import Any


def libc(name: str) -> Any:
    """A glibc function, or None elsewhere (musl, macOS): these are glibc's knobs."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return getattr(ctypes.CDLL(None), name)
    except (OSError, AttributeError):
        return None


def trim_malloc() -> None:
    """Give the heap pages the allocator holds free back to the system (walks the heaps: not on the
    event loop)."""
    trim = libc("malloc_trim")
    if trim is not None:
        trim(0)


def release_memory() -> None:
    """After a model is closed: collect its cycles, release torch's cached GPU memory (when torch is in
    use and CUDA started) and trim the heap. Run it in a thread: a full collection takes a while."""
    gc.collect()
    torch = sys.modules.get("torch")  # never imported here: only a process that uses it has a cache
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()
    trim_malloc()

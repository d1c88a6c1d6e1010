"""The event loop a server runs on: uvloop when it is installed (the default), or asyncio's own.

uvloop runs the loop's own work (callbacks, timers, socket reads and writes) in C: Tornado and grpc.aio
run on it unchanged and spend less CPU per request (bench/compare.py). `event_loop: asyncio` in
server.yml picks the standard loop, e.g. to rule the loop out while debugging.
"""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def loop_factory(kind: str = "auto") -> Callable[[], asyncio.AbstractEventLoop]:
    """The factory of `kind`'s loops; "auto" is uvloop when importable, else asyncio."""
    if kind == "asyncio" or (kind == "auto" and importlib.util.find_spec("uvloop") is None):
        return asyncio.new_event_loop
    import uvloop  # "uvloop" asked for and missing: the ImportError names it

    return uvloop.new_event_loop


def run(main: Coroutine[Any, Any, T], kind: str = "auto") -> T:
    """`asyncio.run(main)` on a loop of `kind`."""
    factory = loop_factory(kind)
    if hasattr(asyncio, "Runner"):  # Python 3.11+
        with asyncio.Runner(loop_factory=factory) as runner:
            return runner.run(main)
    loop = factory()
    try:
        asyncio.set_event_loop(loop)
        return loop.run_until_complete(main)
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        asyncio.set_event_loop(None)
        loop.close()

"""The loop a server runs on: uvloop by default when installed, asyncio's own when asked for."""

from __future__ import annotations

import asyncio

import pytest

from grps_py import event_loop


async def loop_module() -> str:
    return type(asyncio.get_running_loop()).__module__


def test_auto_is_uvloop_when_installed() -> None:
    pytest.importorskip("uvloop")
    assert event_loop.run(loop_module(), "auto").startswith("uvloop")


def test_asyncio_is_the_standard_loop() -> None:
    assert event_loop.run(loop_module(), "asyncio").startswith("asyncio")


def test_run_returns_the_coroutines_result() -> None:
    async def answer() -> int:
        await asyncio.sleep(0)
        return 42

    assert event_loop.run(answer(), "uvloop") == 42

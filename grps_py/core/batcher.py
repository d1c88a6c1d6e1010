"""Dynamic batching for one model: gather requests for up to `batch_timeout_us`, run them together.

A batch never holds more than `max_batch_size` requests, and the timeout counts from the oldest
request waiting. When a batch fails as a whole, each of its requests is retried alone so that one
bad request fails itself and not its neighbours.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import Executor as ThreadPool
from dataclasses import dataclass
from typing import Any

from grps_py.core.context import GrpsContext

log = logging.getLogger("grps_py.batcher")

RunBatch = Callable[[list[Any], list[GrpsContext]], list[Any]]
RunOne = Callable[[Any, GrpsContext], Any]


@dataclass
class _Pending:
    inp: Any
    ctx: GrpsContext
    future: asyncio.Future[Any]


class Batcher:
    def __init__(
        self,
        run_batch: RunBatch,
        run_one: RunOne,
        pool: ThreadPool,
        max_batch_size: int,
        batch_timeout_us: int,
    ) -> None:
        self._run_batch = run_batch
        self._run_one = run_one
        self._pool = pool
        self.max_batch_size = max_batch_size
        self._timeout_s = batch_timeout_us / 1e6
        self._queue: asyncio.Queue[_Pending] | None = None
        self._worker: asyncio.Task[None] | None = None

    async def submit(self, inp: Any, ctx: GrpsContext) -> Any:
        if self._queue is None:
            self._queue = asyncio.Queue()
            self._worker = asyncio.ensure_future(self._serve(self._queue))
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._queue.put_nowait(_Pending(inp, ctx, future))
        return await future

    def close(self) -> None:
        if self._worker is not None:
            self._worker.cancel()

    async def _serve(self, queue: asyncio.Queue[_Pending]) -> None:
        while True:
            batch = await self._gather(queue)
            batch = [p for p in batch if not p.future.done()]  # cancelled while waiting
            if batch:
                await self._run(batch)

    async def _gather(self, queue: asyncio.Queue[_Pending]) -> list[_Pending]:
        batch = [await queue.get()]
        deadline = asyncio.get_running_loop().time() + self._timeout_s
        while len(batch) < self.max_batch_size:
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0 and queue.empty():
                break
            try:
                item = (
                    queue.get_nowait()
                    if not queue.empty()
                    else await asyncio.wait_for(queue.get(), remaining)
                )
                batch.append(item)
            except asyncio.TimeoutError:
                break
        return batch

    async def _run(self, batch: list[_Pending]) -> None:
        loop = asyncio.get_running_loop()
        inps, ctxs = [p.inp for p in batch], [p.ctx for p in batch]
        try:
            outs = await loop.run_in_executor(self._pool, self._run_batch, inps, ctxs)
            if len(outs) != len(batch):
                raise RuntimeError(f"batch of {len(batch)} answered with {len(outs)} outputs")
        except Exception as exc:
            if len(batch) == 1:
                _settle(batch[0], error=exc)
                return
            log.info("batch of %d failed; running its requests one by one", len(batch))
            await asyncio.gather(*(self._run_alone(p) for p in batch))
            return
        for pending, out in zip(batch, outs, strict=True):
            _settle(pending, result=out)

    async def _run_alone(self, pending: _Pending) -> None:
        loop = asyncio.get_running_loop()
        try:
            out = await loop.run_in_executor(self._pool, self._run_one, pending.inp, pending.ctx)
        except Exception as exc:
            _settle(pending, error=exc)
            return
        _settle(pending, result=out)


def _settle(pending: _Pending, result: Any = None, error: BaseException | None = None) -> None:
    """Answer a request unless its caller already gave up on it."""
    if pending.future.done():
        return
    if error is not None:
        pending.future.set_exception(error)
    else:
        pending.future.set_result(result)

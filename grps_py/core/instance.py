"""One instance of a model (Triton's instance_group member): a converter and an inferer on one device,
with its own worker thread. Runs one request, or a batch with each request's failures kept to itself.

A batch runs preprocess per request, one inference over the whole batch, then postprocess per
request. The built-in numpy/torch converters concatenate the batch along dim 0 and split the
output back by each request's rows; an inferer that overrides `batch_infer` gets the list; any
other runs request by request. A request that fails in pre- or postprocessing fails alone, and
when the batch inference fails, each request is retried alone so a bad one fails only itself.
Streaming requests are batched through `batch_infer(inputs, contexts)`, where each context streams
its own messages; a merged numpy/torch inference is not used for them.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from grps_py.core.context import GrpsContext
from grps_py.core.model import Converter, ModelInferer
from grps_py.core.types import Payload

log = logging.getLogger("grps_py.model")

# (output, None) or (None, the exception): one per request of a batch.
Outcome = tuple[Any, BaseException | None]


def _overrides(obj: Any, base: type, name: str) -> bool:
    return getattr(type(obj), name) is not getattr(base, name)


def _try(fn: Callable[..., Any], *args: Any) -> Outcome:
    try:
        return fn(*args), None
    except Exception as exc:
        return None, exc


class ModelInstance:
    """Runs preprocess -> infer -> postprocess for one model on one device, off the event loop."""

    def __init__(
        self,
        key: str,
        index: int,
        device: str,
        inferer: ModelInferer,
        converter: Converter,
        to_payload: Callable[[Any], Payload],
    ) -> None:
        self.key = key
        self.index = index
        self.device = device
        self.inferer = inferer
        self.converter = converter
        self._to_payload = to_payload
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"model-{key}-{index}")
        self.active = 0  # dispatched to this instance and not finished (running or next in its thread)
        self.is_async = any(
            inspect.iscoroutinefunction(fn)
            for fn in (converter.preprocess, inferer.infer, converter.postprocess)
        )

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)

    def _bind(self, ctx: GrpsContext) -> None:
        """For `stream_respond_with_postprocess`: this instance's postprocess, as a Payload."""
        ctx.postprocess = lambda out: self._to_payload(self.converter.postprocess(out, ctx))

    # -- one request ---------------------------------------------------------------------------
    def run_one(self, inp: Any, ctx: GrpsContext) -> Any:
        self._bind(ctx)
        x = self.converter.preprocess(inp, ctx)
        y = self.inferer.infer(x, ctx)
        return self.converter.postprocess(y, ctx)

    async def run_async(self, inp: Any, ctx: GrpsContext) -> Any:
        """Model code with `async def` parts: those run on the loop, the rest on this instance's thread."""
        self._bind(ctx)
        x = await self._call(self.converter.preprocess, inp, ctx)
        y = await self._call(self.inferer.infer, x, ctx)
        return await self._call(self.converter.postprocess, y, ctx)

    async def _call(self, fn: Callable[..., Any], arg: Any, ctx: GrpsContext) -> Any:
        if inspect.iscoroutinefunction(fn):
            return await fn(arg, ctx)
        return await asyncio.get_running_loop().run_in_executor(self.pool, fn, arg, ctx)

    # -- a batch -------------------------------------------------------------------------------
    def run_batch(self, inps: list[Any], ctxs: list[GrpsContext]) -> list[Outcome]:
        for ctx in ctxs:
            self._bind(ctx)
        pre = self._each(self.converter, "preprocess", inps, ctxs)
        live = [i for i, (_, err) in enumerate(pre) if err is None]
        inferred = self._infer([pre[i][0] for i in live], [ctxs[i] for i in live])
        outcomes: list[Outcome] = list(pre)
        for i, (y, err) in zip(live, inferred, strict=True):
            outcomes[i] = (None, err) if err is not None else (y, None)
        post_live = [i for i, (_, err) in enumerate(outcomes) if err is None]
        post = self._each(
            self.converter, "postprocess", [outcomes[i][0] for i in post_live], [ctxs[i] for i in post_live]
        )
        for i, outcome in zip(post_live, post, strict=True):
            outcomes[i] = outcome
        return outcomes

    def _each(
        self, converter: Converter, step: str, items: list[Any], ctxs: list[GrpsContext]
    ) -> list[Outcome]:
        """A converter step for every request: its batch_* method when the converter has its own, falling
        back to one call per request (so only the failing request fails)."""
        if not items:
            return []
        if _overrides(converter, Converter, f"batch_{step}"):
            outs, err = _try(getattr(converter, f"batch_{step}"), items, ctxs)
            if err is None and isinstance(outs, list) and len(outs) == len(items):
                return [(out, None) for out in outs]
            log.info("model '%s': batch_%s failed (%s); running it per request", self.key, step, err)
        one = getattr(converter, step)
        return [_try(one, item, ctx) for item, ctx in zip(items, ctxs, strict=True)]

    def _infer(self, xs: list[Any], ctxs: list[GrpsContext]) -> list[Outcome]:
        if len(xs) <= 1:
            return [_try(self.inferer.infer, x, ctx) for x, ctx in zip(xs, ctxs, strict=True)]
        outs = self._infer_together(xs, ctxs)
        if outs is not None:
            return [(out, None) for out in outs]
        return [_try(self.inferer.infer, x, ctx) for x, ctx in zip(xs, ctxs, strict=True)]

    def _infer_together(self, xs: list[Any], ctxs: list[GrpsContext]) -> list[Any] | None:
        """One inference for the whole batch, or None to run request by request."""
        try:
            if _overrides(self.inferer, ModelInferer, "batch_infer"):
                outs = self.inferer.batch_infer(xs, ctxs)
                if isinstance(outs, list) and len(outs) == len(xs):
                    return outs
                raise RuntimeError(f"batch_infer answered {len(outs)} outputs for {len(xs)} requests")
            merge = getattr(self.converter, "merge_batch", None)
            if not callable(merge) or any(ctx.if_streaming() for ctx in ctxs):
                return None  # a merged inference could stream through one context only
            merged = merge(xs)
            if merged is None:
                return None
            x, rows = merged
            parts: list[Any] | None = self.converter.split_batch(self.inferer.infer(x, ctxs[0]), rows)  # type: ignore[attr-defined]
            return parts
        except Exception as exc:
            log.info("model '%s': a batch of %d failed (%s); running it per request", self.key, len(xs), exc)
            return None

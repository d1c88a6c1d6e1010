"""One instance of a model (Triton's instance_group member): a converter and an inferer on one device,
with its own worker thread. Runs one request, or a batch with each request's failures kept to itself.

A batch follows one of two contracts, chosen by the converter:

- **Step by step** (grps-py's contract; every built-in converter, and any converter without a
  `batch_preprocess` of its own): preprocess runs per request, one inference runs the whole batch,
  then postprocess per request (or the converter's `batch_postprocess`, list in, list out). The
  built-in numpy/torch converters concatenate the batch along dim 0 and split the output back by each
  request's rows; an inferer that overrides `batch_infer` gets the list of inputs and answers a list;
  any other runs request by request. Streaming requests are batched through `batch_infer`, where each
  context streams its own messages; a merged numpy/torch inference is not used for them.
- **Whole batch** (grps's contract; a converter that overrides `batch_preprocess`, which only user
  converters do): `batch_preprocess(inputs, contexts)` returns the batch's one input (a concatenated
  array, a dict of them, a list: whatever the model takes), `batch_infer(input, contexts)` gets it whole
  and answers the batch's output, and `batch_postprocess(output, contexts)` returns one answer per
  request. grps-py code written list-in/list-out is a special case (a list with one item per request,
  handed whole). The base `batch_infer` / `batch_postprocess` only loop over such a list, so a merged
  input or output needs the model's own method.

A request that fails in a per-request step fails alone. When a batch step fails (or answers the wrong
number of outputs), its requests run again one by one, so a bad request fails only itself.

grps model code reports an error through its context (`set_err_msg`) instead of raising: a request
whose context has an error stops after the step that set it and answers None (its node then raises the
reported message). A whole batch stops once every one of its requests has an error, as grps's batcher.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import logging
from collections.abc import Callable
from time import perf_counter_ns
from typing import Any

from grps_py.core import request_scope
from grps_py.core.context import GrpsContext
from grps_py.core.instance_thread import InstanceThread
from grps_py.core.model import Converter, ModelInferer, NoneConverter
from grps_py.core.statistics import Execution, Timed, executed
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


def _try_as(ctx: GrpsContext, fn: Callable[..., Any], *args: Any) -> Outcome:
    """`_try` for one request of a batch, its log lines under its own request id."""
    with request_scope.scoped(ctx.request_id):
        return _try(fn, *args)


def _one_each(value: Any, count: int) -> bool:
    """Whether a batch step's result holds one item per request (a list or tuple of `count`)."""
    return isinstance(value, (list, tuple)) and len(value) == count


def _all_reported(ctxs: list[GrpsContext]) -> bool:
    return all(ctx.has_err() for ctx in ctxs)


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
        self.pool = InstanceThread(f"model-{key}-{index}")
        self.active = 0  # dispatched to this instance and not finished (running or next in its thread)
        self.hung = False  # running a batch past a request's deadline: it gets no new work meanwhile
        # Requests it runs side by side: 1, or a generative model's running sequences (its node sets it).
        self.capacity = 1
        # grps's batch contract (the converter merges and splits): a batching model then runs even a
        # lone request through the batch methods, as grps does.
        self.batches_whole = _overrides(converter, Converter, "batch_preprocess")
        # What model code reads as `context.converter`: grps has none for `converter_type: none`.
        self._grps_converter = None if isinstance(converter, NoneConverter) else converter
        self.is_async = any(
            inspect.iscoroutinefunction(fn)
            for fn in (converter.preprocess, inferer.infer, converter.postprocess)
        )

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)

    def _bind(self, ctx: GrpsContext) -> None:
        """For `stream_respond_with_postprocess`: this instance's postprocess, as a Payload; and grps's
        `context.converter` / `context.inferer`: the model running the request."""
        ctx.postprocess = lambda out: self._to_payload(self.converter.postprocess(out, ctx))
        ctx.set_converter(self._grps_converter)
        ctx.set_inferer(self.inferer)

    # -- one request ---------------------------------------------------------------------------
    def run_one(self, inp: Any, ctx: GrpsContext) -> Any:
        """The request's answer, or None once a step reported an error on its context. A `Timed` input
        (the model node's) is unwrapped, and told the execution's step durations."""
        timed = inp if type(inp) is Timed else None
        if timed is not None:
            inp = timed.inp
        self._bind(ctx)
        started = perf_counter_ns()
        x = self.converter.preprocess(inp, ctx)
        if ctx.has_err():
            return None
        preprocessed = perf_counter_ns()
        y = self.inferer.infer(x, ctx)
        if ctx.has_err():
            return None
        inferred = perf_counter_ns()
        out = self.converter.postprocess(y, ctx)
        if timed is not None:
            timed.execution = Execution(timed.rows, started, preprocessed, inferred, perf_counter_ns())
        return out

    async def run_async(self, inp: Any, ctx: GrpsContext) -> Any:
        """Model code with `async def` parts: those run on the loop, the rest on this instance's thread.
        Stops as `run_one` does when a step reported an error; times its steps as `run_one` does."""
        timed = inp if type(inp) is Timed else None
        if timed is not None:
            inp = timed.inp
        self._bind(ctx)
        started = perf_counter_ns()
        x = await self._call(self.converter.preprocess, inp, ctx)
        if ctx.has_err():
            return None
        preprocessed = perf_counter_ns()
        y = await self._call(self.inferer.infer, x, ctx)
        if ctx.has_err():
            return None
        inferred = perf_counter_ns()
        out = await self._call(self.converter.postprocess, y, ctx)
        if timed is not None:
            timed.execution = Execution(timed.rows, started, preprocessed, inferred, perf_counter_ns())
        return out

    async def _call(self, fn: Callable[..., Any], arg: Any, ctx: GrpsContext) -> Any:
        if inspect.iscoroutinefunction(fn):
            return await fn(arg, ctx)
        run = contextvars.copy_context().run  # the thread runs it under this request's id
        return await asyncio.get_running_loop().run_in_executor(self.pool, run, fn, arg, ctx)

    def _run_alone(self, inp: Any, ctx: GrpsContext) -> Outcome:
        return _try_as(ctx, self.run_one, inp, ctx)

    # -- a batch -------------------------------------------------------------------------------
    def run_batch(self, sent: list[Any], ctxs: list[GrpsContext]) -> list[Outcome]:
        """In the instance's thread: lines about the whole batch carry all its request ids, lines of one
        request's own step its id alone. `Timed` inputs are unwrapped and told the execution's steps."""
        for ctx in ctxs:
            self._bind(ctx)
        inps = [item.inp if type(item) is Timed else item for item in sent]
        with request_scope.scoped(request_scope.batch_id(ctx.request_id for ctx in ctxs)):
            if self.batches_whole:
                return self._run_whole(inps, ctxs, sent)
            return self._run_steps(inps, ctxs, sent)

    # -- grps's contract: the converter merges and splits the batch ----------------------------
    def _run_whole(self, inps: list[Any], ctxs: list[GrpsContext], sent: list[Any]) -> list[Outcome]:
        marks: list[int] = [perf_counter_ns()]  # started, preprocessed, inferred
        try:
            outs = self._whole_batch(inps, ctxs, marks)
        except Exception as exc:
            log.info(
                "model '%s': a batch of %d failed (%s); running it per request", self.key, len(inps), exc
            )
            # A request that already reported its error keeps it; the others run one by one (each an
            # execution of its own).
            return [
                (None, None) if ctx.has_err() else self._run_alone(item, ctx)
                for item, ctx in zip(sent, ctxs, strict=True)
            ]
        if len(marks) == 3:
            executed(sent, *marks)
        return [(None if ctx.has_err() else out, None) for out, ctx in zip(outs, ctxs, strict=True)]

    def _whole_batch(self, inps: list[Any], ctxs: list[GrpsContext], marks: list[int]) -> list[Any]:
        """batch_preprocess -> batch_infer -> batch_postprocess, each result handed whole to the next;
        the time each step ended is appended to `marks` (the last by the caller)."""
        count = len(inps)
        x = self.converter.batch_preprocess(inps, ctxs)
        if _all_reported(ctxs):
            return [None] * count
        if not _overrides(self.inferer, ModelInferer, "batch_infer") and not _one_each(x, count):
            raise TypeError(
                "batch_preprocess merged the batch, but the inferer has no batch_infer to take it"
            )
        marks.append(perf_counter_ns())
        y = self.inferer.batch_infer(x, ctxs)
        if _all_reported(ctxs):
            return [None] * count
        marks.append(perf_counter_ns())
        if not _overrides(self.converter, Converter, "batch_postprocess") and not _one_each(y, count):
            raise TypeError("batch_infer answered a merged batch, but the converter has no batch_postprocess")
        outs = self.converter.batch_postprocess(y, ctxs)
        if not _one_each(outs, count):
            got = len(outs) if isinstance(outs, (list, tuple)) else type(outs).__name__
            raise ValueError(f"batch_postprocess answered {got} for {count} requests; expected a list")
        return list(outs)

    # -- grps-py's contract: per-request steps around one inference -----------------------------
    def _run_steps(self, inps: list[Any], ctxs: list[GrpsContext], sent: list[Any]) -> list[Outcome]:
        started = perf_counter_ns()
        outcomes = self._each(self.converter, "preprocess", inps, ctxs)
        live = self._live(outcomes, ctxs)
        preprocessed = perf_counter_ns()
        inferred = self._infer([outcomes[i][0] for i in live], [ctxs[i] for i in live])
        for i, outcome in zip(live, inferred, strict=True):
            outcomes[i] = outcome
        live = self._live(outcomes, ctxs)
        inferred_at = perf_counter_ns()
        post = self._each(
            self.converter, "postprocess", [outcomes[i][0] for i in live], [ctxs[i] for i in live]
        )
        for i, outcome in zip(live, post, strict=True):
            outcomes[i] = outcome
        executed(sent, started, preprocessed, inferred_at)
        return [
            (None, None) if err is None and ctx.has_err() else (out, err)
            for (out, err), ctx in zip(outcomes, ctxs, strict=True)
        ]

    @staticmethod
    def _live(outcomes: list[Outcome], ctxs: list[GrpsContext]) -> list[int]:
        """The requests still going: no exception, and no error reported on their context."""
        return [i for i, (_, err) in enumerate(outcomes) if err is None and not ctxs[i].has_err()]

    def _each(
        self, converter: Converter, step: str, items: list[Any], ctxs: list[GrpsContext]
    ) -> list[Outcome]:
        """A converter step for every request: its batch_* method when the converter has its own, falling
        back to one call per request (so only the failing request fails)."""
        if not items:
            return []
        if _overrides(converter, Converter, f"batch_{step}"):
            outs, err = _try(getattr(converter, f"batch_{step}"), items, ctxs)
            if err is None and _one_each(outs, len(items)):
                return [(out, None) for out in outs]
            log.info("model '%s': batch_%s failed (%s); running it per request", self.key, step, err)
        one = getattr(converter, step)
        return [_try_as(ctx, one, item, ctx) for item, ctx in zip(items, ctxs, strict=True)]

    def _infer(self, xs: list[Any], ctxs: list[GrpsContext]) -> list[Outcome]:
        if len(xs) <= 1:
            return [_try_as(ctx, self.inferer.infer, x, ctx) for x, ctx in zip(xs, ctxs, strict=True)]
        outs = self._infer_together(xs, ctxs)
        if outs is not None:
            return [(out, None) for out in outs]
        return [_try_as(ctx, self.inferer.infer, x, ctx) for x, ctx in zip(xs, ctxs, strict=True)]

    def _infer_together(self, xs: list[Any], ctxs: list[GrpsContext]) -> list[Any] | None:
        """One inference for the whole batch, or None to run request by request."""
        try:
            if _overrides(self.inferer, ModelInferer, "batch_infer"):
                outs = self.inferer.batch_infer(xs, ctxs)
                if _one_each(outs, len(xs)):
                    return list(outs)
                raise RuntimeError(f"batch_infer did not answer a list of {len(xs)} outputs, one per request")
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

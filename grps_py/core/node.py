"""A model node: one configured model (converter + inferer) running on its own worker threads."""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from grps_py.core.batcher import Batcher
from grps_py.core.config import ModelSettings
from grps_py.core.context import GrpsContext
from grps_py.core.errors import GrpsError, ModelError, ModelLoadError, ModelNotReady
from grps_py.core.model import (
    BUILTIN_CONVERTERS,
    BUILTIN_INFERERS,
    DEFAULT_CONVERTER_FOR,
    Converter,
    ModelInferer,
    Registry,
    converter_register,
    inferer_register,
    load_builtin,
    outputs_to_payload,
)
from grps_py.core.signature import check_inputs, name_outputs
from grps_py.core.types import MessageBridge, Payload, PayloadKind

log = logging.getLogger("grps_py.model")
_MAX_ERROR_CHARS = 300


def public_failure(model: str, exc: BaseException) -> str:
    """A one-line message about a failing model, without any traceback text."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    text = text[:_MAX_ERROR_CHARS]
    return f"model '{model}' failed: {type(exc).__name__}" + (f": {text}" if text else "")


R = TypeVar("R")


def _registered(registry: Registry[R], name: str | None, model_key: str) -> R:
    instance = registry.get(name or "")
    if instance is None:
        raise ModelLoadError(
            f"model '{model_key}': {registry.kind}_name {name!r} is not registered "
            f"(registered: {registry.names()}); register it in a file under src/"
        )
    return instance


def _resolve_inferer(settings: ModelSettings) -> ModelInferer:
    if settings.inferer_type == "customized":
        return _registered(inferer_register, settings.inferer_name, settings.key)
    instance: ModelInferer = load_builtin(BUILTIN_INFERERS[settings.inferer_type])
    return instance


def _resolve_converter(settings: ModelSettings) -> Converter:
    kind = settings.converter_type or DEFAULT_CONVERTER_FOR[settings.inferer_type]
    if kind == "customized":
        return _registered(converter_register, settings.converter_name, settings.key)
    instance: Converter = load_builtin(BUILTIN_CONVERTERS[kind])
    return instance


def _is_async(fn: Callable[..., Any]) -> bool:
    return inspect.iscoroutinefunction(fn)


class ModelNode:
    """Runs preprocess -> infer -> postprocess for one model, off the event loop."""

    def __init__(self, settings: ModelSettings, bridge: MessageBridge, max_workers: int) -> None:
        self.settings = settings
        self.key = settings.key
        self._bridge = bridge
        self._pool = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix=f"model-{self.key}")
        self.inferer = _resolve_inferer(settings)
        self.converter = _resolve_converter(settings)
        self._all_sync = not any(
            _is_async(fn)
            for fn in (self.converter.preprocess, self.inferer.infer, self.converter.postprocess)
        )
        self.batcher = self._make_batcher()
        self.loaded = False

    def _make_batcher(self) -> Batcher | None:
        batching = self.settings.batching
        if batching.type != "dynamic":
            return None
        if not self._all_sync:
            log.warning("model '%s': async model code is not batched; serving requests one by one", self.key)
            return None
        return Batcher(
            self._run_batch_sync,
            self._run_sync,
            self._pool,
            batching.max_batch_size,
            batching.batch_timeout_us,
        )

    # -- lifecycle -----------------------------------------------------------------------------
    def load(self) -> None:
        """Init and load the model (blocking; run it in a thread). Any failure is a ModelLoadError."""
        try:
            self._load()
        except ModelLoadError:
            raise
        except Exception as exc:
            log.error("model '%s' failed to load", self.key, exc_info=exc)
            raise ModelLoadError(
                public_failure(self.key, exc).replace("failed", "failed to load", 1)
            ) from exc

    def _load(self) -> None:
        s = self.settings
        path = str(s.inferer_path) if s.inferer_path else None
        args = dict(s.inferer_args)
        if s.inp_device:  # grps passes inp_device to the inferer alongside its args
            args.setdefault("inp_device", s.inp_device)
        self.inferer.init(path, s.device, args)
        bind_inputs = getattr(self.inferer, "bind_input_names", None)
        if callable(bind_inputs) and s.inputs:  # e.g. TorchScript takes declared inputs positionally
            bind_inputs([spec.name for spec in s.inputs])
        if not self.inferer.load():
            raise ModelLoadError(f"model '{self.key}': inferer load() returned False")
        self.converter.init(str(s.converter_path) if s.converter_path else None, dict(s.converter_args))
        bind_device = getattr(self.converter, "bind_device", None)
        device = getattr(self.inferer, "input_device", None) or getattr(self.inferer, "device", None)
        if callable(bind_device) and device:
            bind_device(device)
        self.loaded = True

    def describe(self) -> dict[str, Any]:
        describe = getattr(self.inferer, "describe", None)
        return dict(describe()) if callable(describe) else {}

    @property
    def on_gpu(self) -> bool:
        """Whether the loaded model runs on a GPU (as its backend reports it)."""
        inferer = self.inferer
        device = getattr(inferer, "input_device", None) or getattr(inferer, "run_device", None)
        return self.loaded and str(device or inferer.device or "").startswith(("cuda", "gpu"))

    def close(self) -> None:
        if self.batcher is not None:
            self.batcher.close()
        self._pool.shutdown(wait=False, cancel_futures=True)

    @property
    def pool(self) -> ThreadPoolExecutor:
        return self._pool

    # -- payload <-> what the converter speaks -------------------------------------------------
    def converter_input(self, payload: Payload) -> Any:
        if self.converter.speaks_messages:
            if payload.kind is PayloadKind.MESSAGE:
                return payload.value
            return self._bridge.to_message(payload)
        if payload.kind is PayloadKind.MESSAGE:
            return self._bridge.from_message(payload.value)
        return payload

    def converter_output(self, out: Any) -> Payload:
        if isinstance(out, Payload):
            payload = out
        elif self._bridge.is_message(out):
            return Payload.of_message(out)
        else:
            payload = outputs_to_payload(out)
        if self.settings.outputs and payload.kind is PayloadKind.TENSORS:
            return Payload.of_tensors(name_outputs(self.settings.outputs, payload.value))
        return payload

    def checked_input(self, payload: Payload) -> Payload:
        """Tensors are checked against the declared inputs (and named by them when sent unnamed)."""
        if self.settings.inputs and payload.kind is PayloadKind.TENSORS:
            return Payload.of_tensors(check_inputs(self.settings.inputs, payload.value, self.key))
        return payload

    # -- running -------------------------------------------------------------------------------
    async def run(self, payload: Payload, ctx: GrpsContext) -> Payload:
        if not self.loaded:
            raise ModelNotReady(f"model '{self.key}' is not loaded")
        inp = self.converter_input(self.checked_input(payload))
        ctx.postprocess = lambda out: self.converter_output(self.converter.postprocess(out, ctx))
        try:
            if self.batcher is not None:
                out = await self.batcher.submit(inp, ctx)
            elif self._all_sync:
                loop = asyncio.get_running_loop()
                out = await loop.run_in_executor(self._pool, self._run_sync, inp, ctx)
            else:
                out = await self._run_mixed(inp, ctx)
        except (GrpsError, asyncio.CancelledError):
            raise
        except Exception as exc:
            log.error("request %s: model '%s' raised", ctx.request_id, self.key, exc_info=exc)
            raise ModelError(public_failure(self.key, exc)) from exc
        self.raise_if_reported(ctx)
        return self.converter_output(out)

    def raise_if_reported(self, ctx: GrpsContext) -> None:
        """grps model code reports errors through its context rather than by raising."""
        if ctx.has_err():
            raise ModelError(ctx.get_err_msg() or f"model '{self.key}' reported an error")

    def _run_sync(self, inp: Any, ctx: GrpsContext) -> Any:
        x = self.converter.preprocess(inp, ctx)
        y = self.inferer.infer(x, ctx)
        return self.converter.postprocess(y, ctx)

    def _run_batch_sync(self, inps: list[Any], ctxs: list[GrpsContext]) -> list[Any]:
        xs = self.converter.batch_preprocess(inps, ctxs)
        ys = self.inferer.batch_infer(xs, ctxs)
        return self.converter.batch_postprocess(ys, ctxs)

    async def _run_mixed(self, inp: Any, ctx: GrpsContext) -> Any:
        x = await self._call(self.converter.preprocess, inp, ctx)
        y = await self._call(self.inferer.infer, x, ctx)
        return await self._call(self.converter.postprocess, y, ctx)

    async def _call(self, fn: Callable[..., Any], arg: Any, ctx: GrpsContext) -> Any:
        if _is_async(fn):
            return await fn(arg, ctx)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, fn, arg, ctx)

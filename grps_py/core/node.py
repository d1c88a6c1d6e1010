"""A model node: one configured model, as instances behind a scheduler (queue, batching, dispatch)."""

from __future__ import annotations

import asyncio
import copy
import logging
import re
from collections.abc import Hashable, Sequence
from time import perf_counter_ns
from typing import Any, TypeVar

import numpy as np

from grps_py.core import backend_registry
from grps_py.core.config import ModelSettings
from grps_py.core.context import GrpsContext
from grps_py.core.datatypes import BYTES, datatype_of
from grps_py.core.errors import GrpsError, InvalidInput, ModelError, ModelLoadError, ModelNotReady
from grps_py.core.instance import ModelInstance
from grps_py.core.model import (
    Converter,
    ModelInferer,
    Registry,
    converter_register,
    inferer_register,
    outputs_to_payload,
)
from grps_py.core.observer import SchedulerObserver
from grps_py.core.scheduler import ConcurrencyLimit, ModelScheduler
from grps_py.core.sequence import DIRECT, SequenceBatcher, sequence_request
from grps_py.core.sequence import Sequence as ModelSequence
from grps_py.core.signature import (
    DeclaredInputs,
    TensorSpec,
    declaration_conflicts,
    name_outputs,
    spec_from_description,
)
from grps_py.core.statistics import InferenceStats, Timed
from grps_py.core.types import MessageBridge, Payload, PayloadKind, Tensor
from grps_py.generation.api import generative_register
from grps_py.generation.inferer import GenerativeInferer
from grps_py.generation.report import GenerationReport

log = logging.getLogger("grps_py.model")
_MAX_ERROR_CHARS = 300  # of an exception's message
_MAX_REPORTED_CHARS = 1000  # of a message model code chose to show (set_err_msg, a GrpsError it raised)
_NO_VALUE = object()
# A file-system path in a message: rooted at /, ~/, ./, ../ or a drive letter, and not part of a word,
# a URL or a fraction ("a/b", "http://h/p", "3/4" are left alone).
_PATH = re.compile(r"""(?<![\w.:/~\\-])(?:[A-Za-z]:\\|~/|\.{1,2}/|/)[^\s'"`<>|*?,;:()\[\]{}]+""")
_ANSWERS = "numpy arrays (or a dict or list of them), str, bytes or a GrpsMessage"


def scrub(text: str, secrets: Sequence[str] = (), limit: int = _MAX_ERROR_CHARS) -> str:
    """Text from model code made fit for a client: its first line, file-system paths as <path>,
    configured secrets as <redacted>, at most `limit` characters."""
    lines = text.strip().splitlines()
    line = lines[0] if lines else ""
    for secret in secrets:
        if secret:
            line = line.replace(secret, "<redacted>")
    return _PATH.sub("<path>", line)[:limit]


def public_failure(model: str, exc: BaseException, secrets: Sequence[str] = ()) -> str:
    """A one-line message about a failing model, without any traceback text, path or secret."""
    text = scrub(str(exc), secrets)
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


def renewed(registered: R) -> R:
    """A new object for a model loaded after start-up, in place of the one a project registered (which
    the version being replaced may still be running): its class called without arguments, else a
    shallow copy; the node then runs its init and load as for any object."""
    try:
        return type(registered)()
    except TypeError:
        return copy.copy(registered)


def _resolve_inferer(settings: ModelSettings) -> tuple[ModelInferer, bool]:
    """The inferer object, and whether it is the project's registered one."""
    loader = backend_registry.backend(settings.inferer_type).loader
    if loader is None:
        return _registered(inferer_register, settings.inferer_name, settings.key), True
    instance: ModelInferer = _built_in(loader, settings.key)
    return instance, False


def _resolve_converter(settings: ModelSettings) -> tuple[Converter, bool]:
    loader = backend_registry.converter(settings.inferer_type, settings.converter_type).loader
    if loader is None:
        return _registered(converter_register, settings.converter_name, settings.key), True
    instance: Converter = _built_in(loader, settings.key)
    return instance, False


def _built_in(loader: str, model_key: str) -> Any:
    """A built-in inferer or converter; a framework that is not installed names the model that needs it."""
    try:
        return backend_registry.load(loader)
    except ModelLoadError as exc:
        raise ModelLoadError(f"model '{model_key}': {exc}") from None


def instance_devices(settings: ModelSettings) -> list[str]:
    """One device per instance: `instances` on each of `devices` (GPU indices), else on `device`."""
    if settings.devices:
        return [f"cuda:{d}" for d in settings.devices for _ in range(settings.instances)]
    return [settings.device] * settings.instances


def batch_shape(payload: Payload) -> tuple[int, Hashable]:
    """A request's rows (dim 0) and what it must share with others to be batched with them."""
    if payload.kind is not PayloadKind.TENSORS:
        return 1, payload.kind
    arrays = [t.data if hasattr(t.data, "shape") else t.array for t in payload.value]  # numpy or torch
    if not arrays or any(len(a.shape) == 0 for a in arrays) or len({int(a.shape[0]) for a in arrays}) != 1:
        return 1, object()  # no common batch dim: it runs alone
    key = tuple(
        (t.name, str(a.dtype), tuple(a.shape[1:])) for t, a in zip(payload.value, arrays, strict=True)
    )
    return int(arrays[0].shape[0]), key


class ModelNode:
    """One configured model: its instances (each a converter + inferer with a worker thread) behind a
    scheduler that queues, batches and dispatches requests."""

    def __init__(
        self,
        settings: ModelSettings,
        bridge: MessageBridge,
        limit: ConcurrencyLimit,
        observer: SchedulerObserver,
        secrets: Sequence[str] = (),
        fresh: bool = False,
    ) -> None:
        self.settings = settings
        self.key = settings.key
        self._bridge = bridge
        self._secrets = tuple(secrets)  # never shown to a client, whatever model code puts in a message
        # A node loaded after start-up (`fresh`) gets its own objects in place of registered ones, one
        # per registered object (shared by its instances, as the registered one would be).
        self._renewed: dict[int, Any] | None = {} if fresh else None
        self._observer = observer
        self.instances = [
            self._make_instance(i, device) for i, device in enumerate(instance_devices(settings))
        ]
        self.scheduler = ModelScheduler(settings, self.instances, limit, observer)
        self.sequences, self._pinned = self._sequence_batching(limit, observer)
        # The declared signature, ready for the per-request checks.
        tensors_only = backend_registry.converter(settings.inferer_type, settings.converter_type).tensors_only
        self._inputs = DeclaredInputs(settings.inputs, tensors_only) if settings.inputs else None
        self._outputs = {spec.name: spec for spec in settings.outputs}
        if settings.batching.type == "dynamic" and not self.scheduler.batching:
            log.warning("model '%s': async model code is not batched; serving requests one by one", self.key)
        self.loaded = False
        # Triton's statistics of this model version (core/statistics.py), counted as requests are answered.
        self.statistics = InferenceStats(settings.name, settings.version, self.max_batch_size)

    def _make_instance(self, index: int, device: str) -> ModelInstance:
        """Built-in inferers and converters get one object per instance; registered ones are shared."""
        if backend_registry.backend(self.settings.inferer_type).generative:
            inferer: ModelInferer = self._generative()
        else:
            inferer = self._own(*_resolve_inferer(self.settings))
        return ModelInstance(
            self.key,
            index,
            device,
            inferer,
            self._own(*_resolve_converter(self.settings)),
            self.converter_output,
        )

    def _generative(self) -> GenerativeInferer:
        """A generative model's inferer: the registered GenerativeModel behind a continuous batcher."""
        registered = self._own(_registered(generative_register, self.settings.inferer_name, self.key), True)
        report = GenerationReport(self._observer, self.key, lambda: self.scheduler.depth)
        return GenerativeInferer(registered, self.settings, report)

    def _own(self, instance: R, registered: bool) -> R:
        if not registered or self._renewed is None:
            return instance
        own: R | None = self._renewed.get(id(instance))
        if own is None:
            own = self._renewed[id(instance)] = renewed(instance)
        return own

    def _sequence_batching(
        self, limit: ConcurrencyLimit, observer: SchedulerObserver
    ) -> tuple[SequenceBatcher | None, list[ModelScheduler] | None]:
        """The model's sequences (core/sequence.py), and with the `direct` strategy over several
        instances a scheduler per instance, so that a sequence's requests all run on its slot's."""
        settings = self.settings.sequence_batching
        if settings is None:
            return None, None
        per_instance = self.settings.batching.max_batch_size if self.scheduler.batching else 1
        batcher = SequenceBatcher(
            self.key,
            settings,
            slots=per_instance * len(self.instances),
            instances=len(self.instances),
            max_waiting=self.settings.batching.max_queue_size,
        )
        if settings.strategy != DIRECT or len(self.instances) == 1:
            return batcher, None
        pinned = [ModelScheduler(self.settings, [instance], limit, observer) for instance in self.instances]
        return batcher, pinned

    def adopt_statistics(self, replaced: ModelNode) -> None:
        """A reload of the same model version: its statistics go on counting here."""
        stats = replaced.statistics
        stats.batch_limit = max(1, self.max_batch_size)
        self.statistics = stats

    @property
    def schedulers(self) -> list[ModelScheduler]:
        return [self.scheduler, *(self._pinned or ())]

    def _scheduler_for(self, sequence: ModelSequence) -> ModelScheduler:
        assert self.sequences is not None
        index = self.sequences.instance_of(sequence)
        return self.scheduler if index is None or self._pinned is None else self._pinned[index]

    @property
    def inferer(self) -> ModelInferer:
        return self.instances[0].inferer

    @property
    def converter(self) -> Converter:
        return self.instances[0].converter

    # -- lifecycle -----------------------------------------------------------------------------
    def load(self) -> None:
        """Init and load every instance (blocking; run it in a thread). Any failure is a ModelLoadError."""
        try:
            loaded: set[int] = set()
            for instance in self.instances:
                self._load(instance, loaded)
        except ModelLoadError:
            raise
        except Exception as exc:
            # Start-up reports the failure in one line; the traceback is for those who ask (log.level DEBUG).
            log.debug("model '%s' failed to load", self.key, exc_info=exc)
            raise ModelLoadError(
                public_failure(self.key, exc).replace("failed", "failed to load", 1)
            ) from exc
        for instance in self.instances:
            if isinstance(instance.inferer, GenerativeInferer):  # its sequences run side by side
                instance.capacity = instance.inferer.concurrent_requests
        self._check_declaration()
        self.loaded = True

    def _check_declaration(self) -> None:
        """Declared inputs/outputs that contradict what the model file states stop the load, naming each.
        Only where a built-in converter passes tensors through as they are: a converter of the project's
        own may add, rename or reshape them (the declaration then describes the converter's side)."""
        s = self.settings
        if not backend_registry.backend(s.inferer_type).states_signature or not (s.inputs or s.outputs):
            return
        converter = backend_registry.converter(s.inferer_type, s.converter_type)
        if converter.loader is None or not converter.tensors_only:
            return
        described = self.describe()
        problems = [
            *declaration_conflicts(
                s.inputs, [spec_from_description(i) for i in described.get("inputs", ())], "input"
            ),
            *declaration_conflicts(
                s.outputs, [spec_from_description(o) for o in described.get("outputs", ())], "output"
            ),
        ]
        if problems:
            raise ModelLoadError(
                f"model '{self.key}': inference.yml disagrees with the model: {'; '.join(problems)}"
            )

    def _load(self, instance: ModelInstance, loaded: set[int]) -> None:
        s = self.settings
        inferer, converter = instance.inferer, instance.converter
        if id(inferer) not in loaded:  # a registered inferer shared by instances loads once
            loaded.add(id(inferer))
            path = str(s.inferer_path) if s.inferer_path else None
            args = dict(s.inferer_args)
            if s.inp_device:  # grps passes inp_device to the inferer alongside its args
                args.setdefault("inp_device", s.inp_device)
            inferer.init(path, instance.device, args)
            bind_inputs = getattr(inferer, "bind_input_names", None)
            if callable(bind_inputs) and s.inputs:  # e.g. TorchScript takes declared inputs positionally
                bind_inputs([spec.name for spec in s.inputs])
            if not inferer.load():
                raise ModelLoadError(f"model '{self.key}': inferer load() returned False")
        if id(converter) not in loaded:
            loaded.add(id(converter))
            converter.init(str(s.converter_path) if s.converter_path else None, dict(s.converter_args))
        bind_device = getattr(converter, "bind_device", None)
        device = getattr(inferer, "input_device", None) or getattr(inferer, "device", None)
        if callable(bind_device) and device:
            bind_device(device)

    def describe(self) -> dict[str, Any]:
        describe = getattr(self.inferer, "describe", None)
        return dict(describe()) if callable(describe) else {}

    @property
    def run_devices(self) -> list[str]:
        """Where the instances run, each device once: once loaded, as the backend resolved it (`auto`
        becomes `cpu` or `cuda:0`, a GPU this host lacks `cpu`); before that, and for the user's own
        model code (which may share one inferer between instances), the device each instance was given."""
        found = [(_run_device(i.inferer) if self.loaded else None) or i.device for i in self.instances]
        return list(dict.fromkeys(found))

    @property
    def configured_devices(self) -> list[str]:
        """The devices inference.yml gives the instances (`devices: [0, 1]`: cuda:0, cuda:1), each once."""
        return list(dict.fromkeys(i.device for i in self.instances))

    def placement(self) -> str:
        """Where the model runs, `cpu` or `cuda:0, cuda:1`, followed by what inference.yml says where that
        differs: `cpu (device: auto)`, `cpu (devices: [0])` on a host without a GPU."""
        running = ", ".join(self.run_devices)
        if self.run_devices == self.configured_devices:
            return running
        if self.settings.devices:
            return f"{running} (devices: {list(self.settings.devices)})"
        return f"{running} (device: {self.settings.device})"

    def summary(self) -> str:
        """What `grps-py check` and the server's log say of a loaded model: `onnx on cpu (device: auto),
        1 instance(s)`."""
        return f"{self.settings.inferer_type} on {self.placement()}, {len(self.instances)} instance(s)"

    @property
    def max_batch_size(self) -> int:
        """The most rows the server puts in one batch; 0 when it does not batch this model (Triton's
        meaning): batching `none`, or async model code, which runs requests one by one."""
        return self.settings.batching.max_batch_size if self.scheduler.batching else 0

    @property
    def on_gpu(self) -> bool:
        """Whether the loaded model runs on a GPU (as its backend reports it)."""
        return self.loaded and any(device.startswith(("cuda", "gpu")) for device in self.run_devices)

    def close(self) -> None:
        for scheduler in self.schedulers:
            scheduler.close()
        if self.sequences is not None:
            self.sequences.close()
        for instance in self.instances:
            if isinstance(instance.inferer, GenerativeInferer):
                instance.inferer.close()
            instance.close()

    # -- payload <-> what the converter speaks -------------------------------------------------
    def converter_input(self, payload: Payload) -> Any:
        if self.instances[0].converter.speaks_messages:  # self.converter, inline: runs per request
            if payload.kind is PayloadKind.MESSAGE:
                return payload.value
            return self._bridge.to_message(payload)
        if payload.kind is PayloadKind.MESSAGE:
            return self._bridge.from_message(payload.value)
        return payload

    def converter_output(self, out: Any) -> Payload:
        """What the converter answered as a Payload; a ModelError saying what was expected when it cannot
        be an answer (a value that is no tensor, or a tensor unlike its declaration)."""
        if isinstance(out, Payload):
            payload = out
        elif self._bridge.is_message(out):
            return Payload.of_message(out)
        else:
            try:
                payload = outputs_to_payload(out)
            except Exception as exc:
                raise ModelError(
                    f"model '{self.key}' answered {type(out).__name__}, which is not an answer "
                    f"({scrub(str(exc), self._secrets)}); expected {_ANSWERS}"
                ) from exc
        if payload.kind is not PayloadKind.TENSORS:
            return payload
        tensors = payload.value
        declared = self._outputs
        if declared:
            named = name_outputs(self.settings.outputs, tensors)
            if named is not tensors:
                tensors = named
                payload = Payload(PayloadKind.TENSORS, tensors)
        for tensor in tensors:
            self._check_output(tensor, declared.get(tensor.name))
        return payload

    def _check_output(self, tensor: Tensor, spec: TensorSpec | None) -> None:
        """A numpy output must hold numbers, str or bytes, and match its declared datatype and shape
        (torch tensors are left as they are: reading them could mean a copy off the GPU)."""
        array = tensor.data
        if not isinstance(array, np.ndarray):
            return
        datatype = datatype_of(array.dtype)
        held = None if datatype is not None and datatype != BYTES else _odd_values(array)
        if held is not None:
            raise ModelError(
                f"model '{self.key}' answered output '{tensor.name}' holding {held} values; "
                f"expected numbers, str or bytes ({_ANSWERS})"
            )
        if spec is None:
            return
        if spec.datatype is not None and datatype != spec.datatype:
            raise ModelError(
                f"model '{self.key}' answered output '{tensor.name}' as {datatype}; "
                f"its declared datatype is {spec.datatype}"
            )
        if not spec.fits(array.shape):
            raise ModelError(
                f"model '{self.key}' answered output '{tensor.name}' with shape {list(array.shape)}; "
                f"its declared shape is {spec.describe_shape()}"
            )

    def checked_input(self, payload: Payload) -> Payload:
        """Tensors are checked against the declared inputs (and named by them when sent unnamed); a model
        whose converter takes tensors only refuses anything else."""
        return payload if self._inputs is None else self._inputs.checked(payload, self.key)

    # -- running -------------------------------------------------------------------------------
    async def run(self, payload: Payload, ctx: GrpsContext) -> Payload:
        started = perf_counter_ns()
        try:
            if not self.loaded:
                raise ModelNotReady(f"model '{self.key}' is not loaded")
            payload = self.checked_input(payload)
            if self.sequences is None:
                timed, out = await self._submit(payload, ctx, self.scheduler)
            else:
                request = sequence_request(ctx.parameters, self.key)
                async with self.sequences.admitted(request) as sequence:
                    controls = self.sequences.controls(request, self.scheduler.batching)
                    if controls:
                        payload = with_controls(payload, controls, self.key)
                    timed, out = await self._submit(payload, ctx, self._scheduler_for(sequence))
            if ctx.has_err():  # grps model code reports errors through its context rather than by raising
                self._raise_reported(ctx)
            try:
                answer = self.converter_output(out)
            except ModelError as exc:
                log.error("%s", exc.public_message, extra={"request_id": ctx.request_id})
                raise
        except BaseException:  # refused, failed, timed out or cancelled: Triton's `fail`
            self.statistics.failed(started)
            raise
        self.statistics.succeeded(started, timed)
        return answer

    async def _submit(
        self, payload: Payload, ctx: GrpsContext, scheduler: ModelScheduler
    ) -> tuple[Timed, Any]:
        """The request through the scheduler: its timings and the model's output."""
        rows, key = batch_shape(payload) if scheduler.batching else (1, None)
        # The instance unwraps it, and notes in it the execution that ran it (its statistics).
        timed = Timed(self.converter_input(payload), rows, perf_counter_ns())
        try:
            return timed, await scheduler.submit(timed, ctx, rows, key)
        except asyncio.CancelledError:
            raise
        except GrpsError as exc:  # the scheduler's, or one model code raised: its words, scrubbed
            exc.public_message = scrub(exc.public_message, self._secrets, _MAX_REPORTED_CHARS)
            raise
        except Exception as exc:
            # The traceback goes to the log only, each line under the request's id (never to the client).
            log.error("model '%s' raised", self.key, exc_info=exc, extra={"request_id": ctx.request_id})
            if is_gpu_oom(exc):
                self._observer.gpu_oom(self.key)
            raise ModelError(public_failure(self.key, exc, self._secrets)) from exc

    def _raise_reported(self, ctx: GrpsContext) -> None:
        """The error model code reported through its context, as a ModelError."""
        msg = scrub(ctx.get_err_msg(), self._secrets, _MAX_REPORTED_CHARS)
        raise ModelError(msg or f"model '{self.key}' reported an error")


def with_controls(payload: Payload, controls: list[tuple[str, Any]], model: str) -> Payload:
    """The request's tensors and its sequence's control tensors beside them."""
    if payload.kind is not PayloadKind.TENSORS:
        raise InvalidInput(
            f"model '{model}' takes sequence control inputs, so its requests must carry tensors"
        )
    return Payload(PayloadKind.TENSORS, [*payload.value, *(Tensor(name, data) for name, data in controls)])


def _run_device(inferer: ModelInferer) -> str | None:
    """The device a loaded built-in inferer runs on, by the attribute its backend keeps it in (ONNX
    Runtime's `run_device`, TorchScript's `model_device`: where the weights are)."""
    for name in ("run_device", "model_device"):
        device = getattr(inferer, name, None)
        if isinstance(device, str) and device:
            return device
    return None


def _odd_values(array: np.ndarray[Any, Any]) -> str | None:
    """What an output holds that no protocol can carry (objects other than str/bytes, complex numbers,
    dates...), by type name; None when it is fine."""
    if array.dtype.kind == "O":
        odd = next((v for v in array.flat if not isinstance(v, (str, bytes))), _NO_VALUE)
        return None if odd is _NO_VALUE else type(odd).__name__
    return None if datatype_of(array.dtype) is not None else str(array.dtype)


def is_gpu_oom(exc: BaseException) -> bool:
    """torch's OutOfMemoryError, or ONNX Runtime's CUDA allocation failure (told apart by name and
    message: the core imports neither library)."""
    if type(exc).__name__ == "OutOfMemoryError":
        return True
    text = str(exc).lower()
    return "cuda" in text and ("out of memory" in text or "failed to allocate" in text)

"""The Open Inference Protocol over the executor: what the /v2 routes and GRPCInferenceService share.

The adapters decode the wire into an `OipRequest`, call this, and encode the `OipResponse`; the
inference itself is the executor's one path, the same the grps API takes. Request parameters the
server cannot honour for the model are refused here (a sequence for a model without sequence
batching, a reserved `triton_` key), and classified outputs are answered as their classes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from importlib import metadata
from typing import Any

import numpy as np
import orjson

from grps_py.core.catalog import Catalog, ModelEntry, model_config
from grps_py.core.classification import classify
from grps_py.core.context import GrpsContext
from grps_py.core.dag import Dag
from grps_py.core.errors import InvalidInput, ModelError, ModelNotFound, ModelNotReady, Unsupported
from grps_py.core.executor import SERVER_NAME, Executor
from grps_py.core.oip import (
    EMPTY_FINAL_RESPONSE,
    SEQUENCE_PARAMETERS,
    TRITON_PREFIX,
    OipRequest,
    OipResponse,
    RequestedOutput,
)
from grps_py.core.repository import READY, UNAVAILABLE
from grps_py.core.shared_memory import SharedMemoryRegions
from grps_py.core.signature import messages_can_carry
from grps_py.core.telemetry import OIP_HTTP
from grps_py.core.types import InferRequest, Payload, PayloadKind, Tensor
from grps_py.core.untrusted import MAX_DECIMAL_DIGITS, shown

# Only what is really implemented is advertised: not `cuda_shared_memory`.
EXTENSIONS = (
    "binary_tensor_data",
    "classification",
    "model_configuration",
    "model_repository",
    "system_shared_memory",
    "schedule_policy",
    "sequence",
    "statistics",
    "generate",
    "parameters",
)
CUDA_SHARED_MEMORY = "CUDA shared memory is not supported by this server"
_DEFAULT_OUTPUT = "output"


# The regions of each server (its executor): HTTP and gRPC register into and read from the same ones.
def server_version() -> str:
    try:
        return metadata.version("grps-py")
    except metadata.PackageNotFoundError:  # running from a source tree that was not installed
        return "0"


class OipDataplane:
    """Health, metadata and inference in OIP terms, for both transports; `protocol` (oip-http or oip-grpc)
    labels the requests it runs."""

    def __init__(self, executor: Executor, protocol: str = OIP_HTTP) -> None:
        self.executor = executor
        self.protocol = protocol

    @property
    def shared_memory(self) -> SharedMemoryRegions:
        """The server's system shared-memory regions (the executor's: one registry per server)."""
        return self.executor.shared_memory

    @property
    def catalog(self) -> Catalog:
        return self.executor.catalog

    # -- health and metadata -------------------------------------------------------------------
    def server_metadata(self) -> dict[str, Any]:
        return {"name": SERVER_NAME, "version": server_version(), "extensions": list(EXTENSIONS)}

    def is_live(self) -> bool:
        return self.executor.is_live()

    def is_ready(self) -> bool:
        return self.executor.is_ready()

    def entry(self, name: str, version: str = "") -> ModelEntry:
        """The served model's entry; ModelNotFound, or ModelNotReady (503) while it is being unloaded."""
        try:
            return self.executor.catalog.entry(name, version)  # not the property: per request
        except ModelNotFound:
            if self.executor.repository.unloading(name):
                raise ModelNotReady(f"model '{shown(name)}' is being unloaded") from None
            raise

    def model_ready(self, name: str, version: str = "") -> bool:
        """Ready when the server is (online, loaded) and so is every node behind the model."""
        entry = self.catalog.entry(name, version)
        target = self.executor.resolve(entry.key)
        nodes = target.nodes if isinstance(target, Dag) else [target]
        return self.executor.is_ready() and all(node.loaded for node in nodes)

    def model_metadata(self, name: str, version: str = "") -> tuple[ModelEntry, list[str]]:
        entry = self.catalog.entry(name, version)
        return entry, self.catalog.versions(entry.name)

    def model_config(self, name: str, version: str = "") -> dict[str, Any]:
        return model_config(self.catalog.entry(name, version))

    def repository_index(self, ready_only: bool = False) -> list[dict[str, str]]:
        """Every model version known (the DAG too) with its state, as Triton's repository index answers:
        READY, LOADING, UNLOADING, or UNAVAILABLE and why. A server that cannot serve (loading, offline,
        shutting down) lists its READY models UNAVAILABLE, with that reason."""
        index = self.executor.repository.index()
        server_down = self._server_unavailable()
        if server_down:
            for model in index:
                if model["state"] == READY:
                    model.update(state=UNAVAILABLE, reason=server_down)
        return [model for model in index if model["state"] == READY] if ready_only else index

    def _server_unavailable(self) -> str:
        """Why the server serves no model now ("" when it does)."""
        executor = self.executor
        if executor.is_ready():
            return ""
        if not executor.is_loaded:
            return "loading"
        if executor.draining:
            return "the server is shutting down"
        return "the server is offline"

    async def load(self, name: str, parameters: dict[str, Any]) -> None:
        """Triton's repository load: `parameters.config`, when given, is one model entry in inference.yml's
        format as a JSON string (a mapping is taken too)."""
        config: Any = None
        for key, value in parameters.items():
            if key == "config":
                config = _config_entry(value)
            elif key.startswith("file:"):
                raise InvalidInput(
                    f"parameter '{shown(key, 64)}': model files cannot be sent with a load; name them in "
                    "the config (inferer_path) or in inference.yml"
                )
            else:
                raise InvalidInput(f"unknown load parameter '{shown(key, 64)}'; the one known is 'config'")
        await self.executor.repository.request_load(name, config)

    async def unload(self, name: str, parameters: dict[str, Any]) -> None:
        """Triton's repository unload: `parameters.unload_dependents` (a boolean) takes the DAG down too
        when it runs the model."""
        dependents = False
        for key, value in parameters.items():
            if key != "unload_dependents":
                raise InvalidInput(
                    f"unknown unload parameter '{shown(key, 64)}'; the one known is 'unload_dependents'"
                )
            if type(value) is not bool:
                raise InvalidInput("parameter 'unload_dependents' must be a boolean")
            dependents = value
        await self.executor.repository.request_unload(name, dependents)

    # -- inference -----------------------------------------------------------------------------
    def context(
        self, request: OipRequest, rid: str, deadline_s: float | None = None, streaming: bool = False
    ) -> GrpsContext:
        """The request's context; the adapter keeps it to cancel the request when the client goes away.

        The `timeout` parameter (microseconds) shortens the transport's deadline; `priority` picks the
        priority level (0: the model's default)."""
        parameters = request.parameters
        priority = 0
        if parameters:  # most requests send none
            timeout_us = _int_parameter(parameters, "timeout")
            if timeout_us:
                deadline_s = min(deadline_s, timeout_us / 1e6) if deadline_s is not None else timeout_us / 1e6
            priority = _int_parameter(parameters, "priority")
        return GrpsContext(
            streaming=streaming,
            deadline_s=deadline_s,
            request_id=rid,
            parameters=parameters,
            priority=priority,
        )

    def _prepare(
        self, name: str, version: str, request: OipRequest, ctx: GrpsContext
    ) -> tuple[ModelEntry, InferRequest]:
        try:
            entry = self.executor.catalog.entry(name, version)  # not self.entry: runs per request
        except ModelNotFound:
            entry = self.entry(name, version)  # ModelNotReady while it is being unloaded
        if request.parameters:
            _check_parameters(entry, request.parameters)
        if request.outputs:
            known = {spec.name for spec in entry.outputs}
            for wanted in request.outputs:
                if known and wanted.name not in known:
                    raise InvalidInput(_unknown_output(wanted.name, entry, sorted(known)))
        if entry.takes_messages:
            messages_can_carry(request.inputs)
        payload = Payload(PayloadKind.TENSORS, request.inputs)
        return entry, InferRequest(payload, ctx, entry.key, ctx.request_id, self.protocol)

    async def infer(self, name: str, version: str, request: OipRequest, ctx: GrpsContext) -> OipResponse:
        entry, infer_request = self._prepare(name, version, request, ctx)
        response = await self.executor.infer(infer_request)
        return self._response(entry, request, response.payload)

    async def infer_stream(
        self, name: str, version: str, request: OipRequest, ctx: GrpsContext
    ) -> AsyncIterator[OipResponse]:
        """One OipResponse per message the model streams (its answer when it streams none).

        `ctx` must be a streaming context (`context(..., streaming=True)`)."""
        entry, infer_request = self._prepare(name, version, request, ctx)
        async for response in self.executor.infer_stream(infer_request):
            yield self._response(entry, request, response.payload)

    def _response(self, entry: ModelEntry, request: OipRequest, payload: Payload) -> OipResponse:
        outputs = self._tensors(entry, payload)
        if request.outputs:
            by_name = {t.name: t for t in outputs}
            missing = [w.name for w in request.outputs if w.name not in by_name]
            if missing:
                raise InvalidInput(_unknown_output(missing[0], entry, list(by_name)))
            outputs = [
                _classified(entry, w, by_name[w.name]) if w.classification else by_name[w.name]
                for w in request.outputs
            ]
        return OipResponse(entry.name, entry.version, outputs, id=request.id)

    def _tensors(self, entry: ModelEntry, payload: Payload) -> list[Tensor]:
        """A model's answer as OIP output tensors: tensors as they are, text or bytes as one BYTES element."""
        kind = payload.kind
        if kind is PayloadKind.MESSAGE:
            return self._tensors(entry, self.executor.bridge.from_message(payload.value))
        if kind is PayloadKind.TENSORS:  # a named numpy tensor is already one (the usual answer)
            return [
                t
                if t.name and type(t.data) is np.ndarray
                else Tensor(t.name or f"{_DEFAULT_OUTPUT}_{i}", t.array)
                for i, t in enumerate(payload.value)
            ]
        name = entry.outputs[0].name if entry.outputs else _DEFAULT_OUTPUT
        if kind is PayloadKind.TEXT:
            return [Tensor(name, _one_bytes(payload.value.encode()))]
        if kind is PayloadKind.BYTES:
            return [Tensor(name, _one_bytes(bytes(payload.value)))]
        if kind is PayloadKind.EMPTY:
            return []
        raise ModelError(
            f"model '{entry.name}' answered a gmap, which OIP cannot carry; return tensors, text or bytes"
        )


_MAX_INT_PARAMETER = 10**MAX_DECIMAL_DIGITS - 1  # as the HTTP controls (Grps-Timeout-Us) allow


def _check_parameters(entry: ModelEntry, parameters: dict[str, Any]) -> None:
    """Refuse what the server would otherwise ignore: a sequence's parameters sent to a model that takes
    no sequences (its answers would silently lose the sequence's state), and Triton's reserved keys."""
    if entry.sequence_batching is None:
        for key in SEQUENCE_PARAMETERS:
            if key in parameters:
                raise InvalidInput(
                    f"parameter '{key}': model '{entry.name}' has no sequence batching, so it cannot run "
                    "a request as part of a sequence"
                )
    for key in parameters:
        if key.startswith(TRITON_PREFIX) and key != EMPTY_FINAL_RESPONSE:
            raise InvalidInput(
                f"parameter '{shown(key, 64)}': keys starting with '{TRITON_PREFIX}' are reserved; the only "
                f"one a client may send is '{EMPTY_FINAL_RESPONSE}'"
            )


def _classified(entry: ModelEntry, wanted: RequestedOutput, tensor: Tensor) -> Tensor:
    """The output as its top classes (Triton's classification extension), labelled from its label file."""
    spec = next((s for s in entry.outputs if s.name == wanted.name), None)
    labels = spec.labels if spec is not None else ()
    array = classify(wanted.name, tensor.array, wanted.classification, entry.max_batch_size > 0, labels)
    return Tensor(wanted.name, array)


MAX_CONFIG_CHARS = 1 << 20  # a model entry is a few hundred bytes; this bounds a hostile one


def _config_entry(value: object) -> dict[str, Any]:
    """`parameters.config`: a JSON object, sent as a string (Triton's clients) or as an object."""
    if isinstance(value, str):
        if len(value) > MAX_CONFIG_CHARS:
            raise InvalidInput(f"parameter 'config' is longer than {MAX_CONFIG_CHARS} characters")
        try:
            value = orjson.loads(value)
        except orjson.JSONDecodeError as exc:
            raise InvalidInput(f"parameter 'config' is not JSON: {shown(str(exc), 200)}") from None
    if not isinstance(value, dict):
        raise InvalidInput("parameter 'config' must be a JSON object: one model entry, as in inference.yml")
    return value


def cuda_shared_memory() -> Unsupported:
    """The answer to every CUDA shared-memory route and rpc."""
    return Unsupported(CUDA_SHARED_MEMORY)


def _int_parameter(parameters: dict[str, Any], name: str) -> int:
    """`timeout` or `priority`: an integer (JSON number, protobuf int64/uint64), 0 to 10**18 - 1."""
    value = parameters.get(name, 0)
    if type(value) is not int or not 0 <= value <= _MAX_INT_PARAMETER:
        raise InvalidInput(
            f"parameter '{name}' must be a non-negative integer of at most {MAX_DECIMAL_DIGITS} digits, "
            f"not {_shown_value(value)}"
        )
    return value


def _shown_value(value: object) -> str:
    """A parameter's value for a message: a string quoted and `shown`, anything else as repr shows it."""
    return f"'{shown(value, 40)}'" if isinstance(value, str) else shown(repr(value), 40)


def _one_bytes(value: bytes) -> np.ndarray[Any, Any]:
    array = np.empty(1, dtype=object)
    array[0] = value
    return array


def _unknown_output(name: str, entry: ModelEntry, known: list[str]) -> str:
    return (
        f"unknown output '{shown(name)}' requested from model '{entry.name}'; its outputs: {', '.join(known)}"
    )

"""grps.protos.v1.GrpsService: the grps API over gRPC, unary and server streaming."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import TypeAlias

import grpc

from grps_py.access import AccessGuard
from grps_py.codecs import grps_pb
from grps_py.codecs.pb_wire import SerializedWithRaw
from grps_py.core.context import GrpsContext
from grps_py.core.executor import Executor
from grps_py.core.protection import LimitsSettings
from grps_py.core.telemetry import GRPS_GRPC
from grps_py.core.types import InferRequest, PayloadKind
from grps_py.grpc.boundary import priority_of, rpc_boundary
from grps_py.protos import grps_pb2

Msg = grps_pb2.GrpsMessage
_BIN_DATA = Msg.DESCRIPTOR.fields_by_name["bin_data"].number
Ctx: TypeAlias = grpc.aio.ServicerContext
_ENDING: set[asyncio.Task[None]] = set()  # aborts of stalled RPCs still under way (a reference each)


def _failure(code: int, msg: str) -> Msg:
    """How grps answers a failed request: status OK, and the envelope FAILURE with the HTTP status."""
    reply = Msg()
    reply.status.code = code
    reply.status.msg = msg
    reply.status.status = grps_pb2.Status.FAILURE
    return reply


def _ok(message: Msg | None = None) -> Msg:
    reply = message if message is not None else Msg()
    reply.status.code = 200
    reply.status.msg = "OK"
    reply.status.status = grps_pb2.Status.SUCCESS
    return reply


def end_stalled_rpc(context: Ctx, rid: str, stall_s: float) -> Callable[[], None]:
    """What ends the streaming RPC running in the current task once its client has read nothing for
    `stall_s` (limits.stream_stall_timeout_s), to be called on the loop.

    grpc.aio waits for HTTP/2 flow control before it takes the next message, so the task is then stuck in
    grpc's write. The RPC is aborted with DEADLINE_EXCEEDED (the client gets that status after whatever
    it still reads: grpc sends it behind the messages in flight) and the task is cancelled, which ends the
    handler: its stream, the model's request, and its record (a client that went away)."""
    task = asyncio.current_task()
    details = f"the client did not read for {stall_s:g} s (limits.stream_stall_timeout_s) [request_id={rid}]"

    def end() -> None:
        ending = asyncio.ensure_future(_abort(context, details))
        _ENDING.add(ending)
        ending.add_done_callback(_ENDING.discard)
        if task is not None:
            task.cancel()  # after the abort has begun: the cancellation reaches the task later

    return end


async def _abort(context: Ctx, details: str) -> None:
    with contextlib.suppress(Exception):  # AbortError, always; or the call ended meanwhile
        await context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, details)


class GrpsService:
    """Implements every rpc of grps_pb2_grpc.GrpsServiceServicer (each wrapped by the boundary, which
    supplies the request id, so the signatures differ from the generated base and it is not subclassed).

    A failed request is answered as grps answers it, which is what grps clients check: gRPC status OK
    and `status {status: FAILURE, code: <HTTP status of the error table>, msg: <short message>}`; a
    stream sends the messages it had, then that one. The boundary does it (`failure_answer`), and still
    records the failure with its status. Refused callers, gRPC's own limits, a stalled stream and a
    client's own deadline or cancel keep their gRPC status codes."""

    SERVICE = grps_pb2.DESCRIPTOR.services_by_name["GrpsService"]
    PROTOCOL = GRPS_GRPC
    INFERENCE_RPCS = frozenset({"Predict", "PredictStreaming"})
    ADMIN_RPCS = frozenset({"Online", "Offline"})  # loopback callers or the admin token (the boundary checks)

    failure_answer = staticmethod(_failure)

    def __init__(self, executor: Executor, guard: AccessGuard, limits: LimitsSettings) -> None:
        self.executor = executor
        self.guard = guard
        self.limits = limits

    def model_key(self, request: Msg) -> str:
        return self.executor.model_key(request.model)

    def client_request_id(self, request: Msg) -> str:
        return ""

    def _request(self, message: Msg, context: Ctx, rid: str, streaming: bool) -> InferRequest:
        ctx = GrpsContext(
            streaming=streaming,
            deadline_s=context.time_remaining(),
            request_id=rid,
            priority=priority_of(context),
        )
        payload = grps_pb.message_to_payload(message, self.limits)
        return InferRequest(payload, ctx, message.model, rid, self.PROTOCOL)

    @rpc_boundary
    async def Predict(self, request: Msg, context: Ctx, rid: str) -> Msg | SerializedWithRaw:
        response = await self.executor.infer(self._request(request, context, rid, streaming=False))
        payload = response.payload
        if payload.kind is PayloadKind.BYTES:  # appended to the reply as it is, not copied into it
            return SerializedWithRaw(_ok(), _BIN_DATA, [payload.value])
        return _ok(grps_pb.payload_to_message(payload, Msg()))

    @rpc_boundary
    async def PredictStreaming(self, request: Msg, context: Ctx, rid: str) -> AsyncIterator[Msg]:
        infer_request = self._request(request, context, rid, streaming=True)
        stall_s = self.limits.stream_stall_timeout_s
        infer_request.context.on_stall(end_stalled_rpc(context, rid, stall_s))
        async for response in self.executor.infer_stream(infer_request):
            yield _ok(grps_pb.payload_to_message(response.payload, Msg()))

    @rpc_boundary
    async def Online(self, request: Msg, context: Ctx, rid: str) -> Msg:
        self.executor.online()
        return _ok()

    @rpc_boundary
    async def Offline(self, request: Msg, context: Ctx, rid: str) -> Msg:
        self.executor.offline()
        return _ok()

    @rpc_boundary
    async def CheckLiveness(self, request: Msg, context: Ctx, rid: str) -> Msg:
        return _ok()

    @rpc_boundary
    async def CheckReadiness(self, request: Msg, context: Ctx, rid: str) -> Msg:
        """Not ready is an answer, not an RPC error: status OK with a FAILURE envelope (as grps)."""
        if self.executor.is_ready():
            return _ok()
        return _failure(503, "server is offline" if self.executor.is_loaded else "models are loading")

    @rpc_boundary
    async def ServerMetadata(self, request: Msg, context: Ctx, rid: str) -> Msg:
        return _ok(Msg(str_data=self.executor.server_metadata()))

    @rpc_boundary
    async def ModelMetadata(self, request: Msg, context: Ctx, rid: str) -> Msg:
        """An unknown model is an answer too: FAILURE 404 (as grps), an empty name FAILURE 400."""
        return _ok(Msg(str_data=self.executor.model_metadata(request.str_data or request.model)))

"""inference.GRPCInferenceService: the Open Inference Protocol over gRPC, with Triton's extensions
that tritonclient uses (ModelConfig, the bidirectional ModelStreamInfer, the model repository, system
shared memory). The repository's load and unload and the shared-memory rpcs are admin rpcs (the admin
token, or a loopback peer without one), as over HTTP; the CUDA ones answer UNIMPLEMENTED."""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeAlias

import grpc

from grps_py.access import AccessGuard
from grps_py.codecs import oip_pb
from grps_py.codecs.oip_shared_memory import OutputPlaces, read_inputs
from grps_py.codecs.pb_wire import SerializedWithRaw
from grps_py.core import request_scope
from grps_py.core.context import GrpsContext
from grps_py.core.dataplane import OipDataplane, cuda_shared_memory
from grps_py.core.errors import GrpsError, Unsupported
from grps_py.core.executor import Executor, StallWatch
from grps_py.core.oip import EMPTY_FINAL_RESPONSE, FINAL_RESPONSE, OipRequest, OipResponse
from grps_py.core.protection import LimitsSettings
from grps_py.core.telemetry import OIP_GRPC
from grps_py.grpc.boundary import rpc_boundary, rpc_info
from grps_py.grpc.grps_service import end_stalled_rpc
from grps_py.grpc.oip_statistics import StatisticsRpcs
from grps_py.lifecycle import INFERENCE, RequestLifecycle, log_failure
from grps_py.protos import open_inference_pb2 as pb

log = logging.getLogger("grps_py.grpc")
Ctx: TypeAlias = grpc.aio.ServicerContext
_DONE = object()  # one request of a stream has sent its last response
_READ_END = object()  # the client closed its side of the stream


class OipService(StatisticsRpcs):
    """Implements GRPCInferenceService (each rpc wrapped by the boundary, which supplies the request id)."""

    SERVICE = pb.DESCRIPTOR.services_by_name["GRPCInferenceService"]
    PROTOCOL = OIP_GRPC
    INFERENCE_RPCS = frozenset({"ModelInfer", "ModelStreamInfer"})
    # Tensor bytes stay views into the received request (codecs/pb_wire.py): no copy on the way in.
    RAW_BYTES_FIELDS = {"ModelInfer": "raw_input_contents", "ModelStreamInfer": "raw_input_contents"}
    # A region maps memory of this host: who may register one may read and write it.
    ADMIN_RPCS = frozenset(
        {
            "RepositoryModelLoad",
            "RepositoryModelUnload",
            "SystemSharedMemoryStatus",
            "SystemSharedMemoryRegister",
            "SystemSharedMemoryUnregister",
        }
    )

    def __init__(self, executor: Executor, guard: AccessGuard, limits: LimitsSettings) -> None:
        self.executor = executor
        self.guard = guard
        self.limits = limits
        self.dataplane = OipDataplane(executor, OIP_GRPC)

    def model_key(self, request: pb.ModelInferRequest) -> str:
        try:
            return self.executor.catalog.entry(request.model_name, request.model_version).key
        except GrpsError:
            return ""

    def client_request_id(self, request: pb.ModelInferRequest) -> str:
        return request.id

    @rpc_boundary
    async def ServerLive(self, request: Any, context: Ctx, rid: str) -> pb.ServerLiveResponse:
        return pb.ServerLiveResponse(live=self.dataplane.is_live())

    @rpc_boundary
    async def ServerReady(self, request: Any, context: Ctx, rid: str) -> pb.ServerReadyResponse:
        return pb.ServerReadyResponse(ready=self.dataplane.is_ready())

    @rpc_boundary
    async def ModelReady(
        self, request: pb.ModelReadyRequest, context: Ctx, rid: str
    ) -> pb.ModelReadyResponse:
        return pb.ModelReadyResponse(ready=self.dataplane.model_ready(request.name, request.version))

    @rpc_boundary
    async def ServerMetadata(self, request: Any, context: Ctx, rid: str) -> pb.ServerMetadataResponse:
        return pb.ServerMetadataResponse(**self.dataplane.server_metadata())

    @rpc_boundary
    async def ModelMetadata(
        self, request: pb.ModelMetadataRequest, context: Ctx, rid: str
    ) -> pb.ModelMetadataResponse:
        entry, versions = self.dataplane.model_metadata(request.name, request.version)
        return oip_pb.encode_model_metadata(entry, versions)

    @rpc_boundary
    async def ModelConfig(
        self, request: pb.ModelConfigRequest, context: Ctx, rid: str
    ) -> pb.ModelConfigResponse:
        return oip_pb.encode_model_config(self.dataplane.model_config(request.name, request.version))

    @rpc_boundary
    async def RepositoryIndex(
        self, request: pb.RepositoryIndexRequest, context: Ctx, rid: str
    ) -> pb.RepositoryIndexResponse:
        _no_repository_name(request.repository_name)
        index = self.dataplane.repository_index(request.ready)
        return pb.RepositoryIndexResponse(models=[pb.RepositoryIndexResponse.ModelIndex(**m) for m in index])

    @rpc_boundary
    async def RepositoryModelLoad(
        self, request: pb.RepositoryModelLoadRequest, context: Ctx, rid: str
    ) -> pb.RepositoryModelLoadResponse:
        _no_repository_name(request.repository_name)
        await self.dataplane.load(request.model_name, oip_pb.repository_parameters(request.parameters))
        return pb.RepositoryModelLoadResponse()

    @rpc_boundary
    async def RepositoryModelUnload(
        self, request: pb.RepositoryModelUnloadRequest, context: Ctx, rid: str
    ) -> pb.RepositoryModelUnloadResponse:
        _no_repository_name(request.repository_name)
        await self.dataplane.unload(request.model_name, oip_pb.repository_parameters(request.parameters))
        return pb.RepositoryModelUnloadResponse()

    @rpc_boundary
    async def SystemSharedMemoryStatus(
        self, request: pb.SystemSharedMemoryStatusRequest, context: Ctx, rid: str
    ) -> pb.SystemSharedMemoryStatusResponse:
        regions = self.dataplane.shared_memory.status(request.name)
        reply = pb.SystemSharedMemoryStatusResponse()
        for region in regions:
            reply.regions[region["name"]].CopyFrom(pb.SystemSharedMemoryStatusResponse.RegionStatus(**region))
        return reply

    @rpc_boundary
    async def SystemSharedMemoryRegister(
        self, request: pb.SystemSharedMemoryRegisterRequest, context: Ctx, rid: str
    ) -> pb.SystemSharedMemoryRegisterResponse:
        self.dataplane.shared_memory.register(request.name, request.key, request.offset, request.byte_size)
        return pb.SystemSharedMemoryRegisterResponse()

    @rpc_boundary
    async def SystemSharedMemoryUnregister(
        self, request: pb.SystemSharedMemoryUnregisterRequest, context: Ctx, rid: str
    ) -> pb.SystemSharedMemoryUnregisterResponse:
        self.dataplane.shared_memory.unregister(request.name)
        return pb.SystemSharedMemoryUnregisterResponse()

    @rpc_boundary
    async def CudaSharedMemoryStatus(
        self, request: Any, context: Ctx, rid: str
    ) -> pb.CudaSharedMemoryStatusResponse:
        raise cuda_shared_memory()

    @rpc_boundary
    async def CudaSharedMemoryRegister(
        self, request: Any, context: Ctx, rid: str
    ) -> pb.CudaSharedMemoryRegisterResponse:
        raise cuda_shared_memory()

    @rpc_boundary
    async def CudaSharedMemoryUnregister(
        self, request: Any, context: Ctx, rid: str
    ) -> pb.CudaSharedMemoryUnregisterResponse:
        raise cuda_shared_memory()

    def _decode(self, request: pb.ModelInferRequest) -> tuple[OipRequest, OutputPlaces]:
        """The request, its shared-memory inputs read, and where its shared-memory outputs go."""
        oip_request = oip_pb.decode_infer_request(request, self.limits)
        return oip_request, read_inputs(oip_request, self.dataplane.shared_memory, self.limits)

    @rpc_boundary
    async def ModelInfer(self, request: pb.ModelInferRequest, context: Ctx, rid: str) -> SerializedWithRaw:
        oip_request, places = self._decode(request)
        ctx = self.dataplane.context(oip_request, rid, context.time_remaining())
        # A client that cancels is told to the model by the executor (if_disconnected()).
        response = await self.dataplane.infer(request.model_name, request.model_version, oip_request, ctx)
        places.place(response)
        return oip_pb.encode_infer_reply(response)

    @rpc_boundary
    async def ModelStreamInfer(
        self, requests: AsyncIterator[tuple[pb.ModelInferRequest, int]], context: Ctx, rid: str
    ) -> AsyncIterator[bytes]:
        """Requests of one stream run concurrently; their (serialized) responses interleave as they come.
        Each request is named by its OIP `id`, else `<stream id>.<n>`, and gets a record of its own.

        Bounded by `limits.stream_buffer_messages` (N): at most N requests run at once (the next one is
        not read until one ends: a client that sends faster waits on HTTP/2 flow control) and at most N
        responses wait for the client (a request's next one waits). A response the client has not taken
        within `limits.stream_stall_timeout_s` ends the RPC (DEADLINE_EXCEEDED) and cancels its requests."""
        limits = self.limits
        queue: asyncio.Queue[Any] = asyncio.Queue()  # responses (<= N, by `room`), _DONE, _READ_END
        room = asyncio.Semaphore(limits.stream_buffer_messages)  # responses that may wait in `queue`
        running = asyncio.Semaphore(limits.stream_buffer_messages)  # requests that may run at once
        tasks: set[asyncio.Task[None]] = set()
        numbers = itertools.count(1)
        started = 0

        async def send(data: bytes) -> None:
            await room.acquire()
            queue.put_nowait(data)

        def done() -> None:
            queue.put_nowait(_DONE)
            running.release()

        async def read() -> None:
            nonlocal started
            try:
                stream = aiter(requests)
                while True:
                    await running.acquire()  # released by the request's task, when it ends
                    try:
                        message, size = await anext(stream)
                    except StopAsyncIteration:
                        return
                    number = next(numbers)
                    rid_n = request_scope.client_request_id(message.id) or f"{rid}.{number}"
                    task = asyncio.ensure_future(self._serve(message, size, context, rid_n, send, done))
                    started += 1
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)
            finally:
                queue.put_nowait(_READ_END)  # after every request has its task

        stall_s = limits.stream_stall_timeout_s
        end = end_stalled_rpc(context, rid, stall_s)

        def stalled() -> None:
            log.info(
                "ModelStreamInfer: the client did not read for %ss (limits.stream_stall_timeout_s)", stall_s
            )
            end()

        watch = StallWatch(asyncio.get_running_loop(), stall_s, stalled)
        reader = asyncio.ensure_future(read())
        reading, finished = True, 0
        try:
            while reading or finished < started:
                item = await queue.get()
                if item is _READ_END:
                    reading = False
                elif item is _DONE:
                    finished += 1
                else:
                    watch.handed()
                    yield item
                    watch.taken()
                    room.release()
        finally:
            watch.close()
            reader.cancel()
            for task in list(tasks):
                task.cancel()
        await reader  # a request the stream could not parse fails the stream

    async def _serve(
        self,
        message: pb.ModelInferRequest,
        size: int,
        context: Ctx,
        rid: str,
        send: Callable[[bytes], Awaitable[None]],
        done: Callable[[], None],
    ) -> None:
        """Run one request of a stream; every message the model streams becomes one response."""
        request_scope.enter(rid)  # this task's log lines
        info = rpc_info(self, "ModelStreamInfer")
        call = RequestLifecycle(self.executor.telemetry, info.protocol, info.route, INFERENCE, rid)
        call.bytes_in = size
        call.start(self.model_key(message))
        ctx: GrpsContext | None = None

        async def respond(response: pb.ModelStreamInferResponse) -> None:
            data = response.SerializeToString()
            call.bytes_out += len(data)
            await send(data)

        try:
            request, places = self._decode(message)
            ctx = self.dataplane.context(request, rid, context.time_remaining(), streaming=True)
            await self._stream_responses(message, request, ctx, places, respond)
        except asyncio.CancelledError:
            call.cancel()
            if ctx is not None:
                ctx.cancel()
            raise
        except Exception as exc:
            call.fail(exc)
            log_failure(log, "ModelStreamInfer", exc)
            await respond(pb.ModelStreamInferResponse(error_message=call.public_error(exc)))
        finally:
            call.finish()
            done()

    async def _stream_responses(
        self,
        message: pb.ModelInferRequest,
        request: OipRequest,
        ctx: GrpsContext,
        places: OutputPlaces,
        send: Callable[[pb.ModelStreamInferResponse], Awaitable[None]],
    ) -> None:
        """Each response carries `triton_final_response`. With `triton_enable_empty_final_response` the
        end is an empty response; otherwise each response is held until the next one comes, so the last
        real one can carry the final flag."""
        name, version = message.model_name, message.model_version
        empty_final = request.parameters.get(EMPTY_FINAL_RESPONSE) is True
        held: OipResponse | None = None
        async for response in self.dataplane.infer_stream(name, version, request, ctx):
            places.place(response)  # each response of the request overwrites the last one's
            if empty_final:
                await send(_stream_response(response, final=False))
                continue
            if held is not None:
                await send(_stream_response(held, final=False))
            held = response
        if held is None:
            entry = self.dataplane.entry(name, version)
            held = OipResponse(entry.name, entry.version, [], id=request.id)
        await send(_stream_response(held, final=True))


def _stream_response(response: OipResponse, final: bool) -> pb.ModelStreamInferResponse:
    response.parameters[FINAL_RESPONSE] = final
    return pb.ModelStreamInferResponse(infer_response=oip_pb.encode_infer_response(response))


def _no_repository_name(name: str) -> None:
    """One repository per server (its inference.yml): a client naming another is refused."""
    if name:
        raise Unsupported("'repository_name' specification is not supported")

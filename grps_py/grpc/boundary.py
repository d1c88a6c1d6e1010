"""The one gRPC error boundary, applied to every RPC (unary, server streaming and bidirectional).

A core error aborts the call with its real status code and a short message that carries the
request id; anything unexpected is logged with its traceback and answers INTERNAL.

The boundary also owns the wire bytes: RPCs are registered raw (`grpc/server.py`), so it parses the
request and serializes each answer itself and knows their sizes without serializing twice. It names
the request (`x-request-id` metadata, an OIP `id`, or a new id), returns that id in the trailing
metadata, sets it for the request's log lines, and hands one `RequestRecord` per request to the
executor's telemetry. On a bidirectional stream (ModelStreamInfer) each request on the stream gets
its own record, made by the service with a `CallRecord`; the stream itself gets none.

Access is checked here too, before the request is parsed: admin RPCs (Online/Offline) need the admin
token or a loopback peer, inference RPCs an inference token when tokens are configured
(`authorization: Bearer <token>` metadata); refusals answer UNAUTHENTICATED or PERMISSION_DENIED.
"""

from __future__ import annotations

import functools
import inspect
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import grpc
from google.protobuf import message_factory
from google.protobuf.descriptor import ServiceDescriptor
from google.protobuf.message import DecodeError

from grps_py import status
from grps_py.access_log import log_refused_id
from grps_py.codecs.pb_wire import WithRawField, split_field
from grps_py.core import errors, request_scope, telemetry
from grps_py.core.errors import GrpsError, InvalidInput, ModelError
from grps_py.core.executor import Executor
from grps_py.core.untrusted import MAX_DECIMAL_DIGITS, decimal, shown
from grps_py.http.auth import AccessGuard, grpc_peer_is_local
from grps_py.logs import ACCESS_LOGGER
from grps_py.request_ids import new_request_id

log = logging.getLogger("grps_py.grpc")
client_log = logging.getLogger(ACCESS_LOGGER)  # client mistakes: per request, silent with log.access off
F = TypeVar("F", bound=Callable[..., Any])
Handler = Callable[[Any, grpc.aio.ServicerContext], Any]  # (raw request or requests, context)
BOUNDARY_MARK = "__grps_rpc_boundary__"
_BIND = "__grps_rpc_bind__"
REQUEST_ID_KEY = "x-request-id"
PRIORITY_KEY = "grps-priority"
AUTHORIZATION_KEY = "authorization"
CANCELLED_STATUS = status.ERROR_TABLE[errors.Cancelled].http


class Service(Protocol):
    """What a servicer tells its boundary about itself."""

    executor: Executor
    guard: AccessGuard
    SERVICE: ServiceDescriptor
    PROTOCOL: str  # the telemetry label of its inference RPCs
    INFERENCE_RPCS: frozenset[str]
    ADMIN_RPCS: frozenset[str]

    def model_key(self, request: Any) -> str:
        """The model key an inference request runs under ("" when unknown)."""

    def client_request_id(self, request: Any) -> str:
        """An id the inference request carries in its body (OIP `id`), or ""."""


# Below this, a message is parsed whole: copying its bytes costs less than finding them in Python.
RAW_FIELD_MIN_BYTES = 64 << 10


@dataclass(frozen=True)
class RpcInfo:
    name: str
    route: str  # "/package.Service/Method"
    request_class: Any
    inference: bool
    admin: bool
    protocol: str
    client_streaming: bool
    raw_field: str = ""  # a repeated bytes field kept out of the parsed message (codecs/pb_wire.py)

    def parse(self, raw: bytes) -> Any:
        try:
            if not self.raw_field or len(raw) < RAW_FIELD_MIN_BYTES:
                return self.request_class.FromString(raw)
            number = self.request_class.DESCRIPTOR.fields_by_name[self.raw_field].number
            rest, values = split_field(raw, number)
            return WithRawField(self.request_class.FromString(rest), self.raw_field, values)
        except DecodeError:
            raise InvalidInput(
                f"the {self.name} request is not a valid {self.request_class.DESCRIPTOR.full_name} message"
            ) from None


@functools.cache
def _rpc_info(service_class: type, name: str) -> RpcInfo:
    service: ServiceDescriptor = service_class.SERVICE  # type: ignore[attr-defined]
    method = service.methods_by_name[name]
    inference = name in service_class.INFERENCE_RPCS  # type: ignore[attr-defined]
    return RpcInfo(
        name=name,
        route=f"/{service.full_name}/{name}",
        request_class=message_factory.GetMessageClass(method.input_type),
        inference=inference,
        admin=name in service_class.ADMIN_RPCS,  # type: ignore[attr-defined]
        protocol=service_class.PROTOCOL if inference else "grpc",  # type: ignore[attr-defined]
        client_streaming=method.client_streaming,
        raw_field=getattr(service_class, "RAW_BYTES_FIELDS", {}).get(name, ""),
    )


def rpc_info(service: Service, name: str) -> RpcInfo:
    return _rpc_info(type(service), name)


def metadata_request_id(context: grpc.aio.ServicerContext) -> tuple[str, str]:
    """The request id the client chose in `x-request-id` metadata ("" when none, or when it may not
    name the request), and the value it sent when it may not ("" otherwise: logged by the caller)."""
    for key, value in context.invocation_metadata() or ():
        if key == REQUEST_ID_KEY:
            chosen = request_scope.client_request_id(value)
            return chosen, "" if chosen or not value else str(value)
    return "", ""


def log_failure(exc: BaseException, rpc: str) -> None:
    """Client mistakes at info (in the access log), model failures at warning (the node logged the
    traceback), bugs in full. The line carries the request id of the current scope."""
    if isinstance(exc, ModelError):
        log.warning("%s", exc.public_message)
    elif isinstance(exc, GrpsError):
        client_log.info("%s -> %s", rpc, exc.public_message)
    else:
        log.error("%s failed", rpc, exc_info=exc)


def check_access(service: Service, info: RpcInfo, context: grpc.aio.ServicerContext) -> None:
    """Raise Unauthenticated / PermissionDenied unless the caller may make this RPC (callers skip
    this for open RPCs, so an open server pays nothing)."""
    authorization = None
    for key, value in context.invocation_metadata() or ():
        if key == AUTHORIZATION_KEY and isinstance(value, str):
            authorization = value
    if info.admin:
        service.guard.check_admin(authorization, grpc_peer_is_local(context.peer()))
    else:
        service.guard.check_inference(authorization)


def needs_check(service: Service, info: RpcInfo) -> bool:
    return info.admin or (info.inference and bool(service.guard.inference_tokens))


def priority_of(context: grpc.aio.ServicerContext) -> int:
    """The grps API's priority level from `grps-priority` metadata (0: the model's default): ASCII digits
    only, at most 18, as the HTTP controls (`untrusted.decimal`)."""
    for key, value in context.invocation_metadata() or ():
        if key == PRIORITY_KEY:
            number = decimal(value) if isinstance(value, str) else None
            if number is None:
                raise InvalidInput(
                    f"{PRIORITY_KEY} metadata must be a non-negative integer "
                    f"(0-9, at most {MAX_DECIMAL_DIGITS} digits), not '{shown(value, 40)}'"
                )
            return number
    return 0


class CallRecord:
    """One request's RequestRecord in the making: an RPC, or one request on a bidirectional stream."""

    def __init__(self, service: Service, info: RpcInfo, bytes_in: int, request_id: str, named: bool) -> None:
        self._telemetry = service.executor.telemetry
        self.info = info
        self.request_id = request_id
        self.named = named  # the client chose the id: an OIP `id` does not replace it
        self.bytes_in = bytes_in
        self.bytes_out = 0
        self.model: str | None = None  # set once request_started was reported
        self.status = 200
        self.error: BaseException | None = None
        self._started = time.time()
        self._clock = time.perf_counter()
        self._finished = False

    def announce(self, context: grpc.aio.ServicerContext) -> None:
        """The id for the request's log lines, and for the client in the trailing metadata."""
        request_scope.enter(self.request_id)
        context.set_trailing_metadata(((REQUEST_ID_KEY, self.request_id),))

    def identify(self, service: Service, request: Any, context: grpc.aio.ServicerContext) -> None:
        """An inference request: named by its OIP `id` unless the client named it, and now in flight."""
        if not self.info.inference:
            return
        body_id = "" if self.named else service.client_request_id(request)
        chosen = request_scope.client_request_id(body_id) if body_id else ""
        if chosen:
            self.request_id = chosen
            self.announce(context)
        elif body_id:
            log_refused_id("the request's id", body_id, in_body=True)
        self.start(service.model_key(request))

    def start(self, model_key: str) -> None:
        if self.info.inference and self.model is None:
            self.model = model_key
            self._telemetry.request_started(self.info.protocol, model_key)

    def fail(self, exc: BaseException) -> None:
        self.error = exc
        self.status = status.wire_status(exc).http

    def cancelled(self) -> None:
        self.status = CANCELLED_STATUS

    def finish(self) -> None:
        if self._finished:
            return
        self._finished = True
        if self.info.inference and self.model is None:
            self.start("")  # failed before its model was known: still one start, one finish
        error, status = self.error, self.status
        reason = None if error is None and status < 400 else telemetry.reason_of(error, status)
        self._telemetry.request_finished(
            telemetry.RequestRecord(
                request_id=self.request_id,
                protocol=self.info.protocol,
                route=self.info.route,
                model=self.model or "",
                inference=self.info.inference,
                status=status,
                reason=reason,
                started=self._started,
                duration_s=time.perf_counter() - self._clock,
                bytes_in=self.bytes_in,
                bytes_out=self.bytes_out,
            )
        )


async def _abort(context: grpc.aio.ServicerContext, exc: BaseException, rid: str, rpc: str) -> None:
    log_failure(exc, rpc)
    code = status.wire_status(exc).grpc
    await context.abort(code, f"{status.public_message(exc)} [request_id={rid}]")


def _open(service: Service, info: RpcInfo, raw: bytes, context: grpc.aio.ServicerContext) -> CallRecord:
    rid, refused = metadata_request_id(context)
    call = CallRecord(service, info, len(raw), rid or new_request_id(), named=bool(rid))
    call.announce(context)
    if refused:
        log_refused_id(f"{REQUEST_ID_KEY} metadata", refused)
    return call


async def parsed_requests(
    info: RpcInfo, raw_requests: AsyncIterator[bytes]
) -> AsyncIterator[tuple[Any, int]]:
    """The requests of a client stream, each with its size on the wire."""
    async for raw in raw_requests:
        yield info.parse(raw), len(raw)


def rpc_boundary(method: F) -> F:
    """Wrap a servicer method: (self, request, context, request_id) -> response or async stream, registered
    as raw bytes in and out. A bidirectional method gets (message, size) pairs and yields serialized
    answers (its requests' records are its own).

    The server registers `handler(service, name)`: the RPC with its service and facts bound once. The
    wrapped method itself does the same for whoever calls it directly."""
    rpc = method.__name__
    if inspect.isasyncgenfunction(method):
        bind = _streaming_rpc(method, rpc)

        @functools.wraps(method)
        async def streaming(self: Any, raw: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
            async for data in bind(self)(raw, context):
                yield data

        wrapped: Any = streaming
    else:
        bind = _unary_rpc(method, rpc)

        @functools.wraps(method)
        async def unary(self: Any, raw: bytes, context: grpc.aio.ServicerContext) -> bytes:
            data: bytes = await bind(self)(raw, context)
            return data

        wrapped = unary
    setattr(wrapped, BOUNDARY_MARK, True)
    setattr(wrapped, _BIND, bind)
    return wrapped  # type: ignore[no-any-return]


def handler(service: Service, name: str) -> Handler:
    """The RPC `name` of `service` as the server registers it: a plain function (not a bound method, which
    costs grpc a call more per request to inspect) that looks up nothing per request."""
    bind: Callable[[Service], Handler] = getattr(getattr(type(service), name), _BIND)
    return bind(service)


def _admit(
    service: Service,
    info: RpcInfo,
    checked: bool,
    call: CallRecord,
    raw: Any,
    context: grpc.aio.ServicerContext,
) -> Any:
    """The call's request, parsed, once the caller may make it (`checked`: the RPC needs a token)."""
    if checked:
        check_access(service, info, context)
    request = info.parse(raw)
    call.identify(service, request, context)
    return request


def _unary_rpc(method: Callable[..., Any], rpc: str) -> Callable[[Service], Handler]:
    def bind(service: Service) -> Handler:
        info = rpc_info(service, rpc)
        checked = needs_check(service, info)

        async def unary(raw: bytes, context: grpc.aio.ServicerContext) -> bytes:
            call = _open(service, info, raw, context)
            try:
                request = _admit(service, info, checked, call, raw, context)
                data: bytes = (await method(service, request, context, call.request_id)).SerializeToString()
                call.bytes_out = len(data)
                return data
            except Exception as exc:
                call.fail(exc)
                await _abort(context, exc, call.request_id, rpc)
                raise  # not reached: abort raises
            except BaseException:  # the client cancelled
                call.cancelled()
                raise
            finally:
                call.finish()

        return unary

    return bind


def _streaming_rpc(method: Callable[..., Any], rpc: str) -> Callable[[Service], Handler]:
    def bind(service: Service) -> Handler:
        info = rpc_info(service, rpc)
        checked = needs_check(service, info)

        async def streaming(raw: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
            if info.client_streaming:
                async for data in _bidirectional(method, service, info, raw, context):
                    yield data
                return
            call = _open(service, info, raw, context)
            try:
                request = _admit(service, info, checked, call, raw, context)
                async for item in method(service, request, context, call.request_id):
                    data = item.SerializeToString()
                    call.bytes_out += len(data)
                    yield data
            except Exception as exc:
                call.fail(exc)
                await _abort(context, exc, call.request_id, rpc)
            except BaseException:  # the client cancelled, or the stream was closed
                call.cancelled()
                raise
            finally:
                call.finish()

        return streaming

    return bind


async def _bidirectional(
    method: Callable[..., Any],
    service: Any,
    info: RpcInfo,
    raw_requests: Any,
    context: grpc.aio.ServicerContext,
) -> AsyncIterator[bytes]:
    """A stream of requests: named by `x-request-id` (its requests then `<id>.1`, `<id>.2`, ... unless
    they carry an OIP `id`); a failure of the stream itself aborts it."""
    rid, refused = metadata_request_id(context)
    rid = rid or new_request_id()
    request_scope.enter(rid)
    context.set_trailing_metadata(((REQUEST_ID_KEY, rid),))
    if refused:
        log_refused_id(f"{REQUEST_ID_KEY} metadata", refused)
    try:
        if needs_check(service, info):
            check_access(service, info, context)
        async for data in method(service, parsed_requests(info, raw_requests), context, rid):
            yield data
    except Exception as exc:
        await _abort(context, exc, rid, info.name)

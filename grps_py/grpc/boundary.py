"""The one gRPC error boundary, applied to every RPC (unary, server streaming and bidirectional).

A core error aborts the call with its real status code and a short message that carries the
request id; anything unexpected is logged with its traceback and answers INTERNAL. A service whose
clients read failures from the answer (GrpsService, as grps answers: `failure_answer`) gets, for a
request it let in, status OK and that answer instead (a stream: after the messages already sent);
a refused caller, a client's own deadline or cancel still end the call with their gRPC status.

The boundary also owns the wire bytes: RPCs are registered raw (`grpc/server.py`), so it parses the
request and serializes each answer itself and knows their sizes without serializing twice. It names
the request (`x-request-id` metadata, an OIP `id`, or a new id), returns that id in the trailing
metadata, sets it for the request's log lines, and hands one `RequestRecord` per request to the
executor's telemetry, all through the request's `RequestLifecycle` (grps_py/lifecycle.py), as HTTP does.
On a bidirectional stream (ModelStreamInfer) each request on the stream gets a lifecycle of its own
(`open_call`, by the service); the stream itself gets no record.

Access is checked here too, before the request is parsed: admin RPCs (Online/Offline) need the admin
token or a loopback peer, inference RPCs an inference token when tokens are configured
(`authorization: Bearer <token>` metadata); refusals answer UNAUTHENTICATED or PERMISSION_DENIED.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import grpc
from google.protobuf import message_factory
from google.protobuf.descriptor import ServiceDescriptor
from google.protobuf.message import DecodeError

from grps_py import status
from grps_py.access import AccessGuard, grpc_peer_is_local
from grps_py.codecs.pb_wire import WithRawField, split_field
from grps_py.core import request_scope
from grps_py.core.errors import Cancelled, DeadlineExceeded, InvalidInput
from grps_py.core.executor import Executor
from grps_py.core.untrusted import MAX_DECIMAL_DIGITS, decimal, shown
from grps_py.lifecycle import ADMIN, INFERENCE, OPEN, RequestLifecycle, log_failure, needs_check

log = logging.getLogger("grps_py.grpc")
F = TypeVar("F", bound=Callable[..., Any])
Handler = Callable[[Any, grpc.aio.ServicerContext], Any]  # (raw request or requests, context)
BOUNDARY_MARK = "__grps_rpc_boundary__"
_BIND = "__grps_rpc_bind__"
REQUEST_ID_KEY = "x-request-id"
PRIORITY_KEY = "grps-priority"
AUTHORIZATION_KEY = "authorization"


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
    access: str  # lifecycle.OPEN, INFERENCE or ADMIN
    protocol: str
    client_streaming: bool
    raw_field: str = ""  # a repeated bytes field kept out of the parsed message (codecs/pb_wire.py)
    # (HTTP status, message) -> the answer that reports a failed request with status OK, for a service
    # whose clients read failures from the answer (grps's GrpsService); None: failures abort the call.
    failure_answer: Callable[[int, str], Any] | None = None

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
    admin = name in service_class.ADMIN_RPCS  # type: ignore[attr-defined]
    return RpcInfo(
        name=name,
        route=f"/{service.full_name}/{name}",
        request_class=message_factory.GetMessageClass(method.input_type),
        access=INFERENCE if inference else ADMIN if admin else OPEN,
        protocol=service_class.PROTOCOL if inference else "grpc",  # type: ignore[attr-defined]
        client_streaming=method.client_streaming,
        raw_field=getattr(service_class, "RAW_BYTES_FIELDS", {}).get(name, ""),
        failure_answer=getattr(service_class, "failure_answer", None),
    )


def rpc_info(service: Service, name: str) -> RpcInfo:
    return _rpc_info(type(service), name)


def sent_request_id(context: grpc.aio.ServicerContext) -> str | None:
    """The `x-request-id` metadata the client sent, if any (the lifecycle decides whether it may name
    the request)."""
    for key, value in context.invocation_metadata() or ():
        if key == REQUEST_ID_KEY:
            return str(value)
    return None


def check_access(service: Service, call: RequestLifecycle, context: grpc.aio.ServicerContext) -> None:
    """Raise Unauthenticated / PermissionDenied unless the caller may make this RPC (callers skip
    this when `call.needs_check`, so an open server pays nothing)."""
    authorization = None
    for key, value in context.invocation_metadata() or ():
        if key == AUTHORIZATION_KEY and isinstance(value, str):
            authorization = value
    call.admit(service.guard, authorization, grpc_peer_is_local(context.peer()))


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


async def abort(context: grpc.aio.ServicerContext, call: RequestLifecycle, exc: BaseException) -> None:
    """The error boundary: log why, then end the RPC with the status of the one error table."""
    call.fail(exc)
    log_failure(log, call.route.rpartition("/")[2], exc)
    await context.abort(status.wire_status(exc).grpc, call.public_error(exc))


def answers_failure(info: RpcInfo, context: grpc.aio.ServicerContext, exc: BaseException) -> bool:
    """Whether the failure of an admitted request is answered (status OK, the service's failure
    message) rather than aborted. A client's own deadline or cancel stays a gRPC status: the client
    reads those from its call, whatever a late answer would say."""
    if info.failure_answer is None or isinstance(exc, Cancelled):
        return False
    return not (isinstance(exc, DeadlineExceeded) and context.time_remaining() is not None)


def failure_data(info: RpcInfo, call: RequestLifecycle, exc: BaseException) -> bytes:
    """The serialized failure answer, the failure logged and recorded as `abort` would."""
    http_status = call.fail(exc)
    log_failure(log, info.name, exc)
    assert info.failure_answer is not None
    data: bytes = info.failure_answer(http_status, call.public_error(exc)).SerializeToString()
    call.bytes_out += len(data)
    return data


def announce(call: RequestLifecycle, context: grpc.aio.ServicerContext) -> None:
    """The id for the request's log lines, and for the client in the trailing metadata."""
    request_scope.enter(call.request_id)
    context.set_trailing_metadata(((REQUEST_ID_KEY, call.request_id),))


def open_call(
    service: Service, info: RpcInfo, context: grpc.aio.ServicerContext, sent_id: str | None = None
) -> RequestLifecycle:
    """A request's lifecycle: named by its `x-request-id` metadata (or `sent_id`, a stream's id for one
    of its requests), announced, a refused id logged."""
    if sent_id is None:
        sent_id = sent_request_id(context)
    call = RequestLifecycle(service.executor.telemetry, info.protocol, info.route, info.access, sent_id)
    announce(call, context)
    call.log_refused_id(f"{REQUEST_ID_KEY} metadata")
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
    service: Service, info: RpcInfo, call: RequestLifecycle, raw: Any, context: grpc.aio.ServicerContext
) -> Any:
    """The call's request, parsed (the caller was let in); an inference request is then named by its
    OIP `id` (unless the client named it) and started."""
    request = info.parse(raw)
    if info.access == INFERENCE:
        if call.adopt(service.client_request_id(request)):
            announce(call, context)
        call.start(service.model_key(request))
    return request


def _unary_rpc(method: Callable[..., Any], rpc: str) -> Callable[[Service], Handler]:
    def bind(service: Service) -> Handler:
        info = rpc_info(service, rpc)
        checked = needs_check(info.access, service.guard)

        async def unary(raw: bytes, context: grpc.aio.ServicerContext) -> bytes:
            call = open_call(service, info, context)
            call.bytes_in = len(raw)
            admitted = False
            try:
                if checked:
                    check_access(service, call, context)
                admitted = True
                request = _admit(service, info, call, raw, context)
                data: bytes = (await method(service, request, context, call.request_id)).SerializeToString()
                call.bytes_out = len(data)
                return data
            except Exception as exc:
                if admitted and answers_failure(info, context, exc):
                    return failure_data(info, call, exc)
                await abort(context, call, exc)
                raise  # not reached: abort raises
            except BaseException:  # the client cancelled
                call.cancel()
                raise
            finally:
                call.finish()

        return unary

    return bind


def _streaming_rpc(method: Callable[..., Any], rpc: str) -> Callable[[Service], Handler]:
    def bind(service: Service) -> Handler:
        info = rpc_info(service, rpc)
        checked = needs_check(info.access, service.guard)

        async def streaming(raw: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
            if info.client_streaming:
                async for data in _bidirectional(method, service, info, checked, raw, context):
                    yield data
                return
            call = open_call(service, info, context)
            call.bytes_in = len(raw)
            admitted = False
            try:
                if checked:
                    check_access(service, call, context)
                admitted = True
                request = _admit(service, info, call, raw, context)
                async for item in method(service, request, context, call.request_id):
                    data = item.SerializeToString()
                    call.bytes_out += len(data)
                    yield data
            except Exception as exc:
                if admitted and answers_failure(info, context, exc):
                    yield failure_data(info, call, exc)  # after the messages sent; the call ends OK
                else:
                    await abort(context, call, exc)
            except BaseException:  # the client cancelled, or the stream was closed
                call.cancel()
                raise
            finally:
                call.finish()

        return streaming

    return bind


async def _bidirectional(
    method: Callable[..., Any],
    service: Any,
    info: RpcInfo,
    checked: bool,
    raw_requests: Any,
    context: grpc.aio.ServicerContext,
) -> AsyncIterator[bytes]:
    """A stream of requests: named by `x-request-id` (its requests then `<id>.1`, `<id>.2`, ... unless
    they carry an OIP `id`); each of its requests gets a lifecycle of its own (`open_call` with the
    request's id, by the service); the stream itself gets no record. A failure of the stream aborts it."""
    stream = open_call(service, info, context)  # names the stream, which gets no record of its own
    try:
        if checked:
            check_access(service, stream, context)
        async for data in method(service, parsed_requests(info, raw_requests), context, stream.request_id):
            yield data
    except Exception as exc:
        await abort(context, stream, exc)

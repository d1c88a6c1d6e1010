"""The one gRPC error boundary, applied to every RPC (unary and server streaming).

A core error aborts the call with its real status code and a short message that carries the
request id; anything unexpected is logged with its traceback and answers INTERNAL.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

import grpc

from grps_py import status
from grps_py.core.errors import GrpsError, InvalidInput, ModelError
from grps_py.request_ids import new_request_id

log = logging.getLogger("grps_py.grpc")
F = TypeVar("F", bound=Callable[..., Any])
BOUNDARY_MARK = "__grps_rpc_boundary__"


def request_id_of(context: grpc.aio.ServicerContext) -> str:
    for key, value in context.invocation_metadata() or ():
        if key == "x-request-id" and isinstance(value, str) and value.isprintable():
            return value[:64]
    return new_request_id()


def log_failure(exc: BaseException, rid: str, rpc: str) -> None:
    """Client mistakes at info, model failures at warning (the node logged the traceback), bugs in full."""
    if isinstance(exc, ModelError):
        log.warning("request %s: %s", rid, exc.public_message)
    elif isinstance(exc, GrpsError):
        log.info("request %s: %s -> %s", rid, rpc, exc.public_message)
    else:
        log.error("request %s: %s failed", rid, rpc, exc_info=exc)


def priority_of(context: grpc.aio.ServicerContext) -> int:
    """The grps API's priority level from `grps-priority` metadata (0: the model's default)."""
    for key, value in context.invocation_metadata() or ():
        if key == "grps-priority":
            if isinstance(value, str) and value.isdigit():
                return int(value)
            raise InvalidInput(f"grps-priority metadata must be a non-negative integer, not {value!r}")
    return 0


async def _abort(context: grpc.aio.ServicerContext, exc: BaseException, rid: str, rpc: str) -> None:
    log_failure(exc, rid, rpc)
    code = status.wire_status(exc).grpc
    await context.abort(code, f"{status.public_message(exc)} [request_id={rid}]")


def rpc_boundary(method: F) -> F:
    """Wrap a servicer method: (self, request, context, request_id) -> response or async stream."""
    rpc = method.__name__
    if inspect.isasyncgenfunction(method):

        @functools.wraps(method)
        async def streaming(self: Any, request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            rid = request_id_of(context)
            try:
                async for item in method(self, request, context, rid):
                    yield item
            except Exception as exc:
                await _abort(context, exc, rid, rpc)

        setattr(streaming, BOUNDARY_MARK, True)
        return streaming  # type: ignore[return-value]

    @functools.wraps(method)
    async def unary(self: Any, request: Any, context: grpc.aio.ServicerContext) -> Any:
        rid = request_id_of(context)
        try:
            return await method(self, request, context, rid)
        except Exception as exc:
            await _abort(context, exc, rid, rpc)

    setattr(unary, BOUNDARY_MARK, True)
    return unary  # type: ignore[return-value]

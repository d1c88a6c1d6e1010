"""The grps API over gRPC (`grps.protos.v1.GrpsService`), blocking and asyncio; and the model repository
calls of `inference.GRPCInferenceService` (blocking).

A failed request is answered with status OK and a FAILURE envelope (as grps answers); it raises the
same `GrpsClientError` an HTTP answer with that status raises.

The blocking calls share one channel. `grpc.aio` channels belong to the event loop that made them,
so each async stream opens its own and closes it at the end, which also cancels the call when the
caller leaves the stream early. Timeouts are gRPC deadlines: the server sees them as the request's.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable, Generator
from typing import Any

import grpc

from grps_py.client import repository_wire
from grps_py.client.auth import authorization
from grps_py.client.errors import GrpsClientError, deadline_exceeded, grpc_unavailable
from grps_py.client.values import Reply, Request
from grps_py.protos import grps_pb2, grps_pb2_grpc, open_inference_pb2_grpc

__all__ = ["GrpcTransport"]

Msg = grps_pb2.GrpsMessage
# The server bounds message sizes (interface.max_message_bytes); the client adds no smaller limit.
_OPTIONS = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]
AUTHORIZATION_KEY = "authorization"


def _checked(reply: Msg) -> Msg:
    """A reply whose envelope says FAILURE is an error: its `code` is the HTTP status (how grps, and
    grps-py, answer a failed request over gRPC: status OK, the failure in the envelope)."""
    if reply.status.status == grps_pb2.Status.FAILURE:
        raise GrpsClientError.from_status(reply.status.code or 500, reply.status.msg)
    return reply


class GrpcTransport:
    def __init__(self, target: str, token: str | None = None) -> None:
        bearer = authorization(token)  # a token that cannot be sent fails before a channel is opened
        self._admin_metadata = () if bearer is None else ((AUTHORIZATION_KEY, bearer),)
        self.target = target
        self.where = f"{target} (gRPC)"
        self._channel = grpc.insecure_channel(target, options=_OPTIONS)
        self._stub = grps_pb2_grpc.GrpsServiceStub(self._channel)  # type: ignore[no-untyped-call]
        self._oip = open_inference_pb2_grpc.GRPCInferenceServiceStub(self._channel)  # type: ignore[no-untyped-call]

    def _error(self, exc: grpc.RpcError, timeout_s: float | None) -> GrpsClientError:
        """The server's errors carry its request id; a deadline or connection failure without one is
        the client's own, and is worded as the HTTP transport words it."""
        error = GrpsClientError.from_rpc_error(exc)
        if "request_id=" in error.message:
            return error
        if error.code == "DEADLINE_EXCEEDED":
            return deadline_exceeded(self.where, timeout_s)
        if error.code == "UNAVAILABLE":
            return grpc_unavailable(self.where, error.message)
        return error

    def _call(
        self, rpc: Callable[..., Any], message: Any, timeout_s: float | None, admin: bool = False
    ) -> Any:
        """One unary RPC; an admin one carries the admin token, when the client has one."""
        metadata = (self._admin_metadata if admin else ()) or None
        try:
            return rpc(message, timeout=timeout_s, metadata=metadata)
        except grpc.RpcError as exc:
            raise self._error(exc, timeout_s) from exc

    def predict(self, request: Request, timeout_s: float | None) -> Reply:
        return _checked(self._call(self._stub.Predict, request.message(), timeout_s))

    def predict_stream(self, request: Request, timeout_s: float | None) -> Generator[Reply, None, None]:
        call = self._stub.PredictStreaming(request.message(), timeout=timeout_s)
        try:
            for reply in call:
                yield _checked(reply)
        except grpc.RpcError as exc:
            raise self._error(exc, timeout_s) from exc
        finally:
            call.cancel()  # a no-op once the stream has ended; stops the model when left early

    async def predict_stream_async(
        self, request: Request, timeout_s: float | None
    ) -> AsyncGenerator[Reply, None]:
        message = request.message()
        async with grpc.aio.insecure_channel(self.target, options=_OPTIONS) as channel:
            stub = grps_pb2_grpc.GrpsServiceStub(channel)  # type: ignore[no-untyped-call]
            call = stub.PredictStreaming(message, timeout=timeout_s)
            try:
                async for reply in call:
                    yield _checked(reply)
            except grpc.RpcError as exc:
                raise self._error(exc, timeout_s) from exc

    def health(self, action: str, timeout_s: float | None) -> tuple[bool, int, str]:
        """(ok, status, message): readiness answers "not ready" in its envelope, not as an RPC error."""
        rpc = {
            "online": self._stub.Online,
            "offline": self._stub.Offline,
            "live": self._stub.CheckLiveness,
            "ready": self._stub.CheckReadiness,
        }[action]
        status = self._call(rpc, Msg(), timeout_s, admin=action in ("online", "offline")).status
        ok = status.status != grps_pb2.Status.FAILURE
        return ok, status.code or (200 if ok else 503), status.msg or ("OK" if ok else f"not {action}")

    def metadata(self, model: str | None, timeout_s: float | None) -> str:
        if model is None:
            return _checked(self._call(self._stub.ServerMetadata, Msg(), timeout_s)).str_data
        return _checked(self._call(self._stub.ModelMetadata, Msg(str_data=model), timeout_s)).str_data

    def repository_index(self, ready: bool, timeout_s: float | None) -> list[dict[str, str]]:
        request = repository_wire.index_request(ready)
        return repository_wire.index_rows(self._call(self._oip.RepositoryIndex, request, timeout_s, True))

    def load_model(self, name: str, config: str | None, timeout_s: float | None) -> None:
        request = repository_wire.load_request(name, config)
        self._call(self._oip.RepositoryModelLoad, request, timeout_s, admin=True)

    def unload_model(self, name: str, unload_dependents: bool, timeout_s: float | None) -> None:
        request = repository_wire.unload_request(name, unload_dependents)
        self._call(self._oip.RepositoryModelUnload, request, timeout_s, admin=True)

    def close(self) -> None:
        self._channel.close()

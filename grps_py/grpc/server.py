"""Builds the grpc.aio server with every service, bound to the configured port."""

from __future__ import annotations

from typing import Any

import grpc

from grps_py.core.config import ServerSettings
from grps_py.core.executor import Executor
from grps_py.grpc.boundary import Service
from grps_py.grpc.grps_service import GrpsService
from grps_py.grpc.oip_service import OipService

_HANDLER_KINDS: dict[tuple[bool, bool], Any] = {  # (client streaming, server streaming)
    (False, False): grpc.unary_unary_rpc_method_handler,
    (False, True): grpc.unary_stream_rpc_method_handler,
    (True, False): grpc.stream_unary_rpc_method_handler,
    (True, True): grpc.stream_stream_rpc_method_handler,
}


def add_service(server: grpc.aio.Server, servicer: Service) -> None:
    """Register every rpc of the servicer's service with raw bytes in and out (no (de)serializer): its
    boundary parses each request and serializes each answer, so it knows their sizes at no extra cost."""
    handlers = {
        method.name: _HANDLER_KINDS[(method.client_streaming, method.server_streaming)](
            getattr(servicer, method.name)
        )
        for method in servicer.SERVICE.methods
    }
    name = servicer.SERVICE.full_name
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(name, handlers),))
    server.add_registered_method_handlers(name, handlers)


def build_grpc_server(executor: Executor, settings: ServerSettings) -> tuple[grpc.aio.Server, int]:
    """The server (not started) and the port it bound (the real one when configured as 0)."""
    limit = settings.interface.max_message_bytes
    server = grpc.aio.server(
        options=[
            ("grpc.max_send_message_length", limit),
            ("grpc.max_receive_message_length", limit),
            ("grpc.so_reuseport", 0),
        ],
        maximum_concurrent_rpcs=settings.max_connections,
    )
    add_service(server, GrpsService(executor))
    add_service(server, OipService(executor))
    host = settings.interface.host
    address = (
        f"[{host}]:{settings.interface.grpc_port}"
        if ":" in host
        else f"{host}:{settings.interface.grpc_port}"
    )
    port = server.add_insecure_port(address)
    if port == 0:
        raise OSError(f"gRPC could not bind {address}")
    return server, port

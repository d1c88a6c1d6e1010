"""Builds the grpc.aio server with every service, bound to the configured port."""

from __future__ import annotations

import grpc

from grps_py.core.config import ServerSettings
from grps_py.core.executor import Executor
from grps_py.grpc.grps_service import GrpsService
from grps_py.grpc.oip_service import OipService
from grps_py.protos import grps_pb2_grpc, open_inference_pb2_grpc


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
    grps_pb2_grpc.add_GrpsServiceServicer_to_server(GrpsService(executor), server)  # type: ignore[no-untyped-call]
    open_inference_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(  # type: ignore[no-untyped-call]
        OipService(executor), server
    )
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

"""Builds the grpc.aio server with every service, bound to the configured port.

Limits: messages over `limits.grpc_message_bytes` (default interface.max_message_bytes) either way are
refused by gRPC itself with RESOURCE_EXHAUSTED ("Received message larger than max (N vs. LIMIT)");
at most `max_connections` RPCs run at once (grpc's maximum_concurrent_rpcs; beyond it RESOURCE_EXHAUSTED);
a connection idle for `limits.idle_timeout_s` is closed.

Compressed requests (`grpc-encoding: gzip` or `deflate`) are refused unless
`limits.grpc_compressed_requests` is true: gRPC answers UNIMPLEMENTED ("Compression algorithm 'gzip' is
disabled") as soon as the call's headers arrive, before any message is read. gRPC core holds the
message limit to a message's compressed size and then inflates it whole before checking it again, so
a 1 MB gzip message that inflates to 1000 MiB costs the server 1 GB of memory on its way to
RESOURCE_EXHAUSTED; no channel argument bounds that inflation (`grpc.per_message_decompression: 0`
hands the compressed bytes to the handler, without saying whether a message was compressed). The
refusal is the `grpc.compression_enabled_algorithms_bitset` channel argument: identity only.

TLS from `tls.cert_file`/`key_file`; with `tls.client_ca_file` clients must present a certificate
signed by that CA.
"""

from __future__ import annotations

import ssl
from collections.abc import Sequence
from typing import Any

import grpc

from grps_py.access import AccessGuard
from grps_py.core.config import ServerSettings
from grps_py.core.errors import ConfigError
from grps_py.core.executor import Executor
from grps_py.core.protection import TlsSettings
from grps_py.grpc.boundary import Service, handler
from grps_py.grpc.grps_service import GrpsService
from grps_py.grpc.oip_service import OipService

_HANDLER_KINDS: dict[tuple[bool, bool], Any] = {  # (client streaming, server streaming)
    (False, False): grpc.unary_unary_rpc_method_handler,
    (False, True): grpc.unary_stream_rpc_method_handler,
    (True, False): grpc.stream_unary_rpc_method_handler,
    (True, True): grpc.stream_stream_rpc_method_handler,
}


class _Routes(grpc.GenericRpcHandler):  # type: ignore[misc]
    """Every service's methods in one table: grpc.aio asks each generic handler in turn, per request, so
    one handler for all services answers with one lookup."""

    def __init__(self) -> None:
        self._by_route: dict[str, grpc.RpcMethodHandler] = {}

    def add(self, service: str, handlers: dict[str, grpc.RpcMethodHandler]) -> None:
        for method, method_handler in handlers.items():
            self._by_route[f"/{service}/{method}"] = method_handler

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        return self._by_route.get(handler_call_details.method)


def add_services(server: grpc.aio.Server, servicers: Sequence[Service]) -> None:
    """Register every rpc of the servicers' services with raw bytes in and out (no (de)serializer): its
    boundary parses each request and serializes each answer, so it knows their sizes at no extra cost.
    An rpc of the service that the servicer does not define is not registered: gRPC answers it
    UNIMPLEMENTED."""
    routes = _Routes()
    for servicer in servicers:
        handlers = {
            method.name: _HANDLER_KINDS[(method.client_streaming, method.server_streaming)](
                handler(servicer, method.name)
            )
            for method in servicer.SERVICE.methods
            if hasattr(type(servicer), method.name)
        }
        name = servicer.SERVICE.full_name
        routes.add(name, handlers)
        server.add_registered_method_handlers(name, handlers)
    server.add_generic_rpc_handlers((routes,))


# grpc_compression_algorithm bits: identity, deflate, gzip.
IDENTITY_ONLY, ALL_ALGORITHMS = 0b001, 0b111


def grpc_message_limit(settings: ServerSettings) -> int:
    limit = settings.limits.grpc_message_bytes
    return settings.interface.max_message_bytes if limit is None else limit


def server_credentials(tls: TlsSettings, source: str) -> grpc.ServerCredentials:
    """The server's certificate; with `client_ca_file`, clients must present one signed by that CA."""
    assert tls.cert_file is not None and tls.key_file is not None
    ca = tls.client_ca_file
    if ca is not None:
        try:  # gRPC would only fail later, and obscurely, on a file that is not a CA certificate
            ssl.create_default_context(cafile=str(ca))
        except (ssl.SSLError, OSError) as exc:
            msg = f"{source}: tls: client_ca_file {ca} is not a PEM CA certificate: {exc}"
            raise ConfigError(msg) from None
    return grpc.ssl_server_credentials(
        [(tls.key_file.read_bytes(), tls.cert_file.read_bytes())],
        root_certificates=None if ca is None else ca.read_bytes(),
        require_client_auth=ca is not None,
    )


def build_grpc_server(
    executor: Executor, settings: ServerSettings, shared_port: bool = False
) -> tuple[grpc.aio.Server, int]:
    """The server (not started) and the port it bound (the real one when configured as 0). A port in
    use is an error, unless `shared_port` (a worker of several: SO_REUSEPORT, as their HTTP)."""
    limit = grpc_message_limit(settings)
    server = grpc.aio.server(
        options=[
            ("grpc.max_send_message_length", limit),
            ("grpc.max_receive_message_length", limit),
            ("grpc.so_reuseport", 1 if shared_port else 0),
            # A connection with no RPC for this long is closed (GOAWAY; clients reconnect on their own).
            ("grpc.max_connection_idle_ms", max(1, round(settings.limits.idle_timeout_s * 1000))),
            # Which request encodings are accepted (see the module's docstring).
            (
                "grpc.compression_enabled_algorithms_bitset",
                ALL_ALGORITHMS if settings.limits.grpc_compressed_requests else IDENTITY_ONLY,
            ),
        ],
        maximum_concurrent_rpcs=settings.max_connections,
    )
    guard = AccessGuard(settings.security)
    add_services(
        server,
        [GrpsService(executor, guard, settings.limits), OipService(executor, guard, settings.limits)],
    )
    host = settings.interface.host
    address = (
        f"[{host}]:{settings.interface.grpc_port}"
        if ":" in host
        else f"{host}:{settings.interface.grpc_port}"
    )
    if settings.tls.enabled:
        port = server.add_secure_port(address, server_credentials(settings.tls, settings.source))
    else:
        port = server.add_insecure_port(address)
    if port == 0:
        raise OSError(f"gRPC could not bind {address}")
    return server, port

"""The TLS context of the HTTP ports (the API port and `metrics.port`), from server.yml's `tls` section."""

from __future__ import annotations

import ssl

from grps_py.core.errors import ConfigError
from grps_py.core.protection import TlsSettings


def server_ssl_context(tls: TlsSettings, source: str) -> ssl.SSLContext | None:
    """None without `tls.cert_file`; else a server context (TLS 1.2 or newer) holding the certificate.

    Client certificates are not asked for over HTTP: `tls.client_ca_file` applies to gRPC (see
    grpc/server.py), so probes and Prometheus scrapes keep working with plain server TLS."""
    if tls.cert_file is None or tls.key_file is None:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(tls.cert_file, tls.key_file)
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError(
            f"{source}: tls: cannot load cert_file {tls.cert_file} with key_file {tls.key_file}: {exc}"
        ) from None
    context.set_alpn_protocols(["http/1.1"])
    return context

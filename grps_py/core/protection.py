"""server.yml's protective settings: request limits, access tokens and TLS (grps-py's additions).

Each limit has a documented default that is safe to leave on; every key is validated with the same
`Fields` reader as the rest of server.yml, so a bad value names its file and key.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from grps_py.core.yaml_fields import Fields

MIB = 1 << 20

LIMITS_KEYS = (
    "http_body_bytes",
    "grpc_message_bytes",
    "header_bytes",
    "tensors",
    "elements",
    "json_depth",
    "string_bytes",
    "idle_timeout_s",
    "body_timeout_s",
    "http_answer_bytes",
    "write_buffer_bytes",
    "stream_buffer_messages",
    "stream_stall_timeout_s",
    "grpc_compressed_requests",
)
SECURITY_KEYS = ("admin_token", "inference_tokens")
TLS_KEYS = ("cert_file", "key_file", "client_ca_file")


@dataclass(frozen=True)
class LimitsSettings:
    """What one request may carry, and how long a connection may sit idle or take to send a body."""

    http_body_bytes: int | None = None  # None: interface.max_message_bytes
    grpc_message_bytes: int | None = None  # None: interface.max_message_bytes
    header_bytes: int = 64 * 1024  # all request headers together (HTTP)
    tensors: int = 256  # tensors (inputs) in one request
    elements: int = 256 * MIB  # elements over all tensors of one request
    json_depth: int = 64  # nesting depth of a JSON body
    string_bytes: int = 64 * MIB  # one string / bytes element
    idle_timeout_s: float = 300.0  # a keep-alive connection with no request in flight is closed
    body_timeout_s: float = 60.0  # a request body must arrive within this time
    http_answer_bytes: int | None = None  # None: the gRPC message limit (what gRPC would send)
    write_buffer_bytes: int = 1 * MIB  # a connection's unsent answers: past it, its requests are not read
    stream_buffer_messages: int = 64  # streamed messages queued for a client that has not taken them
    stream_stall_timeout_s: float = 60.0  # a stream whose client takes nothing for this long is stopped
    grpc_compressed_requests: bool = False  # accept gzip/deflate-compressed gRPC requests (inflation risk)


@dataclass(frozen=True)
class SecuritySettings:
    """Tokens. Without `admin_token`, admin routes answer loopback callers only."""

    admin_token: str | None = None  # online/offline (and future management routes)
    inference_tokens: tuple[str, ...] = ()  # empty: predict routes are open


@dataclass(frozen=True)
class TlsSettings:
    """TLS for the HTTP and gRPC ports; `client_ca_file` makes gRPC require client certificates."""

    cert_file: Path | None = None
    key_file: Path | None = None
    client_ca_file: Path | None = None

    @property
    def enabled(self) -> bool:
        return self.cert_file is not None


def parse_limits(fields: Fields) -> LimitsSettings:
    d = LimitsSettings()
    http_body = fields.get("http_body_bytes")
    grpc_message = fields.get("grpc_message_bytes")
    http_answer = fields.get("http_answer_bytes")
    return LimitsSettings(
        http_body_bytes=None if http_body is None else fields.integer("http_body_bytes", 0, 1),
        grpc_message_bytes=None if grpc_message is None else fields.integer("grpc_message_bytes", 0, 1),
        header_bytes=fields.integer("header_bytes", d.header_bytes, 1024),
        tensors=fields.integer("tensors", d.tensors, 1),
        elements=fields.integer("elements", d.elements, 1),
        json_depth=fields.integer("json_depth", d.json_depth, 2),
        string_bytes=fields.integer("string_bytes", d.string_bytes, 1),
        idle_timeout_s=fields.number("idle_timeout_s", d.idle_timeout_s, 0.001),
        body_timeout_s=fields.number("body_timeout_s", d.body_timeout_s, 0.001),
        http_answer_bytes=None if http_answer is None else fields.integer("http_answer_bytes", 0, 1),
        write_buffer_bytes=fields.integer("write_buffer_bytes", d.write_buffer_bytes, 1024),
        stream_buffer_messages=fields.integer("stream_buffer_messages", d.stream_buffer_messages, 1),
        stream_stall_timeout_s=fields.number("stream_stall_timeout_s", d.stream_stall_timeout_s, 0.001),
        grpc_compressed_requests=fields.boolean("grpc_compressed_requests", d.grpc_compressed_requests),
    )


def parse_security(fields: Fields) -> SecuritySettings:
    tokens = fields.text_list("inference_tokens")
    return SecuritySettings(admin_token=fields.opt_text("admin_token"), inference_tokens=tokens)


def parse_tls(fields: Fields, project_dir: Path) -> TlsSettings:
    tls = TlsSettings(
        cert_file=fields.file_path("cert_file", project_dir),
        key_file=fields.file_path("key_file", project_dir),
        client_ca_file=fields.file_path("client_ca_file", project_dir),
    )
    if (tls.cert_file is None) != (tls.key_file is None):
        missing = "key_file" if tls.key_file is None else "cert_file"
        fields.missing(missing, "a path: TLS needs both cert_file and key_file")
    if tls.client_ca_file is not None and tls.cert_file is None:
        fields.missing("cert_file", "a path: client_ca_file needs TLS (cert_file and key_file)")
    return tls

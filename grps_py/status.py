"""Each core error class -> (HTTP status, gRPC status code), for the transports' error boundaries.

The table itself, with the meaning of each row, is `grps_py.core.errors.ERROR_TABLE` (the core imports
no grpc); this module gives its gRPC codes as grpc's enum, and the message a client may read.
"""

from __future__ import annotations

from dataclasses import dataclass

import grpc

from grps_py.core import errors
from grps_py.core.untrusted import one_line


@dataclass(frozen=True)
class WireStatus:
    http: int
    grpc: grpc.StatusCode


# `errors.ERROR_TABLE` with grpc's status codes, in the same order.
ERROR_TABLE: dict[type[errors.GrpsError], WireStatus] = {
    cls: WireStatus(row.http, grpc.StatusCode[row.grpc]) for cls, row in errors.ERROR_TABLE.items()
}
INTERNAL = ERROR_TABLE[errors.InternalError]
INTERNAL_MESSAGE = "internal server error"
# A message a client gets is one line of at most this many characters: request values in messages are
# escaped and cut where the message is made (`untrusted.shown`); this holds the rest (a model's error
# text, a value quoted without `shown`), so a gRPC status message always fits its header.
MAX_PUBLIC_MESSAGE_CHARS = 2000


def wire_status(exc: BaseException) -> WireStatus:
    """The status for an exception; unknown exceptions are internal errors. An error only HTTP raises
    (`http/policy.py`: a method a route does not take, a body that does not arrive) refines its class's row
    with an HTTP status of its own (`http_status`); the row's gRPC code and metrics reason stay."""
    for cls in type(exc).__mro__:
        wire = ERROR_TABLE.get(cls)
        if wire is not None:
            http_status = getattr(exc, "http_status", 0)
            return WireStatus(http_status, wire.grpc) if http_status else wire
    return INTERNAL


def public_message(exc: BaseException) -> str:
    """What a client may read about an exception: never a traceback or an internal detail; one line."""
    if isinstance(exc, errors.GrpsError):
        return one_line(exc.public_message, MAX_PUBLIC_MESSAGE_CHARS)
    return INTERNAL_MESSAGE

"""The model of the HTTP framing test project (tests/http/test_http_differential.py)."""

from __future__ import annotations

from typing import Any

from grps_py.core.context import GrpsContext
from grps_py.core.model import ModelInferer, inferer_register
from grps_py.protos.grps_pb2 import GrpsMessage


class FramingEchoInferer(ModelInferer):
    """Answers with the request as the server framed it: method, path, query and body (in hex)."""

    def infer(self, inp: Any, context: GrpsContext) -> GrpsMessage:
        request = context.get_http_request()
        assert request is not None
        seen = {
            "method": request.method,
            "path": request.path,
            "query": request.query,
            "body": request.body.hex(),
        }
        context.set_http_response(seen)
        return GrpsMessage()


inferer_register.register("http_framing_echo", FramingEchoInferer())

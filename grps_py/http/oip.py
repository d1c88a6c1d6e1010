"""The Open Inference Protocol over HTTP: /v2 health, metadata, config, infer and generate.

Errors answer `{"error": msg}` with the status from the one error table. JSON is read whatever the
Content-Type says (tritonclient's async client sends JSON as octet-stream); the binary tensor
extension is recognised by its `Inference-Header-Content-Length` header.
"""

from __future__ import annotations

import asyncio
import gzip
import zlib
from typing import Any, cast

import orjson
from tornado.iostream import StreamClosedError

from grps_py import status
from grps_py.codecs import oip_generate, oip_json
from grps_py.codecs.answer_size import check_answer, oip_generate_bytes, oip_infer_bytes
from grps_py.core.catalog import ModelEntry
from grps_py.core.context import GrpsContext
from grps_py.core.dataplane import OipDataplane
from grps_py.core.errors import GrpsError, InvalidInput, PayloadTooLarge
from grps_py.core.executor import Executor
from grps_py.core.oip import OipRequest, OipResponse
from grps_py.core.telemetry import OIP_HTTP
from grps_py.http.base import BaseHandler
from grps_py.http.direct import DirectCall, DirectRoute, Header
from grps_py.http.policy import HttpPolicy
from grps_py.http.streaming import abort_on_stall

HEADER_LENGTH = "Inference-Header-Content-Length"
MODEL = r"/v2/models/([^/]+)(?:/versions/([^/]+))?"
_JSON = "application/json"
_OCTET_STREAM = "application/octet-stream"
_DECOMPRESSORS = {"gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}


def tensor_metadata(entry: ModelEntry, which: str) -> list[dict[str, Any]]:
    specs = entry.inputs if which == "inputs" else entry.outputs
    return [
        {"name": s.name, "datatype": s.datatype or "", "shape": list(s.shape) if s.shape is not None else []}
        for s in specs
    ]


def inflated(body: bytes, content_encoding: str, executor: Executor) -> bytes:
    """The request body, decompressed as its Content-Encoding says (the body limit holds after it too)."""
    encoding = content_encoding.strip().lower()
    if encoding in ("", "identity"):
        return body
    wbits = _DECOMPRESSORS.get(encoding)
    if wbits is None:
        raise InvalidInput(f"unsupported Content-Encoding {encoding!r}; use gzip or deflate")
    settings = executor.server_settings
    limit = settings.limits.http_body_bytes or settings.interface.max_message_bytes
    inflater = zlib.decompressobj(wbits)
    try:
        data = inflater.decompress(body, limit + 1)
    except zlib.error as exc:
        raise InvalidInput(f"the {encoding} body cannot be decompressed: {exc}") from None
    if len(data) > limit:
        raise PayloadTooLarge(f"the decompressed body exceeds {limit} bytes")
    return data


def compressed(body: bytes, accept_encoding: str) -> tuple[bytes, str | None]:
    """The answer's body and its Content-Encoding (None: as it is). Compressed when the client asks for
    exactly one encoding, as tritonclient's response_compression_algorithm does; the blanket "gzip,
    deflate" HTTP libraries send by default is not read as a wish to spend CPU compressing tensors."""
    accepted = accept_encoding.strip().lower()
    if accepted == "gzip":
        return gzip.compress(body, compresslevel=1), "gzip"
    if accepted == "deflate":
        return zlib.compress(body, 1), "deflate"
    return body, None


def encode_infer_answer(
    request: OipRequest, response: OipResponse, answer_bytes: int
) -> tuple[bytes, str, int | None]:
    """The answer's body, its Content-Type and its Inference-Header-Content-Length (None: all JSON).
    An answer that could take more than `answer_bytes` (limits.http_answer_bytes) is refused before it
    is encoded: AnswerTooLarge (500)."""
    binary = binary_outputs(request, response)
    check_answer(oip_infer_bytes(response, binary, answer_bytes), answer_bytes)
    body, header_length = oip_json.encode_response(response, binary)
    return body, (_JSON if header_length is None else _OCTET_STREAM), header_length


def encode_generate_answer(response: OipResponse, answer_bytes: int) -> bytes:
    """A generate answer (or one server-sent event's data), refused before it is encoded when it could
    take more than `answer_bytes`."""
    check_answer(oip_generate_bytes(response, answer_bytes), answer_bytes)
    return oip_generate.encode_generate(response)


class OipHandler(BaseHandler):
    """Common to the /v2 routes: the dataplane, `{"error": msg}` bodies, JSON answers."""

    dataplane: OipDataplane

    def initialize(
        self,
        executor: Executor,
        dataplane: OipDataplane | None = None,
        action: str = "live",
        stream: bool = False,
        **_: Any,
    ) -> None:
        """`action` is for the health route, `stream` for generate_stream."""
        super().initialize(executor)
        self.dataplane = dataplane or OipDataplane(executor, OIP_HTTP)
        self.action = action
        self.stream = stream

    def error_body(self, http_status: int, msg: str) -> bytes:
        return oip_json.encode_error(msg)

    def write_doc(self, doc: dict[str, Any], http_status: int = 200) -> None:
        self.write_json(orjson.dumps(doc), http_status)


class ServerMetadataHandler(OipHandler):
    def get(self) -> None:
        self.write_doc(self.dataplane.server_metadata())


class HealthHandler(OipHandler):
    """live: the process answers. ready: models loaded and the server online (503 otherwise)."""

    def get(self) -> None:
        if self.action == "live":
            self.write_doc({"live": self.dataplane.is_live()})
            return
        ready = self.dataplane.is_ready()
        self.write_doc({"ready": ready}, 200 if ready else 503)


class ModelMetadataHandler(OipHandler):
    def get(self, model: str, version: str | None = None) -> None:
        entry, versions = self.dataplane.model_metadata(model, version or "")
        self.write_doc(
            {
                "name": entry.name,
                "versions": versions,
                "platform": entry.platform,
                "inputs": tensor_metadata(entry, "inputs"),
                "outputs": tensor_metadata(entry, "outputs"),
            }
        )


class ModelReadyHandler(OipHandler):
    def get(self, model: str, version: str | None = None) -> None:
        ready = self.dataplane.model_ready(model, version or "")
        self.write_doc({"name": model, "ready": ready}, 200 if ready else 503)


class ModelConfigHandler(OipHandler):
    def get(self, model: str, version: str | None = None) -> None:
        self.write_doc(self.dataplane.model_config(model, version or ""))


class InferBase(OipHandler):
    """Reads the (possibly compressed) body and cancels the request when the client goes away."""

    _ctx: GrpsContext | None = None
    protocol = OIP_HTTP
    inference = True

    def prepare(self) -> None:
        super().prepare()
        model, version = self.path_args[0], self.path_args[1] or ""
        try:
            key = self.dataplane.entry(model, version).key
        except GrpsError:
            key = ""  # answered 404 by the route itself
        self.mark_started(key)

    def on_connection_close(self) -> None:
        super().on_connection_close()
        if self._ctx is not None:
            self._ctx.cancel()

    def body(self) -> bytes:
        return inflated(self.request.body, self.request.headers.get("Content-Encoding", ""), self.executor)

    def context(self, request: OipRequest, streaming: bool = False) -> GrpsContext:
        """The request's context, under its OIP `id` when it has one and no X-Request-Id came."""
        self.adopt_request_id(request.id)
        self._ctx = self.dataplane.context(request, self.request_id, streaming=streaming)
        return self._ctx

    async def run(self, model: str, version: str | None, request: OipRequest) -> OipResponse | None:
        """The response, or None when the client went away first."""
        ctx = self.context(request)
        try:
            return await self.dataplane.infer(model, version or "", request, ctx)
        except asyncio.CancelledError:  # the context's cancel ended the model's wait (scheduler.py)
            return None

    def send(self, body: bytes, content_type: str) -> None:
        body, encoding = compressed(body, self.request.headers.get("Accept-Encoding", ""))
        if encoding is not None:
            self.set_header("Content-Encoding", encoding)
        self.set_header("Content-Type", content_type)
        self.finish(body)


class InferRoute(InferBase):
    """POST is answered on the connection itself (`DirectInfer`); the other methods arrive here: 405."""

    direct_methods = ("POST",)


class DirectInfer(DirectCall):
    """POST /v2/models/{model}[/versions/{version}]/infer: JSON or the binary tensor extension, maybe
    compressed, answered without Tornado's web layer (http/direct.py)."""

    protocol = OIP_HTTP
    _ctx: GrpsContext | None = None

    @property
    def dataplane(self) -> OipDataplane:
        return cast(OipDataplane, self.route.options["dataplane"])

    def model_of_head(self) -> str:
        try:
            return self.dataplane.entry(*self.args).key
        except GrpsError:
            return ""  # answered 404 once the request runs

    def error_body(self, http_status: int, msg: str) -> bytes:
        return oip_json.encode_error(msg)

    def client_gone(self) -> None:
        if self._ctx is not None:
            self._ctx.cancel()

    async def answer(self) -> tuple[bytes, str, tuple[Header, ...]] | None:
        headers, limits = self.headers, self.executor.server_settings.limits
        body = inflated(self.body, headers.get("Content-Encoding", ""), self.executor)
        request = oip_json.decode_request(body, headers.get(HEADER_LENGTH), limits)
        self.adopt_request_id(request.id)
        self._ctx = self.dataplane.context(request, self.request_id, streaming=False)
        model, version = self.args
        response = await self.dataplane.infer(model, version, request, self._ctx)
        answer_bytes = self.route.policy.answer_bytes
        body, content_type, header_length = encode_infer_answer(request, response, answer_bytes)
        body, encoding = compressed(body, headers.get("Accept-Encoding", ""))
        more: tuple[Header, ...] = () if header_length is None else ((HEADER_LENGTH, str(header_length)),)
        if encoding is not None:
            more += (("Content-Encoding", encoding),)
        return body, content_type, more


def direct_infer_route(executor: Executor, policy: HttpPolicy) -> DirectRoute:
    dataplane = OipDataplane(executor, OIP_HTTP)
    return DirectRoute(MODEL + r"/infer", DirectInfer, executor, policy, dataplane=dataplane)


def binary_outputs(request: OipRequest, response: OipResponse) -> set[str]:
    """Outputs sent in binary: as each requested output says, else as the request-level flag says."""
    chosen = {wanted.name: wanted.binary for wanted in request.outputs if wanted.binary is not None}
    default = request.binary_output
    return {t.name for t in response.outputs if chosen.get(t.name, default)}


class GenerateHandler(InferBase):
    """Triton's generate extension: named JSON values in, JSON out; `generate_stream` answers with
    server-sent events, one per message the model streams."""

    async def post(self, model: str, version: str | None = None) -> None:
        entry = self.dataplane.entry(model, version or "")
        specs = {s.name: (s.datatype, s.shape) for s in entry.inputs}
        limits = self.executor.server_settings.limits
        inputs, parameters, rid = oip_generate.decode_generate(self.body(), specs, limits)
        request = OipRequest(inputs, id=rid, parameters=parameters)
        if not self.stream:
            response = await self.run(model, version, request)
            if response is not None:
                self.send(encode_generate_answer(response, self.policy.answer_bytes), _JSON)
            return
        await self.run_events(model, version or "", request)

    async def run_events(self, model: str, version: str, request: OipRequest) -> None:
        ctx = self.context(request, streaming=True)
        abort_on_stall(self, ctx)
        started = False
        try:
            async for response in self.dataplane.infer_stream(model, version, request, ctx):
                event = encode_generate_answer(response, self.policy.answer_bytes)
                if not started:
                    self.set_header("Content-Type", "text/event-stream")
                    self.set_header("Cache-Control", "no-cache")
                    started = True
                self.write(b"data: " + event + b"\n\n")
                await self.flush()
        except (StreamClosedError, asyncio.CancelledError):
            self.mark_client_gone()
            ctx.cancel()
            return
        except GrpsError as exc:
            ctx.cancel()  # a message refused here (too large) leaves the model streaming: stop it
            if not started:
                raise
            self.mark_failed(exc)
            self.write(b"data: " + oip_json.encode_error(status.public_message(exc)) + b"\n\n")
        if not self._finished:
            self.finish()


def oip_routes(executor: Executor) -> list[tuple[str, type[BaseHandler], dict[str, Any]]]:
    base: dict[str, Any] = {"executor": executor, "dataplane": OipDataplane(executor, OIP_HTTP)}
    return [
        (r"/v2/?", ServerMetadataHandler, base),
        (r"/v2/health/live", HealthHandler, {**base, "action": "live"}),
        (r"/v2/health/ready", HealthHandler, {**base, "action": "ready"}),
        (MODEL + r"/?", ModelMetadataHandler, base),
        (MODEL + r"/ready", ModelReadyHandler, base),
        (MODEL + r"/config", ModelConfigHandler, base),
        (MODEL + r"/infer", InferRoute, base),
        (MODEL + r"/generate", GenerateHandler, {**base, "stream": False}),
        (MODEL + r"/generate_stream", GenerateHandler, {**base, "stream": True}),
    ]

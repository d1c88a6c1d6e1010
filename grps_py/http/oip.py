"""The Open Inference Protocol over HTTP: /v2 health, metadata, config, infer and generate, and Triton's
repository (index, load, unload) and shared-memory routes.

Errors answer `{"error": msg}` with the status from the one error table. JSON is read whatever the
Content-Type says (tritonclient's async client sends JSON as octet-stream); the binary tensor
extension is recognised by its `Inference-Header-Content-Length` header.

Who may call: inference routes take an inference token when tokens are configured; the repository
index is open, as metadata is; the repository's load and unload and the system shared-memory routes are
admin routes (the admin token, or a loopback caller without one; never a page of another site): they
change what the server runs, and a region maps memory of this host.
"""

from __future__ import annotations

import asyncio
import gzip
import zlib
from typing import Any

import orjson
from tornado.iostream import StreamClosedError

from grps_py import status
from grps_py.codecs import oip_generate, oip_json
from grps_py.codecs.answer_size import check_answer, oip_generate_bytes, oip_infer_bytes
from grps_py.codecs.json_values import expect_object, load
from grps_py.codecs.oip_shared_memory import read_inputs
from grps_py.core.catalog import ModelEntry
from grps_py.core.context import GrpsContext
from grps_py.core.dataplane import OipDataplane, cuda_shared_memory
from grps_py.core.errors import GrpsError, InvalidInput, PayloadTooLarge
from grps_py.core.executor import Executor
from grps_py.core.oip import OipRequest, OipResponse
from grps_py.core.protection import LimitsSettings
from grps_py.core.telemetry import OIP_HTTP
from grps_py.core.untrusted import shown
from grps_py.http.base import BaseHandler
from grps_py.http.direct import Answer, DirectCall, UnaryRoute
from grps_py.http.policy import Header, HttpPolicy, oip_error_body
from grps_py.http.streaming import abort_on_stall
from grps_py.lifecycle import ADMIN, INFERENCE, OPEN

HEADER_LENGTH = "Inference-Header-Content-Length"
MODEL = r"/v2/models/([^/]+)(?:/versions/([^/]+))?"
SYSTEM_SHM = r"/v2/systemsharedmemory"
CUDA_SHM = r"/v2/cudasharedmemory"
REGION = r"/region/([^/]+)"
_JSON = "application/json"
_OCTET_STREAM = "application/octet-stream"
_DECOMPRESSORS = {"gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}


def tensor_metadata(entry: ModelEntry, which: str) -> list[dict[str, Any]]:
    specs = entry.inputs if which == "inputs" else entry.outputs
    return [
        {"name": s.name, "datatype": s.datatype or "", "shape": list(s.shape) if s.shape is not None else []}
        for s in specs
    ]


def inflated(body: bytes, content_encoding: str, limit: int) -> bytes:
    """The request body, decompressed as its Content-Encoding says (the body limit holds after it too)."""
    encoding = content_encoding.strip().lower()
    if encoding in ("", "identity"):
        return body
    wbits = _DECOMPRESSORS.get(encoding)
    if wbits is None:
        raise InvalidInput(f"unsupported Content-Encoding {encoding!r}; use gzip or deflate")
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


def binary_outputs(request: OipRequest, response: OipResponse) -> set[str]:
    """Outputs sent in binary: as each requested output says, else as the request-level flag says."""
    chosen = {wanted.name: wanted.binary for wanted in request.outputs if wanted.binary is not None}
    default = request.binary_output
    return {t.name for t in response.outputs if chosen.get(t.name, default)}


def _doc(doc: dict[str, Any], http_status: int = 200) -> Answer:
    return Answer(orjson.dumps(doc), status=http_status)


_NO_CONTENT = "text/plain; charset=utf-8"  # an empty answer, as Triton sends (not JSON)


class OipRoutes:
    """The unary /v2 routes over one dataplane: health, metadata, config, infer and generate. Each is an
    `async (call) -> Answer` (http/direct.py); generate_stream is `GenerateStreamHandler`'s."""

    def __init__(self, dataplane: OipDataplane, policy: HttpPolicy) -> None:
        self.dataplane = dataplane
        self.policy = policy

    async def server_metadata(self, call: DirectCall) -> Answer:
        return _doc(self.dataplane.server_metadata())

    async def live(self, call: DirectCall) -> Answer:
        """The process answers."""
        return _doc({"live": self.dataplane.is_live()})

    async def ready(self, call: DirectCall) -> Answer:
        """Models loaded and the server online (503 otherwise)."""
        ready = self.dataplane.is_ready()
        return _doc({"ready": ready}, 200 if ready else 503)

    async def model_metadata(self, call: DirectCall) -> Answer:
        entry, versions = self.dataplane.model_metadata(*call.args)
        doc = {
            "name": entry.name,
            "versions": versions,
            "platform": entry.platform,
            "inputs": tensor_metadata(entry, "inputs"),
            "outputs": tensor_metadata(entry, "outputs"),
        }
        return _doc(doc)

    async def model_ready(self, call: DirectCall) -> Answer:
        ready = self.dataplane.model_ready(*call.args)
        return _doc({"name": call.args[0], "ready": ready}, 200 if ready else 503)

    async def model_config(self, call: DirectCall) -> Answer:
        return _doc(self.dataplane.model_config(*call.args))

    def model_of_head(self, call: DirectCall) -> str:
        """An inference request is in flight from its head: its model key ("" when there is no such
        model, which its route answers 404)."""
        try:
            return self.dataplane.entry(*call.args).key
        except GrpsError:
            return ""

    def _body(self, call: DirectCall) -> bytes:
        return inflated(call.body, call.headers.get("Content-Encoding", ""), self.policy.body_bytes)

    def _context(self, call: DirectCall, request: OipRequest) -> GrpsContext:
        """The request's context, under its OIP `id` when it has one and no X-Request-Id came; cancelled
        when the client goes away."""
        call.adopt_request_id(request.id)
        ctx = self.dataplane.context(request, call.request_id, streaming=False)
        call.cancel_on_close(ctx.cancel)
        return ctx

    async def infer(self, call: DirectCall) -> Answer:
        """JSON or the binary tensor extension, maybe compressed; tensors may be in shared memory."""
        limits = self.policy.limits
        request = oip_json.decode_request(self._body(call), call.headers.get(HEADER_LENGTH), limits)
        places = read_inputs(request, self.dataplane.shared_memory, limits)
        model, version = call.args
        response = await self.dataplane.infer(model, version, request, self._context(call, request))
        places.place(response)
        body, content_type, header_length = encode_infer_answer(request, response, self.policy.answer_bytes)
        more: tuple[Header, ...] = () if header_length is None else ((HEADER_LENGTH, str(header_length)),)
        return _compressed_answer(body, content_type, call.headers.get("Accept-Encoding", ""), more)

    async def generate(self, call: DirectCall) -> Answer:
        """Triton's generate extension: named JSON values in, JSON out."""
        model, version = call.args
        request = generate_request(self.dataplane, model, version, self._body(call), self.policy.limits)
        response = await self.dataplane.infer(model, version, request, self._context(call, request))
        body = encode_generate_answer(response, self.policy.answer_bytes)
        return _compressed_answer(body, _JSON, call.headers.get("Accept-Encoding", ""))

    async def repository_index(self, call: DirectCall) -> Answer:
        """Triton's repository index: every model version and its state (body, optional:
        `{"ready": true}` for the ready ones only)."""
        ready = False
        body = self._body(call)
        if body.strip():
            document = expect_object(load(body, limits=self.policy.limits), "the index request")
            ready = document.get("ready", False)
            if type(ready) is not bool:
                raise InvalidInput("Invalid value for 'ready': expected a boolean")
        return Answer(orjson.dumps(self.dataplane.repository_index(ready)))

    async def repository_load(self, call: DirectCall) -> Answer:
        """Triton's repository load: `{"parameters": {"config": "<one model entry as JSON>"}}`, optional."""
        await self.dataplane.load(call.args[0], self._parameters(call, "the load request"))
        return Answer(b"", _NO_CONTENT)

    async def repository_unload(self, call: DirectCall) -> Answer:
        """Triton's repository unload: `{"parameters": {"unload_dependents": true}}`, optional."""
        await self.dataplane.unload(call.args[0], self._parameters(call, "the unload request"))
        return Answer(b"", _NO_CONTENT)

    def _parameters(self, call: DirectCall, what: str) -> dict[str, Any]:
        body = self._body(call)
        if not body.strip():
            return {}
        document = expect_object(load(body, limits=self.policy.limits), what)
        unknown = [key for key in document if key != "parameters"]
        if unknown:
            raise InvalidInput(f"unknown key '{shown(unknown[0], 64)}' in {what}; known: 'parameters'")
        parameters = document.get("parameters", {})
        return expect_object(parameters, f"{what}'s parameters")

    async def shared_memory_status(self, call: DirectCall) -> Answer:
        return Answer(orjson.dumps(self.dataplane.shared_memory.status(call.args[0])))

    async def shared_memory_register(self, call: DirectCall) -> Answer:
        key, offset, byte_size = oip_json.decode_register_request(self._body(call), self.policy.limits)
        self.dataplane.shared_memory.register(call.args[0], key, offset, byte_size)
        return Answer(b"", _NO_CONTENT)

    async def shared_memory_unregister(self, call: DirectCall) -> Answer:
        self.dataplane.shared_memory.unregister(call.args[0])
        return Answer(b"", _NO_CONTENT)

    async def cuda_shared_memory(self, call: DirectCall) -> Answer:
        raise cuda_shared_memory()

    def unary_routes(self) -> list[UnaryRoute]:
        def route(pattern: str, method: str, serve: Any, access: str = OPEN) -> UnaryRoute:
            inference = access == INFERENCE
            return UnaryRoute(
                pattern,
                {method: serve},
                oip_error_body,
                protocol=OIP_HTTP if inference else "http",
                access=access,
                cross_site_refused=access == ADMIN,
                model_of_head=self.model_of_head if inference else None,
            )

        cuda = self.cuda_shared_memory
        return [
            route(MODEL + r"/infer", "POST", self.infer, INFERENCE),
            route(MODEL + r"/generate", "POST", self.generate, INFERENCE),
            route(r"/v2/?", "GET", self.server_metadata),
            route(r"/v2/health/live", "GET", self.live),
            route(r"/v2/health/ready", "GET", self.ready),
            route(MODEL + r"/?", "GET", self.model_metadata),
            route(MODEL + r"/ready", "GET", self.model_ready),
            route(MODEL + r"/config", "GET", self.model_config),
            route(r"/v2/repository/index", "POST", self.repository_index),
            route(r"/v2/repository/models/([^/]+)/load", "POST", self.repository_load, ADMIN),
            route(r"/v2/repository/models/([^/]+)/unload", "POST", self.repository_unload, ADMIN),
            route(f"{SYSTEM_SHM}(?:{REGION})?/status", "GET", self.shared_memory_status, ADMIN),
            route(f"{SYSTEM_SHM}{REGION}/register", "POST", self.shared_memory_register, ADMIN),
            route(f"{SYSTEM_SHM}(?:{REGION})?/unregister", "POST", self.shared_memory_unregister, ADMIN),
            route(f"{CUDA_SHM}(?:{REGION})?/status", "GET", cuda),
            route(f"{CUDA_SHM}{REGION}/register", "POST", cuda),
            route(f"{CUDA_SHM}(?:{REGION})?/unregister", "POST", cuda),
        ]


def _compressed_answer(
    body: bytes, content_type: str, accept_encoding: str, more: tuple[Header, ...] = ()
) -> Answer:
    body, encoding = compressed(body, accept_encoding)
    if encoding is not None:
        more += (("Content-Encoding", encoding),)
    return Answer(body, content_type, headers=more)


def generate_request(
    dataplane: OipDataplane, model: str, version: str, body: bytes, limits: LimitsSettings
) -> OipRequest:
    """A generate request's values, read as the model's declared inputs say."""
    entry = dataplane.entry(model, version)
    specs = {s.name: (s.datatype, s.shape) for s in entry.inputs}
    inputs, parameters, rid = oip_generate.decode_generate(body, specs, limits)
    return OipRequest(inputs, id=rid, parameters=parameters)


class GenerateStreamHandler(BaseHandler):
    """POST /v2/models/{model}[/versions/{version}]/generate_stream: server-sent events, one per message
    the model streams (Triton's generate extension)."""

    protocol = OIP_HTTP
    inference = True
    error_body = staticmethod(oip_error_body)

    def initialize(self, executor: Executor, dataplane: OipDataplane | None = None, **_: Any) -> None:
        super().initialize(executor)
        self.dataplane = dataplane or OipDataplane(executor, OIP_HTTP)

    def prepare(self) -> None:
        super().prepare()
        model, version = self.path_args[0], self.path_args[1] or ""
        try:
            key = self.dataplane.entry(model, version).key
        except GrpsError:
            key = ""  # answered 404 by the route itself
        self.life.start(key)

    async def post(self, model: str, version: str | None = None) -> None:
        body = inflated(self.body, self.request.headers.get("Content-Encoding", ""), self.policy.body_bytes)
        request = generate_request(self.dataplane, model, version or "", body, self.policy.limits)
        self.adopt_request_id(request.id)
        ctx = self.dataplane.context(request, self.request_id, streaming=True)
        self.cancel_on_close(ctx.cancel)
        abort_on_stall(self, ctx)
        started = False
        try:
            async for response in self.dataplane.infer_stream(model, version or "", request, ctx):
                event = encode_generate_answer(response, self.policy.answer_bytes)
                if not started:
                    self.set_header("Content-Type", "text/event-stream")
                    self.set_header("Cache-Control", "no-cache")
                    started = True
                self.write(b"data: " + event + b"\n\n")
                await self.flush()
        except (StreamClosedError, asyncio.CancelledError):
            self.cancel()
            ctx.cancel()
            return
        except GrpsError as exc:
            ctx.cancel()  # a message refused here (too large) leaves the model streaming: stop it
            if not started:
                raise
            self.fail(exc)
            self.write(b"data: " + oip_json.encode_error(status.public_message(exc)) + b"\n\n")
        if not self.answered:
            self.finish()


def oip_stream_routes(
    executor: Executor, dataplane: OipDataplane
) -> list[tuple[str, type[BaseHandler], dict[str, Any]]]:
    """The /v2 routes Tornado serves: the streaming one."""
    return [
        (MODEL + r"/generate_stream", GenerateStreamHandler, {"executor": executor, "dataplane": dataplane})
    ]

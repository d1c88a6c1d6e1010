"""The grps HTTP API: /grps/v1/health/*, /grps/v1/infer/predict, /grps/v1/metadata/*.

Every route answers in one piece on the connection (`GrpsRoutes`, http/direct.py) but a predict that
asks to stream, which `PredictHandler` answers through Tornado's web layer, chunk by chunk. With
`ctrl_mode: body_param` the wish to stream is in the body, which the connection has not read when it
picks the layer, so every predict of such a server goes to `PredictHandler`; both answer a unary predict
with the same code (`decode_predict`, `predict_request`, `streaming.payload_answer`).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs

import orjson
from tornado.httputil import HTTPHeaders, RequestStartLine

from grps_py.codecs import grps_json, json_values
from grps_py.codecs.limits import check_length
from grps_py.core.config import StreamingCtrl
from grps_py.core.context import GrpsContext
from grps_py.core.errors import InvalidInput
from grps_py.core.executor import Executor
from grps_py.core.protection import LimitsSettings
from grps_py.core.telemetry import GRPS_HTTP
from grps_py.core.types import InferRequest, Payload, PayloadKind
from grps_py.http.direct import Answer, DirectCall, UnaryRoute
from grps_py.http.policy import (
    PRIORITY_HEADER,
    PRIORITY_QUERY,
    TIMEOUT_HEADER,
    TIMEOUT_QUERY,
    HttpPolicy,
    grps_error_body,
)
from grps_py.http.streaming import OCTET_STREAM, PredictBase, is_true, payload_answer, streaming_requested
from grps_py.lifecycle import ADMIN, INFERENCE

PREDICT = r"/grps/v1/infer/predict"


def media_type(headers: HTTPHeaders) -> str:
    return headers.get("Content-Type", "").split(";")[0].strip().lower()


def decode_predict(body: bytes, octets: bool, limits: LimitsSettings) -> tuple[Payload, str]:
    """The payload and the model the body names ("": none): raw bytes, or a GrpsMessage as JSON."""
    if octets:
        check_length(len(body), "bin_data", limits)
        return Payload.of_bytes(body), ""
    if not body.strip():
        raise InvalidInput("empty request body; send a GrpsMessage as JSON")
    return grps_json.decode_request(body, limits)


def predict_request(
    payload: Payload,
    model: str,
    request_id: str,
    timeout_us: int | None,
    priority: int,
    streaming: bool,
    protocol: str,
) -> InferRequest:
    """The executor's request for a predict (its timeout in microseconds, 0 or None: none)."""
    ctx = GrpsContext(
        streaming=streaming,
        request_id=request_id,
        deadline_s=timeout_us / 1e6 if timeout_us else None,
        priority=priority,
    )
    return InferRequest(payload, ctx, model, request_id, protocol)


def _envelope(http_status: int, msg: str, ok: bool) -> Answer:
    return Answer(grps_json.encode_status(http_status, msg, ok), status=http_status)


class GrpsRoutes:
    """The unary grps routes over one executor: health (online/offline are admin switches), metadata and
    the unary predict. Each is an `async (call) -> Answer` (http/direct.py)."""

    def __init__(self, executor: Executor, policy: HttpPolicy, ctrl: StreamingCtrl) -> None:
        self.executor = executor
        self.policy = policy
        self.ctrl = ctrl

    async def online(self, call: DirectCall) -> Answer:
        self.executor.online()
        return _envelope(200, "OK", True)

    async def offline(self, call: DirectCall) -> Answer:
        self.executor.offline()
        return _envelope(200, "OK", True)

    async def live(self, call: DirectCall) -> Answer:
        return _envelope(200, "OK", True)

    async def ready(self, call: DirectCall) -> Answer:
        ex = self.executor
        if not ex.is_ready():
            return _envelope(503, "server is offline" if ex.is_loaded else "models are loading", False)
        return _envelope(200, "OK", True)

    async def server_metadata(self, call: DirectCall) -> Answer:
        return Answer(grps_json.encode_response(Payload.of_text(self.executor.server_metadata())))

    async def model_metadata(self, call: DirectCall) -> Answer:
        """The model is named by the body's str_data (grps), its `model` field, or ?model=."""
        name = call.query_argument("model", "")
        if call.body.strip():
            payload, model = grps_json.decode_request(call.body, self.policy.limits)
            name = payload.value if payload.kind is PayloadKind.TEXT and payload.value else (model or name)
        meta = self.executor.model_metadata(str(name))
        return Answer(grps_json.encode_response(Payload.of_text(meta)))

    async def predict(self, call: DirectCall) -> Answer:
        """A unary predict: a GrpsMessage as JSON, or raw bytes as application/octet-stream."""
        payload, model = decode_predict(
            call.body, media_type(call.headers) == OCTET_STREAM, self.policy.limits
        )
        model = model or call.query_argument("model", "")
        timeout_us = call.control(TIMEOUT_HEADER, TIMEOUT_QUERY)
        priority = call.control(PRIORITY_HEADER, PRIORITY_QUERY) or 0
        request = predict_request(payload, model, call.request_id, timeout_us, priority, False, GRPS_HTTP)
        call.cancel_on_close(request.context.cancel)
        call.life.start(self.executor.model_key(model))
        response = await self.executor.infer(request)
        return payload_answer(
            response.payload,
            is_true(call.query_argument("return-ndarray", "false")),
            self.policy.answer_bytes,
        )

    def unary(self, start_line: RequestStartLine, headers: HTTPHeaders) -> bool:
        """Whether a predict is unary (answered here); one that asks to stream, by header or query, and
        every predict of a `body_param` server, is PredictHandler's."""
        ctrl = self.ctrl
        if ctrl.ctrl_mode == "header_param":
            return not is_true(headers.get(ctrl.ctrl_key, "false"))
        if ctrl.ctrl_mode == "query_param":
            query = parse_qs(start_line.path.partition("?")[2], keep_blank_values=True)
            return not is_true((query.get(ctrl.ctrl_key) or ["false"])[-1])
        return False

    def unary_routes(self) -> list[UnaryRoute]:
        def both(serve: Any) -> dict[str, Any]:
            return {"GET": serve, "POST": serve}  # grps answers these to GET and POST alike

        def admin(action: str, serve: Any) -> UnaryRoute:
            path = f"/grps/v1/health/{action}"
            return UnaryRoute(path, both(serve), grps_error_body, access=ADMIN, cross_site_refused=True)

        return [
            UnaryRoute(
                PREDICT, {"POST": self.predict}, grps_error_body, GRPS_HTTP, INFERENCE, accepts=self.unary
            ),
            UnaryRoute("/grps/v1/health/live", both(self.live), grps_error_body),
            UnaryRoute("/grps/v1/health/ready", both(self.ready), grps_error_body),
            admin("online", self.online),
            admin("offline", self.offline),
            UnaryRoute("/grps/v1/metadata/server", both(self.server_metadata), grps_error_body),
            UnaryRoute("/grps/v1/metadata/model", both(self.model_metadata), grps_error_body),
        ]


class PredictHandler(PredictBase):
    """POST a GrpsMessage as JSON, or raw bytes as application/octet-stream: the predicts that stream (and
    every predict of a `body_param` server)."""

    default_model = ""  # the model when neither the body nor ?model= names one ("": the DAG)
    protocol = GRPS_HTTP

    def initialize(self, executor: Executor, streaming_ctrl: StreamingCtrl | None = None, **_: Any) -> None:
        super().initialize(executor)
        self.ctrl = streaming_ctrl or StreamingCtrl()

    def _decode(self) -> tuple[Payload, str, bool]:
        """The payload, the model (the body's beats ?model=) and whether to stream."""
        body = self.body
        streaming = streaming_requested(self, self.ctrl)
        octets = media_type(self.request.headers) == OCTET_STREAM
        if not octets and self.ctrl.ctrl_mode == "body_param" and body.strip():
            body, streaming = self._pop_body_flag(body)
        payload, model = decode_predict(body, octets, self.policy.limits)
        return payload, model, streaming

    def _pop_body_flag(self, body: bytes) -> tuple[bytes, bool]:
        doc = json_values.load(body, limits=self.policy.limits)
        if not isinstance(doc, dict) or self.ctrl.ctrl_key not in doc:
            return body, False
        flag = is_true(doc.pop(self.ctrl.ctrl_key))
        return orjson.dumps(doc), flag

    async def post(self) -> None:
        payload, model, streaming = self._decode()
        model = model or self.get_query_argument("model", "") or self.default_model
        timeout_us = self._int_control(TIMEOUT_HEADER, TIMEOUT_QUERY)
        priority = self._int_control(PRIORITY_HEADER, PRIORITY_QUERY) or 0
        request = predict_request(
            payload, model, self.request_id, timeout_us, priority, streaming, self.protocol
        )
        response = await self.run(request, self.ctrl.res_content_type)
        if response is None:  # streamed, or the client went away
            return
        self.write_payload(response.payload, is_true(self.get_query_argument("return-ndarray", "false")))


def grps_stream_routes(
    executor: Executor, ctrl: StreamingCtrl
) -> list[tuple[str, type[PredictBase], dict[str, Any]]]:
    """The grps routes Tornado serves: the predicts the unary route leaves to it."""
    return [(PREDICT, PredictHandler, {"executor": executor, "streaming_ctrl": ctrl})]

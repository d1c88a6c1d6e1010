"""The grps HTTP API: /grps/v1/health/*, /grps/v1/infer/predict, /grps/v1/metadata/*."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs

import orjson
from tornado.httputil import HTTPHeaders, RequestStartLine

from grps_py.codecs import grps_json, json_values
from grps_py.codecs.answer_size import check_answer, grps_json_bytes, plain_payload
from grps_py.codecs.limits import check_length
from grps_py.core.config import StreamingCtrl
from grps_py.core.context import GrpsContext
from grps_py.core.errors import InvalidInput
from grps_py.core.executor import Executor
from grps_py.core.protection import LimitsSettings
from grps_py.core.telemetry import GRPS_HTTP
from grps_py.core.types import InferRequest, Payload, PayloadKind
from grps_py.http.auth import refuse_cross_site
from grps_py.http.base import (
    PRIORITY_HEADER,
    PRIORITY_QUERY,
    TIMEOUT_HEADER,
    TIMEOUT_QUERY,
    BaseHandler,
)
from grps_py.http.direct import DirectCall, DirectRoute, Header
from grps_py.http.policy import HttpPolicy
from grps_py.http.streaming import OCTET_STREAM, PredictBase, is_true, raw_bytes, streaming_requested

ADMIN_ACTIONS = frozenset({"online", "offline"})


class HealthHandler(BaseHandler):
    """online / offline switch the shared flag (admin: loopback or the admin token); live / ready report
    it (open: probes)."""

    def initialize(self, executor: Executor, action: str = "live", **_: Any) -> None:
        super().initialize(executor)
        self.action = action
        self.admin = action in ADMIN_ACTIONS

    def prepare(self) -> None:
        """An admin switch a browser sends for another site's page is refused (403) first, whatever the
        method and the token (see auth.refuse_cross_site); then the rules of every route."""
        if self.admin:
            headers = self.request.headers
            origin, site = headers.get("Origin"), headers.get("Sec-Fetch-Site")
            refuse_cross_site(origin, site, self.request.protocol, headers.get("Host"))
        super().prepare()

    def get(self) -> None:
        ex = self.executor
        if self.action == "online":
            ex.online()
        elif self.action == "offline":
            ex.offline()
        elif self.action == "ready" and not ex.is_ready():
            self.write_envelope(503, "server is offline" if ex.is_loaded else "models are loading", False)
            return
        self.write_envelope(200, "OK", True)

    post = get


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


class PredictHandler(PredictBase):
    """POST a GrpsMessage as JSON, or raw bytes as application/octet-stream."""

    default_model = ""  # the model when neither the body nor ?model= names one ("": the DAG)
    protocol = GRPS_HTTP

    def initialize(self, executor: Executor, streaming_ctrl: StreamingCtrl | None = None, **_: Any) -> None:
        super().initialize(executor)
        self.ctrl = streaming_ctrl or StreamingCtrl()

    def _decode(self) -> tuple[Payload, str, bool]:
        """The payload, the model (the body's beats ?model=) and whether to stream."""
        body = self.request.body
        streaming = streaming_requested(self, self.ctrl)
        octets = media_type(self.request.headers) == OCTET_STREAM
        if not octets and self.ctrl.ctrl_mode == "body_param" and body.strip():
            body, streaming = self._pop_body_flag(body)
        payload, model = decode_predict(body, octets, self.executor.server_settings.limits)
        return payload, model, streaming

    def _pop_body_flag(self, body: bytes) -> tuple[bytes, bool]:
        doc = json_values.load(body, limits=self.executor.server_settings.limits)
        if not isinstance(doc, dict) or self.ctrl.ctrl_key not in doc:
            return body, False
        flag = is_true(doc.pop(self.ctrl.ctrl_key))
        return orjson.dumps(doc), flag

    async def post(self) -> None:
        payload, model, streaming = self._decode()
        model = model or self.get_query_argument("model", "") or self.default_model
        timeout_s, priority = self.scheduling()
        ctx = GrpsContext(
            streaming=streaming, request_id=self.request_id, deadline_s=timeout_s, priority=priority
        )
        request = InferRequest(payload, ctx, model, self.request_id, self.protocol)
        response = await self.run(request, self.ctrl.res_content_type)
        if response is None:  # streamed, or the client went away
            return
        self.write_payload(response.payload, is_true(self.get_query_argument("return-ndarray", "false")))


class ServerMetadataHandler(BaseHandler):
    def get(self) -> None:
        self.write_json(grps_json.encode_response(Payload.of_text(self.executor.server_metadata())))

    post = get


class ModelMetadataHandler(BaseHandler):
    """The model is named by the body's str_data (grps), its `model` field, or ?model=."""

    def _model_name(self) -> str:
        name = self.get_query_argument("model", "") or ""
        if self.request.body.strip():
            payload, model = grps_json.decode_request(self.request.body, self.executor.server_settings.limits)
            name = payload.value if payload.kind is PayloadKind.TEXT and payload.value else (model or name)
        return str(name)

    def post(self) -> None:
        meta = self.executor.model_metadata(self._model_name())
        self.write_json(grps_json.encode_response(Payload.of_text(meta)))

    get = post


class DirectPredict(DirectCall):
    """A unary POST /grps/v1/infer/predict, answered without Tornado's web layer (http/direct.py);
    a predict that asks to stream goes to `PredictHandler`."""

    protocol = GRPS_HTTP
    _request: InferRequest | None = None

    def error_body(self, http_status: int, msg: str) -> bytes:
        return grps_json.encode_status(http_status, msg, False)

    def client_gone(self) -> None:
        if self._request is not None:
            self._request.context.cancel()

    async def answer(self) -> tuple[bytes, str, tuple[Header, ...]] | None:
        octets = media_type(self.headers) == OCTET_STREAM
        payload, model = decode_predict(self.body, octets, self.executor.server_settings.limits)
        model = model or self.query_argument("model", "")
        timeout_us = self.control(TIMEOUT_HEADER, TIMEOUT_QUERY)
        priority = self.control(PRIORITY_HEADER, PRIORITY_QUERY) or 0
        ctx = GrpsContext(
            request_id=self.request_id, deadline_s=timeout_us / 1e6 if timeout_us else None, priority=priority
        )
        self._request = request = InferRequest(payload, ctx, model, self.request_id, self.protocol)
        self.mark_started(self.executor.model_key(model))
        response = await self.executor.infer(request)
        # Refused before it is encoded when it could be larger than limits.http_answer_bytes (500).
        payload, limit = plain_payload(response.payload), self.route.policy.answer_bytes
        data = raw_bytes(payload)
        if data is not None:
            check_answer(len(data), limit)
            return data, OCTET_STREAM, ()
        return_ndarray = is_true(self.query_argument("return-ndarray", "false"))
        check_answer(grps_json_bytes(payload, return_ndarray, limit), limit)
        body = grps_json.encode_response(payload, return_ndarray=return_ndarray)
        return body, "application/json", ()


def direct_predict_route(executor: Executor, policy: HttpPolicy, ctrl: StreamingCtrl) -> DirectRoute:
    """Unary predicts only: one that asks to stream (by header or query; a body_param one may) is
    answered by PredictHandler."""

    def unary(route: DirectRoute, start_line: RequestStartLine, headers: HTTPHeaders) -> bool:
        if ctrl.ctrl_mode == "header_param":
            return not is_true(headers.get(ctrl.ctrl_key, "false"))
        if ctrl.ctrl_mode == "query_param":
            query = parse_qs(start_line.path.partition("?")[2], keep_blank_values=True)
            return not is_true((query.get(ctrl.ctrl_key) or ["false"])[-1])
        return False

    return DirectRoute(r"/grps/v1/infer/predict", DirectPredict, executor, policy, accepts=unary)

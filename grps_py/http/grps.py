"""The grps HTTP API: /grps/v1/health/*, /grps/v1/infer/predict, /grps/v1/metadata/*."""

from __future__ import annotations

from typing import Any

import orjson

from grps_py.codecs import grps_json, json_values
from grps_py.codecs.limits import check_length
from grps_py.core.config import StreamingCtrl
from grps_py.core.context import GrpsContext
from grps_py.core.errors import InvalidInput
from grps_py.core.executor import Executor
from grps_py.core.telemetry import GRPS_HTTP
from grps_py.core.types import InferRequest, Payload, PayloadKind
from grps_py.http.base import BaseHandler
from grps_py.http.streaming import OCTET_STREAM, PredictBase, is_true, streaming_requested

ADMIN_ACTIONS = frozenset({"online", "offline"})


class HealthHandler(BaseHandler):
    """online / offline switch the shared flag (admin: loopback or the admin token); live / ready report
    it (open: probes)."""

    def initialize(self, executor: Executor, action: str = "live", **_: Any) -> None:
        super().initialize(executor)
        self.action = action
        self.admin = action in ADMIN_ACTIONS

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


class PredictHandler(PredictBase):
    """POST a GrpsMessage as JSON, or raw bytes as application/octet-stream."""

    default_model = ""  # the model when neither the body nor ?model= names one ("": the DAG)
    protocol = GRPS_HTTP

    def initialize(self, executor: Executor, streaming_ctrl: StreamingCtrl | None = None, **_: Any) -> None:
        super().initialize(executor)
        self.ctrl = streaming_ctrl or StreamingCtrl()

    def _content_type(self) -> str:
        return self.request.headers.get("Content-Type", "").split(";")[0].strip().lower()

    def _decode(self) -> tuple[Payload, str, bool]:
        """The payload, the model (the body's beats ?model=) and whether to stream."""
        body = self.request.body
        streaming = streaming_requested(self, self.ctrl)
        limits = self.executor.server_settings.limits
        if self._content_type() == OCTET_STREAM:
            check_length(len(body), "bin_data", limits)
            return Payload.of_bytes(body), "", streaming
        if not body.strip():
            raise InvalidInput("empty request body; send a GrpsMessage as JSON")
        if self.ctrl.ctrl_mode == "body_param":
            body, streaming = self._pop_body_flag(body)
        payload, model = grps_json.decode_request(body, limits)
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

"""Custom predict routes (`interface.customized_predict_http`), each with its own path and methods.

With `customized_body: false` a route is an alias of /grps/v1/infer/predict. With `true` the model
code reads the raw request through `context.get_http_request()` and answers with
`context.set_http_response(...)`, or streams raw chunks with `customized_http_stream_respond`.
"""

from __future__ import annotations

from typing import Any

import orjson

from grps_py.core.config import CustomizedPredictHttp, StreamingCtrl
from grps_py.core.context import GrpsContext, HttpRequest, HttpResponse
from grps_py.core.executor import Executor
from grps_py.core.telemetry import CUSTOM
from grps_py.core.types import InferRequest, Payload
from grps_py.core.untrusted import shown
from grps_py.http.base import BaseHandler
from grps_py.http.grps import PredictHandler
from grps_py.http.policy import MethodNotAllowed
from grps_py.http.streaming import PredictBase, is_true, streaming_requested

EVENT_STREAM = "text/event-stream"
NO_ROUTE = CustomizedPredictHttp()  # initialize() always receives the route; this keeps the signature


class RouteMethods(BaseHandler):
    """Takes exactly the methods the route's config lists; answers 405 (with Allow) to the others."""

    route: CustomizedPredictHttp

    def allowed_methods(self) -> set[str]:
        return set(self.route.methods)

    def prepare(self) -> None:
        super().prepare()
        if self.request.method not in self.allowed_methods():
            takes = ", ".join(self.route.methods)
            raise MethodNotAllowed(
                f"{shown(self.request.path)} takes {takes}, not {shown(self.request.method)}"
            )


class AliasPredictHandler(RouteMethods, PredictHandler):
    """`customized_body: false`: the grps predict API under the route's own path."""

    protocol = CUSTOM

    def initialize(
        self,
        executor: Executor,
        streaming_ctrl: StreamingCtrl | None = None,
        route: CustomizedPredictHttp = NO_ROUTE,
        **_: Any,
    ) -> None:
        super().initialize(executor, streaming_ctrl=streaming_ctrl or route.streaming_ctrl)
        self.route = route
        self.default_model = route.model

    async def get(self) -> None:
        await self.post()

    put = patch = delete = get


class CustomPredictHandler(RouteMethods, PredictBase):
    """`customized_body: true`: the raw request reaches model code; its answer goes back as set.

    Without an answer set by the model, its output is encoded as on the grps route."""

    protocol = CUSTOM

    def initialize(self, executor: Executor, route: CustomizedPredictHttp = NO_ROUTE, **_: Any) -> None:
        super().initialize(executor)
        self.route = route

    def _http_request(self) -> HttpRequest:
        req = self.request
        query = {k: [v.decode("utf-8", "replace") for v in vs] for k, vs in req.query_arguments.items()}
        return HttpRequest(req.method or "POST", req.path, req.headers, query, self.body, req.remote_ip or "")

    def _streaming(self) -> bool:
        ctrl = self.route.streaming_ctrl
        if ctrl.ctrl_mode != "body_param":
            return streaming_requested(self, ctrl)
        try:  # the model parses the body; an unparsable one simply does not ask to stream
            doc = orjson.loads(self.body)
        except orjson.JSONDecodeError:
            return False
        return isinstance(doc, dict) and is_true(doc.get(ctrl.ctrl_key, False))

    async def post(self) -> None:
        streaming = self._streaming()
        timeout_s, priority = self.scheduling()
        ctx = GrpsContext(
            streaming=streaming,
            http_request=self._http_request(),
            request_id=self.request_id,
            deadline_s=timeout_s,
            priority=priority,
        )
        model = self.get_query_argument("model", "") or self.route.model
        request = InferRequest(Payload.of_bytes(self.body), ctx, model, self.request_id, self.protocol)
        content_type = self.route.streaming_ctrl.res_content_type
        if streaming and content_type.split(";")[0].strip() == EVENT_STREAM:
            self.set_header("Cache-Control", "no-cache")  # proxies must pass events on as they come
            self.set_header("X-Accel-Buffering", "no")
        response = await self.run(request, content_type)
        if response is None:  # streamed, or the client went away
            return
        custom = ctx.get_http_response()
        if custom is None:
            self.write_payload(response.payload)
        else:
            self.write_custom(custom)

    def answer_instead_of_stream(self, request: InferRequest) -> bool:
        custom = request.context.get_http_response()
        if custom is None or request.context.streamed_count:
            return False
        self.clear_header("Cache-Control")  # set for a stream that is not coming
        self.clear_header("X-Accel-Buffering")
        self.write_custom(custom)
        return True

    def write_custom(self, custom: HttpResponse) -> None:
        self.set_status(custom.status)
        self.set_header("Content-Type", custom.content_type)
        for key, value in custom.headers.items():
            self.set_header(key, value)
        self.finish(custom.body_bytes())

    get = put = patch = delete = post

"""A custom predict route whose raw request and response the model code handles itself."""

from __future__ import annotations

from typing import Any

from grps_py.core.config import StreamingCtrl
from grps_py.core.context import GrpsContext, HttpRequest
from grps_py.core.executor import Executor
from grps_py.core.types import InferRequest, Payload
from grps_py.http.streaming import PredictBase, streaming_requested


class CustomPredictHandler(PredictBase):
    """The body reaches model code as bytes and through `context.get_http_request()`.

    The answer is what the model set with `context.set_http_response(...)`, else its output encoded
    as usual. Streamed chunks from `customized_http_stream_respond` are written raw.
    """

    def initialize(self, executor: Executor, streaming_ctrl: StreamingCtrl | None = None, **_: Any) -> None:
        super().initialize(executor)
        self.ctrl = streaming_ctrl or StreamingCtrl()

    def _http_request(self) -> HttpRequest:
        req = self.request
        query = {k: [v.decode("utf-8", "replace") for v in vs] for k, vs in req.query_arguments.items()}
        return HttpRequest(req.method or "POST", req.path, dict(req.headers.items()), query, req.body)

    async def post(self) -> None:
        streaming = streaming_requested(self, self.ctrl)
        timeout_s, priority = self.scheduling()
        ctx = GrpsContext(
            streaming=streaming,
            http_request=self._http_request(),
            request_id=self.request_id,
            deadline_s=timeout_s,
            priority=priority,
        )
        model = self.get_query_argument("model", "") or ""
        request = InferRequest(Payload.of_bytes(self.request.body), ctx, model, self.request_id)
        response = await self.run(request, self.ctrl.res_content_type)
        if response is None:  # streamed, or the client went away
            return
        custom = ctx.get_http_response()
        if custom is not None:
            self.set_status(custom.status)
            self.set_header("Content-Type", custom.content_type)
            for key, value in custom.headers.items():
                self.set_header(key, value)
            self.finish(custom.body)
        else:
            self.write_payload(response.payload)

    get = post

"""Custom predict routes (`interface.customized_predict_http`), each with its own path and methods.

With `customized_body: false` a route is an alias of /grps/v1/infer/predict. With `true` the model
code reads the raw request through `context.get_http_request()` and answers with
`context.set_http_response(...)`, or streams raw chunks with `customized_http_stream_respond`.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Iterator
from typing import Any
from urllib.parse import unquote

import orjson
from tornado.iostream import StreamClosedError

from grps_py.core.config import CustomizedPredictHttp, StreamingCtrl
from grps_py.core.context import GrpsContext, HttpRequest, HttpResponse
from grps_py.core.errors import ModelError
from grps_py.core.executor import Executor
from grps_py.core.request_maps import Headers
from grps_py.core.telemetry import CUSTOM
from grps_py.core.types import InferRequest, Payload
from grps_py.core.untrusted import shown
from grps_py.http.base import BaseHandler
from grps_py.http.grps import PredictHandler
from grps_py.http.policy import MethodNotAllowed, log
from grps_py.http.streaming import PredictBase, abort_connection, is_true, streaming_requested

EVENT_STREAM = "text/event-stream"
NO_ROUTE = CustomizedPredictHttp()  # initialize() always receives the route; this keeps the signature
_END = object()  # what next() gives at the end of a streamed answer's chunks


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
    _chunked: HttpResponse | None = None  # a streamed answer the model set, written after its head

    def initialize(self, executor: Executor, route: CustomizedPredictHttp = NO_ROUTE, **_: Any) -> None:
        super().initialize(executor)
        self.route = route

    def _http_request(self) -> HttpRequest:
        """Plain data about this request alone (model code must not reach the handler through it)."""
        req = self.request
        query = {k: [v.decode("utf-8", "replace") for v in vs] for k, vs in req.query_arguments.items()}
        return HttpRequest(
            req.method or "POST",
            unquote(req.path, errors="replace"),  # Flask's request.path is %-decoded
            Headers(req.headers.get_all()),
            query,
            self.body,
            req.remote_ip or "",
            scheme=req.protocol,
            raw_query=req.query,
        )

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
        try:
            response = await self.run(request, content_type)
        except ModelError as exc:
            if not self._answer_reported_error(ctx, exc):
                raise
            response = None
        if response is not None:
            custom = ctx.get_http_response()
            if custom is None:
                self.write_payload(response.payload)
            else:
                self.write_custom(custom)
        if self._chunked is not None and self._chunked.chunks is not None:
            await self._write_chunks(self._chunked, self._chunked.chunks)

    def _answer_reported_error(self, ctx: GrpsContext, exc: ModelError) -> bool:
        """grps's rule: model code that reported an error on its context (`set_err_msg`) and set an answer
        gets that answer sent (grps's example answers its errors so); the request still counts as failed."""
        custom = ctx.get_http_response()
        if custom is None or not ctx.has_err() or self.answered or ctx.streamed_count:
            return False
        self.log_exception(type(exc), exc, None)
        self._clear_stream_headers()
        self.write_custom(custom)
        return True

    def answer_instead_of_stream(self, request: InferRequest) -> bool:
        custom = request.context.get_http_response()
        if custom is None or request.context.streamed_count:
            return False
        self._clear_stream_headers()
        self.write_custom(custom)
        return True

    def _clear_stream_headers(self) -> None:
        self.clear_header("Cache-Control")  # set for a stream that is not coming
        self.clear_header("X-Accel-Buffering")

    def write_custom(self, custom: HttpResponse) -> None:
        """The model's answer: whole, or (a streamed body) its head now and its chunks in `post`."""
        self.set_status(custom.status)
        self.set_header("Content-Type", custom.content_type)
        named: set[str] = set()
        for key, value in custom.header_lines():
            if key.lower() in named:
                self.add_header(key, value)  # a repeated header (Set-Cookie) is sent once per value
            else:
                self.set_header(key, value)
                named.add(key.lower())
        if custom.chunks is None:
            self.finish(custom.body_bytes())
        else:
            self._chunked = custom

    async def _write_chunks(self, custom: HttpResponse, chunks: Iterator[bytes]) -> None:
        """A streamed answer (a generator, or a flask.Response of one): each chunk written and flushed as
        the model's iterator makes it, on a worker thread (its code may block, as in Flask); it is closed
        at the end, or when the client goes away."""
        loop = asyncio.get_running_loop()
        try:
            while True:
                run = contextvars.copy_context().run  # its log lines under this request's id
                chunk = await loop.run_in_executor(None, run, _next_chunk, chunks)
                if chunk is _END:
                    break
                if not isinstance(chunk, (bytes, bytearray, memoryview)):
                    raise TypeError(f"a streamed chunk is str or bytes, not {type(chunk).__name__}")
                if chunk:
                    self.write(bytes(chunk))
                    await self.flush()
        except StreamClosedError:
            self.cancel()
            return
        except Exception as exc:
            failed = ModelError(f"the model's streamed answer failed: {type(exc).__name__}")
            failed.__cause__ = exc  # the log shows what failed
            if not self._head_sent:
                raise failed from exc
            self.log_exception(type(failed), failed, None)
            abort_connection(self)  # the body is cut short: the client must not take it as whole
            return
        finally:
            if custom.on_close is not None:
                await loop.run_in_executor(None, _quietly, custom.on_close)
        self.finish()

    get = put = patch = delete = post


def _next_chunk(chunks: Iterator[bytes]) -> bytes | object:
    return next(chunks, _END)


def _quietly(close: Any) -> None:
    try:
        close()
    except Exception:  # closing a finished response: nothing the client can be told
        log.debug("closing a streamed answer failed", exc_info=True)

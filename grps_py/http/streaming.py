"""Shared by the predict routes: streaming control, running a request, and writing its answer."""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable

from tornado.iostream import StreamClosedError

from grps_py import status
from grps_py.codecs import grps_json
from grps_py.codecs.answer_size import grps_answer
from grps_py.core.config import StreamingCtrl
from grps_py.core.context import GrpsContext
from grps_py.core.errors import GrpsError
from grps_py.core.types import InferRequest, InferResponse, Payload, PayloadKind
from grps_py.http.base import BaseHandler
from grps_py.http.direct import Answer

TRUE_WORDS = frozenset({"1", "true", "yes", "on"})
OCTET_STREAM = "application/octet-stream"


def is_true(value: object) -> bool:
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() in TRUE_WORDS


def streaming_requested(handler: BaseHandler, ctrl: StreamingCtrl) -> bool:
    """Query or header control (body control is read by the route that parses the body)."""
    if ctrl.ctrl_mode == "query_param":
        return is_true(handler.get_query_argument(ctrl.ctrl_key, "false"))
    if ctrl.ctrl_mode == "header_param":
        return is_true(handler.request.headers.get(ctrl.ctrl_key, "false"))
    return False


def raw_bytes(payload: Payload) -> bytes | None:
    """The bytes of a `bin_data` answer (sent raw over HTTP), else None."""
    if payload.kind is PayloadKind.BYTES:
        return bytes(payload.value)
    if payload.kind is PayloadKind.MESSAGE and payload.value.WhichOneof("data_oneof") == "bin_data":
        return bytes(payload.value.bin_data)
    return None


def abort_connection(handler: BaseHandler) -> None:
    """Drop the handler's connection at once, unsent bytes and all (a client that stopped reading would
    keep a graceful close waiting): its pending flush fails with StreamClosedError, and the handler's
    close callback runs."""
    exchange = handler.request.connection
    connection = getattr(exchange, "connection", None)  # http/connection.py: Exchange -> HttpConnection
    transport = getattr(connection, "transport", None)
    if transport is not None:
        transport.abort()
        return
    stream = getattr(exchange, "stream", None)  # Tornado's own HTTP1Connection, should one serve it
    if stream is not None:
        stream.close()


def abort_on_stall(handler: BaseHandler, ctx: GrpsContext) -> None:
    """A stream whose client takes nothing for `limits.stream_stall_timeout_s` is stopped by the executor,
    which cancels its model; this ends the HTTP request too, by aborting the connection (its flush fails,
    and the request is recorded as one whose client went away)."""
    handler_ref = weakref.ref(handler)  # the handler holds the request and its context: no cycle

    def abort() -> None:
        current = handler_ref()
        if current is not None:
            abort_connection(current)

    ctx.on_stall(abort)


def payload_answer(payload: Payload, return_ndarray: bool, answer_bytes: int) -> Answer:
    """A unary grps answer: `bin_data` raw as octet-stream, anything else as grps JSON, once it is known
    to fit `answer_bytes` (limits.http_answer_bytes; checked before it is encoded: AnswerTooLarge, 500)."""
    payload = grps_answer(payload, return_ndarray, answer_bytes)
    data = raw_bytes(payload)
    if data is not None:
        return Answer(data, OCTET_STREAM)
    return Answer(grps_json.encode_response(payload, return_ndarray=return_ndarray))


def json_line(payload: Payload) -> bytes:
    """One streamed message: raw bytes as they are, anything else one JSON document and a newline."""
    data = raw_bytes(payload)
    return data if data is not None else grps_json.encode_response(payload) + b"\n"


class PredictBase(BaseHandler):
    """Runs one request unary or streaming, and cancels it when the client goes away."""

    _request: InferRequest | None = None
    inference = True

    def on_connection_close(self) -> None:
        if self._request is not None:
            self.cancel_on_close(self._request.context.cancel)
        super().on_connection_close()

    def write_payload(self, payload: Payload, return_ndarray: bool = False) -> None:
        """The unary answer, as the unary route writes it (`payload_answer`)."""
        answer = payload_answer(payload, return_ndarray, self.policy.answer_bytes)
        self.set_header("Content-Type", answer.content_type)
        self.finish(answer.body)

    async def run(self, request: InferRequest, content_type: str) -> InferResponse | None:
        """Stream the answer when the request asked for it (returns None); else return the answer."""
        self.life.start(self.executor.model_key(request.model))
        if request.context.if_streaming():
            await self.run_streaming(request, content_type)
            return None
        return await self.run_unary(request)

    async def run_unary(self, request: InferRequest) -> InferResponse | None:
        """The response, or None when the client went away first."""
        self._request = request
        try:
            return await self.executor.infer(request)
        except asyncio.CancelledError:  # the context's cancel ended the model's wait (scheduler.py)
            return None

    async def run_streaming(
        self, request: InferRequest, content_type: str, encode: Callable[[Payload], bytes] = json_line
    ) -> None:
        """Write each streamed message as one chunk and flush it (the flush waits while the connection's
        buffer is over its limit: backpressure); stop when the client is gone, or stalled."""
        self._request = request
        abort_on_stall(self, request.context)
        started = False
        try:
            async for response in self.executor.infer_stream(request):
                response.payload = grps_answer(response.payload, False, self.policy.answer_bytes)
                if not started:
                    if self.answer_instead_of_stream(request):
                        return
                    self.set_header("Content-Type", content_type)
                    started = True
                self.write(encode(response.payload))
                await self.flush()
        except (StreamClosedError, asyncio.CancelledError):
            self.cancel()
            request.context.cancel()
            return
        except GrpsError as exc:
            if not started:
                raise
            # Headers are gone: the error travels as the stream's last message (and in the record).
            code = self.fail(exc)
            self.write(grps_json.encode_status(code, status.public_message(exc), False) + b"\n")
        if not started and self.answer_instead_of_stream(request):
            return
        if not self.answered:
            self.finish()

    def answer_instead_of_stream(self, request: InferRequest) -> bool:
        """Whether the model answered a streaming request with one whole answer instead, which has
        then been written (custom routes: an error set with `set_http_response` before streaming)."""
        return False

"""Per-request context handed to model code: user data, errors, streaming, cancellation, raw HTTP.

Model code usually runs in a worker thread, so every method that touches the event loop is
thread-safe: streamed items are handed to the loop with `call_soon_threadsafe`, which keeps their
order and delivers every one queued before the model returns.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from grps_py.core.custom_http import HttpRequest, HttpResponse, make_response
from grps_py.core.types import Payload

__all__ = ["STREAM_END", "GrpsContext", "HttpRequest", "HttpResponse", "StreamEnd"]


class StreamEnd:
    """Sentinel closing a response stream."""


STREAM_END = StreamEnd()


class GrpsContext:
    """The context of one request, as grps model code knows it.

    grps's own signature `GrpsContext(grpc_context=None, http_request=None)` is accepted too, so grps
    code that builds a context (its template's test.py does) runs unchanged. `grpc_context` is ignored:
    here the server passes cancellation and the deadline through `cancel()` and `deadline_s`.
    """

    def __init__(
        self,
        grpc_context: object = None,
        http_request: HttpRequest | None = None,
        *,
        streaming: bool = False,
        deadline_s: float | None = None,
        request_id: str = "",
        parameters: dict[str, Any] | None = None,
        priority: int = 0,
    ) -> None:
        self.request_id = request_id
        self.priority = priority  # 1 is the highest level; 0 takes the model's default
        # Request parameters (OIP `parameters`): str, int, float or bool values by name.
        self.parameters: dict[str, Any] = dict(parameters) if parameters else {}
        self._streaming = streaming
        self._http_request = http_request
        self._deadline = None if deadline_s is None else time.monotonic() + deadline_s
        self._on_cancel: list[Callable[[], object]] = []

    # What most requests never change is set on the class: a context is made per request.
    _http_response: HttpResponse | None = None
    _user_data: dict[Any, Any] | None = None  # made on the first put_user_data
    _has_err = False
    _err_msg = ""
    # Set on the loop thread, read by model threads: a plain flag is enough (no waiting on it).
    _disconnected = False
    _loop: asyncio.AbstractEventLoop | None = None
    _loop_thread: int | None = None
    _sink: asyncio.Queue[Any] | None = None
    _streamed = 0
    _stream_closed = False  # a message sent with final=True was the last one
    # Set by the model node while its code runs, for stream_respond_with_postprocess.
    postprocess: Callable[[Any], Payload] | None = None

    # -- user data and errors ------------------------------------------------------------------
    def put_user_data(self, key: Any, value: Any) -> None:
        if self._user_data is None:
            self._user_data = {}
        self._user_data[key] = value

    def get_user_data(self, key: Any, default: Any = None) -> Any:
        return default if self._user_data is None else self._user_data.get(key, default)

    def set_has_err(self, has_err: bool = True) -> None:
        self._has_err = bool(has_err)

    def has_err(self) -> bool:
        return self._has_err

    def set_err_msg(self, msg: str) -> None:
        self._err_msg = str(msg)
        self._has_err = True

    def get_err_msg(self) -> str:
        return self._err_msg

    def get_parameter(self, key: str, default: Any = None) -> Any:
        """A request parameter (OIP `parameters`), or `default` when the request did not send it."""
        return self.parameters.get(key, default)

    # -- streaming -----------------------------------------------------------------------------
    def if_streaming(self) -> bool:
        return self._streaming

    def attach_stream(self, loop: asyncio.AbstractEventLoop, sink: asyncio.Queue[Any]) -> None:
        """Called by the executor on the loop thread before model code runs."""
        self._loop = loop
        self._loop_thread = threading.get_ident()
        self._sink = sink

    @property
    def streamed_count(self) -> int:
        return self._streamed

    def _push(self, item: Any, final: bool) -> None:
        if self._sink is None or self._loop is None or self._disconnected or self._stream_closed:
            return
        self._stream_closed = final
        self._streamed += 1
        if threading.get_ident() == self._loop_thread:
            self._sink.put_nowait(item)
        else:
            self._loop.call_soon_threadsafe(self._sink.put_nowait, item)

    def stream_respond(self, msg: Any, final: bool = False) -> None:
        """Send one message of a streaming answer (a GrpsMessage, or a Payload). Ignored unless streaming.

        `final=True` marks the last message: later ones are dropped; the stream ends when the model
        code returns."""
        if not self._streaming:
            return
        self._push(msg if isinstance(msg, Payload) else Payload.of_message(msg), final)

    def stream_respond_with_postprocess(self, out: Any, final: bool = False) -> None:
        """Run the model's converter postprocess on `out`, then stream the result."""
        if not self._streaming:
            return
        if self.postprocess is None:
            raise RuntimeError("stream_respond_with_postprocess is only available while model code runs")
        self._push(self.postprocess(out), final)

    def customized_http_stream_respond(self, data: bytes | str, final: bool = False) -> None:
        """Send one raw chunk of a custom HTTP route's streaming answer (written as is, flushed at once,
        e.g. one server-sent event `data: ...\n\n`); `final` as for `stream_respond`."""
        if not self._streaming:
            return
        self._push(Payload.of_bytes(data.encode() if isinstance(data, str) else bytes(data)), final)

    # -- cancellation and deadline -------------------------------------------------------------
    def if_disconnected(self) -> bool:
        return self._disconnected

    def cancel(self) -> None:
        """The client went away: model code sees `if_disconnected()` turn true."""
        if self._disconnected:
            return
        self._disconnected = True
        for callback in self._on_cancel:
            callback()

    def on_cancel(self, callback: Callable[[], object]) -> None:
        self._on_cancel.append(callback)

    def time_remaining(self) -> float | None:
        return None if self._deadline is None else self._deadline - time.monotonic()

    # -- custom HTTP ---------------------------------------------------------------------------
    def get_http_request(self) -> HttpRequest | None:
        return self._http_request

    def set_http_response(
        self,
        body: Any,
        status: int = 200,
        content_type: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        """The custom route's answer: str (text/plain), bytes (octet-stream), a dict or list (JSON),
        an HttpResponse, or a (body, status[, headers]) tuple. `content_type` overrides the default."""
        self._http_response = make_response(body, status, content_type, headers)

    def get_http_response(self) -> HttpResponse | None:
        return self._http_response

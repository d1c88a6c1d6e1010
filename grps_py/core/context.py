"""Per-request context handed to model code: user data, errors, streaming, cancellation, raw HTTP.

Model code usually runs in a worker thread, so every method that touches the event loop is
thread-safe: streamed items go through a `StreamSink`, which keeps their order, delivers every one
pushed before the model returns, and holds at most `limits.stream_buffer_messages` of them: past that a
push waits (on the model's thread, never on the loop) until the transport takes one, or the stream ends.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from grps_py.core.custom_http import HttpRequest, HttpResponse, make_response
from grps_py.core.types import Payload

__all__ = ["STREAM_END", "GrpsContext", "HttpRequest", "HttpResponse", "StreamEnd", "StreamSink"]


class StreamEnd:
    """Sentinel closing a response stream."""


STREAM_END = StreamEnd()
_WAIT_SLICE_S = 1.0  # how often a waiting push checks that the loop still runs (server exit)


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class StreamSink:
    """The bounded hand-off of one response stream, from model code to the executor on the loop.

    `push` (model code, any thread) waits while `limit` messages are untaken, until half of them are
    (so a waiting model thread is woken once per `limit / 2` messages, not per message), and is refused
    once the sink is closed. `put` (the executor, on the loop) never waits: the model's answer, a
    failure, the end, at most a few. `get` (on the loop) takes the next item; pushes made while it is
    not waiting wake the loop not at all."""

    def __init__(self, loop: asyncio.AbstractEventLoop, limit: int) -> None:
        self._loop = loop
        self._loop_thread = threading.get_ident()  # made on the loop
        self._limit = max(1, limit)
        self._low = self._limit // 2  # a full sink lets its pushes go on once it is down to this
        self._items: deque[Any] = deque()
        self._lock = threading.Lock()
        self._room = threading.Condition(self._lock)  # pushes waiting on a thread
        self._pushers = 0  # how many wait on `_room`
        self._room_futures: list[asyncio.Future[None]] = []  # async model code waiting (`drain`)
        self._taker: asyncio.Future[None] | None = None  # `get` waiting for an item
        self.closed = False

    def push(self, item: Any) -> bool:
        """Queue a message of model code; False (dropped) once the stream is closed. On a model's thread
        this waits while the sink is full; on the loop (async model code) it cannot wait, so the message
        is queued at once (`drain` is the async way to wait)."""
        on_loop = threading.get_ident() == self._loop_thread
        with self._lock:
            while not on_loop and len(self._items) >= self._limit and not self.closed:
                self._pushers += 1
                try:
                    self._room.wait(_WAIT_SLICE_S)
                finally:
                    self._pushers -= 1
                if self._loop.is_closed():
                    self.closed = True
            if self.closed:
                return False
            self._items.append(item)
            taker, self._taker = self._taker, None
        if taker is not None:
            if on_loop:
                _wake(taker)
            else:
                self._loop.call_soon_threadsafe(_wake, taker)
        return True

    def put(self, item: Any) -> None:
        """On the loop: queue an item of the executor's own (never waits, never refused)."""
        with self._lock:
            self._items.append(item)
            taker, self._taker = self._taker, None
        if taker is not None:
            _wake(taker)

    async def get(self) -> Any:
        """On the loop: the next item, once there is one."""
        while True:
            with self._lock:
                if self._items:
                    item = self._items.popleft()
                    if len(self._items) <= self._low:  # a waiting push goes on only below the low mark:
                        if self._pushers:  # it then pushes many before it waits again, not one each time
                            self._room.notify()
                        if self._room_futures:
                            room, self._room_futures = self._room_futures, []
                            for future in room:
                                _wake(future)
                    return item
                taker = self._taker = self._loop.create_future()
            await taker

    @property
    def backlog(self) -> int:
        """Messages queued and not yet taken by the stream's consumer."""
        return len(self._items)

    async def drain(self) -> None:
        """On the loop: wait until the sink has room (or is closed)."""
        while len(self._items) >= self._limit and not self.closed:
            future = self._loop.create_future()
            self._room_futures.append(future)
            await future

    def close(self) -> None:
        """On the loop: the stream is over (its client is gone, or it stalled): waiting pushes return,
        later ones are dropped."""
        with self._lock:
            self.closed = True
            self._room.notify_all()
            room, self._room_futures = self._room_futures, []
        for future in room:
            _wake(future)


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
    _sink: StreamSink | None = None
    _streamed = 0
    # Set when the stream was stopped because its client took nothing for this many seconds.
    stalled_s: float | None = None
    _on_stall: list[Callable[[], object]] | None = None
    _stream_closed = False  # a message sent with final=True was the last one
    # Set by the model node while its code runs, for stream_respond_with_postprocess.
    postprocess: Callable[[Any], Payload] | None = None
    # The converter and inferer running the request (grps's `context.converter` / `.inferer`).
    _converter: Any = None
    _inferer: Any = None

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

    def attach_stream(self, sink: StreamSink) -> None:
        """Called by the executor on the loop thread before model code runs."""
        self._sink = sink

    @property
    def streamed_count(self) -> int:
        return self._streamed

    def _push(self, item: Any, final: bool) -> None:
        sink = self._sink
        if sink is None or self._disconnected or self._stream_closed:
            return
        self._stream_closed = final
        self._streamed += 1
        sink.push(item)  # waits while the client is behind; dropped once it is gone

    def stream_respond(self, msg: Any, final: bool = False) -> None:
        """Send one message of a streaming answer (a GrpsMessage, or a Payload). Ignored unless streaming.

        While `limits.stream_buffer_messages` messages wait for the client, this waits (the model's
        thread, not the server) until the client takes one. Once the client is gone, or stopped taking
        messages for `limits.stream_stall_timeout_s`, it returns at once and drops the message, and
        `if_disconnected()` is true. `final=True` marks the last message: later ones are dropped; the
        stream ends when the model code returns."""
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

    def stream_backlog(self) -> int:
        """Streamed messages the client has not taken yet (0 when not streaming): model code may send
        what it has in fewer, larger messages while the client is behind."""
        return 0 if self._sink is None else self._sink.backlog

    async def stream_drain(self) -> None:
        """For `async def` model code, which runs on the event loop where `stream_respond` cannot wait:
        wait until the stream's buffer has room again (at once when it has, or the client is gone)."""
        if self._sink is not None:
            await self._sink.drain()

    # -- cancellation and deadline -------------------------------------------------------------
    def if_disconnected(self) -> bool:
        return self._disconnected

    def cancel(self) -> None:
        """The client went away: model code sees `if_disconnected()` turn true. On the loop thread."""
        if self._disconnected:
            return
        self._disconnected = True
        if self._sink is not None:
            self._sink.close()
        for callback in self._on_cancel:
            callback()

    def on_cancel(self, callback: Callable[[], object]) -> None:
        self._on_cancel.append(callback)

    def stop_stalled(self, stalled_s: float) -> None:
        """The client took no streamed message for `stalled_s`: cancel (the model sees
        `if_disconnected()`), then let the transport end the request (`on_stall`). On the loop thread."""
        if self._disconnected:
            return
        self.stalled_s = stalled_s
        self.cancel()
        for callback in self._on_stall or ():
            callback()

    def on_stall(self, callback: Callable[[], object]) -> None:
        """How the transport ends a request whose client stopped taking its stream."""
        if self._on_stall is None:
            self._on_stall = []
        self._on_stall.append(callback)

    def stream_over(self) -> None:
        """The executor is done with the stream: drop the `on_stall` callbacks (they hold the transport's
        request, which holds this context: no cycle is left for the cyclic GC)."""
        self._on_stall = None

    def time_remaining(self) -> float | None:
        return None if self._deadline is None else self._deadline - time.monotonic()

    # -- the model running the request (grps) -------------------------------------------------
    def set_converter(self, converter: Any) -> None:
        """Called by the server where a model's instance takes the request (grps's name)."""
        self._converter = converter

    def set_inferer(self, inferer: Any) -> None:
        """Called by the server where a model's instance takes the request (grps's name)."""
        self._inferer = inferer

    @property
    def converter(self) -> Any:
        """The converter of the model running this request; None for `converter_type: none` (grps has
        no converter then: the instance sets None) and outside model code."""
        return self._converter

    @property
    def inferer(self) -> Any:
        """The inferer of the model running this request; None outside model code."""
        return self._inferer

    # -- custom HTTP ---------------------------------------------------------------------------
    def get_http_request(self) -> HttpRequest | None:
        return self._http_request

    def set_http_response(
        self,
        body: Any,
        status: int = 200,
        content_type: str | None = None,
        headers: Mapping[str, str] | list[tuple[str, str]] | None = None,
    ) -> None:
        """The custom route's answer: str (text/plain), bytes (octet-stream), a dict or list (JSON), an
        iterator (streamed), an HttpResponse or flask.Response, or a (body, status), (body, headers) or
        (body, status, headers) tuple. `content_type` overrides the default."""
        self._http_response = make_response(body, status, content_type, headers)

    def get_http_response(self) -> HttpResponse | None:
        return self._http_response

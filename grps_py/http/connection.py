"""One HTTP/1.1 connection: httptools parses it, the Tornado Application answers its requests.

Tornado's own connection (HTTP1Connection on an IOStream) costs about 0.17 ms of CPU per small request
here: the head is found with a regex and parsed in Python, and each request runs two coroutines and a
chain of futures. This asyncio Protocol feeds the bytes to httptools (llhttp, in C) and hands each
request to the Application through Tornado's HTTPConnection interface, so the handlers are unchanged.
It keeps Tornado's behaviour: keep-alive rules, chunked answers without a Content-Length, 100-continue
after the handler's `prepare`, a bare 400 for a malformed request, closing after an answer given before
the body was read, and requests pipelined on one connection answered in order.

What it adds, against clients that would hold memory or desynchronise the framing:
- a request's head and its chunked trailers together are held to `limits.header_bytes`, counted per
  message (complete requests that arrived in the same read do not count); over it nothing more is read
  and the connection closes once the requests ahead are answered, leaving this one unanswered (as
  Tornado does for a head too large);
- a malformed request (400: llhttp parses strictly), a Transfer-Encoding other than `chunked` (501, or
  400 when `chunked` is not the last coding or the request is HTTP/1.0), conflicting Content-Length or
  Transfer-Encoding headers (400), an `Expect` other than `100-continue` (417), a version other than
  HTTP/1.0 and HTTP/1.1 (505): answered once the requests ahead of it on the connection are, and the
  connection closed; nothing after it is read (tests/http/test_http_differential.py holds the framing
  to h11's);
- write backpressure: past `limits.write_buffer_bytes` of answers the client has not taken, the
  connection reads no more requests and begins no pipelined one until the buffer drains, and what a
  client sends behind a request waiting its turn stays unparsed; a connection whose client takes
  nothing for `limits.idle_timeout_s` is aborted (see `sweep`), closing or not;
- an HTTP/1.0 answer with no Content-Length (a stream) ends by closing the connection, and a
  connection llhttp reads as ending (`Connection: close, ...`) is not kept alive.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import re
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

import httptools
from tornado import httputil
from tornado.iostream import StreamClosedError

if TYPE_CHECKING:
    from grps_py.http.listener import HttpListener

log = logging.getLogger("grps_py.http")
app_log = logging.getLogger("tornado.application")  # where Tornado logs what a delegate raised


def bare(status: str) -> bytes:
    """An answer of its status alone, after which the connection closes."""
    return f"HTTP/1.1 {status}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n".encode("ascii")


BAD_REQUEST = bare("400 Bad Request")
EXPECTATION_FAILED = bare("417 Expectation Failed")
NOT_IMPLEMENTED = bare("501 Not Implemented")
VERSION_NOT_SUPPORTED = bare("505 HTTP Version Not Supported")
CONTINUE = b"HTTP/1.1 100 (Continue)\r\n\r\n"
NO_BODY_STATUSES = (204, 304)
# A Host header's value (RFC 3986 host [":" port]: an IP literal, or a name of unreserved, %-encoded
# and sub-delim characters but the comma, which joins two values).
HOST = re.compile(r"(?:\[[0-9A-Fa-f:.vV]+\]|[A-Za-z0-9\-._~!$&'()*+;=%]*)(?::[0-9]*)?")
FEED_BYTES = 16384  # parsed at a time: what arrives past a request that must wait stays unparsed
FIRST_REQUEST_WAIT_S = 1.0  # how long the drain waits for the first request of a connection it took in


class RequestContext:
    """What HTTPServerRequest reads from `connection.context`: the peer's address and the scheme."""

    __slots__ = ("address", "protocol", "remote_ip")

    def __init__(self, address: Any, protocol: str) -> None:
        self.address = address
        self.remote_ip = address[0] if isinstance(address, tuple) else "0.0.0.0"
        self.protocol = protocol

    def __str__(self) -> str:
        return str(self.remote_ip)


def closed_future() -> asyncio.Future[None]:
    future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    future.set_exception(StreamClosedError())
    future.exception()  # retrieved: a writer that does not wait for it logs nothing
    return future


def replaced(headers: list[tuple[str, str]], name: str, value: str) -> list[tuple[str, str]]:
    """`headers` with `name` set to `value` alone."""
    return [(key, text) for key, text in headers if key != name] + [(name, value)]


class Exchange(httputil.HTTPConnection):
    """One request and its answer: Tornado's HTTPConnection for the request's handler.

    Its events (head, body pieces, end) are delivered to the Application's delegate while the exchange
    is the connection's current one and its head has been taken (`prepare` ran); until then they wait
    here, in order."""

    __slots__ = (
        "_chunking",
        "_close_callback",
        "_delegate",
        "_expected_remaining",
        "_pending",
        "_waiting",
        "begun",
        "connection",
        "context",
        "disconnect_on_finish",
        "head",
        "read_finished",
        "write_finished",
        "wrote_headers",
    )

    def __init__(self, connection: HttpConnection) -> None:
        self.connection = connection
        self.context = connection.context
        self.head: tuple[httputil.RequestStartLine, httputil.HTTPHeaders] | None = None
        self._delegate: httputil.HTTPMessageDelegate | None = None
        self._pending: list[bytes | None] = []  # body pieces not yet delivered; None: the end
        self._waiting = True  # not current yet, or the handler has not taken the head yet
        self._close_callback: Callable[[], None] | None = None
        self._chunking = False
        self._expected_remaining: int | None = None
        self.begun = False  # its head went to the Application
        self.read_finished = False
        self.write_finished = False
        self.wrote_headers = False
        self.disconnect_on_finish = False

    # -- the request, in -----------------------------------------------------------------------
    def headers_received(self, start_line: httputil.RequestStartLine, headers: httputil.HTTPHeaders) -> None:
        self.head = (start_line, headers)
        self.disconnect_on_finish = not self.connection.can_keep_alive(start_line, headers)

    def body_received(self, piece: bytes | None) -> None:
        """A piece of the body, or the end (None)."""
        if self._waiting:
            self._pending.append(piece)
        else:
            self._deliver(piece)

    def begin(self) -> None:
        """The exchange became the connection's current one: hand its head to the Application."""
        assert self.head is not None
        start_line, headers = self.head
        connection = self.connection
        self.begun = True
        connection.body_started(self)
        direct = connection.listener.direct
        call = direct.call_for(self, start_line, headers) if direct is not None else None
        delegate = call if call is not None else connection.listener.app.start_request(connection, self)
        self._delegate = delegate
        try:
            taken = delegate.headers_received(start_line, headers)
        except httputil.HTTPInputError as exc:  # the request itself is malformed (its Host, its query)
            log.info("malformed HTTP request from %s: %s", self.context, exc)
            connection.answer_bad_request()
            return
        except Exception:
            app_log.error("Uncaught exception", exc_info=True)
            connection.close()
            return
        if taken is None or (isinstance(taken, asyncio.Future) and taken.done()):
            self._headers_taken(None)
        else:
            asyncio.ensure_future(taken).add_done_callback(self._headers_taken)

    def _headers_taken(self, _future: object) -> None:
        assert self.head is not None
        if self.connection.closed:
            return
        start_line, headers = self.head
        if (
            headers.get_list("Expect")  # (get_list: no KeyError raised and caught for a missing header)
            and start_line.version == "HTTP/1.1"  # (an HTTP/1.0 client expects no interim answer)
            and not self.write_finished
        ):  # (any other expectation was refused: see `refused`)
            self.connection.transport_write(CONTINUE)
        self._waiting = False
        pending, self._pending = self._pending, []
        for piece in pending:
            self._deliver(piece)

    def _deliver(self, piece: bytes | None) -> None:
        delegate = self._delegate
        if delegate is None:  # answered and released already: the rest of the body is not wanted
            return
        if piece is not None:
            if not self.write_finished:
                delegate.data_received(piece)
            return
        self.read_finished = True
        self.connection.body_done(self)
        if self.write_finished:
            self._release()
            return
        try:
            delegate.finish()
        except Exception:
            app_log.error("Uncaught exception", exc_info=True)
            self.connection.close()

    def connection_lost(self) -> None:
        """Tell whoever listens that the connection closed before this exchange was done."""
        delegate, callback = self._delegate, self._close_callback
        self._release()
        if delegate is None or self.write_finished:
            return
        if not self.read_finished:
            delegate.on_connection_close()
        elif callback is not None:
            callback()

    def _release(self) -> None:
        """Let go of the handler: the request holds this exchange as its connection, and the cycle
        would keep the request's body (megabytes, maybe) until the cyclic GC came by."""
        self._delegate = None
        self._close_callback = None
        self._pending = []

    # -- the answer, out (Tornado's HTTPConnection) ---------------------------------------------
    def set_close_callback(self, callback: Callable[[], None] | None) -> None:
        self._close_callback = callback

    def set_body_timeout(self, timeout: float) -> None:
        """The listener's body timeout applies to every request (see http/listener.py)."""

    def set_max_body_size(self, max_body_size: int) -> None:
        """The handlers enforce the body limit themselves (http/base.py)."""

    def write_headers(
        self,
        start_line: httputil.RequestStartLine | httputil.ResponseStartLine,
        headers: httputil.HTTPHeaders,
        chunk: bytes | None = None,
    ) -> asyncio.Future[None]:
        assert isinstance(start_line, httputil.ResponseStartLine)
        return self.write_head(start_line.code, start_line.reason, list(headers.get_all()), chunk)

    def write_head(
        self, code: int, reason: str, headers: list[tuple[str, str]], chunk: bytes | None = None
    ) -> asyncio.Future[None]:
        """Write the answer's head (header names as HTTPHeaders spells them) and maybe its first piece."""
        assert self.head is not None
        request_line = self.head[0]
        names = {name for name, _ in headers}
        self._chunking = (
            request_line.version == "HTTP/1.1"
            and request_line.method != "HEAD"
            and code not in NO_BODY_STATUSES
            and not 100 <= code < 200
            and "Content-Length" not in names
            and "Transfer-Encoding" not in names
        )
        if self.connection.draining:
            self.disconnect_on_finish = True
        if request_line.version == "HTTP/1.1":
            if self.disconnect_on_finish:
                headers = replaced(headers, "Connection", "close")
        elif not (
            "Content-Length" in names
            or request_line.method == "HEAD"
            or code in NO_BODY_STATUSES
            or 100 <= code < 200
        ):  # HTTP/1.0 has no chunking: an answer without a length ends where the connection does
            self.disconnect_on_finish = True
        elif not self.disconnect_on_finish:  # (an HTTP/1.0 connection is kept only when asked for)
            headers = replaced(headers, "Connection", "Keep-Alive")
        if self._chunking:
            headers.append(("Transfer-Encoding", "chunked"))
        if request_line.method == "HEAD" or code == 304:
            self._expected_remaining = 0
        elif "Content-Length" in names:
            self._expected_remaining = int(next(value for name, value in headers if name == "Content-Length"))
        lines = [f"HTTP/1.1 {code} {reason}"]
        lines.extend(f"{name}: {value}" for name, value in headers)
        text = "\r\n".join(lines)
        breaks = len(lines) - 1
        if text.count("\n") != breaks or text.count("\r") != breaks:  # a CR or LF inside a line
            raise ValueError(f"illegal characters (CR or LF) in a header: {text!r}")
        head = (text + "\r\n\r\n").encode("latin1")
        self.wrote_headers = True
        if chunk:
            head += self._framed(chunk)
        return self.connection.write(head)

    def write(self, chunk: bytes) -> asyncio.Future[None]:
        return self.connection.write(self._framed(chunk))

    def _framed(self, chunk: bytes) -> bytes:
        if self._expected_remaining is not None:
            self._expected_remaining -= len(chunk)
            if self._expected_remaining < 0:
                self.connection.close()
                raise httputil.HTTPOutputError("Tried to write more data than Content-Length")
        if self._chunking and chunk:
            return b"%x\r\n%b\r\n" % (len(chunk), chunk)
        return chunk

    def finish(self) -> None:
        connection = self.connection
        if self._expected_remaining and not connection.closed:
            connection.close()
            raise httputil.HTTPOutputError(
                f"Tried to write {self._expected_remaining} bytes less than Content-Length"
            )
        if self._chunking:
            connection.write(b"0\r\n\r\n")
        self.write_finished = True
        if self.read_finished:
            self._release()
        else:
            self.disconnect_on_finish = True  # answered before its body was read: the rest is not read
        connection.exchange_done(self)


class HttpConnection(asyncio.Protocol):
    """A client connection: parses requests as they arrive and answers them in order."""

    def __init__(self, listener: HttpListener) -> None:
        self.listener = listener
        self.transport: asyncio.Transport | None = None
        self.context = RequestContext(None, "http")
        self.closed = False
        self.due: float | None = None  # when the sweep closes it (idle, or a body too slow); None: never
        self._parser = httptools.HttpRequestParser(self)
        self._exchanges: deque[Exchange] = deque()  # the current one first, then those pipelined
        self._parsing: Exchange | None = None  # the exchange whose bytes are arriving
        self._url: list[bytes] = []
        self._headers: list[tuple[bytes, bytes]] = []
        # The current message's head and trailers against limits.header_bytes: what the callbacks handed
        # over (target, header lines), and the reads that lay wholly inside its head or its trailers
        # (httptools holds a header line that spans reads until it ends: those reads bound it).
        self._head_bytes = 0
        self._head_reads = 0
        self._in_head = False  # inside a head, or a chunk's header and maybe the trailers after it
        self._heads = 0  # heads (and chunk headers) begun: tells whether a read stayed inside one
        self._rejection: bytes | None = None  # the answer to a request refused, once those ahead are
        self._write_paused = False
        self._drained: list[asyncio.Future[None]] = []
        self._lost: asyncio.Future[None] | None = None
        self._reading_paused = False
        self._unparsed = b""  # received while (or after) reading paused: parsed when it resumes
        self._unsent = 0  # the write buffer at the last sweep that saw it shrink (or fill)
        self._stall_due: float | None = None  # aborted then, unless the client takes some of it
        self._awaiting_first_until = 0.0  # before any byte came: not idle to the drain until then

    @property
    def draining(self) -> bool:
        return self.listener.no_keep_alive

    # -- asyncio.Protocol -----------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports do not derive from it
        self.context = RequestContext(transport.get_extra_info("peername"), self.listener.scheme)
        self._lost = asyncio.get_running_loop().create_future()
        if not self.listener.admit(self):
            self.closed = True
            return
        self.transport.set_write_buffer_limits(high=self.listener.write_buffer_bytes)
        self.due = self.listener.idle_due()
        self._awaiting_first_until = time.monotonic() + FIRST_REQUEST_WAIT_S

    def data_received(self, data: bytes) -> None:
        self._awaiting_first_until = 0.0
        if self.closed or self._rejection is not None:
            return
        if self._unparsed or self._reading_paused:  # behind bytes not parsed yet: in order
            self._unparsed += data
        elif len(data) <= FEED_BYTES:
            self._parse(data)
        else:
            self._feed(data)

    def _feed(self, data: bytes) -> None:
        """Parse `data` a piece at a time; once reading pauses (a pipelined request waits its turn, or
        answers wait unsent) the rest waits in `_unparsed`, so a client's backlog costs no memory."""
        view = memoryview(data)
        for at in range(0, len(data), FEED_BYTES):
            if self.closed or self._rejection is not None:
                return
            if self._reading_paused:
                self._unparsed = bytes(view[at:])
                return
            self._parse(view[at : at + FEED_BYTES])

    def _parse(self, piece: bytes | memoryview) -> None:
        heads = self._heads
        try:
            self._parser.feed_data(piece)
        except httptools.HttpParserUpgrade:
            self.reject(b"")  # no protocol upgrades here: answer what came, then close
            return
        except httptools.HttpParserError as exc:
            if not self.closed and self._rejection is None:  # (not refused by a callback already)
                log.info("malformed HTTP request from %s: %s", self.context, exc)
                self.reject(BAD_REQUEST)
            return
        if self._in_head and self._heads == heads:  # the whole piece lay inside one head (or trailers)
            self._head_reads += len(piece)
            if self._head_reads > self.listener.header_bytes:
                self.reject(b"")  # as Tornado does: a head over the limit is not answered

    def _read_on(self) -> None:
        """Reading resumed: parse what arrived while it was paused (unless it paused again since)."""
        if self._reading_paused:
            return
        data, self._unparsed = self._unparsed, b""
        if data and not self.closed and self._rejection is None:
            self._feed(data)  # (pieces of FEED_BYTES: it stops where reading pauses again)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.listener.forget(self)
        if self._exchanges:
            self._exchanges[0].connection_lost()
        self._exchanges.clear()
        self._parsing = None
        for waiter in self._drained:
            if not waiter.done():
                waiter.set_exception(StreamClosedError())
                waiter.exception()
        self._drained.clear()
        if self._lost is not None and not self._lost.done():
            self._lost.set_result(None)

    def pause_writing(self) -> None:
        """Past limits.write_buffer_bytes unsent: read and begin nothing more until it drains."""
        self._write_paused = True
        self._pause_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        self._stall_due = None  # the client took some: progress
        waiters, self._drained = self._drained, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)
        if self._exchanges and not self._exchanges[0].begun:
            asyncio.get_running_loop().call_soon(self._begin_next, context=contextvars.Context())
        self._resume_reading()

    # -- httptools callbacks ------------------------------------------------------------------
    def on_message_begin(self) -> None:
        if self.closed:
            raise httptools.HttpParserCallbackError("the connection is closed")
        exchange = Exchange(self)
        self._parsing = exchange
        self._exchanges.append(exchange)
        self._url = []
        self._headers = []
        self._head_bytes = self._head_reads = 0
        self._in_head = True
        self._heads += 1

    def on_url(self, url: bytes) -> None:
        self._url.append(url)
        self._head_bytes += len(url)
        if self._head_bytes > self.listener.header_bytes:
            self._head_too_large()

    def on_header(self, name: bytes, value: bytes) -> None:
        """A header of the head, or a trailer (kept, within the limit, until the next request; unused:
        Tornado ignores trailers)."""
        self._head_bytes += len(name) + len(value) + 4
        if self._head_bytes > self.listener.header_bytes:
            self._head_too_large()
        self._headers.append((name, value))

    def _head_too_large(self) -> None:
        self.reject(b"")  # as Tornado does: a head over the limit is not answered
        raise httptools.HttpParserCallbackError("the head is over limits.header_bytes")

    def on_headers_complete(self) -> None:
        exchange = self._parsing
        assert exchange is not None
        self._in_head = False
        parser = self._parser
        version = "HTTP/" + parser.get_http_version()
        start_line = httputil.RequestStartLine(
            parser.get_method().decode("ascii"), b"".join(self._url).decode("latin1"), version
        )
        headers = httputil.HTTPHeaders()
        for name, value in self._headers:
            headers.add(name.decode("latin1"), value.decode("latin1").strip())
        refusal = refused(version, headers)
        if refusal is not None:
            log.info("refused an HTTP request from %s: %s", self.context, refusal.split(b"\r\n", 1)[0])
            self.reject(refusal)
            raise httptools.HttpParserCallbackError("the request is refused")
        exchange.headers_received(start_line, headers)
        if exchange is self._exchanges[0] and not self._write_paused:
            exchange.begin()
        else:  # pipelined behind an unanswered request (or answers unsent): read on once it is answered
            self._pause_reading()

    def on_chunk_header(self) -> None:
        self._in_head = True  # a chunk's data follows, or (after the last one) the trailers
        self._heads += 1

    def on_chunk_complete(self) -> None:
        self._in_head = False

    def on_body(self, piece: bytes) -> None:
        self._in_head = False
        if self._parsing is not None:
            self._parsing.body_received(piece)

    def on_message_complete(self) -> None:
        self._in_head = False
        exchange, self._parsing = self._parsing, None
        if exchange is not None:
            exchange.body_received(None)

    # -- what the exchanges ask for -----------------------------------------------------------
    def can_keep_alive(self, start_line: httputil.RequestStartLine, headers: httputil.HTTPHeaders) -> bool:
        """Tornado's rules: HTTP/1.1 unless `Connection: close`; HTTP/1.0 only when asked for. And never
        when llhttp reads the connection as ending (`close` among other Connection options): it would
        refuse the next request."""
        if self.listener.no_keep_alive or not self._parser.should_keep_alive():
            return False
        options = headers.get_list("Connection")
        connection = ",".join(options).lower() if options else None
        if start_line.version == "HTTP/1.1":
            return connection != "close"
        if (
            "Content-Length" in headers
            or "Transfer-Encoding" in headers
            or start_line.method in ("HEAD", "GET")
        ):
            return connection == "keep-alive"
        return False

    def body_started(self, exchange: Exchange) -> None:
        """The current exchange's head is in: its body is due within the body timeout."""
        self.due = self.listener.body_due()

    def body_done(self, exchange: Exchange) -> None:
        """The current exchange's body is in: no deadline while it is answered."""
        self.due = None

    def write(self, data: bytes) -> asyncio.Future[None]:
        """Send `data`; the future is done once the transport takes more (flow control)."""
        if self.closed or self.transport is None or self.transport.is_closing():
            return closed_future()
        self.transport.write(data)
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self._write_paused:
            self._drained.append(future)
        else:
            future.set_result(None)
        return future

    def transport_write(self, data: bytes) -> None:
        if not self.closed and self.transport is not None:
            self.transport.write(data)

    def exchange_done(self, exchange: Exchange) -> None:
        """The current exchange is answered: close, or wait for (or begin) the next request."""
        if self.closed:
            return
        if exchange.disconnect_on_finish:
            self.close()
            return
        if self._exchanges and self._exchanges[0] is exchange:
            self._exchanges.popleft()
        if self._rejection is not None and not self._exchanges:
            self._answer_rejection()
            return
        self.due = self.listener.idle_due()
        if self._exchanges and self._exchanges[0].head is not None:
            # A pipelined request: begin it from the connection's own context, not the handler's.
            asyncio.get_running_loop().call_soon(self._begin_next, context=contextvars.Context())
        self._resume_reading()

    def _begin_next(self) -> None:
        if self.closed or self._write_paused or not self._exchanges:  # (resume_writing calls again)
            return
        current = self._exchanges[0]
        if current.head is not None and not current.begun:
            current.begin()

    def answer_bad_request(self) -> None:
        """Tornado's answer to a malformed request: a bare 400, then close."""
        current = self._exchanges[0] if self._exchanges else None
        if current is None or not current.wrote_headers:
            self.transport_write(BAD_REQUEST)
        self.close()

    def reject(self, answer: bytes) -> None:
        """The request being parsed is refused (malformed, or framed in a way not served): nothing more
        is read; `answer` (b"": none) goes out once the requests ahead of it are answered, then the
        connection closes. One whose handler has it already (its body was malformed) is answered so at
        once, as Tornado does."""
        if self.closed:
            return
        self._rejection = answer
        self._pause_reading()
        refused_exchange, self._parsing = self._parsing, None
        if refused_exchange is not None and refused_exchange.begun:  # the current one: answered now
            self._answer_rejection()
            return
        if refused_exchange is not None and self._exchanges and self._exchanges[-1] is refused_exchange:
            self._exchanges.pop()
        if not self._exchanges:
            self._answer_rejection()

    def _answer_rejection(self) -> None:
        current = self._exchanges[0] if self._exchanges else None
        if self._rejection and (current is None or not current.wrote_headers):
            self.transport_write(self._rejection)
        self.close()

    def close(self) -> None:
        """Close after what was written is sent (the transport flushes it first; `sweep` aborts a
        connection whose client takes none of it)."""
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()
        self.closed = True
        self.due = None

    def sweep(self, now: float) -> None:
        """The listener's periodic check: past its deadline (`due`) the connection is closed; one whose
        write buffer has not shrunk (nor drained below its low-water mark) for limits.idle_timeout_s is
        aborted: its client takes nothing, and a close would wait for the buffer to flush forever."""
        if self.due is not None and self.due <= now:
            self.expire()
        transport = self.transport
        if transport is None or self.closed_for_good():
            return
        unsent = transport.get_write_buffer_size()
        if not unsent:
            self._stall_due = None
        elif self._stall_due is None or unsent < self._unsent:
            self._unsent, self._stall_due = unsent, now + self.listener.idle_timeout_s
        elif self._stall_due <= now:
            log.info("aborting the HTTP connection of %s: it took none of %d bytes", self.context, unsent)
            self.closed = True
            transport.abort()

    def expire(self) -> None:
        """Past its deadline (see `due`): closed, as Tornado's own timeouts do."""
        self.close()

    def refuse(self, answer: bytes, grace_s: float) -> None:
        """Answer at once without reading, and close (at the latest after `grace_s`: a client that
        never reads)."""
        assert self.transport is not None
        self.transport.write(answer)
        self.transport.close()
        asyncio.get_running_loop().call_later(grace_s, self.transport.abort)

    async def wait_closed(self) -> None:
        if self._lost is not None:
            await self._lost

    def closed_for_good(self) -> bool:
        """The transport is gone (connection_lost was called)."""
        return self._lost is not None and self._lost.done()

    def idle(self) -> bool:
        """Waiting for its next request with nothing buffered either way. A new connection whose
        first request has not come yet is not idle for its first FIRST_REQUEST_WAIT_S: its client
        connected to send one (closing it now would reset that request)."""
        if self._exchanges or self._parsing is not None or self.transport is None:
            return False
        if self._awaiting_first_until and time.monotonic() < self._awaiting_first_until:
            return False
        return self.transport.get_write_buffer_size() == 0

    def _pause_reading(self) -> None:
        if not self._reading_paused and self.transport is not None and not self.closed:
            self._reading_paused = True
            self.transport.pause_reading()

    def _resume_reading(self) -> None:
        """Read on, unless answers wait unsent, a pipelined request waits its turn, or one was refused."""
        if (
            self._reading_paused
            and not self._write_paused
            and len(self._exchanges) <= 1
            and self._rejection is None
            and self.transport is not None
            and not self.closed
        ):
            self._reading_paused = False
            # The loop's reader callback keeps the context it is registered in: the connection's own,
            # not that of the handler whose answer resumed reading (its request id, its variables).
            contextvars.Context().run(self.transport.resume_reading)
            if self._unparsed:  # (what arrives meanwhile queues behind it)
                asyncio.get_running_loop().call_soon(self._read_on, context=contextvars.Context())


def refused(version: str, headers: httputil.HTTPHeaders) -> bytes | None:
    """The answer to a request whose framing or expectation is not served; None: it is served.

    llhttp already refuses Content-Length twice, with Transfer-Encoding, or not a number, and
    Transfer-Encoding twice or with `chunked` before another coding."""
    if version != "HTTP/1.1" and version != "HTTP/1.0":  # llhttp takes HTTP/0.9 and HTTP/2.0 too
        return VERSION_NOT_SUPPORTED
    framing = headers.get_list("Transfer-Encoding")  # (get_list: no KeyError raised when it is missing)
    if framing:
        codings = [coding.strip() for coding in ",".join(framing).lower().split(",")]
        if version == "HTTP/1.0" or codings[-1] != "chunked" or "chunked" in codings[:-1]:
            return BAD_REQUEST  # RFC 9112 6.1, 6.3: chunked must come last, once, and not in HTTP/1.0
        if len(codings) > 1:
            return NOT_IMPLEMENTED  # RFC 9112 6.1: a coding not understood (gzip, ...)
    expect = headers.get_list("Expect")
    if expect and ",".join(expect).lower() != "100-continue":
        return EXPECTATION_FAILED
    hosts = headers.get_list("Host")
    if (not hosts and version == "HTTP/1.1") or len(hosts) > 1 or (hosts and not HOST.fullmatch(hosts[0])):
        return BAD_REQUEST  # RFC 9112 3.2: one Host, required in HTTP/1.1; a comma means two were joined
    return None

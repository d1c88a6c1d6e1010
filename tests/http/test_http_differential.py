"""The HTTP/1.1 framing of grps_py/http/connection.py (httptools, i.e. llhttp, under our own code)
against h11, the reference HTTP/1.1 implementation, on generated request streams.

Each example is a stream of pipelined requests (Content-Length and chunked bodies, chunk extensions,
trailers, odd whitespace, obs-fold, bare LF and CR, control characters, duplicate and conflicting
framing headers, invalid lengths and chunk sizes, requests hidden in bodies), ending with a request
that closes the connection. It is sent, cut at random byte boundaries, to a real server whose /echo
route answers with what it took each request to be (method, target, body), and the answers must be
exactly what the reference says: the same requests seen in the same order, then, where the reference
refuses a request, one refusal (400, 413, 417, 501 or 505: not told apart) and the connection closed;
where it waits for more bytes, no further answer and the connection open. Any disagreement on where a
request ends would let a request be smuggled past a proxy that frames it the other way: it fails the
test.

The reference is h11 (a fresh h11.Connection per request, fed what follows the previous one), with
these normalisations, each where h11 and our server (llhttp, strict) differ in ways RFC 9112 allows and
that are no smuggling risk: none moves where a request ends; most refuse outright what h11 would take:
- bare LF or CR as a line end, and obs-fold (a header line starting with whitespace), are refused
  (RFC 9112 2.2, 5.2; h11 accepts both);
- control characters other than HTAB in a field value are refused (RFC 9110 5.5; h11 accepts them);
- runs of SP between the request line's parts are taken as one (RFC 9112 3 allows it; llhttp does
  it, h11 refuses them);
- a method other than those the route takes (the generator's odd ones are unknown to llhttp), or a
  version other than HTTP/1.0 and HTTP/1.1, is refused (h11 takes any token and any HTTP/1.x; llhttp
  takes HTTP/0.9 and HTTP/2.0 too, refused by our code with 505);
- Transfer-Encoding with Content-Length, and Content-Length twice even with equal values, are refused
  (RFC 9112 6.3 allows it and calls the first a smuggling sign; h11 lets TE win and merges equal
  lengths); Transfer-Encoding in an HTTP/1.0 request is refused (RFC 9112 6.1: faulty framing), and so
  is an HTAB after its last coding (llhttp's reading of `chunked<HTAB>`; RFC 9110 5.5 would strip it);
- a Content-Length or chunk size of 2**60 or more is refused (llhttp's overflow), and a Content-Length
  over limits.http_body_bytes is refused with 413 before the body is read;
- chunk lines are held to the strict grammar `1*HEXDIG *( ";" token [ "=" ( token / quoted-string ) ] )
  CRLF` (no whitespace: RFC 9112 7.1.1's BWS is not taken; h11 takes anything after `;`), checked by
  `strict_chunked`, whose framing must agree with h11's wherever both accept;
- an `Expect` other than `100-continue` is refused (RFC 9110 10.1.1 allows 417; h11 ignores it);
- empty lines (CR and LF) before a request line are skipped, as llhttp does (RFC 9112 2.2 asks a
  server to ignore at least one; h11 refuses them); a request line cut short at the end of a stream
  may be waited for or refused (llhttp judges a method by its known methods as it arrives);
- keep-alive: HTTP/1.1 unless `close` is among the Connection options (as h11 has it); HTTP/1.0 only
  with `Connection: keep-alive` exactly and a length or a GET (Tornado's rule; h11 keeps no HTTP/1.0
  connection): it decides whether the connection closes after an answer, never where a request ends.
"""

from __future__ import annotations

import itertools
import re
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any
from urllib.parse import parse_qs

import h11
import orjson
import pytest
from fuzz.fuzzing import FUZZ
from fuzz.fuzzing import note as fuzz_note
from hypothesis import given, settings
from hypothesis import strategies as st

from support import PROJECTS, ServerThread, start_project

METHODS = ("GET", "POST", "PUT", "DELETE", "PATCH")  # what the /echo route takes
BODY_LIMIT = 65536  # limits.http_body_bytes of the http_framing project
OVERFLOW = 2**60  # llhttp refuses lengths and chunk sizes from about here
SENTINEL = b"GET /echo?t=end HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
REFUSALS = (400, 413, 417, 501, 505)
TOKEN = rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"
QUOTED = rb'"(?:[\t !#-\[\]-~\x80-\xff]|\\[\t -~\x80-\xff])*"'
CHUNK_LINE = re.compile(
    rb"([0-9A-Fa-f]+)((?:;" + TOKEN + rb"(?:=(?:" + TOKEN + rb"|" + QUOTED + rb"))?)*)\r\n"
)
FIELD_LINE = re.compile(rb"(" + TOKEN + rb"):[ \t]*((?:[\x21-\x7e\x80-\xff]+[ \t]*)*)")
CTL = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")


@pytest.fixture(scope="module")
def server() -> Iterator[ServerThread]:
    running = start_project(PROJECTS / "http_framing")
    yield running
    running.stop()


# --- the reference ---------------------------------------------------------------------------------


@dataclass
class Outcome:
    """What a server does with a stream: the requests it serves (method, target, body), then how it
    ends: "close" (after the last one's answer), "refused" (one refusal, then close) or "waiting"."""

    seen: list[tuple[str, str, bytes]] = field(default_factory=list)
    ending: str = "waiting"
    why: str = ""
    or_refused: bool = False  # waiting, with a head cut short whose start line llhttp may refuse already


class Refused(Exception):
    """The reference refuses the request (the message says which rule)."""


def reference(stream: bytes) -> Outcome:
    outcome = Outcome()
    rest = stream
    while True:
        rest = rest.lstrip(b"\r\n")  # empty lines before a request line are skipped
        if not rest:
            return outcome
        try:
            found = one_request(rest)
        except Refused as exc:
            outcome.ending, outcome.why = "refused", str(exc)
            return outcome
        if found is None:  # waiting for more bytes
            request_line = rest.split(b"\r\n", 1)[0]
            outcome.or_refused = request_line == rest or not valid_request_line(request_line)
            return outcome
        seen, used, closes = found
        outcome.seen.append(seen)
        if closes:
            outcome.ending = "close"
            return outcome
        rest = rest[used:]


def one_request(data: bytes) -> tuple[tuple[str, str, bytes], int, bool] | None:
    """The request at the start of `data` as (method, target, body), the bytes it spans, and whether the
    connection closes after its answer; None: it is incomplete. Raises Refused."""
    line = data.partition(b"\r\n")[0]
    fed = RUNS_OF_SP.sub(b" ", line) + data[len(line) :]  # h11 wants one SP between the parts
    conn = h11.Connection(h11.SERVER)
    conn.receive_data(fed)
    try:
        request = conn.next_event()
    except h11.RemoteProtocolError as exc:
        raise Refused(f"h11: {exc}") from None
    if request is h11.NEED_DATA:
        strict_partial_head(data)
        return None
    assert isinstance(request, h11.Request)
    head_size = len(data) - len(conn.trailing_data[0])  # (what follows is the same in `data` and `fed`)
    headers = strict_head(fed[: len(fed) - len(conn.trailing_data[0])])
    strict = strict_chunked(data[head_size:]) if "transfer-encoding" in headers else None
    body = b""
    while True:
        try:
            event = conn.next_event()
        except h11.RemoteProtocolError as exc:
            assert strict is None or strict[0] == "bad", f"h11 refused ({exc}) what the strict scan took"
            raise Refused(f"h11: {exc}") from None
        if event is h11.NEED_DATA:
            if strict is not None and strict[0] == "bad":
                raise Refused("strict: malformed chunked framing")
            assert strict is None or strict[0] == "waiting", f"h11 waits, the strict scan does not: {strict}"
            return None
        if isinstance(event, h11.Data):
            body += event.data
        elif isinstance(event, h11.EndOfMessage):
            break
    used = len(data) - len(conn.trailing_data[0])
    if strict is not None:
        if strict[0] == "bad":
            raise Refused("strict: malformed chunked framing")
        assert strict == ("ok", used - head_size), f"h11 and the strict scan frame the body apart: {strict}"
    seen = (request.method.decode(), request.target.decode("latin1"), body)
    return seen, used, closes_after(headers)


BARE = re.compile(rb"\r(?!\n)|(?<!\r)\n")
RUNS_OF_SP = re.compile(rb"(?<=[^ ])  +(?=[^ ])")


def strict_head(head: bytes) -> dict[str, str]:
    """The fields of a complete head as h11 found it (values joined with "," as Tornado's HTTPHeaders
    joins them, and ":method", ":version"); raises Refused for what our server refuses and h11 takes."""
    if not head.endswith(b"\r\n\r\n") or BARE.search(head[:-4]):
        raise Refused("a bare LF or CR")
    request_line, *lines = head[:-4].split(b"\r\n")
    if not valid_request_line(request_line):
        raise Refused(f"request line {request_line!r}")
    method, _target, version = request_line.decode("latin1").split(" ")
    headers = {":method": method, ":version": version}
    lengths = 0
    for line in lines:
        check_field_line(line)
        name, _, value = line.partition(b":")
        key, text = name.decode("latin1").lower(), value.decode("latin1").strip(" \t")
        if key == "transfer-encoding" and value.rstrip(b" ").endswith(b"\t"):
            raise Refused("HTAB after the last coding")  # llhttp's reading; OWS to RFC 9110 5.5
        lengths += key == "content-length"
        headers[key] = f"{headers[key]},{text}" if key in headers else text
    framing = headers.get("transfer-encoding")
    if framing is not None and "content-length" in headers:
        raise Refused("Transfer-Encoding with Content-Length")
    if lengths > 1:
        raise Refused("Content-Length twice")
    if framing is not None and (version == "HTTP/1.0" or framing.lower() != "chunked"):
        raise Refused(f"Transfer-Encoding {framing!r} in {version}")
    length = headers.get("content-length")
    if length is not None:
        if not (length.isascii() and length.isdigit()):
            raise Refused(f"Content-Length {length!r}")
        if int(length) >= OVERFLOW:
            raise Refused("Content-Length overflow")
        if int(length) > BODY_LIMIT:
            raise Refused("Content-Length over limits.http_body_bytes (413)")
    expect = headers.get("expect")
    if expect is not None and expect.lower() != "100-continue":
        raise Refused(f"Expect {expect!r}")
    return headers


def valid_request_line(line: bytes) -> bool:
    parts = line.decode("latin1").split(" ")
    return len(parts) == 3 and parts[0] in METHODS and parts[2] in ("HTTP/1.0", "HTTP/1.1")


def check_field_line(line: bytes) -> None:
    if line[:1] in (b" ", b"\t"):
        raise Refused("obs-fold")
    if CTL.search(line):
        raise Refused("a control character in a field")


def strict_partial_head(data: bytes) -> None:
    """`data` is the start of a head h11 waits to complete: raises Refused for what is already wrong in
    its lines (its request line is judged by `reference`)."""
    text = data.removesuffix(b"\r")
    if BARE.search(text):
        raise Refused("a bare LF or CR")
    for line in text.split(b"\r\n")[1:-1]:
        check_field_line(line)


def strict_chunked(data: bytes) -> tuple[str, int]:
    """A chunked body at the start of `data` under the strict grammar: ("ok", its size), ("waiting", 0)
    (a valid prefix of one), or ("bad", where)."""
    at = 0
    while True:
        line = CHUNK_LINE.match(data, at)
        if line is None:
            return ("waiting", 0) if may_become(data[at:], CHUNK_LINE) else ("bad", at)
        size = int(line[1], 16)
        if size >= OVERFLOW:
            return "bad", at
        at = line.end()
        if size == 0:
            break
        if len(data) < at + size + 2:
            return ("waiting", 0) if b"\r\n".startswith(data[at + size :]) else ("bad", at + size)
        if data[at + size : at + size + 2] != b"\r\n":
            return "bad", at + size
        at += size + 2
    while True:  # the trailers, then an empty line
        end = data.find(b"\r\n", at)
        if end < 0:
            return ("waiting", 0) if may_become(data[at:], FIELD_LINE) else ("bad", at)
        line_bytes = data[at:end]
        if line_bytes == b"":
            return "ok", end + 2
        if BARE.search(line_bytes) or not FIELD_LINE.fullmatch(line_bytes):
            return "bad", at
        at = end + 2


def may_become(tail: bytes, grammar: re.Pattern[bytes]) -> bool:
    """Whether `tail`, the end of the stream with no CRLF in it, may still become a line of `grammar`."""
    if tail in (b"", b"\r"):
        return True
    tail = tail.removesuffix(b"\r")
    if BARE.search(tail):
        return False
    endings = (b"", b"0", b"a", b'"', b'a"', b":", b"=a")
    return any(grammar.fullmatch(tail + end + b"\r\n") or grammar.fullmatch(tail + end) for end in endings)


def closes_after(headers: dict[str, str]) -> bool:
    """The server's keep-alive rule (see the module's docstring)."""
    connection = headers.get("connection", "").lower()
    if "close" in (option.strip(" \t") for option in connection.split(",")):
        return True
    if headers[":version"] == "HTTP/1.1":
        return False
    keeps = "content-length" in headers or headers[":method"] in ("GET", "HEAD")
    return not (keeps and connection == "keep-alive")


# --- the server's side -----------------------------------------------------------------------------


class Answers:
    """Reads answers (each with a Content-Length; interim 1xx skipped) off a socket."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.buffer, self.closed = sock, b"", False

    def _fill(self, timeout_s: float) -> bool:
        if self.closed:
            return False
        self.sock.settimeout(timeout_s)
        try:
            chunk = self.sock.recv(65536)
        except (TimeoutError, BlockingIOError):
            return False
        except ConnectionResetError:
            chunk = b""
        self.closed = not chunk
        self.buffer += chunk
        return bool(chunk)

    def next(self, timeout_s: float) -> tuple[int, dict[str, str], bytes] | None:
        while True:
            while b"\r\n\r\n" not in self.buffer:
                if not self._fill(timeout_s):
                    return None
            head, _, rest = self.buffer.partition(b"\r\n\r\n")
            lines = head.decode("latin1").split("\r\n")
            status = int(lines[0].split()[1])
            headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
            size = int(headers.get("content-length", "0"))
            while len(rest) < size:
                if not self._fill(timeout_s):
                    return None
                rest = self.buffer.partition(b"\r\n\r\n")[2]
            self.buffer = rest[size:]
            if status >= 200:
                return status, headers, rest[:size]

    def rest(self, timeout_s: float) -> bytes:
        """What else comes within `timeout_s` (until the server closes)."""
        deadline = time.monotonic() + timeout_s
        while not self.closed and time.monotonic() < deadline and self._fill(deadline - time.monotonic()):
            pass
        return self.buffer


def served(server: ServerThread, stream: bytes, cuts: list[int], expected: Outcome) -> tuple[list[Any], bool]:
    """Send `stream` cut at `cuts`; the answers the server gave (as `as_seen` shows them; 4xx and 5xx
    by status alone, anything that is no answer as its bytes) and whether it closed the connection."""
    points = sorted({0, len(stream), *(cut % (len(stream) + 1) for cut in cuts)})
    with socket.create_connection(("127.0.0.1", server.server.http_port), timeout=10) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            for start, end in itertools.pairwise(points):
                sock.sendall(stream[start:end])
                time.sleep(0.001)
        except OSError:
            pass  # closed by the server before the rest was sent (after a refusal)
        reader = Answers(sock)
        answers = []
        while len(answers) < len(expected.seen) and (answer := reader.next(5)) is not None:
            answers.append(as_seen(answer))
        reader.rest(2 if expected.ending != "waiting" else 0.3 if expected.or_refused else 0.1)
        while reader.buffer and (answer := reader.next(0.01)) is not None:
            answers.append(as_seen(answer))
        if reader.buffer:
            answers.append(reader.buffer)
        return answers, reader.closed


def as_seen(answer: tuple[int, dict[str, str], bytes]) -> Any:
    status, _headers, body = answer
    if status != 200:
        return status
    doc = orjson.loads(body)
    return doc["method"], doc["path"], doc["query"], bytes.fromhex(doc["body"])


def expected_seen(method: str, target: str, body: bytes) -> Any:
    path, _, query = target.partition("?")
    return method, path, parse_qs(query, keep_blank_values=True), body


# --- the generator ---------------------------------------------------------------------------------
# Each stream draws how often its parts go wrong (never, now and then, often): streams of valid requests
# test pipelining and cutting; the others put odd pieces at random places, alone or together.

FILLER = "ABCxyz019-._~!$'()*,:@/"
GOOD_EOL = b"\r\n"
ODD_EOLS = [b"\n", b"\r", b" \r\n", b"\r\r\n"]
ODD_SIZES = ["0x5", " 5", "5 ", "-5", "g", "", "1" + "0" * 20, "5\t"]
ODD_EXTENSIONS = ["; a=b", ";a =b", ";", ";=b", ';a="x', ";a=b c", ";a=\x01"]
ODD_LENGTHS = ["+{n}", "{n}, {n}", "{n},{m}", "", "0x5", "-1", "1e2", "9" * 25, "100000", "{big}"]
ODD_CODINGS = ["gzip, chunked", "chunked, gzip", "identity", "chunked, chunked", "gzip", "chunked;q=1"]


class Odds:
    """How often a stream's parts go wrong (per thousand draws)."""

    def __init__(self, draw: st.DrawFn) -> None:
        self.draw = draw
        self.per_mille = draw(st.sampled_from([0, 0, 20, 80]))

    def __call__(self, good: Any, odd: list[Any]) -> Any:
        """`good` (a value or a strategy), or one of `odd` now and then."""
        if self.per_mille and self.draw(st.integers(0, 999)) < self.per_mille:
            return self.draw(st.sampled_from(odd))
        return self.draw(good) if isinstance(good, st.SearchStrategy) else good

    def eol(self) -> bytes:
        return bytes(self(GOOD_EOL, ODD_EOLS))

    def header_line(self, name: str, value: str) -> bytes:
        separator = self(st.sampled_from([": ", ":", ":  ", ":\t"]), [" : ", " :", "\t:"])
        tails = ["", "", " "] if name == "Transfer-Encoding" else ["", "", " ", "\t"]  # (HTAB there: odd)
        tail = self(st.sampled_from(tails), ["\t", "\x01", "\x7f"])
        return f"{name}{separator}{value}{tail}".encode("latin1") + self.eol()


def chunked_body(odds: Odds, body: bytes) -> bytes:
    draw = odds.draw
    out, at = b"", 0
    while at < len(body):
        size = min(len(body) - at, draw(st.integers(1, 16)))
        declared = max(0, size + odds(0, [-2, -1, 1, 2]))
        digits = odds(st.sampled_from([f"{declared:x}", f"{declared:X}", f"00{declared:x}"]), ODD_SIZES)
        extension = odds(st.sampled_from(["", "", ";a", ";a=b", ';a="q q"', ";a;b=c"]), ODD_EXTENSIONS)
        out += f"{digits}{extension}".encode("latin1") + odds.eol()
        out += body[at : at + size] + bytes(odds(b"\r\n", [b"\n", b"", b"XX", b"\r"]))
        at += size
    last = odds(st.sampled_from(["0", "000", "0;end"]), ["0 ", " 0", "0x0", "1"])
    out += last.encode() + odds.eol()
    for n in range(draw(st.integers(0, 2))):
        out += odds.header_line(f"X-Trailer-{n}", odds(st.sampled_from(["t", "a b", ""]), ["\x01", "\xff"]))
        out += bytes(odds(b"", [b" folded\r\n"]))
    return out + odds.eol()


def request(odds: Odds, tag: str, nested: bool = False) -> bytes:
    draw = odds.draw
    method = odds(st.sampled_from(METHODS), ["FOO", "get", "POSTX", "PRI"])
    target = f"/echo?t={tag}" + draw(st.text(FILLER, max_size=6))
    version = odds(
        st.sampled_from(["HTTP/1.1", "HTTP/1.1", "HTTP/1.0"]), ["HTTP/1.2", "HTTP/2.0", "http/1.1"]
    )
    space = odds(" ", ["  ", "\t"])
    head = f"{method}{space}{target}{odds(' ', ['  '])}{version}".encode("latin1") + odds.eol()
    if version != "HTTP/1.0" and odds(True, [False]):
        head += odds.header_line("Host", "x")
    body = draw(st.binary(max_size=24))
    if not nested and draw(st.integers(0, 3)) == 0:  # a request hidden in the body: served if misframed
        body += request(odds, f"{tag}s", nested=True)
    framing = draw(st.sampled_from(["none", "length", "length", "chunked", "chunked"]))
    if version == "HTTP/1.0" and framing == "chunked":  # refused (RFC 9112 6.1): now and then only
        framing = odds("length", ["chunked"])
    framing = odds(framing, ["both", "lengths", "codings"])
    if framing == "none":
        body = b""
    n = len(body) + odds(0, [-3, -1, 1, 3])
    length = odds(st.sampled_from(["{n}", "0{n}"]), ODD_LENGTHS).format(n=max(n, 0), m=n + 1, big=n + 500)
    coding = odds(st.sampled_from(["chunked", "Chunked", "CHUNKED"]), ODD_CODINGS)
    lines = {
        "none": [],
        "length": [("Content-Length", length)],
        "chunked": [("Transfer-Encoding", coding)],
        "both": draw(st.permutations([("Content-Length", length), ("Transfer-Encoding", coding)])),
        "lengths": [("Content-Length", length), ("Content-Length", draw(st.sampled_from([length, "7"])))],
        "codings": [("Transfer-Encoding", coding), ("Transfer-Encoding", "chunked")],
    }[framing]
    for _ in range(draw(st.integers(0, 2))):
        name = draw(st.sampled_from(["X-A", "x-b", "Accept", "Connection", "Expect"]))
        value = {
            "Connection": draw(st.sampled_from(["close", "keep-alive", "Keep-Alive", "close, te"])),
            "Expect": odds("100-continue", ["100-Continue", "200-ok"]),
        }.get(name, draw(st.text("abc 019\xe9", max_size=6)))
        lines.insert(draw(st.integers(0, len(lines))), (name, value))
    for name, value in lines:
        head += odds.header_line(name, value)
        head += bytes(odds(b"", [b" folded\r\n", b"\t folded\r\n"]))
    head += odds.eol()
    if "Transfer-Encoding" in dict(lines) and odds(True, [False]):
        return head + chunked_body(odds, body)
    return head + body


@st.composite
def streams(draw: st.DrawFn) -> bytes:
    odds = Odds(draw)
    parts = [
        odds(b"", [b"\r\n", b"\n", b"\r\n\r\n"]) + request(odds, f"r{n}")
        for n in range(draw(st.integers(1, 5)))
    ]
    stream = b"".join(parts)
    if draw(st.integers(0, 9)) == 0:  # cut short: the server waits for the rest, or refuses what came
        return stream[: draw(st.integers(1, len(stream)))]
    return stream + SENTINEL


# --- the property ----------------------------------------------------------------------------------


@settings(FUZZ, deadline=timedelta(seconds=10))
@given(stream=streams(), cuts=st.lists(st.integers(0, 10_000), max_size=6))
def test_the_server_frames_requests_as_the_reference_does(
    server: ServerThread, stream: bytes, cuts: list[int]
) -> None:
    expected = reference(stream)
    fuzz_note(f"{expected.ending}: {expected.why.split(' ', 1)[0] or len(expected.seen)}")
    answers, closed = served(server, stream, cuts, expected)
    note = f"stream {stream!r}\nreference: {expected}\nanswers: {answers}, closed={closed}"
    assert answers[: len(expected.seen)] == [expected_seen(*request) for request in expected.seen], note
    after = answers[len(expected.seen) :]
    refused = len(after) == 1 and after[0] in REFUSALS and closed
    if expected.ending == "refused" or (expected.or_refused and refused):
        assert refused, note
    else:
        assert len(answers) == len(expected.seen), note
        assert closed == (expected.ending == "close"), note


def test_the_reference_frames_what_it_should() -> None:
    """The reference itself on streams whose framing is known."""
    post = b"POST /echo?t=a HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc"
    chunked = (
        b"PUT /echo?t=b HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"3;x=1\r\nabc\r\n0\r\nT: 1\r\n\r\n"
    )
    outcome = reference(b"\r\n" + post + chunked + SENTINEL)
    assert outcome.seen == [
        ("POST", "/echo?t=a", b"abc"),
        ("PUT", "/echo?t=b", b"abc"),
        ("GET", "/echo?t=end", b""),
    ]
    assert outcome.ending == "close"
    assert reference(post[:-1]).ending == "waiting"
    assert reference(post.replace(b"3\r\n", b"3\r\nContent-Length: 3\r\n") + SENTINEL).ending == "refused"
    assert reference(chunked.replace(b"3;x=1", b"3 ;x=1") + SENTINEL).ending == "refused"
    assert reference(chunked.replace(b"chunked", b"gzip, chunked")).ending == "refused"
    assert reference(post.replace(b"Host: x\r\n", b"Host: x\n")).ending == "refused"
    assert reference(post.replace(b"Host: x\r\n", b"Host: x\r\n folded\r\n")).ending == "refused"
    assert reference(b"POST /echo?t=c HTTP/1.0\r\nConnection: keep-alive\r\n\r\n" + post).seen[1:] == []

"""Form bodies of a custom route's request: `application/x-www-form-urlencoded` and `multipart/form-data`
(RFC 7578), read into Flask's `request.form` and `request.files`.

The body is already whole and within the server's body limit; this parser bounds what it makes of it:
at most `MAX_FORM_PARTS` fields or parts (werkzeug's default; more answers 413, as werkzeug does), each
part's header block at most `MAX_PART_HEADER_BYTES` in at most `MAX_PART_HEADERS` lines. A body that
does not parse answers 400 with a short reason. Each step is one `bytes.find` forward, so a hostile
body costs time linear in its size.
"""

from __future__ import annotations

import io
import os
import re
from typing import IO, Any
from urllib.parse import parse_qsl, unquote

from grps_py.core.errors import InvalidInput, PayloadTooLarge
from grps_py.core.request_maps import Headers, MultiDict

MAX_FORM_PARTS = 1000
MAX_PART_HEADER_BYTES = 8 * 1024
MAX_PART_HEADERS = 32
URLENCODED = "application/x-www-form-urlencoded"
MULTIPART = "multipart/form-data"
# RFC 2046: 1 to 70 characters of a restricted set, not ending with a space.
_BOUNDARY = re.compile(r"[0-9A-Za-z'()+_,\-./:=? ]{0,69}[0-9A-Za-z'()+_,\-./:=?]")
# A parameter of a header value: `; name=token` or `; name="quoted \" string"` (linear: no nesting).
_PARAM = re.compile(r';\s*([^\s;=]+)\s*(?:=\s*("(?:[^"\\]|\\.)*"|[^;]*))?', re.DOTALL)
_ESCAPED = re.compile(r"\\(.)", re.DOTALL)


def options_header(value: str) -> tuple[str, dict[str, str]]:
    """`text/plain; charset="utf-8"` -> ("text/plain", {"charset": "utf-8"}): the value lower-cased,
    parameter names lower-cased, quoted values unquoted, `name*=utf-8''%E2%82%AC` decoded (RFC 8187)."""
    main, _, rest = value.partition(";")
    params: dict[str, str] = {}
    for match in _PARAM.finditer(";" + rest):
        name, raw = match.group(1).lower(), (match.group(2) or "").strip()
        if len(raw) >= 2 and raw[0] == raw[-1] == '"':
            raw = _ESCAPED.sub(r"\1", raw[1:-1])
        if name.endswith("*"):
            charset, _, encoded = raw.partition("'")
            _, _, encoded = encoded.partition("'")
            try:
                params[name[:-1]] = unquote(encoded, encoding=charset or "utf-8", errors="replace")
            except LookupError:  # a charset Python does not know
                params[name[:-1]] = unquote(encoded, errors="replace")
            continue
        params.setdefault(name, raw)
    return main.strip().lower(), params


class UploadedFile:
    """One file of a multipart body, as Flask's FileStorage: `filename`, `name`, `content_type`,
    `mimetype`, `headers`, `read()`, `stream`, `save(dst)`."""

    def __init__(self, name: str, filename: str, headers: Headers, data: bytes) -> None:
        self.name = name
        self.filename = filename
        self.headers = headers
        self.stream: IO[bytes] = io.BytesIO(data)
        self.content_length = len(data)

    @property
    def content_type(self) -> str | None:
        value: str | None = self.headers.get("Content-Type")
        return value

    @property
    def mimetype(self) -> str:
        return options_header(self.content_type or "")[0]

    @property
    def mimetype_params(self) -> dict[str, str]:
        return options_header(self.content_type or "")[1]

    def read(self, size: int = -1) -> bytes:
        return self.stream.read(size)

    def save(self, dst: str | os.PathLike[str] | IO[bytes], buffer_size: int = 16384) -> None:
        """Write the file's bytes to a path or a binary file object (from where `stream` is)."""
        if isinstance(dst, (str, os.PathLike)):
            with open(dst, "wb") as out:
                self._copy_to(out, buffer_size)
        else:
            self._copy_to(dst, buffer_size)

    def _copy_to(self, out: IO[bytes], buffer_size: int) -> None:
        while chunk := self.stream.read(buffer_size):
            out.write(chunk)

    def close(self) -> None:
        self.stream.close()

    def __bool__(self) -> bool:
        return bool(self.filename)

    def __iter__(self) -> Any:
        return iter(self.stream)

    def __repr__(self) -> str:
        return f"<UploadedFile {self.filename!r} ({self.content_type!r})>"


Form = tuple[MultiDict[str], MultiDict[UploadedFile]]


def parse_form(body: bytes, content_type: str) -> Form:
    """`request.form` and `request.files` of a body with this Content-Type (empty for any other type)."""
    mimetype, params = options_header(content_type)
    if mimetype == URLENCODED:
        return _urlencoded(body), MultiDict(what="file")
    if mimetype == MULTIPART:
        return _multipart(body, params.get("boundary", ""))
    return MultiDict(what="form field"), MultiDict(what="file")


def _urlencoded(body: bytes) -> MultiDict[str]:
    text = body.decode("utf-8", "replace")
    try:
        pairs = parse_qsl(
            text, keep_blank_values=True, encoding="utf-8", errors="replace", max_num_fields=MAX_FORM_PARTS
        )
    except ValueError:  # max_num_fields
        raise PayloadTooLarge(f"the form has more than {MAX_FORM_PARTS} fields") from None
    return MultiDict(pairs, what="form field")


def _multipart(body: bytes, boundary: str) -> Form:
    if not _BOUNDARY.fullmatch(boundary):
        raise InvalidInput("the multipart body's Content-Type has no valid boundary")
    delimiter = b"--" + boundary.encode("ascii")
    separator = b"\r\n" + delimiter
    if body.startswith(delimiter):
        pos = len(delimiter)
    else:  # a preamble before the first boundary is ignored (RFC 2046)
        at = body.find(separator)
        if at < 0:
            raise InvalidInput("the multipart body has no boundary line")
        pos = at + len(separator)
    fields: list[tuple[str, str]] = []
    files: list[tuple[str, UploadedFile]] = []
    for count in range(1, MAX_FORM_PARTS + 2):
        if body.startswith(b"--", pos):  # the closing boundary; an epilogue after it is ignored
            return MultiDict(fields, what="form field"), MultiDict(files, what="file")
        if count > MAX_FORM_PARTS:
            break
        eol = body.find(b"\r\n", pos)
        if eol < 0 or body[pos:eol].strip(b" \t"):
            raise InvalidInput("a multipart boundary line is malformed")
        headers, start = _part_headers(body, eol + 2)
        end = body.find(separator, start)
        if end < 0:
            raise InvalidInput("the multipart body ends before its closing boundary")
        _add_part(headers, body[start:end], fields, files)
        pos = end + len(separator)
    raise PayloadTooLarge(f"the multipart body has more than {MAX_FORM_PARTS} parts")


def _part_headers(body: bytes, start: int) -> tuple[Headers, int]:
    """A part's headers and where its content starts."""
    if body.startswith(b"\r\n", start):
        return Headers(), start + 2
    end = body.find(b"\r\n\r\n", start, start + MAX_PART_HEADER_BYTES + 4)
    if end < 0:
        if len(body) - start > MAX_PART_HEADER_BYTES:
            raise PayloadTooLarge(f"a multipart part's headers exceed {MAX_PART_HEADER_BYTES} bytes")
        raise InvalidInput("a multipart part's headers do not end")
    lines = body[start:end].split(b"\r\n")
    if len(lines) > MAX_PART_HEADERS:
        raise PayloadTooLarge(f"a multipart part has more than {MAX_PART_HEADERS} headers")
    headers = Headers()
    for line in lines:
        name, colon, value = line.decode("utf-8", "replace").partition(":")
        if not colon or not name.strip():
            raise InvalidInput("a multipart part has a malformed header line")
        headers.add(name.strip(), value.strip())
    return headers, end + 4


def _add_part(
    headers: Headers, content: bytes, fields: list[tuple[str, str]], files: list[tuple[str, UploadedFile]]
) -> None:
    disposition, params = options_header(headers.get("Content-Disposition", ""))
    name = params.get("name")
    if disposition != "form-data" or name is None:
        return  # not a form field (werkzeug skips it too)
    filename = params.get("filename")
    if filename is not None:
        files.append((name, UploadedFile(name, filename, headers, content)))
        return
    fields.append((name, content.decode("utf-8", "replace")))

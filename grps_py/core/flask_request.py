"""What model code reads of a custom route's request, named as on Flask's `request` (grps hands model code
a Flask request, and its examples read it so): `data`, `get_data()`, `get_json()`, `json`, `args`, `form`,
`files`, `values`, `cookies`, `headers`, `content_type`, `mimetype`, `url`, `query_string`...

Flask is not needed: these are read from the plain request data (`custom_http.HttpRequest`). Where Flask
answers an error (JSON asked of a body that is not JSON, a missing key, a malformed form), the same
request answers the error of our table that matches: 400 with a short reason (413 for a form past
`multipart.MAX_FORM_PARTS`). Forms are parsed on first use, within the server's body limit.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from functools import cached_property
from typing import IO, Any
from urllib.parse import quote, urlencode

import orjson

from grps_py.core.errors import InvalidInput, UnsupportedMediaType
from grps_py.core.multipart import Form, UploadedFile, options_header, parse_form
from grps_py.core.request_maps import Headers, MultiDict, parse_cookies
from grps_py.core.untrusted import shown

_NO_FORM_METHODS = frozenset({"GET", "HEAD"})  # werkzeug leaves their form out of `values`


class FlaskRequestSurface:
    """Flask's reading surface over `method`, `path`, `headers`, `query`, `body`, `remote_addr`,
    `scheme` and `raw_query` (set by the class that mixes it in)."""

    method: str
    path: str
    headers: Mapping[str, str]
    query: dict[str, list[str]]
    body: bytes
    remote_addr: str
    scheme: str
    raw_query: str

    def _headers(self) -> Headers:
        headers = self.headers
        return headers if isinstance(headers, Headers) else Headers(headers)

    # -- the body --------------------------------------------------------------------------------
    @property
    def data(self) -> bytes:
        """The raw body (also for form bodies, unlike werkzeug, which empties `data` once it parsed them)."""
        return self.body

    def get_data(self, cache: bool = True, as_text: bool = False, parse_form_data: bool = False) -> Any:
        """The raw body: bytes, or with `as_text=True` text (UTF-8, undecodable bytes replaced)."""
        return self.body.decode("utf-8", "replace") if as_text else self.body

    @property
    def stream(self) -> IO[bytes]:
        return io.BytesIO(self.body)

    @property
    def is_json(self) -> bool:
        """Whether the Content-Type says JSON: application/json, or application/*+json."""
        mimetype = self.mimetype
        return mimetype == "application/json" or (
            mimetype.startswith("application/") and mimetype.endswith("+json")
        )

    def get_json(self, force: bool = False, silent: bool = False, cache: bool = True) -> Any:
        """The body parsed as JSON. As Flask: a Content-Type that is not JSON is refused unless `force`
        (415, as Flask), malformed JSON answers 400; `silent` gives None for either."""
        if not (force or self.is_json):
            if silent:
                return None
            raise UnsupportedMediaType(
                f"the request's Content-Type is {shown(self.content_type or 'none', 100)}, not "
                "application/json (the model reads its body as JSON)"
            )
        try:
            return orjson.loads(self.body)
        except orjson.JSONDecodeError as exc:
            if silent:
                return None
            raise InvalidInput(f"the request body is not valid JSON: {exc}") from None

    @property
    def json(self) -> Any:
        """`get_json()`: the body as JSON, refused when its Content-Type is not JSON."""
        return self.get_json()

    # -- forms ---------------------------------------------------------------------------------
    @cached_property
    def _form(self) -> Form:
        return parse_form(self.body, self.content_type)

    @property
    def form(self) -> MultiDict[str]:
        """The fields of a urlencoded or multipart body (empty for any other body)."""
        return self._form[0]

    @property
    def files(self) -> MultiDict[UploadedFile]:
        """The files of a multipart body, by field name."""
        return self._form[1]

    @cached_property
    def args(self) -> MultiDict[str]:
        """The query arguments: `args["a"]` and `args.get("a")` are the first value, `getlist` all."""
        return MultiDict(
            ((key, value) for key, values in self.query.items() for value in values), what="query argument"
        )

    @property
    def values(self) -> MultiDict[str]:
        """`args` and `form` together (`form` left out for GET and HEAD, as werkzeug does)."""
        pairs = list(self.args.items(multi=True))
        if self.method.upper() not in _NO_FORM_METHODS:
            pairs += self.form.items(multi=True)
        return MultiDict(pairs, what="value")

    @cached_property
    def cookies(self) -> MultiDict[str]:
        return parse_cookies(self._headers())

    # -- the head ------------------------------------------------------------------------------
    @property
    def content_type(self) -> str:
        """The Content-Type header as sent, parameters and all ("" when none was sent)."""
        value: str = self._headers().get("Content-Type", "")
        return value

    @property
    def mimetype(self) -> str:
        """The media type alone, lower case: "application/json" of "Application/JSON; charset=utf-8"."""
        return options_header(self.content_type)[0]

    @property
    def mimetype_params(self) -> dict[str, str]:
        return options_header(self.content_type)[1]

    @property
    def content_length(self) -> int | None:
        value: int | None = self._headers().get("Content-Length", type=int)
        return value

    @property
    def host(self) -> str:
        value: str = self._headers().get("Host", "")
        return value

    @property
    def is_secure(self) -> bool:
        return self.scheme == "https"

    @property
    def query_string(self) -> bytes:
        """The raw query, as bytes (Flask's type)."""
        raw = self.raw_query or urlencode(
            [(key, value) for key, values in self.query.items() for value in values]
        )
        return raw.encode("latin-1", "replace")

    @property
    def full_path(self) -> str:
        return f"{self.path}?{self.query_string.decode('latin-1')}"

    @property
    def host_url(self) -> str:
        return f"{self.scheme}://{self.host}/"

    @property
    def root_url(self) -> str:
        return self.host_url

    url_root = root_url

    @property
    def base_url(self) -> str:
        """The URL without its query."""
        return f"{self.scheme}://{self.host}{quote(self.path, safe='/%:@&=+$,;~!*()')}"

    @property
    def url(self) -> str:
        query = self.query_string.decode("latin-1")
        return self.base_url + (f"?{query}" if query else "")

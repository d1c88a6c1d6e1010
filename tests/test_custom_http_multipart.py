"""The form parser behind a custom route's `request.form` / `request.files` (grps_py/core/multipart.py),
in-process: what a well-formed body reads back as, and that any body, however hostile, gives the form or
a short InvalidInput (400/413), nothing else. The served behaviour is in test_custom_http_flask.py."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grps_py.core.errors import InvalidInput, PayloadTooLarge
from grps_py.core.multipart import MAX_FORM_PARTS, options_header, parse_form
from grps_py.core.request_maps import Headers, MissingKey, MultiDict

BOUNDARY = "b0undary"
MULTIPART = f"multipart/form-data; boundary={BOUNDARY}"
NAMES = st.text(st.characters(blacklist_characters='"\\\r\n', blacklist_categories=("Cs",)), min_size=1)


def encode(fields: list[tuple[str, bytes]], files: list[tuple[str, str, bytes]]) -> bytes:
    out = b"preamble, ignored\r\n"
    for name, value in fields:
        out += (
            f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n'.encode()
            + value
            + b"\r\n"
        )
    for name, filename, data in files:
        head = f'Content-Disposition: form-data; name="{name}"; filename="{filename}"\r\n'
        out += (
            f"--{BOUNDARY}\r\n{head}Content-Type: application/octet-stream\r\n\r\n".encode() + data + b"\r\n"
        )
    return out + f"--{BOUNDARY}--\r\nepilogue, ignored".encode()


# Content that cannot hold the delimiter (CRLF--boundary), so the body is well-formed.
CONTENT = st.binary(max_size=64).filter(lambda b: BOUNDARY.encode() not in b and not b.endswith(b"\r"))


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(NAMES, st.text(max_size=32).map(str.encode)), max_size=5),
    st.lists(st.tuples(NAMES, NAMES, CONTENT), max_size=3),
)
def test_a_well_formed_body_reads_back(
    fields: list[tuple[str, bytes]], files: list[tuple[str, str, bytes]]
) -> None:
    fields = [(n, v) for n, v in fields if BOUNDARY.encode() not in v and not v.endswith(b"\r")]
    form, uploads = parse_form(encode(fields, files), MULTIPART)
    expected: dict[str, list[str]] = {}
    for name, value in fields:  # each name's values in order, names in order of first appearance
        expected.setdefault(name, []).append(value.decode())
    assert form.to_dict(flat=False) == expected
    got = [(name, f.filename, f.read()) for name, values in uploads.lists() for f in values]
    assert sorted(got) == sorted(files)


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=512), st.sampled_from([MULTIPART, "application/x-www-form-urlencoded"]))
def test_any_body_gives_a_form_or_a_short_invalid_input(body: bytes, content_type: str) -> None:
    try:
        parse_form(body, content_type)
    except InvalidInput as exc:
        assert len(exc.public_message) < 200


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.sampled_from([f"--{BOUNDARY}", "\r\n", "--", "Content-Disposition: form-data; name=a", "x", ":"])
    )
)
def test_bodies_made_of_boundary_pieces_never_raise_anything_else(pieces: list[str]) -> None:
    with contextlib.suppress(InvalidInput):
        parse_form("".join(pieces).encode(), MULTIPART)


def test_the_part_count_is_bounded() -> None:
    at_limit = encode([("f", b"x")] * MAX_FORM_PARTS, [])
    assert len(parse_form(at_limit, MULTIPART)[0].getlist("f")) == MAX_FORM_PARTS
    with pytest.raises(PayloadTooLarge, match="more than 1000 parts"):
        parse_form(encode([("f", b"x")] * (MAX_FORM_PARTS + 1), []), MULTIPART)


def test_options_header_reads_quoted_and_extended_parameters() -> None:
    value = 'Form-Data; name="a \\"q\\" b"; filename*=UTF-8\'\'%E2%82%AC.txt; filename="plain.txt"'
    assert options_header(value) == ("form-data", {"name": 'a "q" b', "filename": "€.txt"})
    assert options_header("text/plain") == ("text/plain", {})


def test_multidict_and_headers_read_as_werkzeugs() -> None:
    args = MultiDict([("a", "1"), ("a", "2"), ("n", "x")], what="query argument")
    assert (args["a"], args.get("a"), args.getlist("a"), dict(args)) == (
        "1",
        "1",
        ["1", "2"],
        {"a": "1", "n": "x"},
    )
    assert (args.get("n", type=int), args.get("n", 5, type=int), args.getlist("a", type=int)) == (
        None,
        5,
        [1, 2],
    )
    assert args.to_dict(flat=False) == {"a": ["1", "2"], "n": ["x"]}
    with pytest.raises(KeyError) as missing:
        args["zz"]
    assert isinstance(missing.value, MissingKey) and isinstance(missing.value, InvalidInput)
    with pytest.raises(TypeError):
        args["a"] = "3"
    headers = Headers([("X-A", "1"), ("x-a", "2"), ("Content-Length", "3")])
    assert (headers["x-A"], headers.getlist("X-A"), headers.get("content-length", type=int)) == (
        "1",
        ["1", "2"],
        3,
    )
    assert "X-a" in headers and list(headers) == ["X-A", "Content-Length"] and len(headers) == 2

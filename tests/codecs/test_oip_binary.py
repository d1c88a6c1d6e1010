"""oip_binary: Triton's binary tensor extension, checked against tritonclient's own helpers."""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import pytest
from tritonclient.utils import deserialize_bytes_tensor, serialize_byte_tensor

from grps_py.codecs.oip_binary import (
    deserialize_bytes,
    serialize_bytes,
    split_body,
    tensor_from_bytes,
    tensor_to_bytes,
)
from grps_py.core.errors import InvalidInput, ModelError
from oip_samples import FIXED_SAMPLES

BYTES_SAMPLES: dict[str, np.ndarray[Any, Any]] = {
    "object-bytes": np.array([[b"a", b""], [b"\x00\xff", "é".encode()]], dtype=object),
    "object-str": np.array(["a", "é", ""], dtype=object),
    "bytes_": np.array([b"ab", b"c"]),
    "one": np.array([b"x" * 1000], dtype=object),
    "0-d": np.array(b"solo", dtype=object),
}


def length_prefixed(*elements: bytes) -> bytes:
    return b"".join(struct.pack("<I", len(e)) + e for e in elements)


def same_bits(got: np.ndarray[Any, Any], want: np.ndarray[Any, Any]) -> None:
    """Same dtype, shape and bytes (so -0.0 and every last bit count)."""
    assert got.dtype == want.dtype
    assert got.shape == want.shape
    assert got.tobytes() == want.tobytes()


# --- BYTES -------------------------------------------------------------------------------------


@pytest.mark.parametrize("array", BYTES_SAMPLES.values(), ids=BYTES_SAMPLES.keys())
def test_serialize_bytes_matches_tritonclient(array: np.ndarray[Any, Any]) -> None:
    assert serialize_bytes(array) == serialize_byte_tensor(array).item()


@pytest.mark.parametrize("array", BYTES_SAMPLES.values(), ids=BYTES_SAMPLES.keys())
def test_deserialize_bytes_reads_what_tritonclient_writes(array: np.ndarray[Any, Any]) -> None:
    buffer = serialize_byte_tensor(array).item()
    got = deserialize_bytes(buffer, array.size, "input 'x'")
    assert got.dtype == object and got.shape == (array.size,)
    assert got.tolist() == deserialize_bytes_tensor(buffer).tolist()
    assert all(type(value) is bytes for value in got)


def test_serialize_bytes_is_row_major_and_encodes_other_values_as_text() -> None:
    transposed = np.array([[b"a", b"b"], [b"c", b"d"]], dtype=object).T
    assert serialize_bytes(transposed) == length_prefixed(b"a", b"c", b"b", b"d")
    assert serialize_bytes(np.array([7, 1.5], dtype=object)) == length_prefixed(b"7", b"1.5")
    assert serialize_bytes(np.empty((2, 0), dtype=object)) == b""
    assert serialize_bytes(np.array(["ab", "é"])) == length_prefixed(b"ab", "é".encode())


def test_serialize_bytes_refuses_unencodable_text_as_a_model_error() -> None:
    with pytest.raises(ModelError, match="UTF-8"):
        serialize_bytes(np.array(["\ud800"], dtype=object))


def test_deserialize_bytes_empty() -> None:
    assert deserialize_bytes(b"", 0, "x").shape == (0,)
    assert deserialize_bytes(memoryview(length_prefixed(b"")), 1, "x").tolist() == [b""]


@pytest.mark.parametrize(
    ("buffer", "count", "fragment"),
    [
        (length_prefixed(b"ab")[:5], 1, "length 2) runs past the end"),
        (length_prefixed(b"ab") + b"\x01\x00", 2, "ends before element 1 of 2"),
        (length_prefixed(b"ab", b"cd"), 1, "6 bytes left over after 1 BYTES elements"),
        (length_prefixed(b"ab") + b"\x00\x00\x00\x00\x00", 2, "1 bytes left over"),
        (length_prefixed(b"", b"", b""), 2, "left over"),
        (length_prefixed(b"abcdefgh"), 4, "cannot hold 4 elements"),
        (length_prefixed(b"abcd", b"e"), 3, "ends before element 2 of 3"),
        (b"\xff\xff\xff\xff", 1, "runs past the end"),
        (b"", 2**62, "cannot hold"),
        (b"abc", 0, "3 bytes left over"),
    ],
)
def test_deserialize_bytes_errors(buffer: bytes, count: int, fragment: str) -> None:
    with pytest.raises(InvalidInput, match="input 'x'") as caught:
        deserialize_bytes(buffer, count, "input 'x'")
    assert fragment in caught.value.public_message


# --- fixed-size tensors ------------------------------------------------------------------------


@pytest.mark.parametrize("datatype", FIXED_SAMPLES)
def test_fixed_size_round_trip_without_copy(datatype: str) -> None:
    array = FIXED_SAMPLES[datatype]
    raw = tensor_to_bytes(array, datatype)
    assert isinstance(raw, memoryview)  # no copy of a contiguous little-endian array
    body = b"head" + bytes(raw)
    got = tensor_from_bytes(memoryview(body)[4:], datatype, list(array.shape), "input 'x'")
    same_bits(got, array)
    assert np.shares_memory(got, np.frombuffer(body, dtype=np.uint8))
    assert not got.flags.writeable


@pytest.mark.parametrize("datatype", FIXED_SAMPLES)
def test_fixed_size_bytes_are_what_tritonclient_sends(datatype: str) -> None:
    array = FIXED_SAMPLES[datatype]
    assert bytes(tensor_to_bytes(array, datatype)) == array.tobytes()  # InferInput uses tobytes()


def test_tensor_to_bytes_makes_little_endian_row_major() -> None:
    big = np.array([[1, 2], [3, 4]], dtype=">i4")
    assert bytes(tensor_to_bytes(big, "INT32")) == np.array([[1, 2], [3, 4]], "<i4").tobytes()
    assert bytes(tensor_to_bytes(big.T, "INT32")) == np.array([1, 3, 2, 4], "<i4").tobytes()
    assert bytes(tensor_to_bytes(np.array(2.5, dtype=">f8"), "FP64")) == struct.pack("<d", 2.5)
    assert tensor_to_bytes(np.array([b"ab"], dtype=object), "BYTES") == length_prefixed(b"ab")


def test_tensor_from_bytes_shapes() -> None:
    zero_d = tensor_from_bytes(struct.pack("<f", 1.5), "FP32", [], "x")
    assert zero_d.shape == () and zero_d.item() == 1.5
    assert tensor_from_bytes(b"", "INT64", [3, 0], "x").shape == (3, 0)
    strings = tensor_from_bytes(length_prefixed(b"a", b"b", b"c", b"d"), "BYTES", [2, 2], "x")
    assert strings.shape == (2, 2) and strings.tolist() == [[b"a", b"b"], [b"c", b"d"]]


@pytest.mark.parametrize(
    ("buffer", "datatype", "shape", "fragment"),
    [
        (bytes(20), "FP32", [2, 3], "shape [2, 3] of FP32 needs 24 bytes, got 20"),
        (bytes(28), "FP32", [2, 3], "needs 24 bytes, got 28"),
        (bytes(8), "INT64", [2**40, 2**40], "needs 9671406556917033397649408 bytes, got 8"),
        (bytes(2), "BOOL", [], "shape [] of BOOL needs 1 bytes, got 2"),
        (b"", "UINT8", [0, 2**63], "shape [0, 9223372036854775808] cannot be used"),
        (b"", "UINT8", [2**62, 0, 4], "cannot be used"),
        (b"", "UINT8", [1] * 70 + [0], "cannot be used"),
        (length_prefixed(b"a"), "BYTES", [2**50], "cannot hold"),
        (length_prefixed(b"a"), "BYTES", [2], "cannot hold 2 elements"),
    ],
)
def test_tensor_from_bytes_errors(buffer: bytes, datatype: str, shape: list[int], fragment: str) -> None:
    with pytest.raises(InvalidInput, match="input 'x'") as caught:
        tensor_from_bytes(buffer, datatype, shape, "input 'x'")
    assert fragment in caught.value.public_message


# --- the body ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("header_length", "json_part", "binary_part"),
    [
        (None, b'{"a":1}xyz', b""),
        ("7", b'{"a":1}', b"xyz"),
        (" 10 ", b'{"a":1}xyz', b""),
        ("0", b"", b'{"a":1}xyz'),
    ],
)
def test_split_body(header_length: str | None, json_part: bytes, binary_part: bytes) -> None:
    body = b'{"a":1}xyz'
    head, rest = split_body(body, header_length)
    assert (bytes(head), bytes(rest)) == (json_part, binary_part)
    assert isinstance(head, memoryview) and isinstance(rest, memoryview)


@pytest.mark.parametrize(
    ("header_length", "fragment"),
    [
        ("-1", "must be a non-negative integer, got '-1'"),
        ("abc", "must be a non-negative integer"),
        ("1.5", "must be a non-negative integer"),
        ("", "must be a non-negative integer"),
        ("\u0661", "must be a non-negative integer"),  # an Arabic-Indic digit: isdigit(), but not ASCII
        ("9" * 5000, "must be a non-negative integer"),
        ("11", "Inference-Header-Content-Length is 11 but the body has only 10 bytes"),
    ],
)
def test_split_body_errors(header_length: str, fragment: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        split_body(b'{"a":1}xyz', header_length)
    assert fragment in caught.value.public_message

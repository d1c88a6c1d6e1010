"""limits: every decoding codec holds a request to `limits.tensors`, `limits.elements`,
`limits.json_depth` and `limits.string_bytes`, naming the limit and the value, and refuses a huge
claimed shape or size before allocating for it."""

from __future__ import annotations

import base64
import math
import struct
import tracemalloc
from collections.abc import Callable
from typing import Any

import orjson
import pytest

from grps_py.codecs import grps_json, grps_pb, oip_generate, oip_json, oip_pb
from grps_py.codecs.limits import (
    DEFAULT_LIMITS,
    ElementBudget,
    check_json_depth,
    check_strings,
    for_body,
    json_depth,
)
from grps_py.core.errors import InvalidInput
from grps_py.core.protection import MIB, LimitsSettings
from grps_py.protos import grps_pb2
from grps_py.protos import open_inference_pb2 as pb

SMALL = LimitsSettings(tensors=2, elements=10, json_depth=5, string_bytes=8)


def doc(value: Any) -> bytes:
    return orjson.dumps(value)


def gtensor(name: str, shape: list[int], values: list[Any], dtype: str = "DT_INT32") -> dict[str, Any]:
    field = "flat_string" if dtype == "DT_STRING" else "flat_int32"
    return {"name": name, "dtype": dtype, "shape": shape, field: values}


def grps_doc(*tensors: dict[str, Any]) -> bytes:
    return doc({"gtensors": {"tensors": list(tensors)}})


def oip_doc(*inputs: dict[str, Any], outputs: int = 0) -> bytes:
    document: dict[str, Any] = {"inputs": list(inputs)}
    if outputs:
        document["outputs"] = [{"name": f"o{i}"} for i in range(outputs)]
    return doc(document)


def oip_input(name: str, shape: list[int], data: list[Any], datatype: str = "INT32") -> dict[str, Any]:
    return {"name": name, "datatype": datatype, "shape": shape, "data": data}


def grps_message(*shapes_and_values: tuple[list[int], list[int]]) -> grps_pb2.GrpsMessage:
    msg = grps_pb2.GrpsMessage()
    msg.gtensors.SetInParent()
    for index, (shape, values) in enumerate(shapes_and_values):
        msg.gtensors.tensors.add(name=f"t{index}", dtype=grps_pb2.DT_INT32, shape=shape, flat_int32=values)
    return msg


def oip_message(*shapes: list[int], outputs: int = 0, claim_only: bool = False) -> pb.ModelInferRequest:
    """INT32 inputs of these shapes with raw contents to match (or 4 bytes each, with `claim_only`)."""
    msg = pb.ModelInferRequest(model_name="m")
    for index, shape in enumerate(shapes):
        msg.inputs.add(name=f"i{index}", datatype="INT32", shape=shape)
        msg.raw_input_contents.append(bytes(4 if claim_only else 4 * math.prod(shape)))
    for index in range(outputs):
        msg.outputs.add(name=f"o{index}")
    return msg


def bytes_request(items: list[bytes]) -> pb.ModelInferRequest:
    msg = pb.ModelInferRequest(model_name="m")
    msg.inputs.add(name="x", datatype="BYTES", shape=[len(items)]).contents.bytes_contents.extend(items)
    return msg


def records(*items: bytes) -> bytes:
    return b"".join(struct.pack("<I", len(item)) + item for item in items)


def binary_body(datatype: str, shape: list[int], size: int, binary: bytes) -> tuple[bytes, str]:
    entry = {"name": "x", "datatype": datatype, "shape": shape, "parameters": {"binary_data_size": size}}
    header = doc({"inputs": [entry]})
    return header + binary, str(len(header))


# Each case: (decode under SMALL that must succeed at the limit, decode one past it, expected message).
Case = tuple[Callable[[], Any], Callable[[], Any], str]
CASES: dict[str, Case] = {
    "grps_json tensors": (
        lambda: grps_json.decode_request(grps_doc(gtensor("a", [1], [1]), gtensor("b", [1], [1])), SMALL),
        lambda: grps_json.decode_request(grps_doc(*(gtensor(n, [1], [1]) for n in "abc")), SMALL),
        "the request has 3 tensors; limits.tensors is 2",
    ),
    "grps_json elements": (
        lambda: grps_json.decode_request(
            grps_doc(gtensor("a", [5], [1] * 5), gtensor("b", [5], [1] * 5)), SMALL
        ),
        lambda: grps_json.decode_request(
            grps_doc(gtensor("a", [5], [1] * 5), gtensor("b", [6], [1] * 6)), SMALL
        ),
        "tensor 'b': the request's tensors hold 11 elements so far, over limits.elements (10)",
    ),
    "grps_json ndarray elements": (
        lambda: grps_json.decode_request(doc({"ndarray": [[1.0] * 5] * 2}), SMALL),
        lambda: grps_json.decode_request(doc({"ndarray": [[1.0] * 11]}), SMALL),
        "ndarray: 11 elements exceed limits.elements (10)",
    ),
    "grps_json json_depth": (
        lambda: grps_json.decode_request(doc({"ndarray": [[[[1.0]]]]}), SMALL),
        lambda: grps_json.decode_request(doc({"ndarray": [[[[[1.0]]]]]}), SMALL),
        "the JSON nests 6 levels deep; limits.json_depth is 5",
    ),
    "grps_json string tensor": (
        lambda: grps_json.decode_request(grps_doc(gtensor("s", [1], ["é" * 4], "DT_STRING")), SMALL),
        lambda: grps_json.decode_request(
            grps_doc(gtensor("s", [2], ["a", "a" * 7 + "é"], "DT_STRING")), SMALL
        ),
        "tensor 's': a value of 9 bytes exceeds limits.string_bytes (8)",
    ),
    "grps_json str_data": (
        lambda: grps_json.decode_request(doc({"str_data": "x" * 8}), SMALL),
        lambda: grps_json.decode_request(doc({"str_data": "x" * 9}), SMALL),
        "str_data: a value of 9 bytes exceeds limits.string_bytes (8)",
    ),
    "grps_json bin_data": (
        lambda: grps_json.decode_request(doc({"bin_data": base64.b64encode(bytes(8)).decode()}), SMALL),
        lambda: grps_json.decode_request(doc({"bin_data": base64.b64encode(bytes(9)).decode()}), SMALL),
        "bin_data: a value of 9 bytes exceeds limits.string_bytes (8)",
    ),
    "grps_json gmap": (
        lambda: grps_json.decode_request(doc({"gmap": {"s_s": {"k": "x" * 8}}}), SMALL),
        lambda: grps_json.decode_request(
            doc({"gmap": {"s_b": {"k": base64.b64encode(bytes(9)).decode()}}}), SMALL
        ),
        "gmap.s_b: a value of 9 bytes exceeds limits.string_bytes (8)",
    ),
    "oip_json inputs": (
        lambda: oip_json.decode_request(
            oip_doc(oip_input("a", [1], [1]), oip_input("b", [1], [1])), None, SMALL
        ),
        lambda: oip_json.decode_request(oip_doc(*(oip_input(n, [1], [1]) for n in "abc")), None, SMALL),
        "the request has 3 inputs; limits.tensors is 2",
    ),
    "oip_json outputs": (
        lambda: oip_json.decode_request(oip_doc(outputs=2), None, SMALL),
        lambda: oip_json.decode_request(oip_doc(outputs=3), None, SMALL),
        "the request has 3 requested outputs; limits.tensors is 2",
    ),
    "oip_json elements": (
        lambda: oip_json.decode_request(oip_doc(oip_input("a", [2, 5], [[1] * 5] * 2)), None, SMALL),
        lambda: oip_json.decode_request(
            oip_doc(oip_input("a", [1], [1]), oip_input("b", [10], [1] * 10)), None, SMALL
        ),
        "input 'b': the request's tensors hold 11 elements so far, over limits.elements (10)",
    ),
    "oip_json json_depth": (
        lambda: oip_json.decode_request(oip_doc(oip_input("a", [1, 1], [[1]])), None, SMALL),
        lambda: oip_json.decode_request(doc({"inputs": [], "ignored": [[[[[[]]]]]]}), None, SMALL),
        "the JSON nests 7 levels deep; limits.json_depth is 5",
    ),
    "oip_json BYTES": (
        lambda: oip_json.decode_request(oip_doc(oip_input("s", [1], ["x" * 8], "BYTES")), None, SMALL),
        lambda: oip_json.decode_request(oip_doc(oip_input("s", [1], ["é" * 5], "BYTES")), None, SMALL),
        "input 's': a value of 10 bytes exceeds limits.string_bytes (8)",
    ),
    "oip binary elements": (
        lambda: oip_json.decode_request(*binary_body("FP32", [10], 40, bytes(40)), SMALL),
        lambda: oip_json.decode_request(*binary_body("FP32", [11], 44, bytes(44)), SMALL),
        "input 'x': 11 elements exceed limits.elements (10)",
    ),
    "oip binary BYTES": (
        lambda: oip_json.decode_request(*binary_body("BYTES", [1], 12, records(bytes(8))), SMALL),
        lambda: oip_json.decode_request(*binary_body("BYTES", [2], 17, records(b"", bytes(9))), SMALL),
        "input 'x': BYTES element 1: a value of 9 bytes exceeds limits.string_bytes (8)",
    ),
    "generate inputs": (
        lambda: oip_generate.decode_generate(doc({"a": 1, "b": 2, "id": "x", "parameters": {}}), {}, SMALL),
        lambda: oip_generate.decode_generate(doc({"a": 1, "b": 2, "c": 3}), {}, SMALL),
        "the request has 3 inputs; limits.tensors is 2",
    ),
    "generate elements": (
        lambda: oip_generate.decode_generate(doc({"a": [1] * 9, "b": 1}), {}, SMALL),
        lambda: oip_generate.decode_generate(doc({"a": [1] * 10, "b": 1}), {}, SMALL),
        "input 'b': the request's tensors hold 11 elements so far, over limits.elements (10)",
    ),
    "generate strings": (
        lambda: oip_generate.decode_generate(doc({"text_input": "x" * 8}), {}, SMALL),
        lambda: oip_generate.decode_generate(doc({"text_input": ["x" * 9]}), {}, SMALL),
        "input 'text_input': a value of 9 bytes exceeds limits.string_bytes (8)",
    ),
    "generate json_depth": (
        lambda: oip_generate.decode_generate(doc({"a": [[[[1]]]]}), {}, SMALL),
        lambda: oip_generate.decode_generate(doc({"a": [[[[[1]]]]]}), {}, SMALL),
        "the JSON nests 6 levels deep; limits.json_depth is 5",
    ),
    "grps_pb tensors": (
        lambda: grps_pb.message_to_payload(grps_message(([1], [1]), ([1], [1])), SMALL),
        lambda: grps_pb.message_to_payload(grps_message(([1], [1]), ([1], [1]), ([1], [1])), SMALL),
        "the request has 3 tensors; limits.tensors is 2",
    ),
    "grps_pb elements": (
        lambda: grps_pb.message_to_payload(grps_message(([2, 5], [1] * 10)), SMALL),
        lambda: grps_pb.message_to_payload(grps_message(([2, 5], [1] * 10), ([1], [1])), SMALL),
        "tensor 't1': the request's tensors hold 11 elements so far, over limits.elements (10)",
    ),
    "grps_pb strings": (
        lambda: grps_pb.message_to_payload(grps_pb2.GrpsMessage(str_data="é" * 4), SMALL),
        lambda: grps_pb.message_to_payload(grps_pb2.GrpsMessage(bin_data=bytes(9)), SMALL),
        "bin_data: a value of 9 bytes exceeds limits.string_bytes (8)",
    ),
    "grps_pb gmap": (
        lambda: grps_pb.message_to_payload(grps_pb2.GrpsMessage(gmap={"s_b": {"k": bytes(8)}}), SMALL),
        lambda: grps_pb.message_to_payload(grps_pb2.GrpsMessage(gmap={"s_s": {"k": "x" * 9}}), SMALL),
        "gmap.s_s: a value of 9 bytes exceeds limits.string_bytes (8)",
    ),
    "oip_pb inputs": (
        lambda: oip_pb.decode_infer_request(oip_message([1], [1]), SMALL),
        lambda: oip_pb.decode_infer_request(oip_message([1], [1], [1]), SMALL),
        "the request has 3 inputs; limits.tensors is 2",
    ),
    "oip_pb outputs": (
        lambda: oip_pb.decode_infer_request(oip_message(outputs=2), SMALL),
        lambda: oip_pb.decode_infer_request(oip_message(outputs=3), SMALL),
        "the request has 3 requested outputs; limits.tensors is 2",
    ),
    "oip_pb elements": (
        lambda: oip_pb.decode_infer_request(oip_message([2, 5]), SMALL),
        lambda: oip_pb.decode_infer_request(oip_message([2, 5], [1]), SMALL),
        "input 'i1': the request's tensors hold 11 elements so far, over limits.elements (10)",
    ),
    "oip_pb bytes_contents": (
        lambda: oip_pb.decode_infer_request(bytes_request([bytes(8)]), SMALL),
        lambda: oip_pb.decode_infer_request(bytes_request([b"", bytes(9)]), SMALL),
        "input 'x': a value of 9 bytes exceeds limits.string_bytes (8)",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_limit_is_enforced_with_a_message_naming_it(case: str) -> None:
    at_limit, over_limit, message = CASES[case]
    at_limit()
    with pytest.raises(InvalidInput) as caught:
        over_limit()
    assert caught.value.public_message == message


def peak_bytes(call: Callable[[], Any]) -> int:
    tracemalloc.start()
    try:
        with pytest.raises(InvalidInput, match=r"elements exceed limits\.elements"):
            call()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


HUGE_CLAIMS: dict[str, Callable[[], Any]] = {
    "grps_json": lambda: grps_json.decode_request(grps_doc(gtensor("a", [2**31, 2**31], []))),
    "oip_json": lambda: oip_json.decode_request(oip_doc(oip_input("a", [2**40], []))),
    "oip binary": lambda: oip_json.decode_request(*binary_body("FP32", [2**40], 4, bytes(4))),
    "grps_pb": lambda: grps_pb.message_to_payload(grps_message(([2**31, 2**31], []))),
    "oip_pb": lambda: oip_pb.decode_infer_request(oip_message([2**40], claim_only=True)),
}


@pytest.mark.parametrize("case", sorted(HUGE_CLAIMS))
def test_a_huge_claimed_shape_is_refused_before_allocating(case: str) -> None:
    assert peak_bytes(HUGE_CLAIMS[case]) < 1 * MIB


def test_a_binary_size_larger_than_the_body_is_refused() -> None:
    with pytest.raises(
        InvalidInput, match="binary_data_size 1099511627776 runs past the end of the binary data"
    ):
        oip_json.decode_request(
            *binary_body("INT8", [2**40], 2**40, bytes(8)), LimitsSettings(elements=2**41)
        )


def test_element_budget_counts_the_whole_request() -> None:
    budget = ElementBudget(SMALL)
    budget.take_shape([2, 3], "a")
    assert budget.take_shape([4], "b") == 4
    with pytest.raises(InvalidInput) as caught:
        budget.take(1, "c")
    assert (
        caught.value.public_message
        == "c: the request's tensors hold 11 elements so far, over limits.elements (10)"
    )


def test_strings_are_measured_in_utf8_bytes() -> None:
    check_strings(["é" * 4, "x" * 8], "s", SMALL)  # 8 bytes each
    with pytest.raises(InvalidInput, match="s: a value of 9 bytes"):
        check_strings(["x", "é" * 4 + "x"], "s", SMALL)
    with pytest.raises(InvalidInput, match="s: a value of 12 bytes"):
        check_strings([b"x" * 12], "s", SMALL)


@pytest.mark.parametrize(
    ("text", "depth"),
    [
        (b"1", 0),
        (b"[]", 1),
        (b'{"a": [1, {"b": []}]}', 4),
        (b'["[[[[", "\\"[[[", "\\\\"]', 1),  # brackets in strings, escaped quotes, escaped backslashes
        (b'{"k\\\\\\"[": [[]]}', 3),
        (b"[" * 100 + b"]" * 100, 100),
    ],
)
def test_json_depth(text: bytes, depth: int) -> None:
    assert json_depth(text) == depth
    check_json_depth(text, LimitsSettings(json_depth=max(depth, 2)))


def test_default_limits() -> None:
    assert (DEFAULT_LIMITS.tensors, DEFAULT_LIMITS.elements) == (256, 256 * MIB)
    assert (DEFAULT_LIMITS.json_depth, DEFAULT_LIMITS.string_bytes) == (64, 64 * MIB)


def test_string_checks_are_skipped_only_for_bodies_no_longer_than_the_limit() -> None:
    assert for_body(SMALL, 9) is SMALL
    relaxed = for_body(SMALL, 8)  # nothing decoded from 8 bytes can be longer than 8 bytes
    assert relaxed.string_bytes > 2**62
    assert (relaxed.tensors, relaxed.elements, relaxed.json_depth) == (2, 10, 5)

"""The OIP codecs read the extensions' tensor parameters alike over JSON and protobuf: shared-memory
inputs and outputs, classification counts; and answer an output written to shared memory with its
parameters and no data."""

from __future__ import annotations

from typing import Any

import numpy as np
import orjson
import pytest

from grps_py.codecs import oip_json, oip_pb
from grps_py.core.errors import InvalidInput
from grps_py.core.oip import OipRequest, OipResponse, SharedInput, SharedMemoryRef
from grps_py.core.types import Tensor
from grps_py.protos import open_inference_pb2 as pb

SHM = {"shared_memory_region": "r", "shared_memory_byte_size": 24, "shared_memory_offset": 8}


def from_json(inputs: list[dict[str, Any]], outputs: list[dict[str, Any]] | None = None) -> OipRequest:
    return oip_json.decode_request(orjson.dumps({"inputs": inputs, "outputs": outputs or []}))


def from_pb(
    inputs: list[tuple[str, dict[str, Any]]], raw: list[bytes], outputs: dict[str, Any]
) -> OipRequest:
    msg = pb.ModelInferRequest(model_name="m")
    for name, parameters in inputs:
        tensor = msg.inputs.add(name=name, datatype="FP32", shape=[2, 3])
        oip_pb.set_parameters(tensor.parameters, parameters)
    msg.raw_input_contents.extend(raw)
    for name, parameters in outputs.items():
        oip_pb.set_parameters(msg.outputs.add(name=name).parameters, parameters)
    return oip_pb.decode_infer_request(pb.ModelInferRequest.FromString(msg.SerializeToString()))


def test_a_shared_memory_input_is_decoded_where_it_goes() -> None:
    data = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    over_json = from_json(
        [
            {"name": "a", "datatype": "FP32", "shape": [2, 3], "data": data},
            {"name": "b", "datatype": "FP32", "shape": [2, 3], "parameters": SHM},
        ]
    )
    over_pb = from_pb([("a", {}), ("b", SHM)], [np.array(data, np.float32).tobytes()], {})
    for request in (over_json, over_pb):
        assert [t.name for t in request.inputs] == ["a"]
        assert request.shared_inputs == [SharedInput(1, "b", "FP32", [2, 3], SharedMemoryRef("r", 24, 8))]
        assert request.uses_shared_memory


def test_raw_contents_belong_to_the_inputs_not_in_shared_memory() -> None:
    """As in Triton (and as tritonclient sends them): one raw entry per input that carries data."""
    with pytest.raises(InvalidInput, match="raw_input_contents has 2 entries for 1 inputs"):
        from_pb([("a", {}), ("b", SHM)], [b"\0" * 24, b"\0" * 24], {})


@pytest.mark.parametrize(
    ("parameters", "expected"),
    [
        ({"shared_memory_region": "r"}, "'shared_memory_region' needs 'shared_memory_byte_size'"),
        ({"shared_memory_byte_size": 24}, "'shared_memory_byte_size' is given without"),
        ({"shared_memory_region": "", "shared_memory_byte_size": 24}, "must be a region's name"),
        ({"shared_memory_region": "r", "shared_memory_byte_size": -1}, "must be a non-negative integer"),
        ({"shared_memory_region": "r", "shared_memory_byte_size": 24, "shared_memory_offset": "8"}, "offset"),
    ],
)
def test_shared_memory_parameters_are_checked(parameters: dict[str, Any], expected: str) -> None:
    with pytest.raises(InvalidInput, match=expected):
        from_json([{"name": "b", "datatype": "FP32", "shape": [2, 3], "parameters": parameters}])
    with pytest.raises(InvalidInput, match=expected):
        from_pb([("b", parameters)], [], {})


def test_an_input_gives_its_data_one_way() -> None:
    both = {"name": "b", "datatype": "FP32", "shape": [1], "data": [1.0], "parameters": SHM}
    with pytest.raises(InvalidInput, match="exactly one of them"):
        from_json([both])


def test_requested_outputs_read_classification_and_shared_memory() -> None:
    over_json = from_json(
        [], [{"name": "c", "parameters": {"classification": 3}}, {"name": "s", "parameters": SHM}]
    )
    over_pb = from_pb([], [], {"c": {"classification": 3}, "s": SHM})
    for request in (over_json, over_pb):
        c, s = request.outputs
        assert (c.classification, c.shared_memory) == (3, None)
        assert (s.classification, s.shared_memory) == (0, SharedMemoryRef("r", 24, 8))


def test_shared_memory_and_binary_data_together_are_invalid() -> None:
    with pytest.raises(InvalidInput, match="can't set both 'shared_memory_region' and 'binary_data'"):
        from_json([], [{"name": "s", "parameters": {**SHM, "binary_data": True}}])
    assert (
        from_json([], [{"name": "s", "parameters": {**SHM, "binary_data": False}}]).outputs[0].shared_memory
    )


def placed_response() -> OipResponse:
    response = OipResponse("m", "1", [Tensor("s", np.ones((2, 3), np.float32)), Tensor("t", np.arange(2))])
    response.placed["s"] = {"shared_memory_region": "r", "shared_memory_byte_size": 24}
    return response


def test_an_output_in_shared_memory_is_answered_without_its_data() -> None:
    body, header_length = oip_json.encode_response(placed_response(), {"s", "t"})
    assert header_length is not None
    outputs = orjson.loads(body[:header_length])["outputs"]
    assert outputs[0] == {
        "name": "s",
        "datatype": "FP32",
        "shape": [2, 3],
        "parameters": {"shared_memory_region": "r", "shared_memory_byte_size": 24},
    }
    assert outputs[1]["parameters"] == {"binary_data_size": 16} and len(body) == header_length + 16
    reply = oip_pb.encode_infer_response(placed_response())
    assert list(reply.raw_output_contents) == [b"", np.arange(2).tobytes()]  # one entry per output
    assert reply.outputs[0].parameters["shared_memory_byte_size"].int64_param == 24
    assert list(reply.outputs[0].shape) == [2, 3]

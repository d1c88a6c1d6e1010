"""Our `inference.*` protobuf contract against Triton's: same field numbers and types, same rpc paths,
and tritonclient's messages and helpers read what we write and write what we read.

Both definitions live in one process here: ours in a private descriptor pool, tritonclient's in the
default one (see scripts/gen_proto.py), which is exactly the situation this file also proves works.
"""

from __future__ import annotations

import queue
import subprocess
import sys
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc
import ml_dtypes
import numpy as np
import pytest
import tritonclient.grpc as triton
from google.protobuf import descriptor as d
from google.protobuf import descriptor_pool, json_format
from tritonclient.grpc import _utils as triton_utils
from tritonclient.grpc import service_pb2 as theirs
from tritonclient.grpc import service_pb2_grpc as theirs_grpc

from grps_py.codecs import oip_pb
from grps_py.core.catalog import ModelEntry, model_config
from grps_py.core.oip import OipResponse, RequestedOutput
from grps_py.core.signature import TensorSpec
from grps_py.core.types import Tensor
from grps_py.protos import open_inference_pb2 as ours
from grps_py.protos import open_inference_pb2_grpc as ours_grpc
from oip_clients import CONTENTS_FIELD

Array = np.ndarray[Any, Any]
RPCS = [
    "ServerLive",
    "ServerReady",
    "ModelReady",
    "ServerMetadata",
    "ModelMetadata",
    "ModelInfer",
    "ModelStreamInfer",
    "ModelConfig",
    "ModelStatistics",
    "RepositoryIndex",
    "RepositoryModelLoad",
    "RepositoryModelUnload",
    "SystemSharedMemoryStatus",
    "SystemSharedMemoryRegister",
    "SystemSharedMemoryUnregister",
    "CudaSharedMemoryStatus",
    "CudaSharedMemoryRegister",
    "CudaSharedMemoryUnregister",
]


def bytes_array(values: list[bytes], shape: tuple[int, ...]) -> Array:
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out.reshape(shape)


ARRAYS: dict[str, Array] = {
    "BOOL": np.array([[True, False], [False, True]]),
    "UINT8": np.array([0, 255], dtype=np.uint8),
    "UINT16": np.array([0, 65535], dtype=np.uint16),
    "UINT32": np.array([0, 2**32 - 1], dtype=np.uint32),
    "UINT64": np.array([0, 2**64 - 1], dtype=np.uint64),
    "INT8": np.array([-128, 127], dtype=np.int8),
    "INT16": np.array([-32768, 32767], dtype=np.int16),
    "INT32": np.array([-(2**31), 2**31 - 1], dtype=np.int32),
    "INT64": np.array([[-(2**63)], [2**63 - 1]], dtype=np.int64),
    "FP16": np.array([0.5, -65504, np.inf], dtype=np.float16),
    "FP32": np.array([[0.1, -np.inf, 3.4e38]], dtype=np.float32),
    "FP64": np.array([1e-300, 1.7e308, -0.0], dtype=np.float64),
    "BYTES": bytes_array([b"", b"\x00\xff", "日本語".encode(), b"x" * 300], (2, 2)),
    "BF16": np.array([1.0, -2.5, 3.0e38], dtype=ml_dtypes.bfloat16),
}


def assert_same(got: Array, want: Array) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape
    if want.dtype == object:
        assert got.tolist() == want.tolist()
    else:
        assert got.tobytes() == want.tobytes()


# --- the contract, field by field ---------------------------------------------------------------


def all_messages(file: d.FileDescriptor) -> Iterator[d.Descriptor]:
    """Every message of a file, nested ones (map entries included) too."""
    pending = list(file.message_types_by_name.values())
    while pending:
        message = pending.pop()
        yield message
        pending.extend(message.nested_types)


def triton_pool() -> descriptor_pool.DescriptorPool:
    return theirs.DESCRIPTOR.pool


def test_our_descriptors_live_in_a_private_pool() -> None:
    assert ours.DESCRIPTOR.pool is not descriptor_pool.Default()
    assert ours.DESCRIPTOR.pool is not triton_pool()
    assert ours.DESCRIPTOR.package == "inference"


@pytest.mark.parametrize("message", sorted(m.full_name for m in all_messages(ours.DESCRIPTOR)))
def test_every_field_matches_triton(message: str) -> None:
    mine = ours.DESCRIPTOR.pool.FindMessageTypeByName(message)
    theirs_message = triton_pool().FindMessageTypeByName(message)
    assert mine.GetOptions().map_entry == theirs_message.GetOptions().map_entry
    for field in mine.fields:
        other = theirs_message.fields_by_name.get(field.name)
        assert other is not None, f"{field.full_name} is not in Triton's {message}"
        assert (field.number, field.type, field.is_repeated) == (
            other.number,
            other.type,
            other.is_repeated,
        ), field.full_name
        for kind in ("message_type", "enum_type"):
            a, b = getattr(field, kind), getattr(other, kind)
            assert (a and a.full_name) == (b and b.full_name), field.full_name
        oneof_a, oneof_b = field.containing_oneof, other.containing_oneof
        assert (oneof_a and oneof_a.name) == (oneof_b and oneof_b.name), field.full_name


def test_every_enum_value_matches_triton() -> None:
    enums = [*ours.DESCRIPTOR.enum_types_by_name.values()]
    enums += [e for m in all_messages(ours.DESCRIPTOR) for e in m.enum_types]
    assert {e.full_name for e in enums} == {
        "inference.DataType",
        "inference.ModelInput.Format",
        "inference.ModelInstanceGroup.Kind",
        "inference.ModelQueuePolicy.TimeoutAction",
        "inference.ModelSequenceBatching.Control.Kind",
    }
    for enum in enums:
        other = triton_pool().FindEnumTypeByName(enum.full_name)
        assert {v.name: v.number for v in enum.values} == {v.name: v.number for v in other.values}


def test_the_service_has_our_rpcs_typed_as_tritons() -> None:
    service = ours.DESCRIPTOR.services_by_name["GRPCInferenceService"]
    assert service.full_name == "inference.GRPCInferenceService"
    assert [m.name for m in service.methods] == RPCS
    other = triton_pool().FindServiceByName(service.full_name)
    for method in service.methods:
        their = other.methods_by_name[method.name]
        assert method.input_type.full_name == their.input_type.full_name
        assert method.output_type.full_name == their.output_type.full_name
        assert (method.client_streaming, method.server_streaming) == (
            their.client_streaming,
            their.server_streaming,
        )


class RecordingChannel:
    """Stands in for a grpc.Channel and records the path and kind of each stub method."""

    def __init__(self) -> None:
        self.paths: dict[str, str] = {}

    def __getattr__(self, kind: str) -> Any:
        def register(path: str, **_: Any) -> str:
            self.paths[path] = kind
            return path

        return register


def test_rpc_paths_match_tritons_stub() -> None:
    mine, other = RecordingChannel(), RecordingChannel()
    ours_grpc.GRPCInferenceServiceStub(mine)
    theirs_grpc.GRPCInferenceServiceStub(other)
    expected = {f"/inference.GRPCInferenceService/{rpc}" for rpc in RPCS}
    assert set(mine.paths) == expected
    assert mine.paths == {path: other.paths[path] for path in expected}  # same paths, same streaming kinds
    assert mine.paths["/inference.GRPCInferenceService/ModelStreamInfer"] == "stream_stream"


@pytest.mark.parametrize(
    "order",
    [
        "import grps_py.protos.open_inference_pb2_grpc, tritonclient.grpc",
        "import tritonclient.grpc, grps_py.protos.open_inference_pb2_grpc",
    ],
    ids=["ours-first", "triton-first"],
)
def test_both_import_in_one_process_in_either_order(order: str) -> None:
    subprocess.run([sys.executable, "-c", order], check=True)


# --- messages both ways -------------------------------------------------------------------------

SAMPLES: dict[str, dict[str, Any]] = {
    "ServerLiveRequest": {},
    "ServerLiveResponse": {"live": True},
    "ServerReadyRequest": {},
    "ServerReadyResponse": {"ready": True},
    "ModelReadyRequest": {"name": "m", "version": "2"},
    "ModelReadyResponse": {"ready": True},
    "ServerMetadataRequest": {},
    "ServerMetadataResponse": {"name": "grps-py", "version": "0.1.0", "extensions": ["a", "b"]},
    "ModelMetadataRequest": {"name": "m", "version": "1"},
    "ModelMetadataResponse": {
        "name": "m",
        "versions": ["1", "2"],
        "platform": "python",
        "inputs": [{"name": "x", "datatype": "FP32", "shape": ["-1", "3"]}],
        "outputs": [{"name": "y", "datatype": "BYTES", "shape": ["1"]}],
    },
    "ModelInferRequest": {
        "modelName": "m",
        "modelVersion": "1",
        "id": "r",
        "parameters": {"a": {"boolParam": True}, "b": {"uint64Param": "18446744073709551615"}},
        "inputs": [
            {
                "name": "x",
                "datatype": "INT32",
                "shape": ["2"],
                "parameters": {"c": {"doubleParam": 0.5}},
                "contents": {"intContents": [1, -2]},
            }
        ],
        "outputs": [{"name": "y", "parameters": {"classification": {"int64Param": "3"}}}],
    },
    "ModelInferResponse": {
        "modelName": "m",
        "modelVersion": "1",
        "id": "r",
        "parameters": {"s": {"stringParam": "v"}},
        "outputs": [{"name": "y", "datatype": "FP32", "shape": ["1"]}],
        "rawOutputContents": ["AACAPw=="],
    },
    "ModelStreamInferResponse": {
        "errorMessage": "one request failed",
        "inferResponse": {"modelName": "m", "parameters": {"triton_final_response": {"boolParam": True}}},
    },
    "ModelConfigRequest": {"name": "m", "version": "1"},
    "ModelConfigResponse": {
        "config": {
            "name": "m",
            "platform": "onnxruntime_onnx",
            "backend": "onnxruntime",
            "maxBatchSize": 4,
            "input": [
                {
                    "name": "x",
                    "dataType": "TYPE_BF16",
                    "format": "FORMAT_NCHW",
                    "dims": ["3"],
                    "optional": True,
                }
            ],
            "output": [{"name": "y", "dataType": "TYPE_STRING", "dims": ["-1"], "labelFilename": "l.txt"}],
            "instanceGroup": [{"name": "g", "kind": "KIND_GPU", "count": 2, "gpus": [0, 1]}],
            "dynamicBatching": {"preferredBatchSize": [2, 4], "maxQueueDelayMicroseconds": "100"},
            "modelTransactionPolicy": {"decoupled": True},
            "parameters": {"p": {"stringValue": "v"}},
        }
    },
    "ModelStatisticsRequest": {"name": "m", "version": "1"},
    "ModelStatisticsResponse": {
        "modelStats": [
            {
                "name": "m",
                "version": "1",
                "lastInference": "1700000000000",
                "inferenceCount": "6",
                "executionCount": "2",
                "inferenceStats": {
                    "success": {"count": "2", "ns": "3000"},
                    "fail": {"count": "1", "ns": "10"},
                    "queue": {"count": "2", "ns": "100"},
                    "computeInput": {"count": "2", "ns": "200"},
                    "computeInfer": {"count": "2", "ns": "2000"},
                    "computeOutput": {"count": "2", "ns": "300"},
                    "cacheHit": {},
                    "cacheMiss": {},
                },
                "batchStats": [{"batchSize": "3", "computeInfer": {"count": "2", "ns": "2000"}}],
                "memoryUsage": [{"type": "GPU", "id": "1", "byteSize": "1024"}],
            }
        ]
    },
    "RepositoryIndexRequest": {"repositoryName": "r", "ready": True},
    "RepositoryIndexResponse": {
        "models": [{"name": "m", "version": "1", "state": "UNAVAILABLE", "reason": "unloaded"}]
    },
    "RepositoryModelLoadRequest": {
        "repositoryName": "r",
        "modelName": "m",
        "parameters": {"config": {"stringParam": "{}"}, "file:1/model.onnx": {"bytesParam": "AAE="}},
    },
    "RepositoryModelLoadResponse": {},
    "RepositoryModelUnloadRequest": {
        "modelName": "m",
        "parameters": {"unload_dependents": {"boolParam": True}},
    },
    "RepositoryModelUnloadResponse": {},
    "SystemSharedMemoryStatusRequest": {"name": "r"},
    "SystemSharedMemoryStatusResponse": {
        "regions": {"r": {"name": "r", "key": "/k", "offset": "8", "byteSize": "64"}}
    },
    "SystemSharedMemoryRegisterRequest": {"name": "r", "key": "/k", "offset": "8", "byteSize": "64"},
    "SystemSharedMemoryRegisterResponse": {},
    "SystemSharedMemoryUnregisterRequest": {"name": "r"},
    "SystemSharedMemoryUnregisterResponse": {},
    "CudaSharedMemoryStatusRequest": {"name": "c"},
    "CudaSharedMemoryStatusResponse": {"regions": {"c": {"name": "c", "deviceId": "1", "byteSize": "64"}}},
    "CudaSharedMemoryRegisterRequest": {"name": "c", "rawHandle": "AAE=", "deviceId": "1", "byteSize": "64"},
    "CudaSharedMemoryRegisterResponse": {},
    "CudaSharedMemoryUnregisterRequest": {"name": "c"},
    "CudaSharedMemoryUnregisterResponse": {},
}

SEQUENCE_CONFIG = {
    "name": "acc",
    "maxBatchSize": 8,
    "sequenceBatching": {
        "maxSequenceIdleMicroseconds": "5000000",
        "oldest": {"maxCandidateSequences": 4, "preferredBatchSize": [2], "maxQueueDelayMicroseconds": "100"},
        "controlInput": [
            {"name": "START", "control": [{"int32FalseTrue": [0, 1]}]},
            {"name": "CORRID", "control": [{"kind": "CONTROL_SEQUENCE_CORRID", "dataType": "TYPE_UINT64"}]},
        ],
    },
}
QUEUED_CONFIG = {
    "name": "q",
    "dynamicBatching": {
        "priorityLevels": "2",
        "defaultPriorityLevel": "1",
        "defaultQueuePolicy": {
            "timeoutAction": "DELAY",
            "defaultTimeoutMicroseconds": "1000",
            "maxQueueSize": 8,
        },
        "priorityQueuePolicy": {"1": {"allowTimeoutOverride": True}},
    },
}


@pytest.mark.parametrize("config", [SEQUENCE_CONFIG, QUEUED_CONFIG], ids=["sequence", "queue policies"])
def test_model_configs_cross_both_ways(config: dict[str, Any]) -> None:
    mine = json_format.ParseDict({"config": config}, ours.ModelConfigResponse())
    other = json_format.ParseDict({"config": config}, theirs.ModelConfigResponse())
    assert mine.SerializeToString(deterministic=True) == other.SerializeToString(deterministic=True)
    assert json_format.MessageToDict(theirs.ModelConfigResponse.FromString(mine.SerializeToString())) == {
        "config": config
    }


def test_every_message_has_a_sample() -> None:
    # The messages left out are all reached through the samples of those that hold them.
    assert set(SAMPLES) == set(ours.DESCRIPTOR.message_types_by_name) - {
        "InferParameter",
        "InferTensorContents",
        "ModelConfig",
        "ModelInput",
        "ModelOutput",
        "ModelInstanceGroup",
        "ModelDynamicBatching",
        "ModelTransactionPolicy",
        "ModelQueuePolicy",
        "ModelSequenceBatching",
        "ModelParameter",
        "StatisticDuration",
        "InferStatistics",
        "InferBatchStatistics",
        "MemoryUsage",
        "ModelStatistics",
        "ModelRepositoryParameter",
    }


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_messages_cross_both_ways(name: str) -> None:
    mine = json_format.ParseDict(SAMPLES[name], getattr(ours, name)())
    other = json_format.ParseDict(SAMPLES[name], getattr(theirs, name)())
    assert mine.SerializeToString(deterministic=True) == other.SerializeToString(deterministic=True)
    from_mine = getattr(theirs, name).FromString(mine.SerializeToString())
    from_theirs = getattr(ours, name).FromString(other.SerializeToString())
    assert json_format.MessageToDict(from_mine) == json_format.MessageToDict(from_theirs) == SAMPLES[name]


# --- inference: tritonclient's request -> our decoder; our encoder -> tritonclient's result --------


def triton_inputs(arrays: dict[str, Array]) -> list[Any]:
    """tritonclient's InferInput for each array, its data set with set_data_from_numpy (raw contents)."""
    inputs = []
    for name, array in arrays.items():
        datatype = next(k for k, v in ARRAYS.items() if v.dtype == array.dtype)
        inputs.append(triton.InferInput(name, list(array.shape), datatype).set_data_from_numpy(array))
    return inputs


def triton_request(arrays: dict[str, Array], outputs: list[Any], **parameters: Any) -> bytes:
    """The request tritonclient's InferenceServerClient.infer would send, as wire bytes."""
    request = triton_utils._get_inference_request(
        model_name="m",
        inputs=triton_inputs(arrays),
        model_version="2",
        request_id="req-7",
        outputs=outputs,
        sequence_id=0,
        sequence_start=False,
        sequence_end=False,
        priority=3,
        timeout=1000,
        parameters=parameters,
    )
    return request.SerializeToString()


@pytest.mark.parametrize("datatype", sorted(ARRAYS))
def test_tritonclient_request_decodes(datatype: str) -> None:
    wire = triton_request({"x": ARRAYS[datatype]}, [triton.InferRequestedOutput("y", class_count=2)], p=1.5)
    msg = ours.ModelInferRequest.FromString(wire)
    assert (msg.model_name, msg.model_version) == ("m", "2")
    request = oip_pb.decode_infer_request(msg)
    (tensor,) = request.inputs
    assert tensor.name == "x"
    assert_same(tensor.array, ARRAYS[datatype])
    assert request.id == "req-7"
    assert request.parameters == {"priority": 3, "timeout": 1000, "p": 1.5}
    assert request.outputs == [RequestedOutput("y", None, {"classification": 2})]


def test_tritonclient_request_with_every_datatype_at_once() -> None:
    arrays = {f"in_{k}": v for k, v in sorted(ARRAYS.items())}
    wire = triton_request(arrays, [], flag=True, text="t", count=-5)
    request = oip_pb.decode_infer_request(ours.ModelInferRequest.FromString(wire))
    assert [t.name for t in request.inputs] == list(arrays)
    for tensor, array in zip(request.inputs, arrays.values(), strict=True):
        assert_same(tensor.array, array)
    assert request.parameters == {"priority": 3, "timeout": 1000, "flag": True, "text": "t", "count": -5}


@pytest.mark.parametrize("datatype", sorted(CONTENTS_FIELD))
def test_triton_typed_contents_decode(datatype: str) -> None:
    array = ARRAYS[datatype]
    msg = theirs.ModelInferRequest(model_name="m")
    tensor = msg.inputs.add(name="x", datatype=datatype, shape=array.shape)
    getattr(tensor.contents, CONTENTS_FIELD[datatype]).extend(array.ravel().tolist())
    (decoded,) = oip_pb.decode_infer_request(
        ours.ModelInferRequest.FromString(msg.SerializeToString())
    ).inputs
    assert_same(decoded.array, array)


PARAMETERS = {"flag": True, "count": -(2**63), "big": 2**64 - 1, "ratio": 0.25, "text": "héllo"}


def encode_for_triton(outputs: list[Tensor]) -> triton.InferResult:
    reply = oip_pb.encode_infer_response(OipResponse("m", "2", outputs, id="req-7", parameters=PARAMETERS))
    return triton.InferResult(theirs.ModelInferResponse.FromString(reply.SerializeToString()))


@pytest.mark.parametrize("datatype", sorted(ARRAYS))
def test_tritonclient_reads_our_response(datatype: str) -> None:
    result = encode_for_triton([Tensor("y", ARRAYS[datatype])])
    assert_same(result.as_numpy("y"), ARRAYS[datatype])
    response = result.get_response()
    assert (response.model_name, response.model_version, response.id) == ("m", "2", "req-7")
    params = {k: getattr(v, v.WhichOneof("parameter_choice")) for k, v in response.parameters.items()}
    assert params == PARAMETERS
    assert response.parameters["big"].WhichOneof("parameter_choice") == "uint64_param"


def test_tritonclient_reads_many_outputs_and_text() -> None:
    outputs = [Tensor(f"out_{k}", v) for k, v in sorted(ARRAYS.items())]
    outputs.append(Tensor("text", np.array([["a", "é"]])))  # numpy unicode -> BYTES, UTF-8
    result = encode_for_triton(outputs)
    for tensor in outputs[:-1]:
        assert_same(result.as_numpy(tensor.name), tensor.array)
    assert result.as_numpy("text").tolist() == [[b"a", "é".encode()]]


def test_tritonclient_reads_our_metadata_and_config() -> None:
    entry = ModelEntry(
        name="clf",
        version="2",
        key="clf-2",
        platform="onnxruntime_onnx",
        backend="onnxruntime",
        inputs=(TensorSpec("x", "FP32", (-1, 3)),),
        outputs=(TensorSpec("y", "INT64", (-1,)), TensorSpec("z")),
        declared_inputs=True,
        max_batch_size=8,
        batch_timeout_us=250,
        takes_messages=False,
        gpu=False,
    )
    metadata = theirs.ModelMetadataResponse.FromString(
        oip_pb.encode_model_metadata(entry, ["1", "2"]).SerializeToString()
    )
    assert (metadata.name, list(metadata.versions), metadata.platform) == (
        "clf",
        ["1", "2"],
        "onnxruntime_onnx",
    )
    assert [(t.name, t.datatype, list(t.shape)) for t in metadata.outputs] == [
        ("y", "INT64", [-1]),
        ("z", "", []),
    ]
    config = theirs.ModelConfigResponse.FromString(
        oip_pb.encode_model_config(model_config(entry)).SerializeToString()
    ).config
    assert json_format.MessageToDict(config, preserving_proto_field_name=True) == {
        "name": "clf",
        "platform": "onnxruntime_onnx",
        "backend": "onnxruntime",
        "max_batch_size": 8,
        "input": [{"name": "x", "data_type": "TYPE_FP32", "dims": ["3"]}],
        "output": [{"name": "y", "data_type": "TYPE_INT64"}, {"name": "z"}],  # z: TYPE_INVALID, the default
        "instance_group": [{"count": 1, "kind": "KIND_CPU"}],
        "dynamic_batching": {"max_queue_delay_microseconds": "250"},
    }


# --- over a real channel: our generated servicer code, tritonclient's InferenceServerClient ------


class EchoServicer(ours_grpc.GRPCInferenceServiceServicer):
    """Answers with the request's inputs as outputs, through the codec, as an adapter would."""

    def _echo(self, request: ours.ModelInferRequest) -> OipResponse:
        decoded = oip_pb.decode_infer_request(request)
        return OipResponse(request.model_name, "1", decoded.inputs, decoded.id, decoded.parameters)

    def ModelInfer(self, request: ours.ModelInferRequest, context: Any) -> ours.ModelInferResponse:
        return oip_pb.encode_infer_response(self._echo(request))

    def ModelStreamInfer(self, requests: Iterator[ours.ModelInferRequest], context: Any) -> Iterator[Any]:
        for request in requests:
            reply = ours.ModelStreamInferResponse()
            oip_pb.encode_infer_response(self._echo(request), reply.infer_response)
            yield reply

    def ModelConfig(self, request: ours.ModelConfigRequest, context: Any) -> ours.ModelConfigResponse:
        return oip_pb.encode_model_config({"name": request.name, "max_batch_size": 2})

    def ServerLive(self, request: ours.ServerLiveRequest, context: Any) -> ours.ServerLiveResponse:
        return ours.ServerLiveResponse(live=True)


@pytest.fixture(scope="module")
def echo_server() -> Iterator[str]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    ours_grpc.add_GRPCInferenceServiceServicer_to_server(EchoServicer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield f"127.0.0.1:{port}"
    server.stop(grace=None)


def test_tritonclient_over_a_real_channel(echo_server: str) -> None:
    arrays = {f"in_{k}": v for k, v in sorted(ARRAYS.items())}
    with triton.InferenceServerClient(echo_server) as client:
        assert client.is_server_live()
        result = client.infer("m", triton_inputs(arrays), request_id="r1", parameters={"k": "v"})
        for name, array in arrays.items():
            assert_same(result.as_numpy(name), array)
        assert result.get_response().id == "r1"
        config = client.get_model_config("m").config
        assert (config.name, config.max_batch_size) == ("m", 2)


def test_tritonclient_stream_over_a_real_channel(echo_server: str) -> None:
    results: queue.Queue[Any] = queue.Queue()
    with triton.InferenceServerClient(echo_server) as client:
        client.start_stream(callback=lambda result, error: results.put((result, error)))
        for i in range(3):
            client.async_stream_infer("m", triton_inputs({"x": np.full(2, i, np.int32)}), request_id=str(i))
        received = [results.get(timeout=10) for _ in range(3)]
        client.stop_stream()
    for i, (result, error) in enumerate(received):
        assert error is None
        assert result.get_response().id == str(i)
        assert_same(result.as_numpy("x"), np.full(2, i, np.int32))

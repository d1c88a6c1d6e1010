"""Dynamic batching: concurrent requests run as one batch, and a bad request fails alone; a batch counts
requests for a converter that merges it itself (grps's rule), rows of one shape for the others."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
import httpx
import numpy as np
import pytest
from google.protobuf import json_format

from grps_py.core.context import GrpsContext
from grps_py.core.model import Converter, ModelInferer, converter_register, inferer_register
from grps_py.protos import grps_pb2, grps_pb2_grpc
from support import ServerThread, start_project


def predict_all(server: ServerThread, texts: list[str]) -> list[httpx.Response]:
    def one(text: str) -> httpx.Response:
        doc = {"model": "batched-1.0", "str_data": text}
        return httpx.post(f"{server.http_url}/grps/v1/infer/predict", json=doc, timeout=30)

    with ThreadPoolExecutor(len(texts)) as pool:
        return list(pool.map(one, texts))


def test_concurrent_requests_share_one_batch(basic_server: ServerThread) -> None:
    sizes = sys.modules["serving_models"].BATCH_SIZES
    sizes.clear()
    # max_batch_size is 4 and the timeout 2 s: four concurrent requests fill one batch at once.
    replies = predict_all(basic_server, ["a", "b", "c", "d"])
    assert [r.json()["str_data"] for r in replies] == ["a!", "b!", "c!", "d!"]
    assert sizes == [4]


def test_one_bad_request_fails_alone(basic_server: ServerThread) -> None:
    replies = predict_all(basic_server, ["a", "bad", "c", "d"])
    assert [r.status_code for r in replies] == [200, 500, 200, 200]
    assert "bad row" in replies[1].json()["status"]["msg"]
    assert [replies[i].json()["str_data"] for i in (0, 2, 3)] == ["a!", "c!", "d!"]


# -- what a batch counts: requests for a converter that merges the batch, rows for the others -------

BATCHING_INFERENCE = """\
models:
  - name: padded            # grps's contract: its converter pads and merges the batch itself
    version: "1"
    inferer_type: customized
    inferer_name: batching_test_row_sums
    converter_type: customized
    converter_name: batching_test_padding
    batching: {type: dynamic, max_batch_size: 4, batch_timeout_us: 2000000}
  - name: rows              # the numpy converter concatenates along dim 0: rows and shapes rule
    version: "1"
    inferer_type: customized
    inferer_name: batching_test_shapes
    converter_type: numpy
    batching: {type: dynamic, max_batch_size: 3, batch_timeout_us: 2000000}
dag:
  name: padded_dag
  nodes: [{name: padded, type: model, model: padded-1}]
"""


class PaddingConverter(Converter):
    """grps's batch contract with variable-length inputs: each request is a float tensor [rows, length];
    batch_preprocess pads every row to the batch's longest and stacks them, batch_postprocess cuts each
    request's rows and length back out."""

    def batch_preprocess(self, inps: list[Any], contexts: list[GrpsContext]) -> Any:
        arrays = []
        for msg, ctx in zip(inps, contexts, strict=True):
            tensor = msg.gtensors.tensors[0]
            arrays.append(np.asarray(tensor.flat_float32, np.float32).reshape(list(tensor.shape)))
            ctx.put_user_data("shape", arrays[-1].shape)
        width = max(a.shape[1] for a in arrays)
        return np.concatenate([np.pad(a, ((0, 0), (0, width - a.shape[1]))) for a in arrays])

    def batch_postprocess(self, inp: Any, contexts: list[GrpsContext]) -> list[Any]:
        outs, start = [], 0
        for ctx in contexts:
            rows, length = ctx.get_user_data("shape")
            y = inp[start : start + rows, :length]
            start += rows
            out = grps_pb2.GrpsMessage()
            tensor = out.gtensors.tensors.add(name="y", dtype=grps_pb2.DT_FLOAT32, shape=list(y.shape))
            tensor.flat_float32.extend(y.ravel().tolist())
            outs.append(out)
        return outs


class RowSums(ModelInferer):
    """Running sums along each row; records the shapes of the requests in each batch it runs."""

    batches: list[list[tuple[int, int]]] = []

    def batch_infer(self, inp: Any, contexts: list[GrpsContext]) -> Any:
        self.batches.append(sorted(ctx.get_user_data("shape") for ctx in contexts))
        return np.cumsum(inp, axis=1)


class Shapes(ModelInferer):
    """Doubles its input; records the shape of each (merged) input it runs."""

    shapes: list[tuple[int, ...]] = []

    def infer(self, inp: Any, context: GrpsContext) -> Any:
        (x,) = inp.values()
        self.shapes.append(tuple(x.shape))
        return {"y": x * 2}


converter_register.register("batching_test_padding", PaddingConverter())
inferer_register.register("batching_test_row_sums", RowSums())
inferer_register.register("batching_test_shapes", Shapes())


@pytest.fixture(scope="module")
def batching_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    root = tmp_path_factory.mktemp("batching")
    (root / "server.yml").write_text("interface:\n  host: 127.0.0.1\n  port: 0,0\n")
    (root / "inference.yml").write_text(BATCHING_INFERENCE)
    running = start_project(root, inference_conf=root / "inference.yml", server_conf=root / "server.yml")
    yield running
    running.stop()


def message(model: str, rows: list[list[float]]) -> grps_pb2.GrpsMessage:
    msg = grps_pb2.GrpsMessage(model=model)
    tensor = msg.gtensors.tensors.add(name="x", dtype=grps_pb2.DT_FLOAT32, shape=[len(rows), len(rows[0])])
    tensor.flat_float32.extend(v for row in rows for v in row)
    return msg


def over_http(server: ServerThread, msg: grps_pb2.GrpsMessage) -> tuple[int, Any]:
    reply = httpx.post(
        f"{server.http_url}/grps/v1/infer/predict", content=json_format.MessageToJson(msg), timeout=30
    )
    if reply.status_code != 200:
        return reply.status_code, reply.json()["status"]["msg"]
    (y,) = reply.json()["gtensors"]["tensors"]
    return 200, np.asarray(y["flat_float32"]).reshape(y["shape"]).tolist()


def over_grpc(server: ServerThread, msg: grps_pb2.GrpsMessage) -> tuple[int, Any]:
    with grpc.insecure_channel(server.grpc_target) as channel:
        answer = grps_pb2_grpc.GrpsServiceStub(channel).Predict(msg, timeout=30)
    if answer.status.status == grps_pb2.Status.FAILURE:
        return answer.status.code, answer.status.msg
    (y,) = answer.gtensors.tensors
    return 200, np.asarray(y.flat_float32).reshape(list(y.shape)).tolist()


def concurrently(server: ServerThread, msgs: list[grps_pb2.GrpsMessage]) -> list[tuple[int, Any]]:
    """All at once: the even ones over HTTP, the odd ones over gRPC."""
    with ThreadPoolExecutor(len(msgs)) as pool:
        futures = [pool.submit(over_grpc if i % 2 else over_http, server, m) for i, m in enumerate(msgs)]
        return [future.result() for future in futures]


def test_a_merging_converter_batches_requests_of_any_shape(batching_server: ServerThread) -> None:
    """grps's rule: max_batch_size 4 counts requests. Four requests of four different lengths (and row
    counts) fill one batch at once, over HTTP and gRPC alike."""
    RowSums.batches.clear()
    inputs = [[[1.0]], [[1.0, 2.0]], [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], [[1.0, 1.0, 1.0, 1.0]]]
    answers = concurrently(batching_server, [message("padded-1", rows) for rows in inputs])
    assert answers == [(200, np.cumsum(rows, axis=1).tolist()) for rows in inputs]
    assert RowSums.batches == [[(1, 1), (1, 2), (1, 4), (2, 3)]]


def test_a_merging_converter_takes_a_request_of_more_rows_than_max_batch_size(
    batching_server: ServerThread,
) -> None:
    """A request counts one however many rows it has (the rows rule would refuse 6 rows with a 400)."""
    RowSums.batches.clear()
    rows = [[float(i), 1.0] for i in range(6)]
    assert over_grpc(batching_server, message("padded-1", rows)) == (200, np.cumsum(rows, axis=1).tolist())
    assert RowSums.batches == [[(6, 2)]]


def test_rows_and_shapes_still_rule_for_the_numpy_converter(batching_server: ServerThread) -> None:
    """max_batch_size 3 counts rows: 1 + 2 rows of width 3 fill a batch; width 5 cannot join them; a
    request of 4 rows is refused."""
    Shapes.shapes.clear()
    inputs = [[[1.0, 2.0, 3.0]], [[4.0, 5.0, 6.0], [7.0, 8.0, 9.0]], [[1.0, 2.0, 3.0, 4.0, 5.0]]]
    answers = concurrently(batching_server, [message("rows-1", rows) for rows in inputs])
    assert answers == [(200, (np.asarray(rows) * 2).tolist()) for rows in inputs]
    assert sorted(Shapes.shapes) == [(1, 5), (3, 3)]
    for send in (over_http, over_grpc):
        status, msg = send(batching_server, message("rows-1", [[1.0, 2.0, 3.0]] * 4))
        assert status == 400 and "takes at most 3" in msg

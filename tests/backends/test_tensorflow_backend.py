"""The tensorflow backend: SavedModels made here (a dense layer with two signatures, a string model),
called directly and served over grps and OIP (HTTP and gRPC), batched and not, against TensorFlow's own
answers."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from grps_py.client import GrpsClient
from grps_py.core import backend_registry
from grps_py.core.config import GpuSettings
from grps_py.core.context import GrpsContext
from grps_py.core.errors import InvalidInput, ModelLoadError
from grps_py.core.types import Payload, Tensor
from grps_py.gpu import apply_gpu_settings
from oip_clients import OipClient
from support import ServerThread, start_project

tf = pytest.importorskip("tensorflow")
from grps_py.backends.tensorflow import TensorFlowConverter, TensorFlowInferer  # noqa: E402

RNG = np.random.default_rng(5)
WEIGHTS = RNG.normal(size=(4, 3)).astype(np.float32)
BIAS = np.array([0.5, -1.0, 0.25], np.float32)


class Dense(tf.Module):  # type: ignore[misc]
    def __init__(self) -> None:
        super().__init__()
        self.w = tf.Variable(WEIGHTS)
        self.b = tf.Variable(BIAS)

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
    def serve(self, x: Any) -> dict[str, Any]:
        y = tf.matmul(x, self.w) + self.b
        return {"y": y, "label": tf.argmax(y, axis=1)}

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
    def doubled(self, x: Any) -> dict[str, Any]:
        return {"z": 2.0 * x}


class Words(tf.Module):  # type: ignore[misc]
    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text")])
    def serve(self, text: Any) -> dict[str, Any]:
        return {"upper": tf.strings.upper(text), "length": tf.strings.length(text, unit="UTF8_CHAR")}


@pytest.fixture(scope="module")
def saved_models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("tf_models")
    dense = Dense()
    tf.saved_model.save(
        dense, str(root / "dense"), signatures={"serving_default": dense.serve, "doubled": dense.doubled}
    )
    words = Words()
    tf.saved_model.save(words, str(root / "words"), signatures={"serving_default": words.serve})
    return root


@pytest.fixture(scope="module")
def expected_dense(saved_models: Path) -> Callable[[np.ndarray], dict[str, np.ndarray]]:
    """TensorFlow's own answer, calling the SavedModel's signature directly."""
    signature = tf.saved_model.load(str(saved_models / "dense")).signatures["serving_default"]

    def call(x: np.ndarray) -> dict[str, np.ndarray]:
        return {name: value.numpy() for name, value in signature(x=tf.constant(x)).items()}

    return call


Reference = Callable[[np.ndarray], dict[str, np.ndarray]]


def make_inferer(path: Path, args: dict[str, Any] | None = None, device: str = "cpu") -> TensorFlowInferer:
    inferer = TensorFlowInferer()
    inferer.init(str(path), device, args or {})
    assert inferer.load() is True
    return inferer


# -- the inferer -------------------------------------------------------------------------------


def test_loads_the_default_signature_and_describes_it(saved_models: Path) -> None:
    inferer = make_inferer(saved_models / "dense")
    assert inferer.run_device == "cpu"
    described = inferer.describe()
    assert described["inputs"] == [{"name": "x", "dtype": "float32", "shape": [-1, 4]}]
    assert sorted(described["outputs"], key=lambda o: o["name"]) == [
        {"name": "label", "dtype": "int64", "shape": [-1]},
        {"name": "y", "dtype": "float32", "shape": [-1, 3]},
    ]
    assert described["signature"] == "serving_default"
    assert described["signatures"] == ["doubled", "serving_default"]


def test_infer_matches_tensorflow_and_numpy(saved_models: Path, expected_dense: Reference) -> None:
    inferer = make_inferer(saved_models / "dense")
    x = RNG.normal(size=(5, 4)).astype(np.float32)
    out = inferer.infer({"x": x}, GrpsContext())
    want = expected_dense(x)
    np.testing.assert_array_equal(out["y"].numpy(), want["y"])
    np.testing.assert_array_equal(out["label"].numpy(), want["label"])
    np.testing.assert_allclose(want["y"], x @ WEIGHTS + BIAS, rtol=1e-5)
    # A list and a lone array name the one input too.
    np.testing.assert_array_equal(inferer.infer([x], GrpsContext())["y"].numpy(), want["y"])
    np.testing.assert_array_equal(inferer.infer(x, GrpsContext())["y"].numpy(), want["y"])


def test_batch_infer_runs_requests_together_and_splits_them_back(
    saved_models: Path, expected_dense: Reference
) -> None:
    inferer = make_inferer(saved_models / "dense")
    xs = [RNG.normal(size=(rows, 4)).astype(np.float32) for rows in (1, 3, 2)]
    outs = inferer.batch_infer([{"x": x} for x in xs], [GrpsContext() for _ in xs])
    for x, out in zip(xs, outs, strict=True):
        np.testing.assert_allclose(out["y"].numpy(), expected_dense(x)["y"], rtol=1e-6)


def test_another_signature_by_inferer_args(saved_models: Path) -> None:
    inferer = make_inferer(saved_models / "dense", {"signature": "doubled"})
    x = np.ones((2, 4), np.float32)
    assert list(inferer.infer({"x": x}, GrpsContext())) == ["z"]
    np.testing.assert_array_equal(inferer.infer({"x": x}, GrpsContext())["z"].numpy(), 2 * x)


def test_string_model(saved_models: Path) -> None:
    inferer = make_inferer(saved_models / "words")
    text = np.array(["héllo", "tf"], dtype=object)
    out = inferer.infer({"text": text}, GrpsContext())
    assert out["upper"].numpy().tolist() == ["HéLLO".encode(), b"TF"]
    assert out["length"].numpy().tolist() == [5, 2]


@pytest.mark.parametrize(
    ("inp", "message"),
    [
        ({"x": np.zeros((2, 4), np.float64)}, "input 'x' expects float32, got float64"),
        ({"x": np.zeros((2, 5), np.float32)}, "input 'x' expects shape [?, 4], got [2, 5]"),
        ({"x": np.zeros(4, np.float32)}, "input 'x' expects rank 2 [?, 4], got shape [4]"),
        ({"y": np.zeros((1, 4), np.float32)}, "unknown input(s) ['y']; the model expects: x"),
    ],
)
def test_mismatched_inputs_are_invalid_input(saved_models: Path, inp: Any, message: str) -> None:
    inferer = make_inferer(saved_models / "dense")
    with pytest.raises(InvalidInput) as raised:
        inferer.infer(inp, GrpsContext())
    assert raised.value.public_message == message


def test_load_failures_are_one_line(saved_models: Path, tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError) as unknown:
        make_inferer(saved_models / "dense", {"signature": "nope"})
    assert "has no signature 'nope' (its signatures: doubled, serving_default)" in str(unknown.value)
    with pytest.raises(ModelLoadError) as missing:
        make_inferer(tmp_path / "absent")
    assert str(missing.value).startswith("cannot load TensorFlow SavedModel") and "\n" not in str(
        missing.value
    )


def test_a_gpu_device_on_a_host_without_one_runs_on_cpu(saved_models: Path) -> None:
    if tf.config.list_physical_devices("GPU"):
        pytest.skip("this host has a GPU")
    assert make_inferer(saved_models / "dense", device="cuda:0").run_device == "cpu"


def test_tensorflow_converter_hands_tensors_and_takes_them_back() -> None:
    converter = TensorFlowConverter()
    x = np.arange(6, dtype=np.float32).reshape(3, 2)
    inp = converter.preprocess(Payload.of_tensors([Tensor("x", x)]), GrpsContext())
    assert isinstance(inp["x"], tf.Tensor)
    out = converter.postprocess({"y": tf.constant(x) * 2, "s": tf.constant([b"a"])}, GrpsContext())
    values = {t.name: t.data for t in out.value}
    np.testing.assert_array_equal(values["y"], x * 2)
    assert values["s"].dtype == object and values["s"].tolist() == [b"a"]


def test_without_tensorflow_loading_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tensorflow", None)
    monkeypatch.delitem(sys.modules, "grps_py.backends.tensorflow")
    with pytest.raises(ModelLoadError) as raised:
        backend_registry.load(backend_registry.backend("tensorflow").loader or "")
    assert str(raised.value) == "tensorflow is not installed (pip install 'grps-py[tensorflow]')"


# -- served ------------------------------------------------------------------------------------

INFERENCE = """\
models:
  - name: dense
    version: "1"
    inferer_type: tensorflow
    inferer_path: {models}/dense
    device: cpu
    inputs: [{{name: x, datatype: FP32, shape: [-1, 4]}}]
    warmup: {{count: 2}}
  - name: dense_batched
    version: "1"
    inferer_type: tensorflow
    inferer_path: {models}/dense
    device: cpu
    batching: {{type: dynamic, max_batch_size: 16, batch_timeout_us: 300000, preferred_batch_size: [4]}}
  - name: dense_tf
    version: "1"
    inferer_type: tensorflow
    inferer_path: {models}/dense
    converter_type: tensorflow
    inferer_args: {{signature: doubled}}
  - name: words
    version: "1"
    inferer_type: tensorflow
    inferer_path: {models}/words
dag:
  name: dense_dag
  nodes: [{{name: dense, type: model, model: dense-1}}]
"""
SERVER = """\
interface: {framework: http+grpc, host: 127.0.0.1, port: "0,0"}
"""


def write_project(root: Path, inference: str) -> tuple[Path, Path]:
    (root / "conf").mkdir(parents=True, exist_ok=True)
    inference_conf, server_conf = root / "conf" / "inference.yml", root / "conf" / "server.yml"
    inference_conf.write_text(inference)
    server_conf.write_text(SERVER)
    return inference_conf, server_conf


@pytest.fixture(scope="module")
def server(saved_models: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    root = tmp_path_factory.mktemp("tf_project")
    inference, server_conf = write_project(root, INFERENCE.format(models=saved_models))
    thread = start_project(root, inference, server_conf)
    yield thread
    thread.stop()


@pytest.fixture(params=["http", "grpc"])
def oip(request: pytest.FixtureRequest, server: ServerThread) -> Iterator[OipClient]:
    client = OipClient(request.param, server)
    yield client
    client.close()


@pytest.fixture(params=["http", "grpc"])
def grps(request: pytest.FixtureRequest, server: ServerThread) -> Iterator[GrpsClient]:
    url = server.http_url if request.param == "http" else server.grpc_target
    with GrpsClient(url, request.param) as client:
        yield client


@pytest.mark.parametrize("model", ["dense", "dense_batched"])
def test_oip_answers_as_tensorflow(oip: OipClient, model: str, expected_dense: Reference) -> None:
    x = RNG.normal(size=(3, 4)).astype(np.float32)
    answer = oip.infer(model, {"x": x})
    assert not answer.error, answer.message
    want = expected_dense(x)
    np.testing.assert_array_equal(answer.outputs["y"], want["y"])
    np.testing.assert_array_equal(answer.outputs["label"], want["label"])


def test_grps_answers_as_tensorflow(grps: GrpsClient, expected_dense: Reference) -> None:
    x = RNG.normal(size=(2, 4)).astype(np.float32)
    out = grps.predict({"x": x}, model="dense-1")
    np.testing.assert_array_equal(out["y"], expected_dense(x)["y"])
    np.testing.assert_array_equal(grps.predict({"x": x})["y"], expected_dense(x)["y"])  # through the DAG


def test_tensorflow_converter_and_another_signature_served(oip: OipClient) -> None:
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    answer = oip.infer("dense_tf", {"x": x})
    assert not answer.error, answer.message
    np.testing.assert_array_equal(answer.outputs["z"], 2 * x)


def test_string_model_served(oip: OipClient) -> None:
    text = np.array([b"grps", "caf\u00e9".encode()], dtype=object)
    answer = oip.infer("words", {"text": text})
    assert not answer.error, answer.message
    assert [bytes(v) for v in answer.outputs["upper"]] == [
        b"GRPS",
        "CAF\u00e9".encode(),
    ]  # upper() is ASCII-only in TF
    assert answer.outputs["length"].tolist() == [4, 4]


def test_concurrent_requests_are_batched(server: ServerThread, expected_dense: Reference) -> None:
    """Four requests within the batch window run as one execution, each answered its own rows."""
    client = OipClient("grpc", server)
    before = _executions(server)
    xs = [RNG.normal(size=(rows, 4)).astype(np.float32) for rows in (1, 2, 1, 3)]
    answers: list[Any] = [None] * len(xs)

    def call(i: int) -> None:
        answers[i] = client.infer("dense_batched", {"x": xs[i]})

    threads = [threading.Thread(target=call, args=(i,)) for i in range(len(xs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    client.close()
    for x, answer in zip(xs, answers, strict=True):
        np.testing.assert_allclose(answer.outputs["y"], expected_dense(x)["y"], rtol=1e-6)
    inferences, executions = (after - prior for after, prior in zip(_executions(server), before, strict=True))
    assert inferences == 7 and executions < 4  # inferences count rows, as Triton's


def _executions(server: ServerThread) -> tuple[int, int]:
    stats = httpx.get(f"{server.http_url}/v2/models/dense_batched/stats").json()["model_stats"][0]
    return stats["inference_count"], stats["execution_count"]


def test_bad_input_is_a_400_and_the_model_keeps_serving(oip: OipClient) -> None:
    answer = oip.infer("dense_batched", {"x": np.zeros((2, 5), np.float32)})
    assert answer.error == "invalid"
    assert "expects shape [?, 4], got [2, 5]" in answer.message
    assert not oip.infer("dense_batched", {"x": np.zeros((1, 4), np.float32)}).error


def test_metadata_and_config_name_the_platform(server: ServerThread) -> None:
    metadata = httpx.get(f"{server.http_url}/v2/models/words").json()
    assert metadata["platform"] == "tensorflow_savedmodel"
    assert metadata["inputs"] == [{"name": "text", "datatype": "BYTES", "shape": [-1]}]
    config = httpx.get(f"{server.http_url}/v2/models/dense_batched/config").json()
    assert config["backend"] == "tensorflow" and config["max_batch_size"] == 16
    assert {"name": "x", "data_type": "TYPE_FP32", "dims": [4]} in config["input"]


def test_declared_inputs_that_contradict_the_signature_stop_the_load(
    saved_models: Path, tmp_path: Path
) -> None:
    inference = textwrap.dedent(
        f"""\
        models:
          - name: dense
            version: "1"
            inferer_type: tensorflow
            inferer_path: {saved_models}/dense
            inputs: [{{name: x, datatype: FP64, shape: [-1, 5]}}]
            outputs: [{{name: probs, datatype: FP32}}]
        dag: {{name: d, nodes: [{{name: dense, type: model, model: dense-1}}]}}
        """
    )
    inference_conf, server_conf = write_project(tmp_path, inference)
    with pytest.raises(ModelLoadError) as raised:
        start_project(tmp_path, inference_conf, server_conf)
    message = str(raised.value)
    assert "input 'x' is declared FP64; the model's is FP32" in message
    assert "input 'x' is declared [-1, 5]; the model's is [-1, 4]" in message
    assert "output 'probs' is not one of the model's" in message


# -- gpu.mem_manager_type: tensorflow ----------------------------------------------------------

TF_GPU = pytest.mark.skipif(not tf.config.list_physical_devices("GPU"), reason="TensorFlow sees no GPU")


def test_tensorflow_memory_manager_without_a_gpu_is_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    if tf.config.list_physical_devices("GPU"):
        pytest.skip("this host has a GPU")
    settings = GpuSettings(devices=(0,), mem_manager_type="tensorflow", mem_limit_mib=512)
    with caplog.at_level(logging.WARNING, logger="grps_py.gpu"):
        assert apply_gpu_settings(settings) is False
    assert "names no GPU TensorFlow can see" in caplog.text


def test_tensorflow_memory_manager_without_tensorflow_names_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "tensorflow", None)
    monkeypatch.delitem(sys.modules, "grps_py.backends.tensorflow")
    with pytest.raises(ModelLoadError, match=r"pip install 'grps-py\[tensorflow\]'"):
        apply_gpu_settings(GpuSettings(devices=(0,), mem_manager_type="tensorflow"))


GPU_LIMIT_PROBE = """
import tensorflow as tf
from grps_py.backends.tensorflow import limit_gpu_memory
assert limit_gpu_memory((0,), 512) == [0]
gpu = tf.config.list_physical_devices("GPU")[0]
print(tf.config.get_logical_device_configuration(gpu)[0].memory_limit)
"""


@pytest.mark.gpu
@TF_GPU
def test_tensorflow_memory_limit_on_a_gpu() -> None:
    """In a fresh interpreter: TensorFlow takes memory settings only before it first uses a GPU."""
    done = subprocess.run(
        [sys.executable, "-c", GPU_LIMIT_PROBE], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "512"


@pytest.mark.gpu
@TF_GPU
def test_a_saved_model_runs_on_the_gpu(saved_models: Path, expected_dense: Reference) -> None:
    inferer = make_inferer(saved_models / "dense", device="cuda:0")
    assert inferer.run_device == "cuda:0"
    x = RNG.normal(size=(4, 4)).astype(np.float32)
    out = inferer.infer({"x": x}, GrpsContext())
    assert "GPU:0" in out["y"].device
    np.testing.assert_allclose(out["y"].numpy(), expected_dense(x)["y"], rtol=1e-4)


def test_serving_without_tensorflow_stops_naming_the_model_and_the_extra(
    monkeypatch: pytest.MonkeyPatch, saved_models: Path, tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "tensorflow", None)
    monkeypatch.delitem(sys.modules, "grps_py.backends.tensorflow")
    inference = textwrap.dedent(
        f"""\
        models:
          - {{name: dense, version: "1", inferer_type: tensorflow, inferer_path: {saved_models}/dense}}
        dag: {{name: d, nodes: [{{name: dense, type: model, model: dense-1}}]}}
        """
    )
    inference_conf, server_conf = write_project(tmp_path, inference)
    with pytest.raises(ModelLoadError) as raised:
        start_project(tmp_path, inference_conf, server_conf)
    assert (
        str(raised.value)
        == "model 'dense-1': tensorflow is not installed (pip install 'grps-py[tensorflow]')"
    )

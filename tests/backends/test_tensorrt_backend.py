"""The tensorrt backend.

On any machine: the rules that need no TensorRT (profile ranges, batch cuts, dtype maps, the device), the
backend's reading and checking of an engine's tensors against a stand-in `tensorrt` module (no GPU work),
and the one-line answer when the package is missing. On a GPU with the `tensorrt` package (marked `gpu`):
an engine built from a small ONNX model by the example's build_engine.py, run directly and served over the
grps API and OIP, with answers compared to ONNX Runtime's on the same ONNX file.
"""

from __future__ import annotations

import gc
import importlib
import importlib.util
import logging
import sys
import threading
import types
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest
import torch
import yaml

import grps_py.backends
from grps_py.backends.feeds import dtype_name
from grps_py.backends.tensorrt_io import (
    TRT_TYPES,
    ProfileRange,
    batch_row_limit,
    check_profile_shape,
    chunk_rows,
    dims_tuple,
    engine_device,
    profile_index,
    torch_dtype_name,
    trt_type,
)
from grps_py.core import backend_registry
from grps_py.core.context import GrpsContext
from grps_py.core.errors import InvalidInput, ModelLoadError
from support import ServerThread, start_project

BACKEND = "grps_py.backends.tensorrt"
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tensorrt"
HAS_TENSORRT = importlib.util.find_spec("tensorrt") is not None
GPU = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not (HAS_TENSORRT and torch.cuda.is_available()), reason="needs a CUDA GPU and the tensorrt package"
    ),
]


# --- profile ranges and batch cuts ------------------------------------------------------------------

BATCH_1_TO_32 = ProfileRange((1, 4), (8, 4), (32, 4))


def test_a_shape_inside_the_profile_passes() -> None:
    for shape in ((1, 4), (8, 4), (32, 4)):
        check_profile_shape("x", shape, BATCH_1_TO_32, 0)


@pytest.mark.parametrize(
    ("shape", "message"),
    [
        ((64, 4), "input 'x' dim 0 is 64; profile 0 takes 1 to 32"),
        ((0, 4), "input 'x' dim 0 is 0; profile 0 takes 1 to 32"),
        ((2, 5), "input 'x' dim 1 is 5; profile 0 takes only 4"),
        ((2, 4, 1), "input 'x' has rank 3 (shape [2, 4, 1]); profile 0 takes rank 2"),
    ],
)
def test_a_shape_outside_the_profile_is_a_400_naming_the_dim_and_range(
    shape: tuple[int, ...], message: str
) -> None:
    with pytest.raises(InvalidInput) as refused:
        check_profile_shape("x", shape, BATCH_1_TO_32, 0)
    assert refused.value.public_message == message


def test_the_profile_describes_itself_as_lists() -> None:
    assert BATCH_1_TO_32.describe() == {"min": [1, 4], "opt": [8, 4], "max": [32, 4]}
    assert ProfileRange.fixed([3, 2]).describe() == {"min": [3, 2], "opt": [3, 2], "max": [3, 2]}


def test_the_batch_limit_is_the_smallest_max_dim_0() -> None:
    ranges = {"a": BATCH_1_TO_32, "b": ProfileRange((1,), (4,), (16,))}
    assert batch_row_limit(ranges) == 16


@pytest.mark.parametrize(
    ("rows", "limit", "chunks"),
    [
        ([3, 3, 3], 8, [[0, 1], [2]]),
        ([8, 1, 7], 8, [[0], [1, 2]]),
        ([1] * 5, 2, [[0, 1], [2, 3], [4]]),
        ([10, 2], 8, [[0], [1]]),  # over the limit: alone (and refused by its own check)
        ([], 8, []),
    ],
)
def test_requests_are_cut_into_runs_that_fit(rows: list[int], limit: int, chunks: list[list[int]]) -> None:
    assert chunk_rows(rows, limit) == chunks


def test_profile_index_is_checked_against_the_engine() -> None:
    assert profile_index(1, 2) == 1
    for bad in (2, -1, True, "1", None):
        with pytest.raises(ModelLoadError, match="from 0 to 1"):
            profile_index(bad, 2)


# --- types and shapes ---------------------------------------------------------------------------------


def test_each_tensorrt_type_is_the_same_type_in_numpy_and_torch() -> None:
    for name, kind in TRT_TYPES.items():
        assert kind.numpy.itemsize == torch.empty(0, dtype=kind.torch).element_size(), name
        assert dtype_name(kind.numpy) == torch_dtype_name(kind.torch), name
    assert trt_type("FLOAT") is not None and trt_type("FLOAT").torch is torch.float32  # type: ignore[union-attr]
    assert trt_type("BF16") is not None and trt_type("BF16").numpy == np.dtype(ml_dtypes.bfloat16)  # type: ignore[union-attr]
    for packed in ("INT4", "FP4", "E8M0"):  # no numpy or torch type holds them
        assert trt_type(packed) is None


class NegativeRank:
    """How trt.Dims of rank -1 (TensorRT's "no such tensor") behaves in Python."""

    def __len__(self) -> int:
        return -1


def test_dims_read_as_tuples_and_a_missing_shape_as_none() -> None:
    assert dims_tuple([2, -1, 3]) == (2, -1, 3)
    assert dims_tuple(()) == ()
    assert dims_tuple(NegativeRank()) is None


# --- the device -----------------------------------------------------------------------------------------


def test_an_engine_needs_a_cuda_gpu() -> None:
    with pytest.raises(ModelLoadError) as refused:
        engine_device("auto", 0)
    message = str(refused.value)
    assert message.startswith("tensorrt needs a CUDA GPU") and "\n" not in message


@pytest.mark.parametrize(
    ("device", "count", "expected"),
    [
        ("auto", 1, "cuda:0"),
        (None, 2, "cuda:0"),
        ("original", 1, "cuda:0"),
        ("cuda:1", 2, "cuda:1"),
        ("gpu", 1, "cuda:0"),
    ],
)
def test_the_engine_device_is_a_gpu(device: str | None, count: int, expected: str) -> None:
    assert engine_device(device, count) == expected


def test_cpu_on_a_gpu_host_is_refused() -> None:
    with pytest.raises(ModelLoadError, match="tensorrt engines run on a GPU: device 'cpu'"):
        engine_device("cpu", 1)
    with pytest.raises(ModelLoadError, match="does not exist"):
        engine_device("cuda:3", 2)


# --- without the package --------------------------------------------------------------------------------


@pytest.fixture
def without_tensorrt(monkeypatch: pytest.MonkeyPatch) -> None:
    """As on a host where `pip install grps-py` did not bring the extra."""
    monkeypatch.setitem(sys.modules, "tensorrt", None)  # `import tensorrt` raises ModuleNotFoundError
    monkeypatch.delitem(sys.modules, BACKEND, raising=False)


@pytest.mark.usefixtures("without_tensorrt")
def test_a_missing_package_names_the_extra_in_one_line() -> None:
    loader = backend_registry.backend("tensorrt").loader
    assert loader is not None
    with pytest.raises(ModelLoadError) as refused:
        backend_registry.load(loader)
    message = str(refused.value)
    assert "pip install 'grps-py[tensorrt]'" in message and "\n" not in message


@pytest.mark.usefixtures("without_tensorrt")
def test_a_server_with_a_tensorrt_model_stops_with_that_line(tmp_path: Path) -> None:
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "mlp.plan").write_bytes(b"not built here")
    root = write_project(tmp_path, [{"name": "mlp", "version": "1", "inferer_path": "./models/mlp.plan"}])
    with pytest.raises(ModelLoadError) as failed:
        start_project(root)
    message = str(failed.value)
    assert "pip install 'grps-py[tensorrt]'" in message and "\n" not in message


@pytest.mark.skipif(
    not HAS_TENSORRT or torch.cuda.is_available(), reason="needs tensorrt on a host without a GPU"
)
def test_with_the_package_but_no_gpu_the_load_says_so(tmp_path: Path) -> None:
    from grps_py.backends.tensorrt import TensorRTInferer

    inferer = TensorRTInferer()
    inferer.init(str(tmp_path / "mlp.plan"), "auto", {})
    with pytest.raises(ModelLoadError, match="tensorrt needs a CUDA GPU"):
        inferer.load()


# --- an engine's tensors, read through a stand-in `tensorrt` module -------------------------------------


@dataclass
class FakeTensor:
    """One I/O tensor of a stand-in engine, as TensorRT 10's ICudaEngine answers about it."""

    mode: str
    dtype: str
    shape: tuple[int, ...]
    profile: tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]] | None = None
    location: str = "DEVICE"
    format: str = "LINEAR"
    shape_io: bool = False


class FakeEngine:
    """The part of trt.ICudaEngine that the backend reads at load."""

    def __init__(self, tensors: dict[str, FakeTensor], profiles: int = 1) -> None:
        self.tensors = tensors
        self.num_optimization_profiles = profiles

    @property
    def num_io_tensors(self) -> int:
        return len(self.tensors)

    def get_tensor_name(self, index: int) -> str:
        return list(self.tensors)[index]

    def get_tensor_mode(self, name: str) -> str:
        return self.tensors[name].mode

    def get_tensor_dtype(self, name: str) -> Any:
        return types.SimpleNamespace(name=self.tensors[name].dtype)

    def get_tensor_shape(self, name: str) -> list[int]:
        return list(self.tensors[name].shape)

    def get_tensor_profile_shape(self, name: str, profile: int) -> list[list[int]]:
        shapes = self.tensors[name].profile
        assert shapes is not None and 0 <= profile < self.num_optimization_profiles
        return [list(shape) for shape in shapes]

    def is_shape_inference_io(self, name: str) -> bool:
        return self.tensors[name].shape_io

    def get_tensor_location(self, name: str) -> str:
        return self.tensors[name].location

    def get_tensor_format(self, name: str, profile: int) -> str:
        return self.tensors[name].format

    def get_tensor_format_desc(self, name: str, profile: int) -> str:
        return f"{self.tensors[name].format} format"


def fake_tensorrt() -> types.ModuleType:
    """What the backend module touches of `tensorrt` when it is imported and reads an engine."""
    trt = types.ModuleType("tensorrt")

    class ILogger:
        Severity = types.SimpleNamespace(INTERNAL_ERROR=0, ERROR=1, WARNING=2, INFO=3, VERBOSE=4)

        def __init__(self) -> None:
            pass

    trt.ILogger = ILogger  # type: ignore[attr-defined]
    trt.TensorIOMode = types.SimpleNamespace(INPUT="INPUT", OUTPUT="OUTPUT")  # type: ignore[attr-defined]
    trt.TensorLocation = types.SimpleNamespace(DEVICE="DEVICE", HOST="HOST")  # type: ignore[attr-defined]
    trt.TensorFormat = types.SimpleNamespace(LINEAR="LINEAR", CHW32="CHW32")  # type: ignore[attr-defined]
    trt.init_libnvinfer_plugins = lambda logger, namespace: True  # type: ignore[attr-defined]
    return trt


@pytest.fixture
def backend(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """grps_py.backends.tensorrt imported against the stand-in module, then forgotten again."""
    saved = sys.modules.pop(BACKEND, None)
    saved_attr = getattr(grps_py.backends, "tensorrt", None)
    monkeypatch.setitem(sys.modules, "tensorrt", fake_tensorrt())
    try:
        yield importlib.import_module(BACKEND)
    finally:
        sys.modules.pop(BACKEND, None)
        if saved is not None:
            sys.modules[BACKEND] = saved
        if saved_attr is not None:
            setattr(grps_py.backends, "tensorrt", saved_attr)  # noqa: B010 (an attribute mypy cannot see)
        elif hasattr(grps_py.backends, "tensorrt"):
            delattr(grps_py.backends, "tensorrt")


def mlp_engine(**overrides: FakeTensor) -> FakeEngine:
    tensors = {
        "x": FakeTensor("INPUT", "FLOAT", (-1, 4), ((1, 4), (8, 4), (32, 4))),
        "y": FakeTensor("OUTPUT", "FLOAT", (-1, 3)),
        **overrides,
    }
    return FakeEngine(tensors)


def test_the_engine_tensors_are_read_by_name(backend: Any) -> None:
    io = backend.EngineIO(mlp_engine(), 0)
    assert io.describe() == {
        "inputs": [{"name": "x", "dtype": "float32", "shape": [-1, 4]}],
        "outputs": [{"name": "y", "dtype": "float32", "shape": [-1, 3]}],
        "profile": {"index": 0, "shapes": {"x": {"min": [1, 4], "opt": [8, 4], "max": [32, 4]}}},
    }
    assert io.batch_limit == 32


def test_a_static_input_takes_its_own_shape_and_no_batches(backend: Any) -> None:
    io = backend.EngineIO(mlp_engine(x=FakeTensor("INPUT", "HALF", (2, 4))), 0)
    assert io.ranges["x"] == ProfileRange.fixed((2, 4))
    assert io.batch_limit is None
    assert io.describe()["inputs"] == [{"name": "x", "dtype": "float16", "shape": [2, 4]}]


@pytest.mark.parametrize(
    ("tensor", "message"),
    [
        (FakeTensor("INPUT", "INT4", (-1, 4), ((1, 4),) * 3), "input 'x' is of type INT4"),
        (FakeTensor("INPUT", "INT32", (2,), shape_io=True, location="HOST"), "input 'x' is a shape tensor"),
        (FakeTensor("INPUT", "FLOAT", (-1, 4), ((1, 4),) * 3, format="CHW32"), "vectorized format CHW32"),
    ],
)
def test_tensors_torch_cannot_stand_for_are_refused_at_load(
    backend: Any, tensor: FakeTensor, message: str
) -> None:
    with pytest.raises(ModelLoadError, match=message):
        backend.EngineIO(mlp_engine(x=tensor), 0)


def test_requests_are_checked_against_the_engine(backend: Any) -> None:
    io = backend.EngineIO(mlp_engine(), 0)
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    for request in ({"x": x}, [x], x, {"x": torch.from_numpy(x)}):
        fed = io.feed(request)
        assert list(fed) == ["x"] and fed["x"].dtype == torch.float32
        np.testing.assert_array_equal(fed["x"].numpy(), x)
    refusals = [
        ({"x": x.astype(np.float64)}, "input 'x' expects float32, got float64"),
        ({"x": torch.zeros((2, 4), dtype=torch.int64)}, "input 'x' expects float32, got int64"),
        ({"x": np.zeros((2, 5), np.float32)}, "input 'x' expects shape [?, 4], got [2, 5]"),
        ({"x": np.zeros(4, np.float32)}, "input 'x' expects rank 2"),
        ({"x": np.zeros((64, 4), np.float32)}, "input 'x' dim 0 is 64; profile 0 takes 1 to 32"),
        ({"x": np.array(["a", "b"])}, "input 'x' expects float32, got string"),
        ({"z": x}, "unknown input(s) ['z']"),
    ]
    for bad, message in refusals:
        with pytest.raises(InvalidInput) as refused:
            io.feed(bad)
        assert message in refused.value.public_message


def test_bfloat16_arrays_become_bfloat16_tensors_bit_for_bit(backend: Any) -> None:
    engine = mlp_engine(x=FakeTensor("INPUT", "BF16", (-1, 4), ((1, 4), (1, 4), (8, 4))))
    values = np.array([[1.5, -2.0, 0.1, 3e8]], dtype=ml_dtypes.bfloat16)
    fed = backend.EngineIO(engine, 0).feed({"x": values})["x"]
    assert fed.dtype == torch.bfloat16
    assert fed.float().tolist() == values.astype(np.float32).tolist()


def test_unknown_inferer_args_are_warned_about_once(backend: Any, caplog: pytest.LogCaptureFixture) -> None:
    args = {"profile": 0, "streams": 2, "customized_op_paths": [], "batch": 4}
    with caplog.at_level(logging.WARNING, logger=BACKEND):
        backend.warn_unknown_args("/m/unknown-args.plan", args)
        backend.warn_unknown_args("/m/unknown-args.plan", args)
    warned = [r.getMessage() for r in caplog.records if "is not used" in r.getMessage()]
    assert len(warned) == 1 and "'batch'" in warned[0]


def test_tensorrt_messages_go_to_the_log_and_errors_explain_a_failed_load(
    backend: Any, caplog: pytest.LogCaptureFixture
) -> None:
    severity = fake_tensorrt().ILogger.Severity
    with caplog.at_level(logging.DEBUG, logger=BACKEND):
        backend.TRT_LOGGER.log(severity.VERBOSE, "kernel chatter")
        backend.TRT_LOGGER.log(severity.WARNING, "a warning")
        backend.TRT_LOGGER.log(severity.ERROR, "Serialization assertion failed.\nMagic tag does not match")
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.WARNING, "TensorRT: a warning"),
        (logging.ERROR, "TensorRT: Serialization assertion failed. Magic tag does not match"),
    ]
    assert backend.TRT_LOGGER.take_last_error() == "Serialization assertion failed. Magic tag does not match"
    assert backend.TRT_LOGGER.take_last_error() == ""


def test_plugin_paths_must_be_a_list_of_files(backend: Any, tmp_path: Path) -> None:
    backend.load_plugins(None)
    backend.load_plugins([])
    with pytest.raises(ModelLoadError, match="must be a list"):
        backend.load_plugins("libplugin.so")
    with pytest.raises(ModelLoadError, match="is not a file"):
        backend.load_plugins([str(tmp_path / "libmissing.so")])
    (tmp_path / "libbroken.so").write_bytes(b"not a library")
    with pytest.raises(ModelLoadError, match="cannot load TensorRT plugin library"):
        backend.load_plugins([str(tmp_path / "libbroken.so")])


def test_a_missing_engine_file_is_named(backend: Any, tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match=r"cannot read TensorRT engine .*missing\.plan"):
        backend.shared_engine(str(tmp_path / "missing.plan"), 0)


# --- an engine built from the example's ONNX model --------------------------------------------------------

MAX_BATCH = 8


def build_script() -> types.ModuleType:
    """examples/tensorrt/build_engine.py as a module (its ONNX writer and engine builder)."""
    spec = importlib.util.spec_from_file_location(
        "tensorrt_example_build_engine", EXAMPLE / "build_engine.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@dataclass(frozen=True)
class Built:
    onnx: Path
    plan: Path


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    script = build_script()
    models = tmp_path_factory.mktemp("tensorrt") / "models"
    onnx_path = script.write_mlp_onnx(models / "mlp.onnx")
    plan = script.build_engine(onnx_path, models / "mlp.plan", min_batch=1, opt_batch=4, max_batch=MAX_BATCH)
    return Built(onnx_path, plan)


def onnx_runtime(onnx_path: Path, x: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    return np.asarray(session.run(["y"], {"x": x})[0])


def assert_matches(y: Any, expected: np.ndarray) -> None:
    """TF32 is off in the build: float32 kernels agree with ONNX Runtime up to summation order."""
    got = y.cpu().numpy() if isinstance(y, torch.Tensor) else np.asarray(y)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


def rows(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, 4)).astype(np.float32)


def loaded(plan: Path, device: str = "cuda:0", **args: Any) -> Any:
    from grps_py.backends.tensorrt import TensorRTInferer

    inferer = TensorRTInferer()
    inferer.init(str(plan), device, args)
    assert inferer.load() is True
    return inferer


def gpu_test(func: Any) -> Any:
    """Marked `gpu`, and skipped without a CUDA GPU and the tensorrt package."""
    for mark in GPU:
        func = mark(func)
    return func


# --- the example's engine builder, as far as it goes without a GPU ---------------------------------------


def test_the_example_mlp_is_a_valid_onnx_model(tmp_path: Path) -> None:
    script = build_script()
    path = script.write_mlp_onnx(tmp_path / "models" / "mlp.onnx")
    w = script.mlp_weights()
    x = rows(5, 0)
    expected = np.maximum(x @ w["W1"] + w["b1"], 0.0) @ w["W2"] + w["b2"]
    np.testing.assert_allclose(onnx_runtime(path, x), expected, rtol=1e-5, atol=1e-6)


def test_the_builder_refuses_a_batch_range_out_of_order(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="1 <= min <= opt <= max"):
        build_script().build_engine(tmp_path / "m.onnx", tmp_path / "m.plan", min_batch=4, opt_batch=2)


@gpu_test
def test_the_engine_answers_as_onnx_runtime(built: Built) -> None:
    inferer = loaded(built.plan)
    assert inferer.run_device == inferer.input_device == "cuda:0"
    x = rows(5, 1)
    expected = onnx_runtime(built.onnx, x)
    answer = inferer.infer({"x": x}, GrpsContext())
    assert set(answer) == {"y"} and answer["y"].device == torch.device("cuda:0")
    assert_matches(answer["y"], expected)
    assert_matches(
        inferer.infer(torch.from_numpy(x).cuda(), GrpsContext())["y"], expected
    )  # on the GPU already
    assert_matches(inferer.infer([x[:1]], GrpsContext())["y"], expected[:1])


@gpu_test
def test_the_engine_describes_its_tensors_and_profile(built: Built) -> None:
    assert loaded(built.plan).describe() == {
        "inputs": [{"name": "x", "dtype": "float32", "shape": [-1, 4]}],
        "outputs": [{"name": "y", "dtype": "float32", "shape": [-1, 3]}],
        "profile": {"index": 0, "shapes": {"x": {"min": [1, 4], "opt": [4, 4], "max": [MAX_BATCH, 4]}}},
    }


@gpu_test
def test_a_batch_beyond_the_profile_is_refused(built: Built) -> None:
    inferer = loaded(built.plan)
    with pytest.raises(InvalidInput) as refused:
        inferer.infer({"x": rows(MAX_BATCH + 1, 2)}, GrpsContext())
    assert (
        refused.value.public_message
        == f"input 'x' dim 0 is {MAX_BATCH + 1}; profile 0 takes 1 to {MAX_BATCH}"
    )


@gpu_test
def test_batch_infer_runs_requests_in_chunks_that_fit_the_profile(built: Built) -> None:
    inferer = loaded(built.plan)
    requests = [rows(3, 10 + i) for i in range(5)]  # 15 rows: runs of 6, 6 and 3
    answers = inferer.batch_infer([{"x": x} for x in requests], [GrpsContext() for _ in requests])
    assert len(answers) == len(requests)
    for x, answer in zip(requests, answers, strict=True):
        assert_matches(answer["y"], onnx_runtime(built.onnx, x))


@gpu_test
def test_contexts_on_one_device_share_one_engine(built: Built, tmp_path: Path) -> None:
    from grps_py.backends.tensorrt import shared_engine

    plan = tmp_path / "own.plan"  # a file of its own: no other test's inferer holds its engine
    plan.write_bytes(built.plan.read_bytes())
    first, second = loaded(plan), loaded(plan)
    assert first.engine is not None and first.engine is second.engine
    assert first._context is not second._context and first._stream is not second._stream
    engine = weakref.ref(first.engine)
    del first, second
    gc.collect()
    assert engine() is None, "the engine outlived its last context"
    assert shared_engine(str(plan), 0) is not None  # and loads again


@gpu_test
def test_two_streams_run_at_once_with_right_answers(built: Built) -> None:
    first, second = loaded(built.plan), loaded(built.plan)
    inputs = [rows(MAX_BATCH, 20 + i) for i in range(16)]
    answers: list[Any] = [None] * len(inputs)

    def run(inferer: Any, start: int) -> None:
        for i in range(start, len(inputs), 2):
            answers[i] = inferer.infer({"x": inputs[i]}, GrpsContext())["y"].cpu().numpy()

    threads = [threading.Thread(target=run, args=(inferer, k)) for k, inferer in enumerate((first, second))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    for x, y in zip(inputs, answers, strict=True):
        assert_matches(y, onnx_runtime(built.onnx, x))


@gpu_test
def test_load_failures_are_one_line(built: Built, tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.plan"
    garbage.write_bytes(b"\x00" * 1024)
    failures: list[tuple[Callable[[], Any], str]] = [
        (lambda: loaded(garbage), f"cannot load TensorRT engine {garbage}"),
        (lambda: loaded(built.plan, device="cpu"), "tensorrt engines run on a GPU"),
        (lambda: loaded(built.plan, profile=1), "profile must be an optimisation profile index from 0 to 0"),
    ]
    for load, message in failures:
        with pytest.raises(ModelLoadError) as refused:
            load()
        assert message in str(refused.value) and "\n" not in str(refused.value)


# --- on a GPU: served ------------------------------------------------------------------------------------


def write_project(root: Path, models: list[dict[str, Any]]) -> Path:
    """A project of tensorrt models (inference.yml and server.yml on free loopback ports)."""
    (root / "conf").mkdir(parents=True, exist_ok=True)
    entries = [
        {"device": "cuda:0", "inferer_type": "tensorrt", "converter_type": "torch", **model}
        for model in models
    ]
    inference = {
        "models": entries,
        "dag": {
            "type": "sequential",
            "name": "main",
            "nodes": [
                {"name": "first", "type": "model", "model": f"{entries[0]['name']}-{entries[0]['version']}"}
            ],
        },
    }
    (root / "conf" / "inference.yml").write_text(yaml.safe_dump(inference, sort_keys=False))
    (root / "conf" / "server.yml").write_text(
        yaml.safe_dump({"interface": {"framework": "http+grpc", "host": "127.0.0.1", "port": "0,0"}})
    )
    return root


@pytest.fixture(scope="module")
def served(built: Built, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    declared = {
        "inputs": [{"name": "x", "datatype": "FP32", "shape": [-1, 4]}],
        "outputs": [{"name": "y", "datatype": "FP32", "shape": [-1, 3]}],
    }
    root = write_project(
        tmp_path_factory.mktemp("tensorrt_project"),
        [
            {"name": "mlp", "version": "1", "inferer_path": str(built.plan)},
            {
                "name": "mlp_batched",
                "version": "1",
                "inferer_path": str(built.plan),
                "inferer_args": {"profile": 0, "streams": 2},
                "batching": {"type": "dynamic", "max_batch_size": MAX_BATCH, "batch_timeout_us": 20000},
                **declared,
            },
        ],
    )
    server = start_project(root)
    yield server
    server.stop()


MODELS = ("mlp", "mlp_batched")


@gpu_test
@pytest.mark.parametrize("protocol", ["http", "grpc"])
@pytest.mark.parametrize("model", MODELS)
def test_served_over_the_grps_api_as_onnx_runtime(
    served: ServerThread, built: Built, protocol: str, model: str
) -> None:
    from grps_py.client import GrpsClient

    port = served.server.http_port if protocol == "http" else served.server.grpc_port
    x = rows(3, 30)
    with GrpsClient(f"127.0.0.1:{port}", protocol=protocol, timeout=30.0) as client:
        assert_matches(client.predict({"x": x}, model=f"{model}-1")["y"], onnx_runtime(built.onnx, x))


@gpu_test
@pytest.mark.parametrize("protocol", ["http", "grpc"])
@pytest.mark.parametrize("model", MODELS)
def test_served_over_oip_as_onnx_runtime(
    served: ServerThread, built: Built, protocol: str, model: str
) -> None:
    from oip_clients import OipClient

    client = OipClient(protocol, served)
    try:
        x = rows(4, 31)
        answer = client.infer(model, {"x": x})
        assert not answer.error, answer.message
        assert_matches(answer.outputs["y"], onnx_runtime(built.onnx, x))
        beyond = client.infer(model, {"x": rows(MAX_BATCH + 1, 32)})
        assert beyond.error == "invalid", beyond
    finally:
        client.close()


@gpu_test
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_batch_beyond_the_profile_is_a_400_naming_it(served: ServerThread, protocol: str) -> None:
    from grps_py.client import GrpsClient, GrpsClientError

    port = served.server.http_port if protocol == "http" else served.server.grpc_port
    with (
        GrpsClient(f"127.0.0.1:{port}", protocol=protocol, timeout=30.0) as client,
        pytest.raises(GrpsClientError) as refused,
    ):
        client.predict({"x": rows(MAX_BATCH + 1, 33)}, model="mlp-1")
    assert refused.value.status == 400
    assert f"input 'x' dim 0 is {MAX_BATCH + 1}; profile 0 takes 1 to {MAX_BATCH}" in refused.value.message


@gpu_test
def test_concurrent_requests_are_batched_across_two_streams(served: ServerThread, built: Built) -> None:
    from grps_py.client import GrpsClient

    singles = [rows(1, 40 + i) for i in range(32)]
    answers: list[Any] = [None] * len(singles)
    clients = [GrpsClient(f"127.0.0.1:{served.server.http_port}", timeout=30.0) for _ in range(8)]
    start = threading.Barrier(len(clients))

    def send(k: int) -> None:
        start.wait()  # all at once, so requests meet in the batcher's window
        for i in range(k, len(singles), len(clients)):
            answers[i] = clients[k].predict({"x": singles[i]}, model="mlp_batched-1")["y"]

    before = clients[0].model_metadata("mlp_batched-1")
    threads = [threading.Thread(target=send, args=(k,)) for k in range(len(clients))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    after = clients[0].model_metadata("mlp_batched-1")
    for client in clients:
        client.close()
    for x, y in zip(singles, answers, strict=True):
        assert y is not None, "a request failed"
        assert_matches(y, onnx_runtime(built.onnx, x))
    assert after["instances"] == 2 and after["device"] == "cuda:0"
    assert after["profile"]["shapes"]["x"]["max"] == [MAX_BATCH, 4]
    ran = after["scheduler"]["batches_run"] - before["scheduler"]["batches_run"]
    assert after["scheduler"]["rows_run"] - before["scheduler"]["rows_run"] == len(singles)
    assert ran < len(singles), "no request was batched with another"


@gpu_test
def test_two_streams_are_two_instances_on_one_engine(served: ServerThread) -> None:
    import httpx

    node = served.server.executor.resolve("mlp_batched-1")
    engines = {id(instance.inferer.engine) for instance in node.instances}
    assert len(node.instances) == 2 and len(engines) == 1
    config = httpx.get(f"{served.http_url}/v2/models/mlp_batched/config", timeout=30).json()
    assert config["platform"] == "tensorrt_plan"
    assert config["instance_group"][0]["count"] == 2 and config["instance_group"][0]["kind"] == "KIND_GPU"

"""The torch backend against the bundled TorchScript model and a numpy reference of the same weights."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest
import torch

from grps_py.backends import short_error
from grps_py.backends.torch import TorchConverter, TorchInferer, concat_inputs, split_outputs
from grps_py.core.context import GrpsContext
from grps_py.core.errors import InvalidInput, ModelLoadError
from grps_py.core.types import Payload, PayloadKind, Tensor
from support import reference

onnx = pytest.importorskip("onnx")

MODELS = Path(__file__).resolve().parents[2] / "models"
MODEL_PT = MODELS / "default.pt"
gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")


def make_inferer(
    device: str | None = "cpu", args: dict[str, Any] | None = None, path: Path = MODEL_PT
) -> TorchInferer:
    inferer = TorchInferer()
    inferer.init(str(path), device, args or {})
    assert inferer.load() is True
    return inferer


@pytest.fixture(scope="module")
def inferer() -> TorchInferer:
    return make_inferer()


@pytest.fixture
def x() -> np.ndarray:
    return np.random.default_rng(7).normal(size=(5, 4)).astype(np.float32)


def save_script(tmp_path: Path, module: torch.nn.Module, name: str) -> Path:
    path = tmp_path / name
    torch.jit.save(torch.jit.script(module), str(path))
    return path


class DictAdder(torch.nn.Module):
    def forward(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        return inputs["a"] + inputs["b"]


class Summer(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.sum()


class TwoHeads(torch.nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return a * 2, a + b


# -- loading and devices -----------------------------------------------------------------------


def test_load_places_model_and_inputs_on_cpu(inferer: TorchInferer) -> None:
    assert inferer.model_device == "cpu"
    assert inferer.input_device == "cpu"
    assert isinstance(inferer.module, torch.jit.ScriptModule)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU fallback")
@pytest.mark.parametrize("device", ["cuda", "gpu:0", "auto", None])
def test_gpu_device_on_cpu_host_falls_back(device: str | None, x: np.ndarray, weights: dict) -> None:
    inferer = make_inferer(device)
    assert inferer.model_device == "cpu"
    np.testing.assert_allclose(inferer.infer(x, GrpsContext()).numpy(), reference(x, weights), rtol=1e-5)


@pytest.mark.parametrize("args", [{}, {"inp_device": "cpu"}])
def test_original_device_keeps_saved_weights(args: dict, x: np.ndarray, weights: dict) -> None:
    inferer = make_inferer("original", args)
    assert inferer.model_device == "cpu"  # the file was saved on cpu
    assert inferer.input_device == "cpu"
    out = inferer.infer(torch.from_numpy(x), GrpsContext())
    np.testing.assert_allclose(out.numpy(), reference(x, weights), rtol=1e-5)


def test_missing_file_is_a_load_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope.pt"
    with pytest.raises(ModelLoadError, match=r"nope\.pt") as raised:
        make_inferer(path=missing)
    assert "\n" not in str(raised.value)


def test_corrupt_file_is_a_load_error(tmp_path: Path) -> None:
    corrupt = tmp_path / "corrupt.pt"
    corrupt.write_bytes(b"not a zip archive at all")
    with pytest.raises(ModelLoadError, match=r"cannot load TorchScript model .*corrupt\.pt"):
        make_inferer(path=corrupt)


def test_no_path_is_a_load_error() -> None:
    inferer = TorchInferer()
    inferer.init(None, "cpu", {})
    with pytest.raises(ModelLoadError, match="inferer_path"):
        inferer.load()


def test_describe_lists_forward_arguments(inferer: TorchInferer, tmp_path: Path) -> None:
    assert inferer.describe() == {
        "inputs": [{"name": "x", "dtype": None, "shape": None}],
        "outputs": [{"name": "output", "dtype": None, "shape": None}],
    }
    heads = make_inferer(path=save_script(tmp_path, TwoHeads(), "heads.pt"))
    assert [arg["name"] for arg in heads.describe()["inputs"]] == ["a", "b"]
    assert [arg["name"] for arg in heads.describe()["outputs"]] == ["output_0", "output_1"]
    assert TorchInferer().describe() == {"inputs": [], "outputs": []}


# -- inference ---------------------------------------------------------------------------------


@pytest.mark.parametrize("form", ["single", "dict", "list", "tuple"])
@pytest.mark.parametrize("as_torch", [False, True])
def test_infer_input_forms_match_reference(
    inferer: TorchInferer, x: np.ndarray, weights: dict, form: str, as_torch: bool
) -> None:
    value: Any = torch.from_numpy(x) if as_torch else x
    inp = {"single": value, "dict": {"x": value}, "list": [value], "tuple": (value,)}[form]
    out = inferer.infer(inp, GrpsContext())
    assert isinstance(out, torch.Tensor)
    assert out.shape == (5, 3)
    np.testing.assert_allclose(out.numpy(), reference(x, weights), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(out.numpy().sum(axis=1), np.ones(5), rtol=1e-6)


# pytest resets warning filters per test, undoing the backend's once-per-process filter.
@pytest.mark.filterwarnings("ignore:The given NumPy array is not writable")
def test_read_only_input_from_a_wire_buffer(inferer: TorchInferer, x: np.ndarray, weights: dict) -> None:
    wire = np.frombuffer(x.tobytes(), dtype=np.float32).reshape(5, 4)
    assert not wire.flags.writeable
    out = inferer.infer(wire, GrpsContext())
    np.testing.assert_allclose(out.numpy(), reference(x, weights), rtol=1e-5, atol=1e-7)


def test_negative_strides_are_accepted(inferer: TorchInferer, x: np.ndarray, weights: dict) -> None:
    flipped = x[::-1]
    out = inferer.infer(flipped, GrpsContext())
    np.testing.assert_allclose(out.numpy(), reference(flipped, weights), rtol=1e-5, atol=1e-7)


def test_call_with_dict_passes_the_dict_itself(tmp_path: Path) -> None:
    path = save_script(tmp_path, DictAdder(), "dict_adder.pt")
    inp = {"a": np.array([1.0, 2.0], np.float32), "b": np.array([10.0, 20.0], np.float32)}
    out = make_inferer(args={"call_with_dict": True}, path=path).infer(inp, GrpsContext())
    np.testing.assert_array_equal(out.numpy(), [11.0, 22.0])
    with pytest.raises(InvalidInput, match="received 3 argument"):  # without the flag: module(**inp)
        make_inferer(path=path).infer(inp, GrpsContext())


def test_wrong_shape_is_invalid_input_without_traceback(inferer: TorchInferer) -> None:
    with pytest.raises(InvalidInput) as raised:
        inferer.infer(np.zeros((1, 3), np.float32), GrpsContext())
    message = raised.value.public_message
    assert message == "model rejected the input: mat1 and mat2 shapes cannot be multiplied (1x3 and 4x8)"


@pytest.mark.parametrize(
    ("inp", "fragment"),
    [
        (np.zeros((2, 4), np.int64), "same dtype"),
        ({"y": np.zeros((1, 4), np.float32)}, "argument 'x'"),
        ([np.zeros((1, 4), np.float32)] * 2, "received 3 argument(s)"),
    ],
)
def test_rejected_inputs_are_short_invalid_input(inferer: TorchInferer, inp: Any, fragment: str) -> None:
    with pytest.raises(InvalidInput) as raised:
        inferer.infer(inp, GrpsContext())
    message = raised.value.public_message
    assert message.startswith("model rejected the input: ")
    assert fragment in message
    assert "Traceback" not in message and "\n" not in message


def test_short_error_takes_the_last_line_of_a_torchscript_error() -> None:
    text = (
        "The following operation failed in the TorchScript interpreter.\n"
        "Traceback of TorchScript, serialized code (most recent call last):\n"
        '  File "code/__torch__.py", line 13, in forward\n'
        "RuntimeError: boom happened\n"
    )
    assert short_error(RuntimeError(text)) == "boom happened"
    assert short_error(ValueError("first line\nsecond line")) == "first line"
    assert short_error(RuntimeError("")) == "RuntimeError"
    assert short_error(RuntimeError("x" * 1000)).endswith("...")


# -- batching ----------------------------------------------------------------------------------


class CountingModule:
    """Wraps a module to count how many times the model really runs."""

    def __init__(self, module: Any) -> None:
        self.module = module
        self.calls: list[Any] = []

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append([tuple(a.shape) for a in args] or {k: tuple(v.shape) for k, v in kwargs.items()})
        return self.module(*args, **kwargs)


@pytest.mark.parametrize("form", ["single", "dict", "list"])
def test_batch_infer_runs_once_and_equals_per_item(form: str, weights: dict) -> None:
    inferer = make_inferer()
    rng = np.random.default_rng(3)
    arrays = [rng.normal(size=(n, 4)).astype(np.float32) for n in (1, 2, 3)]
    wrap = {"single": lambda a: a, "dict": lambda a: {"x": a}, "list": lambda a: [a]}[form]
    singles = [inferer.infer(wrap(a), GrpsContext()) for a in arrays]
    counter = CountingModule(inferer.module)
    inferer.module = counter  # type: ignore[assignment]
    outs = inferer.batch_infer([wrap(a) for a in arrays], [GrpsContext() for _ in arrays])
    assert len(counter.calls) == 1
    assert [tuple(o.shape) for o in outs] == [(1, 3), (2, 3), (3, 3)]
    for out, single, array in zip(outs, singles, arrays, strict=True):
        np.testing.assert_allclose(out.numpy(), single.numpy(), rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(out.numpy(), reference(array, weights), rtol=1e-5, atol=1e-7)


def test_batch_infer_falls_back_for_incompatible_inputs(weights: dict) -> None:
    inferer = make_inferer()
    a = np.ones((1, 4), np.float32)
    counter = CountingModule(inferer.module)
    inferer.module = counter  # type: ignore[assignment]
    outs = inferer.batch_infer([a, {"x": a * 2}, torch.from_numpy(a * 3)], [GrpsContext()] * 3)
    assert len(counter.calls) == 3
    for out, scale in zip(outs, (1, 2, 3), strict=True):
        np.testing.assert_allclose(out.numpy(), reference(a * scale, weights), rtol=1e-5)


def test_batch_infer_runs_per_item_when_output_has_no_batch_dim(tmp_path: Path) -> None:
    inferer = make_inferer(path=save_script(tmp_path, Summer(), "summer.pt"))
    outs = inferer.batch_infer(
        [np.ones((2, 2), np.float32), np.ones((1, 2), np.float32)], [GrpsContext()] * 2
    )
    assert [float(o) for o in outs] == [4.0, 2.0]


def test_batch_infer_splits_tuple_outputs(tmp_path: Path) -> None:
    inferer = make_inferer(path=save_script(tmp_path, TwoHeads(), "heads.pt"))
    items = [[np.full((n, 2), n, np.float32), np.ones((n, 2), np.float32)] for n in (1, 2)]
    outs = inferer.batch_infer(items, [GrpsContext()] * 2)
    assert isinstance(outs[1], tuple)
    np.testing.assert_array_equal(outs[1][0].numpy(), np.full((2, 2), 4.0))
    np.testing.assert_array_equal(outs[0][1].numpy(), np.full((1, 2), 2.0))


def test_concat_and_split_helpers() -> None:
    first = {"a": torch.zeros(1, 2), "b": torch.ones(1)}
    second = {"b": torch.ones(2), "a": torch.zeros(2, 2)}  # key order does not matter
    merged, sizes = concat_inputs([first, second]) or (None, None)
    assert sizes == [1, 2]
    assert merged["a"].shape == (3, 2) and merged["b"].shape == (3,)
    assert concat_inputs([{"a": torch.zeros(1, 2)}, {"a": torch.zeros(1, 3)}]) is None  # trailing dims
    assert concat_inputs([torch.zeros(1, 2), torch.zeros(1, 2, dtype=torch.int64)]) is None  # dtypes
    assert (
        concat_inputs(
            [{"a": torch.zeros(1), "b": torch.zeros(2)}, {"a": torch.zeros(1), "b": torch.zeros(1)}]
        )
        is None
    )
    parts = split_outputs({"y": torch.arange(3)}, [1, 2])
    assert parts is not None and parts[1]["y"].tolist() == [1, 2]
    assert split_outputs(torch.arange(4), [1, 2]) is None


# -- converter ---------------------------------------------------------------------------------


def test_converter_round_trip_through_payload(inferer: TorchInferer, x: np.ndarray, weights: dict) -> None:
    converter = TorchConverter()
    converter.init(None, {})
    converter.bind_device(inferer.input_device)
    ctx = GrpsContext()
    model_in = converter.preprocess(Payload.of_tensors([Tensor("x", x)]), ctx)
    assert isinstance(model_in["x"], torch.Tensor)
    assert model_in["x"].data_ptr() == x.ctypes.data  # a view of the request's array, no copy
    out = converter.postprocess(inferer.infer(model_in, ctx), ctx)
    assert out.kind is PayloadKind.TENSORS
    assert [t.name for t in out.tensors] == ["output"]  # a bare tensor output gets the default name
    assert isinstance(out.tensors[0].data, np.ndarray)
    np.testing.assert_allclose(out.tensors[0].data, reference(x, weights), rtol=1e-5, atol=1e-7)


def test_converter_keeps_strings_as_numpy_and_bfloat16_exact() -> None:
    converter = TorchConverter()
    strings = np.array(["a", "b"], dtype=object)
    assert converter.to_model(strings) is strings
    converted = converter.from_model(torch.tensor([1.5, 2.0], dtype=torch.bfloat16))
    assert converted.dtype == np.dtype(ml_dtypes.bfloat16)  # exact: the OIP BF16 datatype
    np.testing.assert_array_equal(converted.astype(np.float32), [1.5, 2.0])
    back = converter.to_model(converted)
    assert back.dtype == torch.bfloat16 and back.tolist() == [1.5, 2.0]
    assert converter.device == "cpu"


def test_converter_bind_device_falls_back_without_gpu(caplog: pytest.LogCaptureFixture) -> None:
    if torch.cuda.is_available():
        pytest.skip("checks the CPU fallback")
    converter = TorchConverter()
    with caplog.at_level(logging.WARNING):
        converter.bind_device("cuda:0")
    assert converter.device == "cpu"
    assert isinstance(converter.to_model(np.zeros(2, np.float32)), torch.Tensor)


# -- GPU ---------------------------------------------------------------------------------------


@pytest.mark.gpu
@gpu
def test_cuda_inference_matches_reference(x: np.ndarray, weights: dict) -> None:
    inferer = make_inferer("cuda:0")
    assert inferer.model_device == "cuda:0" and inferer.input_device == "cuda:0"
    out = inferer.infer({"x": x}, GrpsContext())
    assert out.device.type == "cuda"
    np.testing.assert_allclose(out.cpu().numpy(), reference(x, weights), rtol=1e-4, atol=1e-6)
    outs = inferer.batch_infer([x[:2], x[2:]], [GrpsContext()] * 2)
    np.testing.assert_allclose(torch.cat(outs).cpu().numpy(), out.cpu().numpy(), rtol=1e-5, atol=1e-7)


@pytest.mark.gpu
@gpu
def test_cuda_converter_and_original_device(x: np.ndarray, weights: dict) -> None:
    inferer = make_inferer("original", {"inp_device": "cuda:0"})
    assert inferer.model_device == "cpu" and inferer.input_device == "cuda:0"
    converter = TorchConverter()
    converter.bind_device("cuda")
    assert converter.to_model(x).device.type == "cuda"
    gpu_inferer = make_inferer("cuda")
    out = converter.postprocess(
        gpu_inferer.infer(
            converter.preprocess(Payload.of_tensors([Tensor("x", x)]), GrpsContext()), GrpsContext()
        ),
        GrpsContext(),
    )
    np.testing.assert_allclose(out.tensors[0].data, reference(x, weights), rtol=1e-4, atol=1e-6)

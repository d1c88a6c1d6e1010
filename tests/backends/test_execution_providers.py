"""ONNX Runtime execution providers chosen by `inferer_args.providers`: the plan (pure), the session it
builds on this CPU host, and what model metadata and Triton's model config report."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

from grps_py.backends.execution_providers import (
    CPU_EP,
    CUDA_EP,
    TENSORRT_EP,
    ProviderPlan,
    plan,
    triton_optimization,
)
from grps_py.backends.onnxruntime import OnnxInferer
from grps_py.core.catalog import ModelEntry, model_config
from grps_py.core.context import GrpsContext
from grps_py.core.errors import ModelLoadError

KNOWN = [TENSORRT_EP, CUDA_EP, "OpenVINOExecutionProvider", CPU_EP]
MODEL_ONNX = Path(__file__).resolve().parents[2] / "models" / "default.onnx"


def test_default_is_cuda_on_a_gpu_and_cpu_alone_on_cpu() -> None:
    assert plan({}, "cuda:1", KNOWN).providers == ((CUDA_EP, {"device_id": 1}), (CPU_EP, {}))
    assert plan({}, "cpu", KNOWN).providers == ((CPU_EP, {}),)


def test_listed_providers_in_order_with_options_and_the_device_index() -> None:
    args = {"providers": [{"tensorrt": {"trt_fp16_enable": True}}, "CUDAExecutionProvider"]}
    assert plan(args, "cuda:2", KNOWN).providers == (
        (TENSORRT_EP, {"device_id": 2, "trt_fp16_enable": True}),
        (CUDA_EP, {"device_id": 2}),
        (CPU_EP, {}),  # always last, so every node has a provider
    )
    # Options naming their own device_id keep it; the legacy cuda_provider_options still apply.
    args = {
        "providers": [{"cuda": {"device_id": 0}}],
        "cuda_provider_options": {"arena_extend_strategy": "kSameAsRequested"},
    }
    assert plan(args, "cuda:1", KNOWN).providers[0] == (
        CUDA_EP,
        {"device_id": 0, "arena_extend_strategy": "kSameAsRequested"},
    )


def test_gpu_providers_are_left_out_on_cpu_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        got = plan({"providers": ["tensorrt", "openvino", "cpu"]}, "cpu", KNOWN)
    assert got.names == ("OpenVINOExecutionProvider", CPU_EP)
    assert "TensorrtExecutionProvider needs a GPU" in caplog.text


@pytest.mark.parametrize(
    ("providers", "message"),
    [
        (["tpu"], "unknown execution provider 'tpu'; use one of cpu, cuda, tensorrt"),
        ("cuda", "must be a list of 1 to 8 providers"),
        ([], "must be a list of 1 to 8 providers"),
        ([3], "'3' is not a provider name"),
        ([{"cuda": {"device_id": [0]}}], "the options of CUDAExecutionProvider must map option names"),
    ],
)
def test_bad_provider_lists_are_load_errors(providers: object, message: str) -> None:
    with pytest.raises(ModelLoadError) as raised:
        plan({"providers": providers}, "cuda:0", KNOWN)
    assert message in str(raised.value)


def test_triton_optimization_names_the_accelerators_a_session_got() -> None:
    chosen = ProviderPlan(
        ((TENSORRT_EP, {"device_id": 0, "trt_fp16_enable": True}), (CUDA_EP, {}), (CPU_EP, {}))
    )
    assert triton_optimization([TENSORRT_EP, CUDA_EP, CPU_EP], chosen) == {
        "execution_accelerators": {
            "gpu_execution_accelerator": [{"name": "tensorrt", "parameters": {"trt_fp16_enable": "True"}}]
        }
    }
    assert triton_optimization([CUDA_EP, CPU_EP], chosen) == {}  # TensorRT did not start: nothing to claim


def test_model_config_carries_the_optimization_block() -> None:
    optimization = {"execution_accelerators": {"gpu_execution_accelerator": [{"name": "tensorrt"}]}}
    entry = ModelEntry(
        name="m",
        version="1",
        key="m-1",
        platform="onnxruntime_onnx",
        backend="onnxruntime",
        inputs=(),
        outputs=(),
        declared_inputs=False,
        max_batch_size=0,
        batch_timeout_us=0,
        takes_messages=False,
        gpu=True,
        optimization=optimization,
    )
    assert model_config(entry)["optimization"] == optimization


def test_a_session_on_this_host_reports_the_providers_it_runs_with(caplog: pytest.LogCaptureFixture) -> None:
    inferer = OnnxInferer()
    inferer.init(str(MODEL_ONNX), "cpu", {"providers": ["tensorrt", "cuda", "cpu"]})
    with caplog.at_level(logging.WARNING):
        assert inferer.load()
    described = inferer.describe()
    assert described["execution_providers"] == [CPU_EP] and "optimization" not in described
    out = inferer.infer({"x": np.zeros((2, 4), np.float32)}, GrpsContext())
    assert out["probs"].shape == (2, 3)
    with pytest.raises(ModelLoadError, match="unknown execution provider 'nope'"):
        bad = OnnxInferer()
        bad.init(str(MODEL_ONNX), "cpu", {"providers": ["nope"]})
        bad.load()

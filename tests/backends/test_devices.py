"""Device normalization: the table every backend shares, including the CPU fallback rule."""

from __future__ import annotations

import logging

import pytest

from grps_py.backends.devices import cuda_index, is_cuda, normalize_device, visible_cuda_count
from grps_py.core.errors import ModelLoadError


@pytest.mark.parametrize(
    ("device", "cuda_count", "expected"),
    [
        ("cpu", 0, "cpu"),
        ("cpu", 2, "cpu"),
        (" CPU ", 1, "cpu"),
        ("cuda", 1, "cuda:0"),
        ("gpu", 2, "cuda:0"),
        ("cuda:0", 1, "cuda:0"),
        ("cuda:1", 2, "cuda:1"),
        ("gpu:1", 2, "cuda:1"),
        ("GPU:1", 4, "cuda:1"),
        ("auto", 0, "cpu"),
        ("auto", 3, "cuda:0"),
        (None, 0, "cpu"),
        (None, 1, "cuda:0"),
    ],
)
def test_normalize_device_table(device: str | None, cuda_count: int, expected: str) -> None:
    assert normalize_device(device, cuda_count) == expected


@pytest.mark.parametrize("device", ["cuda", "gpu", "cuda:0", "cuda:3", "gpu:1"])
def test_gpu_device_without_gpu_falls_back_to_cpu_with_warning(
    device: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="grps_py.backends.devices"):
        assert normalize_device(device, 0) == "cpu"
    assert any("falling back to cpu" in record.getMessage() for record in caplog.records)


def test_auto_without_gpu_is_silent(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="grps_py.backends.devices"):
        assert normalize_device("auto", 0) == "cpu"
    assert caplog.records == []


@pytest.mark.parametrize(("device", "cuda_count"), [("cuda:2", 2), ("gpu:1", 1), ("cuda:7", 4)])
def test_gpu_index_out_of_range_fails_load(device: str, cuda_count: int) -> None:
    with pytest.raises(ModelLoadError) as raised:
        normalize_device(device, cuda_count)
    message = str(raised.value)
    assert device in message
    assert f"{cuda_count} CUDA device(s) available" in message


@pytest.mark.parametrize("device", ["tpu", "cuda:x", "cuda:-1", "original", "mps"])
def test_unknown_device_names_fail_load(device: str) -> None:
    with pytest.raises(ModelLoadError, match="device"):
        normalize_device(device, 1)


@pytest.mark.parametrize(
    ("nodes", "visible", "expected"),
    [
        (2, None, 2),
        (0, None, 0),
        (None, None, None),
        (None, "0", None),
        (4, "1,3", 2),
        (4, "", 0),
        (4, "-1", 0),
        (4, "0,-1,2", 1),  # CUDA stops at the first invalid entry
        (1, "0,1,2", 1),  # cannot see more GPUs than the driver has
        (2, "GPU-8f1c,GPU-9a2b", 2),
    ],
)
def test_visible_cuda_count(nodes: int | None, visible: str | None, expected: int | None) -> None:
    assert visible_cuda_count(nodes, visible) == expected


@pytest.mark.parametrize(
    ("device", "cuda", "index"), [("cpu", False, 0), ("cuda:0", True, 0), ("cuda:3", True, 3)]
)
def test_is_cuda_and_index(device: str, cuda: bool, index: int) -> None:
    assert is_cuda(device) is cuda
    assert cuda_index(device) == index

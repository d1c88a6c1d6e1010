"""Warmup samples (zeros, random, file) and where instances run."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from grps_py.core.config import ModelSettings, WarmupSettings
from grps_py.core.node import instance_devices
from grps_py.core.signature import TensorSpec
from grps_py.core.warmup import sample_shape, samples

SPECS = (
    TensorSpec("x", "FP32", (-1, 3)),
    TensorSpec("ids", "INT64", (2, -1)),
    TensorSpec("t", "BYTES", None),
)


def test_variable_dims_take_the_batch_size_first_then_one() -> None:
    assert sample_shape(SPECS[0], 4) == (4, 3)
    assert sample_shape(SPECS[1], 4) == (2, 1)
    assert sample_shape(SPECS[2], 4) == (4,)


def test_zeros_and_random_samples_have_the_declared_datatypes() -> None:
    zeros = {t.name: t.data for t in samples(WarmupSettings("zeros", batch_size=2), SPECS)}
    assert zeros["x"].dtype == np.float32 and not zeros["x"].any()
    assert zeros["ids"].dtype == np.int64 and zeros["t"].tolist() == [b"", b""]
    random = {t.name: t.data for t in samples(WarmupSettings("random", batch_size=2), SPECS)}
    assert random["x"].shape == (2, 3) and random["x"].any() and random["ids"].dtype == np.int64


def test_file_samples(tmp_path: Path) -> None:
    path = tmp_path / "warm.npz"
    np.savez(path, x=np.ones((5, 3), np.float32))
    (tensor,) = samples(WarmupSettings("file", file=path), ())
    assert tensor.name == "x" and tensor.data.shape == (5, 3)


def test_instances_per_device() -> None:
    base = ModelSettings(name="m", version="1", inferer_type="torch", device="cpu")
    assert instance_devices(base) == ["cpu"]
    two = ModelSettings(
        name="m", version="1", inferer_type="torch", device="cpu", instances=2, devices=(0, 1)
    )
    assert instance_devices(two) == ["cuda:0", "cuda:0", "cuda:1", "cuda:1"]

"""Models that cannot be built or loaded stop start-up with a message that says why."""

from __future__ import annotations

from pathlib import Path

import pytest

from grps_py.core.errors import ModelLoadError
from support import BASIC, start_project


def write_inference(tmp_path: Path, model_line: str) -> Path:
    conf = tmp_path / "inference.yml"
    conf.write_text(
        f"models:\n  - {model_line}\n"
        "dag:\n  type: sequential\n  name: d\n  nodes:\n    - {name: n, type: model, model: m-1}\n"
    )
    return conf


def test_unregistered_inferer_name(tmp_path: Path) -> None:
    conf = write_inference(tmp_path, "{name: m, version: '1', inferer_type: customized, inferer_name: ghost}")
    with pytest.raises(ModelLoadError, match=r"inferer_name 'ghost' is not registered .*'echo'"):
        start_project(BASIC, conf)


def test_unregistered_converter_name(tmp_path: Path) -> None:
    line = (
        "{name: m, version: '1', inferer_type: customized, inferer_name: echo, "
        "converter_type: customized, converter_name: nobody}"
    )
    with pytest.raises(ModelLoadError, match="converter_name 'nobody' is not registered"):
        start_project(BASIC, write_inference(tmp_path, line))


def test_corrupt_model_file(tmp_path: Path) -> None:
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"not an onnx file")
    conf = write_inference(tmp_path, f"{{name: m, version: '1', inferer_type: onnx, inferer_path: {broken}}}")
    with pytest.raises(ModelLoadError, match=r"broken\.onnx"):
        start_project(BASIC, conf)


def test_load_that_raises_is_reported_as_a_load_error(tmp_path: Path) -> None:
    line = "{name: m, version: '1', inferer_type: customized, inferer_name: failing_load}"
    with pytest.raises(ModelLoadError, match=r"model 'm-1' failed to load: OSError: disk on fire"):
        start_project(BASIC, write_inference(tmp_path, line))

"""A bare model directory (what KServe mounts at /mnt/models) read as a one-model project."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest

from grps_py import model_dir
from grps_py.core.config import InterfaceSettings, ServerSettings
from grps_py.core.errors import ConfigError
from support import REPO

ONNX = REPO / "models" / "default.onnx"
TORCH = REPO / "models" / "default.pt"


def place(root: Path, relative: str, source: Path = ONNX) -> Path:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(source, path)
    return path


def error(directory: Path, name: str = "classifier") -> str:
    with pytest.raises(ConfigError) as caught:
        model_dir.project(directory, name)
    message = str(caught.value)
    assert "\n" not in message and "\r" not in message
    return message


def test_a_model_file_alone_is_version_1_of_one_onnx_model_and_its_dag(tmp_path: Path) -> None:
    path = place(tmp_path, "model.onnx")
    project = model_dir.project(tmp_path, "classifier", 8080, 8081)
    assert project.root == tmp_path.resolve()
    (model,) = project.inference.models
    assert (model.name, model.version, model.key) == ("classifier", "1", "classifier-1")
    assert (model.inferer_type, model.converter_type, model.device) == ("onnx", "numpy", "auto")
    assert model.inferer_path == path.resolve()
    assert model.batching.type == "none"
    dag = project.inference.dag
    assert (dag.name, dag.type) == ("classifier", "sequential")
    assert [(node.name, node.model) for node in dag.nodes] == [("classifier", "classifier-1")]


def test_server_settings_are_the_defaults_on_every_interface_and_the_given_ports(tmp_path: Path) -> None:
    place(tmp_path, "model.onnx")
    server = model_dir.project(tmp_path, "classifier", 8080, 8081).server
    assert server.interface == InterfaceSettings(host="0.0.0.0", http_port=8080, grpc_port=8081)
    defaults = ServerSettings()
    assert dataclasses.replace(server, interface=defaults.interface, source=defaults.source) == defaults
    assert server.log.log_dir is None  # stderr only: /mnt/models is read-only under KServe


def test_default_ports_are_server_yml_defaults(tmp_path: Path) -> None:
    place(tmp_path, "model.onnx")
    iface = model_dir.project(tmp_path, "classifier").server.interface
    assert (iface.http_port, iface.grpc_port) == (7080, 7081)


@pytest.mark.parametrize(
    ("relative", "version"),
    [("1/model.onnx", "1"), ("3/model.onnx", "3"), ("classifier/2/model.onnx", "2"), ("m.onnx", "1")],
)
def test_version_directories_name_the_version(tmp_path: Path, relative: str, version: str) -> None:
    path = place(tmp_path, relative)
    (model,) = model_dir.project(tmp_path, "classifier").inference.models
    assert (model.version, model.inferer_path) == (version, path.resolve())
    assert project_dag_model(tmp_path) == f"classifier-{version}"


def project_dag_model(directory: Path) -> str:
    return model_dir.project(directory, "classifier").inference.dag.nodes[0].model


def test_a_torchscript_file_gets_the_torch_inferer_and_converter(tmp_path: Path) -> None:
    place(tmp_path, "1/model.pt", TORCH)
    (model,) = model_dir.project(tmp_path, "classifier").inference.models
    assert (model.inferer_type, model.converter_type, model.version) == ("torch", "torch", "1")


def test_other_files_of_a_kserve_or_triton_layout_are_ignored(tmp_path: Path) -> None:
    place(tmp_path, "classifier/1/model.onnx")
    (tmp_path / "classifier" / "config.pbtxt").write_text('platform: "onnxruntime_onnx"\n')
    (tmp_path / "classifier" / "labels.txt").write_text("a\nb\nc\n")
    (tmp_path / "README.md").write_text("a model\n")
    place(tmp_path, ".cache/model.onnx")  # hidden: the storage initializer's or a tool's
    place(tmp_path, ".model.onnx")
    (model,) = model_dir.project(tmp_path, "classifier").inference.models
    assert model.inferer_path == (tmp_path / "classifier" / "1" / "model.onnx").resolve()


def test_a_directory_without_conf_or_a_model_file_is_refused_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "README.md").write_text("no model here\n")
    place(tmp_path, "saved/model.onnx")  # not a version directory
    place(tmp_path, "a/b/c/model.onnx")  # too deep
    message = error(tmp_path)
    assert message.startswith(f"{tmp_path.resolve()}: not a grps-py project (no conf/server.yml)")
    assert "*.onnx" in message and "*.pt" in message and "1/" in message


def test_several_model_files_are_refused_naming_them(tmp_path: Path) -> None:
    place(tmp_path, "1/model.onnx")
    place(tmp_path, "2/model.onnx")
    message = error(tmp_path)
    assert "2 model files (1/model.onnx, 2/model.onnx)" in message
    assert "conf/server.yml" in message


def test_the_list_of_files_is_bounded_and_escaped(tmp_path: Path) -> None:
    for name in ("a\nfake log line.onnx", "b.onnx", "c.onnx", "d.onnx", "e.pt"):
        place(tmp_path, name)
    message = error(tmp_path)
    assert "5 model files (a\\nfake log line.onnx, b.onnx, c.onnx and 2 more)" in message


def test_an_empty_model_name_or_a_missing_directory_is_refused(tmp_path: Path) -> None:
    place(tmp_path, "model.onnx")
    assert "the model name is empty" in error(tmp_path, " ")
    assert "model directory does not exist" in error(tmp_path / "absent")


def test_a_directory_with_conf_is_a_project(tmp_path: Path) -> None:
    assert model_dir.is_model_dir(tmp_path)
    (tmp_path / "conf").mkdir()
    assert not model_dir.is_model_dir(tmp_path)
    assert not model_dir.is_model_dir(REPO)

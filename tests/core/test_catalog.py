"""The OIP view of the models: versions, platforms, the DAG as a model, Triton-style config."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from grps_py.codecs.grps_pb import GrpsMessageBridge
from grps_py.core.catalog import Catalog, model_config, version_key
from grps_py.core.errors import ConfigError, ModelNotFound
from grps_py.core.executor import Executor
from grps_py.project import load_project
from support import BASIC


@pytest.fixture(scope="module")
def catalog() -> Iterator[Catalog]:
    project = load_project(BASIC)
    executor = Executor(project.server, project.inference, GrpsMessageBridge())
    yield executor.catalog
    executor.close()


def test_versions_compare_number_by_number() -> None:
    ordered = ["1.2", "1.9", "1.10", "2", "10", "10.0.1"]
    assert sorted(reversed(ordered), key=version_key) == ordered
    assert sorted(["v2", "v10", "v1-beta"], key=version_key) == ["v1-beta", "v2", "v10"]


def test_newest_version_by_default(catalog: Catalog) -> None:
    assert catalog.versions("versioned") == ["9", "10"]
    assert catalog.entry("versioned").version == "10"
    assert catalog.entry("versioned", "9").key == "versioned-9"
    with pytest.raises(ModelNotFound, match="versions: 9, 10"):
        catalog.entry("versioned", "8")
    with pytest.raises(ModelNotFound, match="unknown model 'nope'"):
        catalog.entry("nope")


def test_platforms_and_the_dag(catalog: Catalog) -> None:
    assert catalog.entry("classifier").platform == "onnxruntime_onnx"
    assert catalog.entry("classifier_pt").platform == "pytorch_libtorch"
    assert catalog.entry("echo").platform == "python" and catalog.entry("echo").takes_messages
    dag = catalog.entry("double_then_add_one")
    assert (dag.platform, dag.version, dag.key) == ("ensemble", "1", "double_then_add_one")
    assert not dag.takes_messages


def test_declared_signature_and_config(catalog: Catalog) -> None:
    entry = catalog.entry("classifier_pt")
    assert [s.name for s in entry.inputs] == ["INPUT__0"] and entry.declared_inputs
    config = model_config(entry)
    assert config["max_batch_size"] == 8
    assert config["input"] == [{"name": "INPUT__0", "data_type": "TYPE_FP32", "dims": [4]}]
    assert config["dynamic_batching"] == {
        "max_queue_delay_microseconds": 500,
        "default_queue_policy": {
            "timeout_action": "REJECT",
            "allow_timeout_override": True,
            "max_queue_size": 1024,
        },
    }
    unbatched = model_config(catalog.entry("typed"))
    assert unbatched["max_batch_size"] == 0 and unbatched["input"][0]["dims"] == [-1, 3]
    assert unbatched["input"][1]["data_type"] == "TYPE_INT64"


def test_an_entry_is_kept_once_its_models_are_loaded() -> None:
    project = load_project(BASIC)
    executor = Executor(project.server, project.inference, GrpsMessageBridge())
    try:
        catalog = executor.catalog
        assert catalog.entry("versioned") is not catalog.entry("versioned")  # not final: built each time
        for node in executor.nodes.values():
            node.loaded = True
        final = catalog.entry("versioned")
        assert catalog.entry("versioned") is final and catalog.entry("versioned", "10") is final
        assert catalog.entry("versioned", "9").key == "versioned-9"
        with pytest.raises(ModelNotFound, match="versions: 9, 10"):
            catalog.entry("versioned", "8")
    finally:
        executor.close()


LABELLED = """\
models:
  - name: m
    version: "1"
    inferer_type: customized
    inferer_name: identity
    converter_type: numpy
    streaming: true
    outputs: [{name: y, datatype: FP32, shape: [-1, 3], label_filename: LABELS}]
dag: {name: d, nodes: [{name: n, model: m-1}]}
"""


def labelled(tmp_path: Path, labels: str | None, data: bytes = b"") -> Executor:
    """An executor for one model whose output `y` is labelled from the file `labels` under `tmp_path`
    (written with `data`; None: a file that does not exist)."""
    path = tmp_path / (labels or "missing.txt")
    if labels is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    (tmp_path / "inference.yml").write_text(LABELLED.replace("LABELS", str(path)))
    project = load_project(BASIC, inference_conf=tmp_path / "inference.yml")
    return Executor(project.server, project.inference, GrpsMessageBridge())


def test_labels_are_read_once_one_per_line(tmp_path: Path) -> None:
    executor = labelled(tmp_path, "labels/y.txt", b"cat\r\n\ndog \n")
    try:
        (spec,) = executor.catalog.entry("m").outputs
        assert spec.labels == ("cat", "", "dog ")
        config = model_config(executor.catalog.entry("d"))  # the DAG's outputs are its exit node's
        assert config["output"][0]["label_filename"] == str(tmp_path / "labels/y.txt")
        assert config["model_transaction_policy"] == {"decoupled": True}
    finally:
        executor.close()


@pytest.mark.parametrize(
    ("labels", "data", "expected"),
    [
        (None, b"", "cannot be read"),
        ("labels/bad.txt", b"\xff\xfe", "is not UTF-8"),
    ],
)
def test_a_label_file_that_cannot_be_read_stops_the_server(
    tmp_path: Path, labels: str | None, data: bytes, expected: str
) -> None:
    with pytest.raises(ConfigError, match=f"model 'm-1': output 'y': label_filename .*{expected}"):
        labelled(tmp_path, labels, data)


def test_instances_on_gpus_are_counted_per_gpu_as_triton_counts_them(catalog: Catalog) -> None:
    """`instances: 2` on `devices: [0, 1]` is four instances: Triton's group says 2 on each GPU."""
    entry = replace(catalog.entry("classifier_pt"), gpu=True, gpus=(0, 1), instances=4)
    assert model_config(entry)["instance_group"] == [{"count": 2, "kind": "KIND_GPU", "gpus": [0, 1]}]

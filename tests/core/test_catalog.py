"""The OIP view of the models: versions, platforms, the DAG as a model, Triton-style config."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from grps_py.codecs.grps_pb import GrpsMessageBridge
from grps_py.core.catalog import Catalog, model_config, version_key
from grps_py.core.errors import ModelNotFound
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
    assert config["dynamic_batching"] == {"max_queue_delay_microseconds": 500}
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

"""The served models as the Open Inference Protocol sees them: names, versions, platforms, signatures.

Every model in inference.yml is an OIP model (`name`, `version`); the default DAG is one too, named
by `dag.name`, with the inputs of its entry nodes and the outputs of its exit node. A request
without a version gets the model's newest version, compared number by number ("1.10" > "1.9").
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from grps_py.core import backend_registry
from grps_py.core.dag import Dag
from grps_py.core.datatypes import BYTES, datatype_of
from grps_py.core.errors import ModelNotFound
from grps_py.core.node import ModelNode
from grps_py.core.signature import TensorSpec
from grps_py.core.untrusted import shown

log = logging.getLogger("grps_py.catalog")

ENSEMBLE = "ensemble"
DAG_VERSION = "1"
_VERSION_PART = re.compile(r"(\d+)")


def version_key(version: str) -> tuple[Any, ...]:
    """Sort key: digit runs compare as numbers, the rest as text."""
    return tuple(
        (0, int(part), "") if part.isdigit() else (1, 0, part) for part in _VERSION_PART.split(version)
    )


@dataclass(frozen=True)
class ModelEntry:
    """One OIP model. `key` is what the executor resolves (`name-version`, or the DAG's name)."""

    name: str
    version: str
    key: str
    platform: str
    backend: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    declared_inputs: bool  # requests are checked against `inputs`
    max_batch_size: int  # 0: not batched
    batch_timeout_us: int
    takes_messages: bool  # the first node's converter speaks GrpsMessage (converter none / customized)
    gpu: bool
    instances: int = 1
    preferred_batch_size: tuple[int, ...] = ()


def _spec_from_description(item: Mapping[str, Any]) -> TensorSpec:
    """A backend's {name, dtype (numpy name or "string"), shape} as a TensorSpec."""
    dtype = item.get("dtype")
    datatype = None
    if dtype == "string":
        datatype = BYTES
    elif dtype:
        datatype = datatype_of(np.dtype(dtype))
    shape = item.get("shape")
    return TensorSpec(str(item["name"]), datatype, None if shape is None else tuple(int(d) for d in shape))


def node_signature(node: ModelNode) -> tuple[tuple[TensorSpec, ...], tuple[TensorSpec, ...]]:
    """Declared inputs/outputs, else what the loaded model tells (ONNX tells all; TorchScript names)."""
    s = node.settings
    described = node.describe() if node.loaded else {}
    inputs = s.inputs or tuple(_spec_from_description(i) for i in described.get("inputs", ()))
    outputs = s.outputs or tuple(_spec_from_description(o) for o in described.get("outputs", ()))
    return inputs, outputs


class Catalog:
    """Looks up OIP models by name and optional version."""

    def __init__(self, nodes: Mapping[str, ModelNode], dag: Dag) -> None:
        self._nodes = nodes
        self._dag = dag
        self._cache: dict[str, ModelEntry] = {}
        # (name, version) as requested -> its final entry: one lookup per request once models are loaded.
        self._by_request: dict[tuple[str, str], ModelEntry] = {}
        self._versions: dict[str, list[str]] = {}
        for node in nodes.values():
            self._versions.setdefault(node.settings.name, []).append(node.settings.version)
        for versions in self._versions.values():
            versions.sort(key=version_key)
        if dag.name in self._versions:
            log.warning("dag.name %r is also a model's name: OIP serves the model under that name", dag.name)
        else:
            self._versions[dag.name] = [DAG_VERSION]

    def names(self) -> list[str]:
        return sorted(self._versions)

    def versions(self, name: str) -> list[str]:
        """Versions of a model, oldest first."""
        return list(self._versions.get(name, ()))

    def entry(self, name: str, version: str = "") -> ModelEntry:
        found = self._by_request.get((name, version))
        if found is not None:
            return found
        versions = self._versions.get(name)
        if not versions:
            raise ModelNotFound(f"unknown model '{shown(name)}'; served models: {', '.join(self.names())}")
        if version and version not in versions:
            known = ", ".join(versions)
            raise ModelNotFound(
                f"unknown version '{shown(version)}' of model '{shown(name)}'; versions: {known}"
            )
        key = f"{name}-{version or versions[-1]}"
        cached = self._cache.get(key)
        if cached is not None:
            self._by_request[(name, version)] = cached
            return cached
        entry = self._build(key)
        if self._signature_final(key):
            self._cache[key] = entry
            self._by_request[(name, version)] = entry
        return entry

    def _signature_final(self, key: str) -> bool:
        nodes = [self._nodes[key]] if key in self._nodes else list(self._dag.nodes)
        return all(node.loaded for node in nodes)

    def _build(self, key: str) -> ModelEntry:
        node = self._nodes.get(key)
        if node is not None:
            return self._node_entry(node)
        return self._dag_entry()

    def _node_entry(self, node: ModelNode) -> ModelEntry:
        s = node.settings
        spec = backend_registry.backend(s.inferer_type)
        inputs, outputs = node_signature(node)
        batched = node.max_batch_size > 0  # the grps metadata's story too (executor._describe_batching)
        return ModelEntry(
            name=s.name,
            version=s.version,
            key=s.key,
            platform=spec.platform,
            backend=spec.backend,
            inputs=inputs,
            outputs=outputs,
            declared_inputs=bool(s.inputs),
            max_batch_size=node.max_batch_size,
            batch_timeout_us=s.batching.batch_timeout_us if batched else 0,
            takes_messages=node.converter.speaks_messages,
            gpu=node.on_gpu,
            instances=len(node.instances),
            preferred_batch_size=s.batching.preferred_batch_size if batched else (),
        )

    def _dag_entry(self) -> ModelEntry:
        dag = self._dag
        inputs: list[TensorSpec] = []
        for node in dag.entry_nodes:
            for spec in node_signature(node)[0]:
                if spec.name not in {i.name for i in inputs}:
                    inputs.append(spec)
        exit_node = dag.exit_node
        return ModelEntry(
            name=dag.name,
            version=DAG_VERSION,
            key=dag.name,
            platform=ENSEMBLE,
            backend="",
            inputs=tuple(inputs),
            outputs=node_signature(exit_node)[1],
            declared_inputs=all(bool(node.settings.inputs) for node in dag.entry_nodes),
            max_batch_size=0,
            batch_timeout_us=0,
            takes_messages=any(node.converter.speaks_messages for node in dag.entry_nodes),
            gpu=any(node.on_gpu for node in dag.nodes),
        )


_CONFIG_TYPES = {
    "BOOL": "TYPE_BOOL",
    "UINT8": "TYPE_UINT8",
    "UINT16": "TYPE_UINT16",
    "UINT32": "TYPE_UINT32",
    "UINT64": "TYPE_UINT64",
    "INT8": "TYPE_INT8",
    "INT16": "TYPE_INT16",
    "INT32": "TYPE_INT32",
    "INT64": "TYPE_INT64",
    "FP16": "TYPE_FP16",
    "FP32": "TYPE_FP32",
    "FP64": "TYPE_FP64",
    BYTES: "TYPE_STRING",
    "BF16": "TYPE_BF16",
}


def _config_tensor(spec: TensorSpec, batched: bool) -> dict[str, Any]:
    dims = list(spec.shape) if spec.shape is not None else [-1]
    if batched and dims and dims[0] == -1:  # Triton leaves the batch dim out when max_batch_size > 0
        dims = dims[1:]
    data_type = _CONFIG_TYPES.get(spec.datatype or "", "TYPE_INVALID")
    return {"name": spec.name, "data_type": data_type, "dims": dims}


def model_config(entry: ModelEntry) -> dict[str, Any]:
    """Triton's model configuration (its JSON form) derived from inference.yml, for tools that read it."""
    batched = entry.max_batch_size > 0
    config: dict[str, Any] = {
        "name": entry.name,
        "platform": entry.platform,
        "backend": entry.backend,
        "max_batch_size": entry.max_batch_size,
        "input": [_config_tensor(spec, batched) for spec in entry.inputs],
        "output": [_config_tensor(spec, batched) for spec in entry.outputs],
        "instance_group": [{"count": entry.instances, "kind": "KIND_GPU" if entry.gpu else "KIND_CPU"}],
    }
    if batched:
        config["dynamic_batching"] = {"max_queue_delay_microseconds": entry.batch_timeout_us}
        if entry.preferred_batch_size:
            config["dynamic_batching"]["preferred_batch_size"] = list(entry.preferred_batch_size)
    return config

"""The served models as the Open Inference Protocol sees them: names, versions, platforms, signatures,
and how each is scheduled (Triton's model configuration).

Every model in inference.yml is an OIP model (`name`, `version`); the default DAG is one too, named
by `dag.name`, with the inputs of its entry nodes and the outputs of its exit node. A request
without a version gets the model's newest version, compared number by number ("1.10" > "1.9").
An output declared with a `label_filename` carries its labels (read once, when the catalog is built).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from grps_py.core import backend_registry
from grps_py.core.dag import Dag
from grps_py.core.datatypes import BYTES
from grps_py.core.errors import ConfigError, ModelNotFound
from grps_py.core.node import ModelNode
from grps_py.core.sequence import CORRID, END, OLDEST, READY, START, SequenceSettings
from grps_py.core.signature import TensorSpec, spec_from_description
from grps_py.core.untrusted import shown

log = logging.getLogger("grps_py.catalog")

ENSEMBLE = "ensemble"
DAG_VERSION = "1"
_VERSION_PART = re.compile(r"(\d+)")
# A label file holds at most this many labels (as many elements as a classified output may have, in
# Triton) and this many bytes.
MAX_LABELS = 1_000_000
MAX_LABEL_FILE_BYTES = 64 << 20
_UINT32_MAX = 2**32 - 1  # ModelQueuePolicy.max_queue_size is a uint32


def version_key(version: str) -> tuple[Any, ...]:
    """Sort key: digit runs compare as numbers, the rest as text."""
    return tuple(
        (0, int(part), "") if part.isdigit() else (1, 0, part) for part in _VERSION_PART.split(version)
    )


@dataclass(frozen=True)
class QueuePolicy:
    """A model's queue, as Triton's dynamic batcher and its ModelQueuePolicy describe one."""

    max_queue_size: int
    default_timeout_us: int  # 0: none
    priority_levels: int
    default_priority_level: int
    priority_aging_us: int


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
    instances: int = 1  # in all (on each of `gpus`: instances / len(gpus))
    preferred_batch_size: tuple[int, ...] = ()
    gpus: tuple[int, ...] = ()  # the GPU indices the instances run on
    queue: QueuePolicy | None = None  # None: nothing to tell (the DAG has no queue of its own)
    streaming: bool = False  # it may answer with any number of messages (Triton's decoupled)
    # Its sequence batching settings; None: it takes no sequences, and a request naming one is refused
    # (sequence batching plugs in here).
    sequence_batching: SequenceSettings | None = None
    # Triton's `optimization` block where the backend runs the model through an accelerator (ONNX
    # Runtime's TensorRT or OpenVINO execution provider).
    optimization: Mapping[str, Any] | None = None


def read_labels(path: Path, where: str) -> tuple[str, ...]:
    """A label file: one label per line, UTF-8 (a Windows line end is dropped too). Any problem is a
    ConfigError saying `where` the file was named."""
    try:
        with path.open("rb") as file:
            data = file.read(MAX_LABEL_FILE_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"{where}: {path} cannot be read ({exc.strerror or exc})") from None
    if len(data) > MAX_LABEL_FILE_BYTES:
        raise ConfigError(f"{where}: {path} is larger than {MAX_LABEL_FILE_BYTES} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{where}: {path} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()  # the last line's end
    if len(lines) > MAX_LABELS:
        raise ConfigError(f"{where}: {path} has {len(lines)} labels, more than {MAX_LABELS}")
    return tuple(line.removesuffix("\r") for line in lines)


def node_signature(node: ModelNode) -> tuple[tuple[TensorSpec, ...], tuple[TensorSpec, ...]]:
    """Declared inputs/outputs, else what the loaded model tells (ONNX tells all; TorchScript names)."""
    s = node.settings
    described = node.describe() if node.loaded else {}
    inputs = s.inputs or tuple(spec_from_description(i) for i in described.get("inputs", ()))
    outputs = s.outputs or tuple(spec_from_description(o) for o in described.get("outputs", ()))
    return inputs, outputs


class Catalog:
    """Looks up OIP models by name and optional version."""

    def __init__(self, nodes: Mapping[str, ModelNode], dag: Dag | None) -> None:
        """`dag` None: the DAG is not served now (unloaded, or one of its models is)."""
        self._nodes = nodes
        self._dag = dag
        self._labels = _label_files(nodes)
        self._cache: dict[str, ModelEntry] = {}
        # (name, version) as requested -> its final entry: one lookup per request once models are loaded.
        self._by_request: dict[tuple[str, str], ModelEntry] = {}
        self._versions: dict[str, list[str]] = {}
        for node in nodes.values():
            self._versions.setdefault(node.settings.name, []).append(node.settings.version)
        for versions in self._versions.values():
            versions.sort(key=version_key)
        if dag is None:
            pass
        elif dag.name in self._versions:
            # A DAG of that model alone (a model directory's, grps_py/model_dir.py) hides nothing.
            if [node.settings.name for node in dag.nodes] != [dag.name]:
                log.warning(
                    "dag.name %r is also a model's name: OIP serves the model under that name", dag.name
                )
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
        nodes = [self._nodes[key]] if key in self._nodes or self._dag is None else list(self._dag.nodes)
        return all(node.loaded for node in nodes)

    def _build(self, key: str) -> ModelEntry:
        node = self._nodes.get(key)
        if node is not None:
            return self._node_entry(node)
        return self._dag_entry()

    def _with_labels(self, specs: Sequence[TensorSpec]) -> tuple[TensorSpec, ...]:
        return tuple(
            replace(spec, labels=self._labels[spec.label_path]) if spec.label_path is not None else spec
            for spec in specs
        )

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
            outputs=self._with_labels(outputs),
            declared_inputs=bool(s.inputs),
            max_batch_size=node.max_batch_size,
            batch_timeout_us=s.batching.batch_timeout_us if batched else 0,
            takes_messages=node.converter.speaks_messages,
            gpu=node.on_gpu,
            instances=len(node.instances),
            preferred_batch_size=s.batching.preferred_batch_size if batched else (),
            gpus=_gpu_indices(node),
            queue=QueuePolicy(
                max_queue_size=s.batching.max_queue_size,
                default_timeout_us=s.default_timeout_us,
                priority_levels=s.priority_levels,
                default_priority_level=s.default_priority_level,
                priority_aging_us=s.priority_aging_us,
            ),
            streaming=s.streaming,
            sequence_batching=s.sequence_batching,
            optimization=node.describe().get("optimization") if node.loaded else None,
        )

    def _dag_entry(self) -> ModelEntry:
        dag = self._dag
        assert dag is not None  # only its name leads here, and only a served DAG is listed
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
            outputs=self._with_labels(node_signature(exit_node)[1]),
            declared_inputs=all(bool(node.settings.inputs) for node in dag.entry_nodes),
            max_batch_size=0,
            batch_timeout_us=0,
            takes_messages=any(node.converter.speaks_messages for node in dag.entry_nodes),
            gpu=any(node.on_gpu for node in dag.nodes),
            streaming=any(node.settings.streaming for node in dag.nodes),
            sequence_batching=next(
                (n.settings.sequence_batching for n in dag.nodes if n.settings.sequence_batching), None
            ),
        )


def _label_files(nodes: Mapping[str, ModelNode]) -> dict[Path, tuple[str, ...]]:
    """Every declared output's label file, read once (a file named by several outputs, once)."""
    labels: dict[Path, tuple[str, ...]] = {}
    for node in nodes.values():
        for spec in node.settings.outputs:
            path = spec.label_path
            if path is not None and path not in labels:
                where = f"model '{node.key}': output '{spec.name}': label_filename '{spec.label_filename}'"
                labels[path] = read_labels(path, where)
    return labels


def _gpu_indices(node: ModelNode) -> tuple[int, ...]:
    """The GPUs the loaded model's instances run on ("cuda:1" -> 1, "cuda" -> 0), each once."""
    if not node.on_gpu:
        return ()
    indices: list[int] = []
    for device in node.run_devices:
        kind, _, index = device.partition(":")
        if kind in ("cuda", "gpu"):
            indices.append(int(index) if index.isdigit() else 0)
    return tuple(dict.fromkeys(indices))


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


def _config_output(spec: TensorSpec, batched: bool) -> dict[str, Any]:
    tensor = _config_tensor(spec, batched)
    if spec.label_filename is not None:  # as inference.yml names it: the server's own paths stay its own
        tensor["label_filename"] = spec.label_filename
    return tensor


def model_config(entry: ModelEntry) -> dict[str, Any]:
    """Triton's model configuration (its JSON form) as the server runs the model, for tools that read it:
    instances, batching, the queue (`dynamic_batching` holds Triton's queue settings: for a model the
    server does not batch, `max_batch_size` 0, only those), labels, and whether it streams."""
    batched = entry.max_batch_size > 0
    group: dict[str, Any] = {"count": entry.instances, "kind": "KIND_GPU" if entry.gpu else "KIND_CPU"}
    if entry.gpus:  # Triton's count is per GPU
        group.update(count=entry.instances // len(entry.gpus), gpus=list(entry.gpus))
    config: dict[str, Any] = {
        "name": entry.name,
        "platform": entry.platform,
        "backend": entry.backend,
        "max_batch_size": entry.max_batch_size,
        "input": [_config_tensor(spec, batched) for spec in entry.inputs],
        "output": [_config_output(spec, batched) for spec in entry.outputs],
        "instance_group": [group],
    }
    sequences = entry.sequence_batching
    scheduling = _dynamic_batching(entry)
    if isinstance(sequences, SequenceSettings):  # Triton's scheduling choice: one or the other
        config["sequence_batching"] = _sequence_batching(sequences, scheduling)
    elif scheduling:
        config["dynamic_batching"] = scheduling
    queue = entry.queue
    if queue is not None and queue.priority_levels > 1:  # what Triton's config has no field for
        config["parameters"] = {"priority_aging_us": {"string_value": str(queue.priority_aging_us)}}
    if entry.streaming:
        config["model_transaction_policy"] = {"decoupled": True}
    if entry.optimization:
        config["optimization"] = dict(entry.optimization)
    return config


_CONTROL_KINDS = {
    START: "CONTROL_SEQUENCE_START",
    END: "CONTROL_SEQUENCE_END",
    READY: "CONTROL_SEQUENCE_READY",
    CORRID: "CONTROL_SEQUENCE_CORRID",
}
_FALSE_TRUE = {
    "INT32": ("int32_false_true", [0, 1]),
    "FP32": ("fp32_false_true", [0.0, 1.0]),
    "BOOL": ("bool_false_true", [False, True]),
}


def _sequence_batching(settings: SequenceSettings, scheduling: dict[str, Any]) -> dict[str, Any]:
    """Triton's `sequence_batching`: the strategy (oldest with the batching of `scheduling`), the idle
    bound and the control inputs with their false/true values or the id's datatype."""
    controls = []
    for kind, name in settings.control_inputs:
        control: dict[str, Any] = {"kind": _CONTROL_KINDS[kind]}
        if kind == CORRID:
            datatype = settings.corrid_datatype
            control["data_type"] = "TYPE_STRING" if datatype == "BYTES" else f"TYPE_{datatype}"
        else:
            field, values = _FALSE_TRUE[settings.control_datatype]
            control[field] = values
        controls.append({"name": name, "control": [control]})
    config: dict[str, Any] = {"max_sequence_idle_microseconds": settings.max_sequence_idle_us}
    if settings.strategy == OLDEST:
        oldest: dict[str, Any] = {
            key: scheduling[key]
            for key in ("preferred_batch_size", "max_queue_delay_microseconds")
            if key in scheduling
        }
        if settings.max_candidate_sequences:
            oldest["max_candidate_sequences"] = settings.max_candidate_sequences
        config["oldest"] = oldest
    else:
        config["direct"] = {}
    if controls:
        config["control_input"] = controls
    return config


def _dynamic_batching(entry: ModelEntry) -> dict[str, Any]:
    """Batching (when the server batches the model) and the queue: its bound, the timeout of a request
    that sets none (a request's own `timeout` replaces it), what a timed-out request gets (REJECT: it
    never runs), and the priority levels (one level: Triton's 0, no priorities)."""
    scheduling: dict[str, Any] = {}
    if entry.max_batch_size > 0:
        scheduling["max_queue_delay_microseconds"] = entry.batch_timeout_us
        if entry.preferred_batch_size:
            scheduling["preferred_batch_size"] = list(entry.preferred_batch_size)
    queue = entry.queue
    if queue is None:
        return scheduling
    if queue.priority_levels > 1:
        scheduling["priority_levels"] = queue.priority_levels
        scheduling["default_priority_level"] = queue.default_priority_level
    policy: dict[str, Any] = {
        "timeout_action": "REJECT",
        "allow_timeout_override": True,
        "max_queue_size": min(queue.max_queue_size, _UINT32_MAX),
    }
    if queue.default_timeout_us:
        policy["default_timeout_microseconds"] = queue.default_timeout_us
    scheduling["default_queue_policy"] = policy
    return scheduling

"""The models served at one moment: one generation of the executor's model nodes, the DAG over them,
the OIP catalog and the name lookups.

A set never changes once built. Loading, reloading or unloading a model builds a new set beside the
old one and the executor swaps it in with one assignment (core/repository.py). A request takes the
set it starts on and keeps it to its end (`with model_set:` counts it), so it runs every model
of one version, DAG included, whatever happens to the repository meanwhile; when a replaced set's
last request is answered its `drained` event is set, and the nodes no newer set took over are closed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from grps_py.core.catalog import Catalog
from grps_py.core.config import DagSettings
from grps_py.core.dag import Dag
from grps_py.core.errors import ModelNotFound
from grps_py.core.node import ModelNode
from grps_py.core.types import MessageBridge
from grps_py.core.untrusted import shown


class ModelSet:
    """Model nodes by key ("name-version"), the DAG (None when it is not served, `dag_absent` says why),
    and how requests name them."""

    __slots__ = ("_drained", "by_name", "catalog", "dag", "dag_absent", "dag_settings", "nodes", "users")

    def __init__(
        self,
        nodes: Mapping[str, ModelNode],
        dag_settings: DagSettings,
        bridge: MessageBridge,
        source: str,
        dag_wanted: bool = True,
    ) -> None:
        self.nodes = dict(nodes)
        self.dag_settings = dag_settings
        self.dag_absent = _why_no_dag(dag_settings, self.nodes, dag_wanted)
        self.dag = None if self.dag_absent else Dag(dag_settings, self.nodes, bridge, source)
        self.catalog = Catalog(self.nodes, self.dag)
        self.by_name = _by_name(self.nodes)
        self.users = 0  # requests running on this set
        self._drained: asyncio.Event | None = None  # made once the set is replaced

    # -- requests ------------------------------------------------------------------------------
    def __enter__(self) -> None:
        self.users += 1

    def __exit__(self, *exc_info: object) -> None:
        self.users -= 1
        if self._drained is not None and self.users == 0:  # None until replaced: one test per request
            self._drained.set()

    def resolve(self, model: str) -> Dag | ModelNode | None:
        """The DAG (no name, or its name) or the model a request names (`name-version`, or a plain name
        served in one version); None when this set serves no such model."""
        if not model:
            return self.dag
        node = self.nodes.get(model) or self.by_name.get(model)
        if node is not None:
            return node
        if self.dag is not None and model == self.dag.name:
            return self.dag
        return None

    def not_found(self, model: str) -> ModelNotFound:
        served = ", ".join(self.nodes) or "none"
        if not model:
            return ModelNotFound(f"the DAG '{self.dag_settings.name}' is not served: {self.dag_absent}")
        return ModelNotFound(f"unknown model '{shown(model)}'; served models: {served}")

    # -- replacement ---------------------------------------------------------------------------
    def replaced(self) -> asyncio.Event:
        """Mark the set replaced; the event is set once no request runs on it any more."""
        if self._drained is None:
            self._drained = asyncio.Event()
            if self.users == 0:
                self._drained.set()
        return self._drained


def _why_no_dag(settings: DagSettings, nodes: Mapping[str, ModelNode], wanted: bool) -> str:
    """Why the DAG cannot be served by these nodes ("" when it can)."""
    if not wanted:
        return "unloaded"
    missing = [node.model for node in settings.nodes if node.model not in nodes]
    if missing:
        return f"its model {', '.join(repr(m) for m in dict.fromkeys(missing))} is not loaded"
    return ""


def _by_name(nodes: Mapping[str, ModelNode]) -> dict[str, ModelNode]:
    """A plain model name selects its model when only one version is served."""
    names: dict[str, list[ModelNode]] = {}
    for node in nodes.values():
        names.setdefault(node.settings.name, []).append(node)
    return {name: found[0] for name, found in names.items() if len(found) == 1}

"""The DAG: validation at start-up, then execution of its model nodes for each request.

`sequential` (grps): each node takes the previous node's output.
`graph`: each node names the nodes whose outputs it takes (`inputs`); nodes with no inputs take
the request, independent branches run concurrently, and a node with several inputs receives their
tensors joined. A graph ends in exactly one node.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from grps_py.core.config import DagNodeSettings, DagSettings
from grps_py.core.context import GrpsContext
from grps_py.core.errors import ConfigError, InternalError
from grps_py.core.node import ModelNode
from grps_py.core.types import MessageBridge, Payload, PayloadKind, Tensor


def _check_inputs_exist(settings: DagSettings, source: str) -> None:
    names = [n.name for n in settings.nodes]
    for i, node in enumerate(settings.nodes):
        for parent in node.inputs:
            if parent not in names:
                raise ConfigError(
                    f"{source}: dag.nodes[{i}].inputs: {parent!r} is not a node of the DAG; nodes: {names}"
                )
            if parent == node.name:
                raise ConfigError(f"{source}: dag.nodes[{i}].inputs: node {node.name!r} takes its own output")


def _topological_order(settings: DagSettings, source: str) -> list[DagNodeSettings]:
    """Kahn's order; what is left over sits on a cycle."""
    by_name = {n.name: n for n in settings.nodes}
    pending = {n.name: set(n.inputs) for n in settings.nodes}
    order: list[DagNodeSettings] = []
    while pending:
        ready = [name for name, parents in pending.items() if not parents]
        if not ready:
            cycle = " -> ".join(sorted(pending))
            raise ConfigError(f"{source}: dag.nodes: the nodes {cycle} form a cycle; a DAG must be acyclic")
        for name in ready:
            order.append(by_name[name])
            del pending[name]
        for parents in pending.values():
            parents.difference_update(ready)
    return order


def _single_sink(settings: DagSettings, source: str) -> str:
    consumed = {parent for n in settings.nodes for parent in n.inputs}
    sinks = [(i, n.name) for i, n in enumerate(settings.nodes) if n.name not in consumed]
    if len(sinks) != 1:
        listed = ", ".join(f"dag.nodes[{i}] ({name!r})" for i, name in sinks)
        raise ConfigError(
            f"{source}: dag.nodes: {listed} are dangling: their outputs are used by no node; "
            "a graph DAG must end in exactly one node"
        )
    return sinks[0][1]


def merge_payloads(parts: list[tuple[str, Payload]], bridge: MessageBridge) -> Payload:
    """Join the outputs of several parent nodes into one input: their tensors, side by side."""
    if len(parts) == 1:
        return parts[0][1]
    tensors: list[Tensor] = []
    seen: dict[str, str] = {}
    for node_name, payload in parts:
        if payload.kind is PayloadKind.MESSAGE:
            payload = bridge.from_message(payload.value)
        if payload.kind is not PayloadKind.TENSORS:
            raise InternalError(f"node {node_name!r} must output tensors to be joined with other nodes")
        for tensor in payload.value:
            if tensor.name and tensor.name in seen:
                raise InternalError(
                    f"nodes {seen[tensor.name]!r} and {node_name!r} both output tensor {tensor.name!r}"
                )
            seen[tensor.name] = node_name
            tensors.append(tensor)
    return Payload.of_tensors(tensors)


class Dag:
    """A validated DAG over model nodes."""

    def __init__(
        self, settings: DagSettings, nodes: Mapping[str, ModelNode], bridge: MessageBridge, source: str
    ) -> None:
        self.name = settings.name
        self.type = settings.type
        self._bridge = bridge
        for i, node in enumerate(settings.nodes):
            if node.model not in nodes:
                raise ConfigError(f"{source}: dag.nodes[{i}].model: {node.model!r} is not a declared model")
        self._models = {n.name: nodes[n.model] for n in settings.nodes}
        if settings.type == "graph":
            _check_inputs_exist(settings, source)
            self._order = _topological_order(settings, source)
            self._sink = _single_sink(settings, source)
        else:
            self._order = list(settings.nodes)
            self._sink = self._order[-1].name

    @property
    def node_names(self) -> list[str]:
        return [n.name for n in self._order]

    @property
    def nodes(self) -> list[ModelNode]:
        return [self._models[n.name] for n in self._order]

    @property
    def entry_nodes(self) -> list[ModelNode]:
        """The nodes that take the request itself."""
        if self.type != "graph":
            return [self._models[self._order[0].name]]
        return [self._models[n.name] for n in self._order if not n.inputs]

    @property
    def exit_node(self) -> ModelNode:
        """The node whose output is the answer."""
        return self._models[self._sink]

    async def run(self, payload: Payload, ctx: GrpsContext) -> Payload:
        if self.type == "graph":
            return await self._run_graph(payload, ctx)
        for node in self._order:
            payload = await self._models[node.name].run(payload, ctx)
        return payload

    async def _run_graph(self, payload: Payload, ctx: GrpsContext) -> Payload:
        tasks: dict[str, asyncio.Task[Payload]] = {}

        async def run_node(node: DagNodeSettings) -> Payload:
            if not node.inputs:
                return await self._models[node.name].run(payload, ctx)
            parts = [(parent, await tasks[parent]) for parent in node.inputs]
            return await self._models[node.name].run(merge_payloads(parts, self._bridge), ctx)

        for node in self._order:  # parents are created before children, so awaits always find them
            tasks[node.name] = asyncio.ensure_future(run_node(node))
        try:
            done, _pending = await asyncio.wait(tasks.values(), return_when=asyncio.FIRST_EXCEPTION)
        finally:
            for task in tasks.values():
                task.cancel()
        # Retrieve every outcome (so none is reported as unretrieved), then raise the first failure.
        await asyncio.gather(*tasks.values(), return_exceptions=True)
        for task in done:
            if not task.cancelled() and task.exception() is not None:
                raise task.exception()  # type: ignore[misc]
        return tasks[self._sink].result()

"""DAG validation at start-up and graph execution with concurrent branches."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from grps_py.core.config import DagNodeSettings, DagSettings
from grps_py.core.dag import Dag
from grps_py.core.errors import ConfigError
from support import BASIC, ServerThread, start_project


@pytest.fixture(scope="module")
def graph_server() -> Iterator[ServerThread]:
    server = start_project(BASIC, BASIC / "conf" / "inference_graph.yml")
    yield server
    server.stop()


def test_graph_branches_run_concurrently_and_join(graph_server: ServerThread) -> None:
    # Each branch waits on a shared two-party barrier: run one after the other, they would time out.
    doc = {
        "gtensors": {"tensors": [{"name": "x", "dtype": "DT_FLOAT32", "shape": [2], "flat_float32": [1, 2]}]}
    }
    reply = httpx.post(f"{graph_server.http_url}/grps/v1/infer/predict", json=doc, timeout=30)
    assert reply.status_code == 200, reply.text
    (out,) = reply.json()["gtensors"]["tensors"]
    assert out["name"] == "sum" and out["flat_float32"] == [110.0, 220.0]


def node(name: str, *inputs: str) -> DagNodeSettings:
    return DagNodeSettings(name=name, model=f"m-{name}", inputs=tuple(inputs))


def build(*nodes: DagNodeSettings, kind: str = "graph") -> Dag:
    models: dict[str, Any] = {n.model: object() for n in nodes}
    return Dag(DagSettings(name="d", type=kind, nodes=nodes), models, bridge=None, source="inference.yml")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("nodes", "fragment"),
    [
        ((node("a"), node("b", "a", "zz")), "'zz' is not a node"),
        ((node("a", "c"), node("b", "a"), node("c", "b")), "cycle"),
        ((node("a"), node("b", "b")), "its own output"),
        ((node("a"), node("b"), node("c", "a")), "dangling"),
    ],
    ids=["unknown-input", "cycle", "self-loop", "dangling"],
)
def test_invalid_graphs_are_refused_at_start_up(nodes: tuple[DagNodeSettings, ...], fragment: str) -> None:
    with pytest.raises(ConfigError) as err:
        build(*nodes)
    assert fragment in str(err.value) and "inference.yml" in str(err.value)


def test_unknown_model_in_a_node_is_refused() -> None:
    with pytest.raises(ConfigError, match="not a declared model"):
        Dag(DagSettings(name="d", nodes=(node("a"),)), {}, bridge=None, source="inference.yml")  # type: ignore[arg-type]


def test_valid_graph_orders_parents_first() -> None:
    dag = build(node("join", "left", "right"), node("left", "root"), node("right", "root"), node("root"))
    order = dag.node_names
    assert order.index("root") < order.index("left") < order.index("join")
    assert order.index("right") < order.index("join")


def test_bad_dag_stops_the_server_from_starting(tmp_path: Path) -> None:
    conf = tmp_path / "inference.yml"
    conf.write_text(
        "models:\n  - {name: echo, version: '1', inferer_type: customized, inferer_name: echo}\n"
        "dag:\n  type: graph\n  name: d\n  nodes:\n"
        "    - {name: a, type: model, model: echo-1, inputs: [b]}\n"
        "    - {name: b, type: model, model: echo-1, inputs: [a]}\n"
    )
    with pytest.raises(ConfigError, match="cycle"):
        start_project(BASIC, conf)

"""server.yml / inference.yml parsing: valid files, path resolution, and one test per error rule."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from grps_py.core.config import (
    BatchingSettings,
    CustomizedPredictHttp,
    DagNodeSettings,
    DagSettings,
    GpuSettings,
    InterfaceSettings,
    LogSettings,
    ServerSettings,
    StreamingCtrl,
    WarmupSettings,
    load_inference_settings,
    load_server_settings,
    parse_inference_settings,
    parse_server_settings,
)
from grps_py.core.errors import ConfigError
from grps_py.core.signature import TensorSpec

SERVER_YML = """
interface:
  framework: http+grpc
  host: 127.0.0.1
  port: 7080,7081
  customized_predict_http:
    path: /custom_predict
    customized_body: true
    streaming_ctrl:
      ctrl_mode: header_param
      ctrl_key: stream
      res_content_type: text/plain
  max_message_bytes: 1048576
max_connections: 500
max_concurrency: 8
gpu:
  devices: [0, 1]
  mem_manager_type: torch
  mem_limit_mib: 4096
  mem_gc_enable: true
  mem_gc_interval: 30
log:
  log_dir: ./logs
  log_backup_count: 3
start_online: false
shutdown_grace_s: 2.5
"""

INFERENCE_YML = """
models:
  - name: my_model
    version: 1.0.0
    device: cuda:0
    inferer_type: torch
    inferer_path: ./data/m.pt
    inferer_args: {threads: 2}
    converter_type: torch
    batching:
      type: dynamic
      max_batch_size: 8
      batch_timeout_us: 500
  - name: custom
    version: 2.0
    device: original
    inp_device: cpu
    inferer_type: customized
    inferer_name: my_inferer
    converter_type: customized
    converter_name: my_conv
    converter_path: ./src/conv.py
    converter_args: {scale: 0.5}
dag:
  type: graph
  name: my_dag
  nodes:
    - name: node-1
      type: model
      model: my_model-1.0.0
    - name: node-2
      model: custom-2.0
      inputs: [node-1]
"""

DELETE = object()


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project dir with the model files; the working directory is somewhere else."""
    project_dir = tmp_path / "project"
    (project_dir / "data").mkdir(parents=True)
    (project_dir / "src").mkdir()
    (project_dir / "conf").mkdir()
    (project_dir / "data" / "m.pt").write_bytes(b"model")
    (project_dir / "src" / "conv.py").write_text("# converter\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    return project_dir


def _write(project_dir: Path, name: str, text: str) -> Path:
    path = project_dir / "conf" / name
    path.write_text(text)
    return path


def _edit(data: Any, dotted: str, value: object) -> Any:
    """A deep copy of `data` with the value at `dotted` ("models.0.name") replaced or deleted."""
    data = copy.deepcopy(data)
    *parents, last = dotted.split(".")
    node = data
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    key: Any = int(last) if isinstance(node, list) else last
    if value is DELETE:
        del node[key]
    else:
        node[key] = value
    return data


# --- valid files -----------------------------------------------------------------------------------


def test_full_server_yml(project: Path) -> None:
    path = _write(project, "server.yml", SERVER_YML)
    settings = load_server_settings(path, project)
    assert settings == ServerSettings(
        interface=InterfaceSettings(
            framework="http+grpc",
            host="127.0.0.1",
            http_port=7080,
            grpc_port=7081,
            customized_predict_http=(
                CustomizedPredictHttp(
                    path="/custom_predict",
                    customized_body=True,
                    streaming_ctrl=StreamingCtrl("header_param", "stream", "text/plain"),
                ),
            ),
            max_message_bytes=1048576,
            predict_streaming_ctrl=StreamingCtrl("header_param", "stream", "text/plain"),
        ),
        max_connections=500,
        max_concurrency=8,
        gpu=GpuSettings(
            devices=(0, 1),
            mem_manager_type="torch",
            mem_limit_mib=4096,
            mem_gc_enable=True,
            mem_gc_interval=30,
        ),
        log=LogSettings(log_dir=project / "logs", log_backup_count=3),
        start_online=False,
        shutdown_grace_s=2.5,
        source=str(path),
    )
    assert settings.log.log_dir is not None and settings.log.log_dir.is_absolute()


def test_empty_server_yml_means_defaults(project: Path) -> None:
    path = _write(project, "server.yml", "")
    assert load_server_settings(path, project) == ServerSettings(source=str(path))


def test_absolute_log_dir_stays(project: Path, tmp_path: Path) -> None:
    data = {"log": {"log_dir": str(tmp_path / "abs_logs")}}
    assert parse_server_settings(data, "server.yml", project).log.log_dir == tmp_path / "abs_logs"


@pytest.mark.parametrize(
    ("interface", "http_port", "grpc_port"),
    [
        ({"port": "7080,7081"}, 7080, 7081),
        ({"port": " 9000 , 9001 "}, 9000, 9001),
        ({"port": "0,0"}, 0, 0),
        ({"framework": "http", "port": 7080}, 7080, None),
        ({"framework": "http", "port": "8000"}, 8000, None),
        ({"framework": "http", "port": 0}, 0, None),
        ({"framework": "http"}, 7080, None),
        ({}, 7080, 7081),
    ],
)
def test_port_forms(interface: dict[str, Any], http_port: int, grpc_port: int | None, project: Path) -> None:
    settings = parse_server_settings({"interface": interface}, "server.yml", project)
    assert (settings.interface.http_port, settings.interface.grpc_port) == (http_port, grpc_port)


def test_full_inference_yml(project: Path) -> None:
    path = _write(project, "inference.yml", INFERENCE_YML)
    settings = load_inference_settings(path, project)
    assert settings.source == str(path)
    torch_model, custom_model = settings.models
    assert (torch_model.name, torch_model.version, torch_model.key) == ("my_model", "1.0.0", "my_model-1.0.0")
    assert (torch_model.device, torch_model.inp_device, torch_model.inferer_type) == ("cuda:0", None, "torch")
    assert torch_model.inferer_path == project / "data" / "m.pt"
    assert torch_model.inferer_args == {"threads": 2}
    assert (torch_model.converter_type, torch_model.converter_path, torch_model.converter_args) == (
        "torch",
        None,
        {},
    )
    assert torch_model.batching == BatchingSettings(type="dynamic", max_batch_size=8, batch_timeout_us=500)
    assert torch_model.index == 0
    assert (custom_model.version, custom_model.key, custom_model.index) == ("2.0", "custom-2.0", 1)
    assert (custom_model.device, custom_model.inp_device) == ("original", "cpu")
    assert (custom_model.inferer_name, custom_model.inferer_path) == ("my_inferer", None)
    assert (custom_model.converter_type, custom_model.converter_name) == ("customized", "my_conv")
    assert custom_model.converter_path == project / "src" / "conv.py"
    assert custom_model.converter_args == {"scale": 0.5}
    assert custom_model.batching == BatchingSettings()
    assert settings.dag == DagSettings(
        name="my_dag",
        type="graph",
        nodes=(
            DagNodeSettings(name="node-1", model="my_model-1.0.0"),
            DagNodeSettings(name="node-2", model="custom-2.0", inputs=("node-1",)),
        ),
    )


def test_inference_defaults_and_absolute_path(project: Path) -> None:
    data = {
        "models": [
            {"name": "m", "version": 3, "inferer_type": "onnx", "inferer_path": str(project / "data/m.pt")}
        ],
        "dag": {"name": "d", "nodes": [{"name": "n", "model": "m-3"}]},
    }
    settings = parse_inference_settings(data, "inference.yml", project)
    model = settings.models[0]
    assert (model.version, model.device, model.converter_type) == ("3", "auto", None)
    assert model.inferer_path == project / "data" / "m.pt"
    assert settings.dag.type == "sequential"


# --- errors ----------------------------------------------------------------------------------------


def test_missing_file(project: Path) -> None:
    path = project / "conf" / "server.yml"
    with pytest.raises(ConfigError, match="not found") as info:
        load_server_settings(path, project)
    assert str(path) in str(info.value)


@pytest.mark.parametrize(
    ("text", "place", "message"),
    [
        (
            "models:\n  - name: m\n    version: 1: 2\n",
            "3:15",
            "mapping values are not allowed here (check the indentation and the ':' on that line)",
        ),
        (
            "models: [a, b\ndag: {",
            "2:4",
            "expected ',' or ']', but got ':' (a '[' opened before this point is not closed)",
        ),
        (
            "models:\n\t- a\n",
            "2:1",
            "found character '\\t' that cannot start any token (indent with spaces, not tabs)",
        ),
        (
            "dag: {name: d]\n",
            "1:14",
            "expected ',' or '}', but got ']' (a '{' opened before this point is not closed)",
        ),
        (
            "dag: 'open\n",
            "2:1",
            "found unexpected end of stream (a quote or bracket opened before this point is not closed)",
        ),
        ("models: *m\n", "1:9", "found undefined alias 'm' (a value starting with '*' must be quoted)"),
        ("models: [1]]\n", "1:12", "expected <block end>, but found ']' (this ']' closes no '[')"),
    ],
)
def test_yaml_syntax_error_is_one_line_with_its_place(
    project: Path, text: str, place: str, message: str
) -> None:
    path = _write(project, "inference.yml", text)
    with pytest.raises(ConfigError) as info:
        load_inference_settings(path, project)
    assert str(info.value) == f"{path}:{place}: YAML syntax error: {message}"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            {"max_conections": 5},
            "max_conections: unknown key; did you mean 'max_connections'? (allowed keys: ",
        ),
        (
            {"interface": {"prot": 1}},
            "interface.prot: unknown key; did you mean 'port'? (allowed keys: framework,",
        ),
        ({"log": {"Level": "INFO"}}, "log.Level: unknown key; did you mean 'level'? (allowed keys: log_dir,"),
        ({"colour": "red"}, "colour: unknown key; allowed keys: interface, max_connections, "),
    ],
)
def test_unknown_keys_suggest_the_close_one(project: Path, data: dict[str, object], message: str) -> None:
    path = _write(project, "server.yml", yaml.safe_dump(data))
    with pytest.raises(ConfigError) as info:
        load_server_settings(path, project)
    assert str(info.value).startswith(f"{path}: {message}")


def test_an_unknown_model_key_suggests_the_close_one(project: Path) -> None:
    data = _edit(yaml.safe_load(INFERENCE_YML), "models.0.inferer_nmae", "x")
    path = _write(project, "inference.yml", yaml.safe_dump(data))
    with pytest.raises(ConfigError) as info:
        load_inference_settings(path, project)
    assert str(info.value).startswith(
        f"{path}: models[0].inferer_nmae: unknown key; did you mean 'inferer_name'? (allowed keys: name,"
    )


def test_empty_inference_yml_needs_models(project: Path) -> None:
    path = _write(project, "inference.yml", "")
    with pytest.raises(ConfigError, match="models: missing") as info:
        load_inference_settings(path, project)
    assert str(path) in str(info.value)


SERVER_ERRORS = [
    pytest.param("max_conections", 5, "max_conections", "unknown key", id="unknown-top-key"),
    pytest.param("interface.prot", 7080, "interface.prot", "unknown key", id="unknown-nested-key"),
    pytest.param(
        "interface.customized_predict_http.streaming_ctrl.ctrl_mod",
        "x",
        "interface.customized_predict_http.streaming_ctrl.ctrl_mod",
        "unknown key",
        id="unknown-deep-key",
    ),
    pytest.param("interface.framework", "grpc", "interface.framework", "'grpc'", id="bad-framework"),
    pytest.param("interface.port", "70a80,7081", "interface.port", "'70a80,7081'", id="bad-port-string"),
    pytest.param("interface.port", 7080, "interface.port", "7080", id="one-port-for-http+grpc"),
    pytest.param("interface.port", "7080,70000", "interface.port", "'7080,70000'", id="port-out-of-range"),
    pytest.param("interface.port", -1, "interface.port", "-1", id="negative-port"),
    pytest.param("interface.port", "7080,7080", "interface.port", "'7080,7080'", id="same-ports"),
    pytest.param("interface.port", [7080, 7081], "interface.port", "[7080, 7081]", id="port-list"),
    pytest.param("interface.host", 127, "interface.host", "127", id="host-not-str"),
    pytest.param(
        "interface.customized_predict_http.path",
        "custom",
        "interface.customized_predict_http.path",
        "'custom'",
        id="path-without-slash",
    ),
    pytest.param(
        "interface.customized_predict_http.path",
        "/v2/models/m/infer",
        "interface.customized_predict_http.path",
        "outside /v2/",
        id="path-in-the-oip-space",
    ),
    pytest.param(
        "interface.customized_predict_http.path",
        "/grps/v1/infer/predict",
        "interface.customized_predict_http.path",
        "outside /grps/v1/",
        id="path-of-the-grps-route",
    ),
    pytest.param(
        "interface.customized_predict_http.methods",
        ["get", "FETCH"],
        "interface.customized_predict_http.methods",
        "'FETCH'",
        id="unknown-method",
    ),
    pytest.param(
        "interface.customized_predict_http.streaming_ctrl.ctrl_mode",
        "cookie",
        "interface.customized_predict_http.streaming_ctrl.ctrl_mode",
        "'cookie'",
        id="bad-ctrl-mode",
    ),
    pytest.param(
        "interface.customized_predict_http.customized_body",
        "yes",
        "interface.customized_predict_http.customized_body",
        "'yes'",
        id="customized-body-not-bool",
    ),
    pytest.param("interface.max_message_bytes", 0, "interface.max_message_bytes", "0", id="max-message-0"),
    pytest.param("gpu.mem_manager_type", "cuda", "gpu.mem_manager_type", "'cuda'", id="bad-mem-manager"),
    pytest.param("gpu.devices", [0, -1], "gpu.devices", "[0, -1]", id="negative-gpu-device"),
    pytest.param("gpu.mem_limit_mib", -2, "gpu.mem_limit_mib", "-2", id="mem-limit-below-minus-1"),
    pytest.param("max_concurrency", -1, "max_concurrency", "-1", id="negative-max-concurrency"),
    pytest.param("max_connections", True, "max_connections", "True", id="bool-as-int"),
    pytest.param("max_connections", "1000", "max_connections", "'1000'", id="str-as-int"),
    pytest.param("log.log_backup_count", -1, "log.log_backup_count", "-1", id="negative-backup-count"),
    pytest.param("start_online", 1, "start_online", "1", id="int-as-bool"),
    pytest.param("shutdown_grace_s", -0.5, "shutdown_grace_s", "-0.5", id="negative-grace"),
    pytest.param("shutdown_grace_s", False, "shutdown_grace_s", "False", id="bool-as-number"),
    pytest.param("gil_switch_interval_us", 0, "gil_switch_interval_us", "0", id="gil-interval-0"),
    pytest.param("event_loop", "trio", "event_loop", "'trio'", id="unknown-event-loop"),
]


@pytest.mark.parametrize("kind", ["auto", "uvloop", "asyncio"])
def test_event_loop_kinds(kind: str, project: Path) -> None:
    path = _write(project, "server.yml", f"event_loop: {kind}\n")
    assert load_server_settings(path, project).event_loop == kind


def test_event_loop_defaults_to_auto(project: Path) -> None:
    assert load_server_settings(_write(project, "server.yml", "{}\n"), project).event_loop == "auto"


@pytest.mark.parametrize(("where", "value", "key", "shown"), SERVER_ERRORS)
def test_server_errors(where: str, value: object, key: str, shown: str, project: Path) -> None:
    data = _edit(yaml.safe_load(SERVER_YML), where, value)
    path = _write(project, "server.yml", yaml.safe_dump(data))
    with pytest.raises(ConfigError) as info:
        load_server_settings(path, project)
    message = str(info.value)
    assert str(path) in message and f": {key}: " in message and shown in message


def test_custom_routes_as_a_list(project: Path) -> None:
    data = {
        "interface": {
            "customized_predict_http": [
                {"path": "/a", "methods": ["post"], "model": "m-1"},
                {"path": "/b", "customized_body": True, "streaming_ctrl": {"ctrl_mode": "body_param"}},
            ]
        }
    }
    iface = parse_server_settings(data, "server.yml", project).interface
    first, second = iface.customized_predict_http
    assert (first.path, first.methods, first.model, first.customized_body) == ("/a", ("POST",), "m-1", False)
    assert (second.path, second.methods) == ("/b", ("GET", "POST"))
    assert second.streaming_ctrl.ctrl_mode == "body_param"
    assert iface.predict_streaming_ctrl == StreamingCtrl()  # a list leaves the built-in route alone


@pytest.mark.parametrize(
    ("routes", "message"),
    [
        ([{"path": "/a"}, {"path": "/a"}], r"customized_predict_http\[1\]\.path: '/a' .*already used"),
        ([{"customized_body": True}], r"customized_predict_http\[0\]\.path: missing"),
    ],
)
def test_custom_route_list_errors(project: Path, routes: list[object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_server_settings({"interface": {"customized_predict_http": routes}}, "server.yml", project)


def test_port_count_must_match_http_framework(project: Path) -> None:
    data = {"interface": {"framework": "http", "port": "7080,7081"}}
    with pytest.raises(ConfigError, match=r"server\.yml: interface\.port: '7080,7081' is not valid"):
        parse_server_settings(data, "server.yml", project)


def test_server_top_level_not_a_mapping(project: Path) -> None:
    with pytest.raises(ConfigError, match=r"server\.yml: \(top level\): \['a'\] is not valid"):
        parse_server_settings(["a"], "server.yml", project)


INFERENCE_ERRORS = [
    pytest.param("extra", 1, "extra", "unknown key", id="unknown-top-key"),
    pytest.param(
        "models.0.infer_type", "torch", "models[0].infer_type", "unknown key", id="unknown-model-key"
    ),
    pytest.param(
        "models.0.batching.size", 4, "models[0].batching.size", "unknown key", id="unknown-deep-key"
    ),
    pytest.param("models.0.name", DELETE, "models[0].name", "missing", id="missing-model-name"),
    pytest.param("models.0.name", "", "models[0].name", "''", id="empty-model-name"),
    pytest.param("models.0.version", DELETE, "models[0].version", "missing", id="missing-version"),
    pytest.param("models.0.device", "tpu", "models[0].device", "'tpu'", id="bad-device"),
    pytest.param("models.0.device", "cuda:x", "models[0].device", "'cuda:x'", id="bad-device-index"),
    pytest.param(
        "models.1.inp_device", DELETE, "models[1].inp_device", "missing", id="original-no-inp-device"
    ),
    pytest.param(
        "models.1.inp_device", "original", "models[1].inp_device", "'original'", id="bad-inp-device"
    ),
    pytest.param("models.0.inferer_type", "keras", "models[0].inferer_type", "'keras'", id="unknown-inferer"),
    pytest.param("models.0.inferer_type", DELETE, "models[0].inferer_type", "missing", id="no-inferer-type"),
    pytest.param(
        "models.1.inferer_name", DELETE, "models[1].inferer_name", "missing", id="customized-no-name"
    ),
    pytest.param("models.0.inferer_path", DELETE, "models[0].inferer_path", "missing", id="torch-no-path"),
    pytest.param(
        "models.0.inferer_path",
        "./data/nope.pt",
        "models[0].inferer_path",
        "'./data/nope.pt'",
        id="path-missing",
    ),
    pytest.param("models.0.inferer_args", [1], "models[0].inferer_args", "[1]", id="args-not-mapping"),
    pytest.param("models.0.converter_type", "pil", "models[0].converter_type", "'pil'", id="bad-converter"),
    pytest.param(
        "models.1.converter_name",
        DELETE,
        "models[1].converter_name",
        "missing",
        id="converter-customized-no-name",
    ),
    pytest.param(
        "models.1.converter_path",
        "/no/such/conv.py",
        "models[1].converter_path",
        "/no/such/conv.py",
        id="conv-path",
    ),
    pytest.param(
        "models.0.batching.type", "static", "models[0].batching.type", "'static'", id="bad-batching"
    ),
    pytest.param(
        "models.0.batching.max_batch_size", 0, "models[0].batching.max_batch_size", "0", id="batch-0"
    ),
    pytest.param(
        "models.0.batching.batch_timeout_us",
        -1,
        "models[0].batching.batch_timeout_us",
        "-1",
        id="timeout-neg",
    ),
    pytest.param("models.0.inputs", "x", "models[0].inputs", "'x'", id="inputs-not-list"),
    pytest.param(
        "models.0.inputs",
        [{"name": "x", "datatype": "FP99"}],
        "models[0].inputs[0].datatype",
        "'FP99'",
        id="bad-datatype",
    ),
    pytest.param(
        "models.0.inputs", [{"name": "x"}], "models[0].inputs[0].datatype", "missing", id="no-datatype"
    ),
    pytest.param(
        "models.0.outputs",
        [{"name": "y", "datatype": "FP32", "shape": [-2]}],
        "models[0].outputs[0].shape",
        "[-2]",
        id="bad-shape",
    ),
    pytest.param(
        "models.0.inputs",
        [{"name": "x", "datatype": "FP32"}, {"name": "x", "datatype": "INT8"}],
        "models[0].inputs[1].name",
        "'x'",
        id="duplicate-input",
    ),
    pytest.param(
        "models.0.inputs",
        [{"name": "x", "datatype": "FP32", "dims": [1]}],
        "models[0].inputs[0].dims",
        "unknown key",
        id="tensor-unknown-key",
    ),
    pytest.param("models.0.instances", 0, "models[0].instances", "0", id="instances-0"),
    pytest.param("models.0.devices", [-1], "models[0].devices", "[-1]", id="bad-devices"),
    pytest.param(
        "models.0.batching.preferred_batch_size",
        [4, 64],
        "models[0].batching.preferred_batch_size",
        "[4, 64]",
        id="preferred-over-max",
    ),
    pytest.param(
        "models.0.batching.max_queue_size", 0, "models[0].batching.max_queue_size", "0", id="queue-0"
    ),
    pytest.param(
        "models.0.default_timeout_us", -5, "models[0].default_timeout_us", "-5", id="timeout-neg-model"
    ),
    pytest.param(
        "models.0.default_priority_level", 3, "models[0].default_priority_level", "3", id="level-over-levels"
    ),
    pytest.param(
        "models.0.warmup", {"kind": "noise"}, "models[0].warmup.kind", "'noise'", id="bad-warmup-kind"
    ),
    pytest.param(
        "models.0.warmup", {"kind": "zeros"}, "models[0].warmup", "'zeros'", id="warmup-needs-inputs"
    ),
    pytest.param(
        "models.0.warmup", {"kind": "file"}, "models[0].warmup.file", "missing", id="warmup-file-missing"
    ),
    pytest.param("models", [], "models", "[]", id="empty-models"),
    pytest.param("models", DELETE, "models", "missing", id="no-models"),
    pytest.param("models.1", "custom", "models[1]", "'custom'", id="model-not-mapping"),
    pytest.param("dag", DELETE, "dag", "missing", id="no-dag"),
    pytest.param("dag.type", "tree", "dag.type", "'tree'", id="bad-dag-type"),
    pytest.param("dag.name", DELETE, "dag.name", "missing", id="no-dag-name"),
    pytest.param("dag.nodes", [], "dag.nodes", "[]", id="empty-nodes"),
    pytest.param("dag.nodes.0.model", "nope-1", "dag.nodes[0].model", "'nope-1'", id="unknown-model"),
    pytest.param("dag.nodes.0.model", DELETE, "dag.nodes[0].model", "missing", id="node-without-model"),
    pytest.param("dag.nodes.1.name", "node-1", "dag.nodes[1].name", "'node-1'", id="duplicate-node"),
    pytest.param("dag.type", "sequential", "dag.nodes[1].inputs", "['node-1']", id="inputs-on-sequential"),
    pytest.param("dag.nodes.0.type", "merger", "dag.nodes[0].type", "'merger'", id="node-type-not-model"),
    pytest.param("dag.nodes.1.inputs", "node-1", "dag.nodes[1].inputs", "'node-1'", id="inputs-not-list"),
]


@pytest.mark.parametrize(("where", "value", "key", "shown"), INFERENCE_ERRORS)
def test_inference_errors(where: str, value: object, key: str, shown: str, project: Path) -> None:
    data = _edit(yaml.safe_load(INFERENCE_YML), where, value)
    path = _write(project, "inference.yml", yaml.safe_dump(data))
    with pytest.raises(ConfigError) as info:
        load_inference_settings(path, project)
    message = str(info.value)
    assert str(path) in message and f": {key}: " in message and shown in message


def test_declared_tensors(project: Path) -> None:
    data = yaml.safe_load(INFERENCE_YML)
    data["models"][0]["inputs"] = [
        {"name": "x", "datatype": "FP32", "shape": [-1, 4]},
        {"name": "t", "datatype": "BYTES"},
    ]
    data["models"][0]["outputs"] = [{"name": "y", "datatype": "BF16", "shape": []}]
    model = parse_inference_settings(data, "inference.yml", project).models[0]
    assert model.inputs == (TensorSpec("x", "FP32", (-1, 4)), TensorSpec("t", "BYTES", None))
    assert model.outputs == (TensorSpec("y", "BF16", ()),)


def test_scheduling_keys(project: Path) -> None:
    data = yaml.safe_load(INFERENCE_YML)
    data["models"][0].update(
        instances=2,
        devices=[0, 1],
        default_timeout_us=5000,
        priority_levels=3,
        default_priority_level=2,
        priority_aging_us=1000,
        inputs=[{"name": "x", "datatype": "FP32", "shape": [-1, 4]}],
        warmup={"kind": "random", "batch_size": 4, "count": 2},
    )
    data["models"][0]["batching"] = {
        "type": "dynamic",
        "preferred_batch_size": [8, 4, 8],
        "max_queue_size": 7,
    }
    model = parse_inference_settings(data, "inference.yml", project).models[0]
    assert (model.instances, model.devices, model.default_timeout_us) == (2, (0, 1), 5000)
    assert (model.priority_levels, model.default_priority_level, model.priority_aging_us) == (3, 2, 1000)
    assert model.batching.preferred_batch_size == (4, 8) and model.batching.max_queue_size == 7
    assert model.warmup == WarmupSettings(kind="random", batch_size=4, count=2)
    defaults = parse_inference_settings(yaml.safe_load(INFERENCE_YML), "inference.yml", project).models[0]
    assert defaults.batching.max_queue_size == 1024 and defaults.instances == 1 and defaults.warmup is None


def test_duplicate_model(project: Path) -> None:
    data = yaml.safe_load(INFERENCE_YML)
    data["models"][1] = dict(data["models"][0])
    with pytest.raises(ConfigError) as info:
        parse_inference_settings(data, "inference.yml", project)
    message = str(info.value)
    assert "inference.yml: models[1]: 'my_model-1.0.0' is not valid" in message
    assert "models[0]" in message.split("expected", 1)[1]


def test_unknown_dag_model_lists_declared_models(project: Path) -> None:
    data = _edit(yaml.safe_load(INFERENCE_YML), "dag.nodes.0.model", "my_model")
    with pytest.raises(ConfigError, match=r"dag\.nodes\[0\]\.model: 'my_model' is not valid") as info:
        parse_inference_settings(data, "inference.yml", project)
    assert "'my_model-1.0.0', 'custom-2.0'" in str(info.value)


def test_missing_inferer_path_names_resolved_path(project: Path) -> None:
    data = _edit(yaml.safe_load(INFERENCE_YML), "models.0.inferer_path", "data/nope.pt")
    with pytest.raises(ConfigError) as info:
        parse_inference_settings(data, "inference.yml", project)
    assert str(project / "data" / "nope.pt") in str(info.value)


def test_warmup_without_declared_inputs_needs_a_model_file_that_states_them(project: Path) -> None:
    data = _edit(yaml.safe_load(INFERENCE_YML), "models.0.warmup", {"kind": "zeros"})
    with pytest.raises(ConfigError, match="declared `inputs` to build samples from"):
        parse_inference_settings(data, "inference.yml", project)  # TorchScript states no signature
    for backend in ("onnx", "tensorflow", "tensorrt"):
        model = parse_inference_settings(
            _edit(data, "models.0.inferer_type", backend), "i.yml", project
        ).models[0]
        assert model.warmup is not None and not model.inputs


def test_tensorflow_and_tensorrt_are_inferer_types(project: Path) -> None:
    data = _edit(yaml.safe_load(INFERENCE_YML), "models.0.inferer_type", "tensorflow")
    assert parse_inference_settings(data, "inference.yml", project).models[0].inferer_type == "tensorflow"
    data = _edit(yaml.safe_load(INFERENCE_YML), "models.0.inferer_type", "tensorrt")
    data = _edit(data, "models.0.inferer_args", {"streams": 3})
    data = _edit(data, "models.0.instances", 2)
    model = parse_inference_settings(data, "inference.yml", project).models[0]
    assert model.inferer_type == "tensorrt" and model.instances == 6  # 3 contexts on each of 2 instances
    for streams in (0, 33, "2", True):
        with pytest.raises(ConfigError) as info:
            parse_inference_settings(
                _edit(data, "models.0.inferer_args", {"streams": streams}), "i.yml", project
            )
        assert "models[0].inferer_args" in str(info.value) and "streams: an integer from 1 to 32" in str(
            info.value
        )


def test_log_and_metrics_keys(project: Path) -> None:
    data = {
        "log": {"format": "json", "level": "debug", "access": False, "log_backup_count": 3},
        "metrics": {"port": 0},
    }
    settings = parse_server_settings(data, "server.yml", project)
    assert (settings.log.format, settings.log.level, settings.log.access) == ("json", "DEBUG", False)
    assert settings.log.log_backup_count == 3
    assert settings.metrics.port == 0
    defaults = parse_server_settings({}, "server.yml", project)
    assert (defaults.log.format, defaults.log.level, defaults.log.access) == ("text", "INFO", True)
    assert defaults.metrics.port is None


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"log": {"format": "xml"}}, r"log\.format: 'xml'"),
        ({"log": {"level": "loud"}}, r"log\.level: 'loud'"),
        ({"log": {"access": "no"}}, r"log\.access: 'no'"),
        ({"metrics": {"port": 70000}}, r"metrics\.port: 70000"),
        ({"metrics": {"path": "/m"}}, r"metrics\.path: unknown key"),
    ],
)
def test_log_and_metrics_errors(project: Path, data: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_server_settings(data, "server.yml", project)


def test_protection_keys(project: Path, tmp_path: Path) -> None:
    cert, key = tmp_path / "c.pem", tmp_path / "k.pem"
    cert.write_text("x")
    key.write_text("x")
    data = {
        "limits": {"http_body_bytes": 2048, "tensors": 4, "json_depth": 8, "idle_timeout_s": 5},
        "security": {"admin_token": "adm", "inference_tokens": ["a", "b"]},
        "tls": {"cert_file": str(cert), "key_file": str(key)},
    }
    settings = parse_server_settings(data, "server.yml", project)
    assert (settings.limits.http_body_bytes, settings.limits.grpc_message_bytes) == (2048, None)
    limits = settings.limits
    assert (limits.tensors, limits.json_depth, limits.idle_timeout_s) == (4, 8, 5.0)
    assert settings.security.admin_token == "adm" and settings.security.inference_tokens == ("a", "b")
    assert settings.tls.enabled and settings.tls.cert_file == cert and settings.tls.client_ca_file is None
    assert not parse_server_settings({}, "server.yml", project).tls.enabled


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"limits": {"tensors": 0}}, r"limits\.tensors: 0"),
        ({"limits": {"body": 1}}, r"limits\.body: unknown key"),
        ({"security": {"inference_tokens": "abc"}}, r"security\.inference_tokens: 'abc'"),
        ({"tls": {"cert_file": "missing.pem", "key_file": "k.pem"}}, r"tls\.cert_file: 'missing\.pem'"),
    ],
)
def test_protection_errors(project: Path, data: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_server_settings(data, "server.yml", project)

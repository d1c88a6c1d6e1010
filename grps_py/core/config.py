"""Typed settings for conf/server.yml and conf/inference.yml (grps's keys, unchanged).

Config is parsed once into frozen dataclasses; units are in the names. Relative paths in either
file resolve against the project directory (as in grps), never against the working directory.
Every error is a ConfigError naming the file, the key, the bad value and what is allowed.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from grps_py.core import backend_registry
from grps_py.core.backend_registry import CONVERTER_TYPES, CUSTOMIZED, INFERER_TYPES
from grps_py.core.datatypes import DATATYPE_NAMES
from grps_py.core.generation_config import (
    GENERATION_KEYS,
    OPENAI_KEYS,
    SERVER_OPENAI_KEYS,
    GenerationSettings,
    OpenAISettings,
    parse_generation,
    parse_openai,
    parse_openai_prefix,
)
from grps_py.core.protection import (
    LIMITS_KEYS,
    SECURITY_KEYS,
    TLS_KEYS,
    LimitsSettings,
    SecuritySettings,
    TlsSettings,
    parse_limits,
    parse_security,
    parse_tls,
)
from grps_py.core.sequence import SEQUENCE_KEYS, SequenceSettings, parse_sequence_batching
from grps_py.core.signature import TensorSpec
from grps_py.core.yaml_fields import (
    Fields,
    check_unique,
    is_int,
    is_number,
    one_of,
    read_yaml,
    resolve_path,
)

GIB = 1 << 30


@dataclass(frozen=True)
class StreamingCtrl:
    ctrl_mode: str = "query_param"  # query_param | header_param | body_param
    ctrl_key: str = "streaming"
    res_content_type: str = "application/octet-stream"


@dataclass(frozen=True)
class CustomizedPredictHttp:
    path: str | None = None  # an extra predict route; None: the entry only sets streaming_ctrl (grps)
    customized_body: bool = False  # True: model code parses the raw body and builds the answer
    streaming_ctrl: StreamingCtrl = field(default_factory=StreamingCtrl)
    methods: tuple[str, ...] = ("GET", "POST")
    model: str = ""  # the model (name-version) the route serves unless ?model= names one; "": the DAG


@dataclass(frozen=True)
class InterfaceSettings:
    framework: str = "http+grpc"  # http | http+grpc
    host: str = "0.0.0.0"
    http_port: int = 7080
    grpc_port: int | None = 7081  # None when framework is http
    # One entry as grps writes it (a mapping), or several (a list): grps-py's addition.
    customized_predict_http: tuple[CustomizedPredictHttp, ...] = ()
    max_message_bytes: int = GIB  # gRPC message and HTTP body limit
    # /grps/v1/infer/predict's streaming control: grps's single customized_predict_http mapping sets
    # it too; a list of routes leaves it at the default (each route has its own).
    predict_streaming_ctrl: StreamingCtrl = field(default_factory=StreamingCtrl)


@dataclass(frozen=True)
class GpuSettings:
    devices: tuple[int, ...] = ()
    mem_manager_type: str = "none"  # torch | tensorflow | none
    mem_limit_mib: int = -1  # -1: no limit
    mem_gc_enable: bool = False
    mem_gc_interval: int = 60  # seconds


@dataclass(frozen=True)
class LogSettings:
    log_dir: Path | None = None  # None: log to stderr only
    log_backup_count: int = 7  # daily files kept besides the current one
    format: str = "text"  # text | json (one JSON object per line)
    level: str = "INFO"  # DEBUG | INFO | WARNING | ERROR
    access: bool = True  # one access-log line per request (at INFO)


@dataclass(frozen=True)
class MetricsSettings:
    port: int | None = None  # None: /metrics on the HTTP port only; N: also on its own port (0: free)
    triton_names: bool = False  # also export Triton's metric names (nv_inference_*), for its dashboards


@dataclass(frozen=True)
class ServerSettings:
    interface: InterfaceSettings = field(default_factory=InterfaceSettings)
    max_connections: int = 1000
    max_concurrency: int = 32
    gpu: GpuSettings | None = None
    log: LogSettings = field(default_factory=LogSettings)
    metrics: MetricsSettings = field(default_factory=MetricsSettings)
    limits: LimitsSettings = field(default_factory=LimitsSettings)
    security: SecuritySettings = field(default_factory=SecuritySettings)
    tls: TlsSettings = field(default_factory=TlsSettings)
    start_online: bool = True
    shutdown_grace_s: float = 10.0
    # Python's GIL switch interval. Model threads hand the GIL back and forth with the event loop;
    # the default 5 ms lets a busy loop hold a finished model thread back for milliseconds.
    gil_switch_interval_us: int = 500
    # auto: uvloop when installed (less CPU per request, bench/compare.py); uvloop; asyncio
    event_loop: str = "auto"
    # How models change at runtime (Triton's model control modes): none, explicit (the repository API
    # only) or poll (inference.yml and its model files are watched every repository_poll_s).
    model_control: str = "none"
    repository_poll_s: float = 5.0
    # Worker processes sharing the ports (grps_py/workers): 1 serves in this process.
    workers: int = 1
    openai_prefix: str = ""  # the OpenAI-compatible routes' path prefix (KServe's: /openai)
    source: str = "<server.yml>"


DEFAULT_MAX_QUEUE_SIZE = 1024


@dataclass(frozen=True)
class BatchingSettings:
    type: str = "none"  # none | dynamic
    max_batch_size: int = 16  # rows along dim 0
    batch_timeout_us: int = 1000  # counted from the oldest request waiting
    preferred_batch_size: tuple[int, ...] = ()  # send as soon as a batch reaches one of these sizes
    max_queue_size: int = DEFAULT_MAX_QUEUE_SIZE  # requests waiting for the model (batched or not)


@dataclass(frozen=True)
class WarmupSettings:
    kind: str = "zeros"  # zeros | random | file
    batch_size: int = 1
    count: int = 1
    file: Path | None = None  # kind file: an .npz with one array per input name


@dataclass(frozen=True)
class ModelSettings:
    name: str
    version: str
    inferer_type: str  # backend_registry.INFERER_TYPES
    device: str = "auto"  # cpu | cuda | cuda:N | gpu | gpu:N | original | auto
    inp_device: str | None = None  # with device `original`: where inputs go
    inferer_name: str | None = None
    inferer_path: Path | None = None
    inferer_args: dict[str, Any] = field(default_factory=dict)
    converter_type: str | None = None  # backend_registry.CONVERTER_TYPES; None: the inferer's default
    converter_name: str | None = None
    converter_path: Path | None = None
    converter_args: dict[str, Any] = field(default_factory=dict)
    batching: BatchingSettings = field(default_factory=BatchingSettings)
    inputs: tuple[TensorSpec, ...] = ()  # declared tensors (OIP datatypes, -1 for a variable dim)
    outputs: tuple[TensorSpec, ...] = ()
    instances: int = 1  # worker instances (per device when `devices` is given)
    devices: tuple[int, ...] = ()  # GPU indices: `instances` instances on each
    default_timeout_us: int = 0  # 0: no timeout unless the request sets one
    priority_levels: int = 1
    default_priority_level: int = 1  # 1 is the highest
    priority_aging_us: int = 100_000  # a waiting request moves up one level per this much waiting
    warmup: WarmupSettings | None = None
    # The model may answer a request with any number of streamed messages (Triton's decoupled models):
    # what OIP's model config tells clients, so that they call it over a stream.
    streaming: bool = False
    sequence_batching: SequenceSettings | None = None  # a stateful model's sequences (core/sequence.py)
    generation: GenerationSettings | None = None  # inferer_type generative: its continuous batching
    openai: OpenAISettings | None = None  # served by the OpenAI-compatible routes under this name
    index: int = 0  # position in `models`, for error messages

    @property
    def key(self) -> str:
        return f"{self.name}-{self.version}"


@dataclass(frozen=True)
class DagNodeSettings:
    name: str
    model: str  # name-version of a declared model
    type: str = "model"
    inputs: tuple[str, ...] = ()  # graph DAGs: the nodes whose outputs this node takes


@dataclass(frozen=True)
class DagSettings:
    name: str
    type: str = "sequential"  # sequential | graph
    nodes: tuple[DagNodeSettings, ...] = ()


@dataclass(frozen=True)
class InferenceSettings:
    models: tuple[ModelSettings, ...]
    dag: DagSettings
    source: str = "<inference.yml>"
    project_dir: Path = Path()  # relative paths in a model entry given later (a repository load) resolve here


# ---------------------------------------------------------------------------------------------------
# Parsing and validation

_ADDED_SERVER_KEYS = (
    "metrics",
    "limits",
    "security",
    "tls",
    "start_online",
    "shutdown_grace_s",
    "gil_switch_interval_us",
    "event_loop",
    "model_control",
    "repository_poll_s",
    "workers",
    "openai",
)  # grps-py's additions to grps's keys
_SERVER_KEYS = ("interface", "max_connections", "max_concurrency", "gpu", "log", *_ADDED_SERVER_KEYS)
_INTERFACE_KEYS = ("framework", "host", "port", "customized_predict_http", "max_message_bytes")
_CUSTOM_HTTP_KEYS = ("path", "customized_body", "streaming_ctrl", "methods", "model")
_STREAMING_KEYS = ("ctrl_mode", "ctrl_key", "res_content_type")
_GPU_KEYS = ("devices", "mem_manager_type", "mem_limit_mib", "mem_gc_enable", "mem_gc_interval")
_EVENT_LOOPS = ("auto", "uvloop", "asyncio")
MODEL_CONTROL_MODES = ("none", "explicit", "poll")
MIN_POLL_S = 0.1  # a tighter loop would only re-read files
_LOG_KEYS = ("log_dir", "log_backup_count", "format", "level", "access")
_LOG_FORMATS = ("text", "json")
_LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
_METRICS_KEYS = ("port", "triton_names")
_INFERENCE_KEYS = ("models", "dag")
MAX_STREAMS = 32  # TensorRT execution contexts per device (`inferer_args.streams`)
_INFERER_KEYS = ("inferer_type", "inferer_name", "inferer_path", "inferer_args")
_CONVERTER_KEYS = ("converter_type", "converter_name", "converter_path", "converter_args")
_MODEL_KEYS = (
    "name",
    "version",
    "device",
    "inp_device",
    *_INFERER_KEYS,
    *_CONVERTER_KEYS,
    "batching",
    "inputs",
    "outputs",
    "instances",
    "devices",
    "default_timeout_us",
    "priority_levels",
    "default_priority_level",
    "priority_aging_us",
    "warmup",
    "streaming",
    "sequence_batching",
    "generation",
    "openai",
)
_WARMUP_KEYS = ("kind", "batch_size", "count", "file")
_WARMUP_KINDS = ("zeros", "random", "file")
_TENSOR_KEYS = ("name", "datatype", "shape", "label_filename")
_BATCHING_KEYS = ("type", "max_batch_size", "batch_timeout_us", "preferred_batch_size", "max_queue_size")
_DAG_KEYS = ("type", "name", "nodes")
_NODE_KEYS = ("name", "type", "model", "inputs")

_FRAMEWORKS = ("http", "http+grpc")
_CTRL_MODES = ("query_param", "header_param", "body_param")
_HTTP_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
# URL spaces of the built-in APIs: a custom route there would shadow or be shadowed by one of ours.
RESERVED_PATH_PREFIXES = ("/grps/v1/", "/v2/")
_MEM_MANAGERS = ("torch", "tensorflow", "none")
_BATCHING_TYPES = ("none", "dynamic")
_DAG_TYPES = ("sequential", "graph")
_NODE_TYPES = ("model",)
_DEVICE_RE = re.compile(r"cpu|cuda|gpu|original|auto|(?:cuda|gpu):[0-9]+")
_INP_DEVICE_RE = re.compile(r"cpu|cuda|gpu|(?:cuda|gpu):[0-9]+")
_PORT_RE = re.compile(r"\s*[0-9]{1,5}\s*")
_DEVICE_EXPECTED = "cpu, cuda, cuda:N, gpu, gpu:N, original or auto"
_INP_DEVICE_EXPECTED = "cpu, cuda, cuda:N, gpu or gpu:N"


# --- server.yml ------------------------------------------------------------------------------------


def load_server_settings(path: Path, project_dir: Path) -> ServerSettings:
    """Read and validate server.yml. An empty file means all defaults."""
    return parse_server_settings(read_yaml(path), str(path), project_dir)


def parse_server_settings(data: object, source: str, project_dir: Path) -> ServerSettings:
    """Validate already-loaded server.yml data; `source` names the file in messages."""
    fields = Fields(data, source, "", _SERVER_KEYS)
    defaults = ServerSettings()
    gpu = fields.get("gpu")
    return ServerSettings(
        interface=_parse_interface(fields.section("interface", _INTERFACE_KEYS)),
        max_connections=fields.integer("max_connections", defaults.max_connections, 1),
        max_concurrency=fields.integer("max_concurrency", defaults.max_concurrency, 1),
        gpu=None if gpu is None else _parse_gpu(fields.section("gpu", _GPU_KEYS)),
        log=_parse_log(fields.section("log", _LOG_KEYS), project_dir),
        metrics=_parse_metrics(fields.section("metrics", _METRICS_KEYS)),
        limits=parse_limits(fields.section("limits", LIMITS_KEYS)),
        security=parse_security(fields.section("security", SECURITY_KEYS)),
        tls=parse_tls(fields.section("tls", TLS_KEYS), project_dir),
        start_online=fields.boolean("start_online", defaults.start_online),
        shutdown_grace_s=fields.number("shutdown_grace_s", defaults.shutdown_grace_s, 0),
        gil_switch_interval_us=fields.integer("gil_switch_interval_us", defaults.gil_switch_interval_us, 1),
        event_loop=fields.opt_text("event_loop", _EVENT_LOOPS) or defaults.event_loop,
        model_control=fields.opt_text("model_control", MODEL_CONTROL_MODES) or defaults.model_control,
        repository_poll_s=fields.number("repository_poll_s", defaults.repository_poll_s, MIN_POLL_S),
        workers=_parse_workers(fields),
        openai_prefix=parse_openai_prefix(fields.section("openai", SERVER_OPENAI_KEYS)),
        source=source,
    )


MAX_WORKERS = 256


def usable_cores() -> int:
    """The cores this process may use: its CPU affinity (a container's cpuset), and no more than its
    cgroup's CPU quota allows (a Kubernetes CPU limit), rounded up."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    quota = _cgroup_cpu_quota()
    return max(1, min(cores, quota)) if quota else cores


def _cgroup_cpu_quota(path: Path = Path("/sys/fs/cgroup/cpu.max")) -> int | None:
    """cgroup v2's `cpu.max` ("QUOTA PERIOD", or "max PERIOD" for none) as whole cores; None: no limit."""
    try:
        quota, period = path.read_text().split()[:2]
    except (OSError, ValueError):
        return None
    if quota == "max" or not quota.isdigit() or not period.isdigit() or int(period) == 0:
        return None
    return -(-int(quota) // int(period))


def _parse_workers(fields: Fields) -> int:
    """`workers`: a count, or `auto` for one per core this process may run on."""
    value = fields.get("workers")
    if value is None:
        return 1
    if value == "auto":
        return max(1, min(MAX_WORKERS, usable_cores()))
    if is_int(value) and 1 <= value <= MAX_WORKERS:
        return value
    fields.fail("workers", value, f"an integer from 1 to {MAX_WORKERS}, or 'auto' (one per core)")


def _parse_interface(fields: Fields) -> InterfaceSettings:
    defaults = InterfaceSettings()
    framework = fields.opt_text("framework", _FRAMEWORKS) or defaults.framework
    http_port, grpc_port = _parse_ports(fields, framework)
    custom_routes = _parse_custom_routes(fields)
    single = not isinstance(fields.get("customized_predict_http"), list)
    return InterfaceSettings(
        framework=framework,
        host=fields.opt_text("host") or defaults.host,
        http_port=http_port,
        grpc_port=grpc_port,
        customized_predict_http=custom_routes,
        predict_streaming_ctrl=custom_routes[0].streaming_ctrl
        if custom_routes and single
        else StreamingCtrl(),
        max_message_bytes=fields.integer("max_message_bytes", defaults.max_message_bytes, 1),
    )


def _parse_ports(fields: Fields, framework: str) -> tuple[int, int | None]:
    """`port` is "HTTP,GRPC" for http+grpc and "HTTP" (or an int) for http; 0 picks a free port."""
    value = fields.get("port")
    count = 2 if framework == "http+grpc" else 1
    if value is None:
        defaults = InterfaceSettings()
        return defaults.http_port, defaults.grpc_port if count == 2 else None
    shape = '"HTTP,GRPC", e.g. "7080,7081"' if count == 2 else "one HTTP port, e.g. 7080"
    expected = f"{shape} when interface.framework is {framework!r}; each port 0..65535"
    ports: list[int] = []
    if is_int(value):
        ports = [value]
    elif isinstance(value, str) and all(_PORT_RE.fullmatch(part) for part in value.split(",")):
        ports = [int(part) for part in value.split(",")]
    if len(ports) != count or not all(0 <= port <= 65535 for port in ports):
        fields.fail("port", value, expected)
    if count == 2 and ports[0] == ports[1] != 0:
        fields.fail("port", value, "two different ports (or 0 to pick free ones)")
    return ports[0], ports[1] if count == 2 else None


def _parse_custom_routes(fields: Fields) -> tuple[CustomizedPredictHttp, ...]:
    """`customized_predict_http` is one mapping (grps) or a list of them, each with its own path."""
    name = "customized_predict_http"
    value = fields.get(name)
    if value is None:
        return ()
    if not isinstance(value, list):
        return (_parse_custom_http(fields.section(name, _CUSTOM_HTTP_KEYS), path_required=False),)
    routes = [_parse_custom_http(entry) for entry in fields.items(name, _CUSTOM_HTTP_KEYS)]
    check_unique(
        fields.source,
        [(f"{fields.key(name)}[{i}].path", route.path or "") for i, route in enumerate(routes)],
        "path",
    )
    return tuple(routes)


def _parse_custom_http(fields: Fields, path_required: bool = True) -> CustomizedPredictHttp:
    path = fields.opt_text("path")
    if path is None and path_required:
        fields.missing("path", 'a URL path starting with "/"')
    if path is not None:
        _check_custom_path(fields, path)
    ctrl = fields.section("streaming_ctrl", _STREAMING_KEYS)
    defaults = StreamingCtrl()
    streaming_ctrl = StreamingCtrl(
        ctrl_mode=ctrl.opt_text("ctrl_mode", _CTRL_MODES) or defaults.ctrl_mode,
        ctrl_key=ctrl.opt_text("ctrl_key") or defaults.ctrl_key,
        res_content_type=ctrl.opt_text("res_content_type") or defaults.res_content_type,
    )
    methods = tuple(method.upper() for method in fields.text_list("methods"))
    if any(method not in _HTTP_METHODS for method in methods):
        fields.fail("methods", list(methods), f"a list of HTTP methods from {', '.join(_HTTP_METHODS)}")
    return CustomizedPredictHttp(
        path=path,
        customized_body=fields.boolean("customized_body", False),
        streaming_ctrl=streaming_ctrl,
        methods=methods or CustomizedPredictHttp.methods,
        model=fields.opt_text("model") or "",
    )


def _check_custom_path(fields: Fields, path: str) -> None:
    if not path.startswith("/") or any(ch.isspace() or ch in "?#" for ch in path):
        fields.fail("path", path, 'a URL path starting with "/", without spaces, "?" or "#"')
    for prefix in RESERVED_PATH_PREFIXES:
        if path.startswith(prefix) or path == prefix.rstrip("/"):
            fields.fail("path", path, f"a path outside {prefix} (the built-in API's routes live there)")


def _parse_gpu(fields: Fields) -> GpuSettings:
    defaults = GpuSettings()
    return GpuSettings(
        devices=fields.int_list("devices", 0),
        mem_manager_type=fields.opt_text("mem_manager_type", _MEM_MANAGERS) or defaults.mem_manager_type,
        mem_limit_mib=fields.integer("mem_limit_mib", defaults.mem_limit_mib, -1),
        mem_gc_enable=fields.boolean("mem_gc_enable", defaults.mem_gc_enable),
        mem_gc_interval=fields.integer("mem_gc_interval", defaults.mem_gc_interval, 1),
    )


def _parse_log(fields: Fields, project_dir: Path) -> LogSettings:
    log_dir = fields.opt_text("log_dir")
    defaults = LogSettings()
    level = (fields.opt_text("level") or defaults.level).upper()  # grps's files write "info" too
    if level not in _LOG_LEVELS:
        fields.fail("level", fields.get("level"), one_of(_LOG_LEVELS))
    return LogSettings(
        log_dir=None if log_dir is None else resolve_path(log_dir, project_dir),
        log_backup_count=fields.integer("log_backup_count", defaults.log_backup_count, 0),
        format=fields.opt_text("format", _LOG_FORMATS) or defaults.format,
        level=level,
        access=fields.boolean("access", defaults.access),
    )


def _parse_metrics(fields: Fields) -> MetricsSettings:
    port = fields.get("port")
    if port is not None and (not is_int(port) or not 0 <= port <= 65535):
        fields.fail("port", port, "a port number (0 picks a free one)")
    return MetricsSettings(port=port, triton_names=fields.boolean("triton_names", False))


# --- inference.yml ---------------------------------------------------------------------------------


def load_inference_settings(path: Path, project_dir: Path) -> InferenceSettings:
    """Read and validate inference.yml; `models` and `dag` are required."""
    return parse_inference_settings(read_yaml(path), str(path), project_dir)


def parse_inference_settings(data: object, source: str, project_dir: Path) -> InferenceSettings:
    """Validate already-loaded inference.yml data. DAG topology is checked by the DAG builder."""
    fields = Fields(data, source, "", _INFERENCE_KEYS)
    items = fields.items("models", _MODEL_KEYS)
    models = tuple(_parse_model(item, i, project_dir) for i, item in enumerate(items))
    check_unique(source, [(f"models[{i}]", model.key) for i, model in enumerate(models)], "name-version")
    served = [
        (f"models[{i}].openai.served_name", m.openai.served_name) for i, m in enumerate(models) if m.openai
    ]
    check_unique(source, served, "served_name")
    if fields.get("dag") is None:
        fields.missing("dag", "a mapping with keys " + ", ".join(_DAG_KEYS))
    dag = _parse_dag(fields.section("dag", _DAG_KEYS), tuple(model.key for model in models))
    return InferenceSettings(models=models, dag=dag, source=source, project_dir=project_dir)


def parse_model_entry(data: object, source: str, project_dir: Path) -> ModelSettings:
    """One entry of inference.yml's `models`, given on its own (a repository load's `parameters.config`)."""
    return _parse_model(Fields(data, source, "", _MODEL_KEYS), 0, project_dir)


def _parse_model(fields: Fields, index: int, project_dir: Path) -> ModelSettings:
    name = fields.req_text("name")
    version = _parse_version(fields)
    device, inp_device = _parse_device(fields)
    inferer_type = _parse_inferer_type(fields)
    user_inferer = backend_registry.backend(inferer_type).user_code
    inferer_name = fields.opt_text("inferer_name")
    if user_inferer and inferer_name is None:
        fields.missing("inferer_name", f"the registered inferer name when inferer_type is '{inferer_type}'")
    needs_path = None if user_inferer else f"to the {inferer_type} model file"
    converter_type = fields.opt_text("converter_type", CONVERTER_TYPES)
    converter_name = fields.opt_text("converter_name")
    if converter_type == CUSTOMIZED and converter_name is None:
        fields.missing(
            "converter_name", f"the registered converter name when converter_type is '{CUSTOMIZED}'"
        )
    settings = ModelSettings(
        name=name,
        version=version,
        inferer_type=inferer_type,
        device=device,
        inp_device=inp_device,
        inferer_name=inferer_name,
        inferer_path=fields.file_path("inferer_path", project_dir, needs_path),
        inferer_args=fields.mapping("inferer_args"),
        converter_type=converter_type,
        converter_name=converter_name,
        converter_path=fields.file_path("converter_path", project_dir),
        converter_args=fields.mapping("converter_args"),
        batching=_parse_batching(fields.section("batching", _BATCHING_KEYS)),
        inputs=_parse_tensors(fields, "inputs", project_dir),
        outputs=_parse_tensors(fields, "outputs", project_dir),
        **_parse_scheduling(fields, project_dir, inferer_type),
        index=index,
    )
    if backend_registry.backend(inferer_type).generative:
        settings = _generative(fields, settings)
    else:
        for key in ("generation", "openai"):
            if fields.get(key) is not None:
                fields.fail(key, fields.get(key), f"no {key} block (it is for inferer_type: generative)")
    settings = _instances_from_args(fields, settings)
    sequences = settings.sequence_batching
    if sequences is not None:
        declared = {spec.name for spec in settings.inputs}
        for kind, tensor in sequences.control_inputs:
            if tensor in declared:
                fields.fail(
                    "sequence_batching",
                    f"control_inputs.{kind}: {tensor}",
                    "control tensor names that are not declared inputs (the server adds them)",
                )
    return settings


def _instances_from_args(fields: Fields, settings: ModelSettings) -> ModelSettings:
    """grps's TensorRT `inferer_args.streams: K`: K execution contexts on one engine, each on its own CUDA
    stream, which grps-py runs as K instances per device sharing the engine (`instances` times K)."""
    arg = backend_registry.backend(settings.inferer_type).instances_arg
    if arg is None or arg not in settings.inferer_args:
        return settings
    value = settings.inferer_args[arg]
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_STREAMS:
        fields.fail("inferer_args", {arg: value}, f"{arg}: an integer from 1 to {MAX_STREAMS}")
    return replace(settings, instances=settings.instances * value)


def _generative(fields: Fields, settings: ModelSettings) -> ModelSettings:
    """A generative model: one instance whose continuous batcher is its concurrency, streaming."""
    refusals = (
        ("instances", settings.instances != 1, "1 (a generative model's batcher runs its sequences)"),
        ("devices", len(settings.devices) > 1, "at most one GPU index"),
        ("batching", settings.batching.type != "none", "no dynamic batching (it batches every step)"),
        ("converter_type", settings.converter_type is not None, "none (it takes prompts as they come)"),
        ("sequence_batching", settings.sequence_batching is not None, "none"),
    )
    for key, refused, expected in refusals:
        if refused:
            fields.fail(key, fields.get(key), expected + " for inferer_type: generative")
    openai = fields.get("openai")
    return replace(
        settings,
        streaming=True,
        generation=parse_generation(fields.section("generation", GENERATION_KEYS)),
        openai=None if openai is None else parse_openai(fields.section("openai", OPENAI_KEYS), settings.name),
    )


def _parse_scheduling(fields: Fields, project_dir: Path, inferer_type: str) -> dict[str, Any]:
    """Instances, timeouts, priorities and warmup (Triton's instance_group, queue policy, warmup)."""
    defaults = ModelSettings(name="", version="", inferer_type=CUSTOMIZED)
    levels = fields.integer("priority_levels", defaults.priority_levels, 1)
    default_level = fields.integer("default_priority_level", defaults.default_priority_level, 1)
    if default_level > levels:
        fields.fail("default_priority_level", default_level, f"a level from 1 to priority_levels ({levels})")
    warmup = None
    if fields.get("warmup") is not None:
        warmup = _parse_warmup(fields.section("warmup", _WARMUP_KEYS), project_dir)
        # Samples are built from the declared inputs, else from those the model file states (ONNX...).
        states_signature = backend_registry.backend(inferer_type).states_signature
        if warmup.kind != "file" and not fields.get("inputs") and not states_signature:
            fields.fail("warmup", warmup.kind, "kind 'file', or declared `inputs` to build samples from")
    return {
        "instances": fields.integer("instances", defaults.instances, 1),
        "devices": fields.int_list("devices", 0),
        "default_timeout_us": fields.integer("default_timeout_us", defaults.default_timeout_us, 0),
        "priority_levels": levels,
        "default_priority_level": default_level,
        "priority_aging_us": fields.integer("priority_aging_us", defaults.priority_aging_us, 1),
        "warmup": warmup,
        "streaming": fields.boolean("streaming", defaults.streaming),
        "sequence_batching": parse_sequence_batching(fields.section("sequence_batching", SEQUENCE_KEYS)),
    }


def _parse_warmup(fields: Fields, project_dir: Path) -> WarmupSettings:
    defaults = WarmupSettings()
    kind = fields.opt_text("kind", _WARMUP_KINDS) or defaults.kind
    path = fields.file_path(
        "file", project_dir, "to an .npz file when kind is 'file'" if kind == "file" else None
    )
    return WarmupSettings(
        kind=kind,
        batch_size=fields.integer("batch_size", defaults.batch_size, 1),
        count=fields.integer("count", defaults.count, 1),
        file=path,
    )


def _parse_tensors(fields: Fields, key: str, project_dir: Path) -> tuple[TensorSpec, ...]:
    """`inputs` / `outputs`: [{name, datatype, shape, label_filename}] with OIP datatype names; shape may
    be left out. An output's label file is read when the server builds its catalog (an input's is not
    used: the two lists take the same keys)."""
    specs = tuple(_tensor_spec(item, project_dir) for item in fields.items(key, _TENSOR_KEYS, required=False))
    check_unique(
        fields.source, [(f"{fields.key(key)}[{i}].name", s.name) for i, s in enumerate(specs)], "name"
    )
    return specs


def _tensor_spec(item: Fields, project_dir: Path) -> TensorSpec:
    label = item.opt_text("label_filename")
    return TensorSpec(
        name=item.req_text("name"),
        datatype=item.req_text("datatype", DATATYPE_NAMES),
        shape=item.shape("shape"),
        label_filename=label,
        label_path=None if label is None else resolve_path(label, project_dir),
    )


def _parse_version(fields: Fields) -> str:
    value = fields.get("version")
    if is_number(value):  # `version: 1.0` is a YAML float; grps treats it as the string "1.0"
        return str(value)
    return fields.req_text("version", expected="a version string, e.g. '1.0.0'")


def _parse_device(fields: Fields) -> tuple[str, str | None]:
    device = fields.opt_text("device", _DEVICE_RE, _DEVICE_EXPECTED) or "auto"
    inp_device = fields.opt_text("inp_device", _INP_DEVICE_RE, _INP_DEVICE_EXPECTED)
    if device == "original" and inp_device is None:
        fields.missing("inp_device", f"{_INP_DEVICE_EXPECTED} when device is 'original'")
    return device, inp_device


def _parse_inferer_type(fields: Fields) -> str:
    return fields.req_text("inferer_type", INFERER_TYPES)


def _parse_batching(fields: Fields) -> BatchingSettings:
    defaults = BatchingSettings()
    max_batch_size = fields.integer("max_batch_size", defaults.max_batch_size, 1)
    preferred = fields.int_list("preferred_batch_size", 1)
    if any(size > max_batch_size for size in preferred):
        fields.fail(
            "preferred_batch_size", list(preferred), f"sizes from 1 to max_batch_size ({max_batch_size})"
        )
    return BatchingSettings(
        type=fields.opt_text("type", _BATCHING_TYPES) or defaults.type,
        max_batch_size=max_batch_size,
        batch_timeout_us=fields.integer("batch_timeout_us", defaults.batch_timeout_us, 0),
        preferred_batch_size=tuple(sorted(set(preferred))),
        max_queue_size=fields.integer("max_queue_size", defaults.max_queue_size, 1),
    )


def _parse_dag(fields: Fields, model_keys: tuple[str, ...]) -> DagSettings:
    dag_type = fields.opt_text("type", _DAG_TYPES) or "sequential"
    name = fields.req_text("name")
    nodes = tuple(_parse_node(item, dag_type, model_keys) for item in fields.items("nodes", _NODE_KEYS))
    names = [(f"dag.nodes[{i}].name", node.name) for i, node in enumerate(nodes)]
    check_unique(fields.source, names, "node name")
    return DagSettings(name=name, type=dag_type, nodes=nodes)


def _parse_node(fields: Fields, dag_type: str, model_keys: tuple[str, ...]) -> DagNodeSettings:
    inputs = fields.get("inputs")
    if inputs is not None and dag_type != "graph":
        fields.fail("inputs", inputs, f"no inputs (only a dag of type 'graph' has them, not {dag_type!r})")
    declared = ", ".join(repr(key) for key in model_keys)
    return DagNodeSettings(
        name=fields.req_text("name"),
        type=fields.opt_text("type", _NODE_TYPES) or "model",
        model=fields.req_text("model", model_keys, expected=f"a declared model as name-version: {declared}"),
        inputs=fields.text_list("inputs"),
    )

"""Typed settings for conf/server.yml and conf/inference.yml (grps's keys, unchanged).

Config is parsed once into frozen dataclasses; units are in the names. Relative paths in either
file resolve against the project directory (as in grps), never against the working directory.
Every error is a ConfigError naming the file, the key, the bad value and what is allowed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

GIB = 1 << 30


@dataclass(frozen=True)
class StreamingCtrl:
    ctrl_mode: str = "query_param"  # query_param | header_param | body_param
    ctrl_key: str = "streaming"
    res_content_type: str = "application/octet-stream"


@dataclass(frozen=True)
class CustomizedPredictHttp:
    path: str | None = None  # an extra predict route; None when not configured
    customized_body: bool = False  # True: model code parses the raw body and builds the answer
    streaming_ctrl: StreamingCtrl = field(default_factory=StreamingCtrl)


@dataclass(frozen=True)
class InterfaceSettings:
    framework: str = "http+grpc"  # http | http+grpc
    host: str = "0.0.0.0"
    http_port: int = 7080
    grpc_port: int | None = 7081  # None when framework is http
    customized_predict_http: CustomizedPredictHttp = field(default_factory=CustomizedPredictHttp)
    max_message_bytes: int = GIB  # gRPC message and HTTP body limit


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
    log_backup_count: int = 7


@dataclass(frozen=True)
class ServerSettings:
    interface: InterfaceSettings = field(default_factory=InterfaceSettings)
    max_connections: int = 1000
    max_concurrency: int = 32
    gpu: GpuSettings | None = None
    log: LogSettings = field(default_factory=LogSettings)
    start_online: bool = True
    shutdown_grace_s: float = 10.0
    source: str = "<server.yml>"


@dataclass(frozen=True)
class BatchingSettings:
    type: str = "none"  # none | dynamic
    max_batch_size: int = 16
    batch_timeout_us: int = 1000


@dataclass(frozen=True)
class ModelSettings:
    name: str
    version: str
    inferer_type: str  # torch | onnx | customized
    device: str = "auto"  # cpu | cuda | cuda:N | gpu | gpu:N | original | auto
    inp_device: str | None = None  # with device `original`: where inputs go
    inferer_name: str | None = None
    inferer_path: Path | None = None
    inferer_args: dict[str, Any] = field(default_factory=dict)
    converter_type: str | None = None  # none | numpy | torch | customized; None: the inferer's default
    converter_name: str | None = None
    converter_path: Path | None = None
    converter_args: dict[str, Any] = field(default_factory=dict)
    batching: BatchingSettings = field(default_factory=BatchingSettings)
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

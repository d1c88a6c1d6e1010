"""A bare model directory served as a one-model project: what KServe mounts at /mnt/models.

KServe's storage initializer copies an InferenceService's `storageUri` to /mnt/models. That is a grps-py
project (conf/server.yml, conf/inference.yml, models, src/), served as one; or only a model: a single file
(`model.onnx`), a file in a version directory (`1/model.onnx`), or a Triton model repository holding one
model (`classifier/1/model.onnx`, its config.pbtxt not read). For those this module builds the settings a
project would have: one model named as KServe names it (`--model-name`, the InferenceService's name), its
inferer chosen by the file's extension, and a DAG of that model alone, so the grps API serves it too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grps_py.core.config import parse_inference_settings, parse_server_settings
from grps_py.core.errors import ConfigError
from grps_py.core.untrusted import shown
from grps_py.project import Project

# extension -> (inferer_type, converter_type), as conf/inference.yml's classifier entries pair them
MODEL_FILE_TYPES = {".onnx": ("onnx", "numpy"), ".pt": ("torch", "torch")}
HTTP_PORT, GRPC_PORT = 7080, 7081  # server.yml's defaults
DEFAULT_VERSION = "1"  # a model file with no version directory around it
_VERSION_DIR = re.compile(r"[0-9]{1,18}")  # version directories are integers, as in Triton
_LISTED_FILES = 3  # an error message names at most this many of the files it found


@dataclass(frozen=True)
class ModelFile:
    path: Path
    version: str


def is_model_dir(directory: Path) -> bool:
    """A directory without conf/ is not a grps-py project: it is served as a model directory."""
    return not (directory / "conf").is_dir()


def server_data(http_port: int = HTTP_PORT, grpc_port: int = GRPC_PORT) -> dict[str, Any]:
    """The server.yml a model directory stands for: defaults, HTTP and gRPC on all addresses, the ports."""
    return {"interface": {"framework": "http+grpc", "host": "0.0.0.0", "port": f"{http_port},{grpc_port}"}}


def project(
    directory: Path, model_name: str, http_port: int = HTTP_PORT, grpc_port: int = GRPC_PORT
) -> Project:
    """The settings serving DIRECTORY's one model file as `model_name`; a ConfigError in one line when
    the directory does not hold exactly one."""
    root = directory.resolve()
    if not root.is_dir():
        raise ConfigError(f"{shown(str(root))}: model directory does not exist")
    if not model_name.strip():
        raise ConfigError(f"{shown(str(root))}: the model name is empty (give --model-name NAME)")
    try:
        model = find_model_file(root)
    except OSError as exc:  # a directory that cannot be listed
        raise ConfigError(f"{shown(str(root))}: cannot read the model directory: {exc.strerror}") from exc
    source = f"{shown(str(root))} (a model directory)"
    server = parse_server_settings(server_data(http_port, grpc_port), source, root)
    inference = parse_inference_settings(inference_data(model, model_name), source, root)
    return Project(root, server, inference)


def inference_data(model: ModelFile, name: str) -> dict[str, Any]:
    """The inference.yml for one model file: no batching, device auto, the DAG named after the model."""
    inferer_type, converter_type = MODEL_FILE_TYPES[model.path.suffix]
    entry = {
        "name": name,
        "version": model.version,
        "device": "auto",
        "inferer_type": inferer_type,
        "inferer_path": str(model.path),
        "converter_type": converter_type,
        "batching": {"type": "none"},
    }
    node = {"name": name, "type": "model", "model": f"{name}-{model.version}"}
    return {"models": [entry], "dag": {"type": "sequential", "name": name, "nodes": [node]}}


def find_model_file(root: Path) -> ModelFile:
    """The one model file in ROOT, in a version directory of it (ROOT/1/), or in a model's version
    directory (ROOT/NAME/1/, a Triton repository of one model)."""
    found = [ModelFile(path, DEFAULT_VERSION) for path in _model_files(root)]
    for child in _subdirectories(root):
        if _VERSION_DIR.fullmatch(child.name):
            found += [ModelFile(path, child.name) for path in _model_files(child)]
        else:
            for version in _subdirectories(child):
                if _VERSION_DIR.fullmatch(version.name):
                    found += [ModelFile(path, version.name) for path in _model_files(version)]
    if len(found) == 1:
        return found[0]
    where = shown(str(root))
    if not found:
        kinds = ", ".join(f"*{suffix}" for suffix in MODEL_FILE_TYPES)
        raise ConfigError(
            f"{where}: not a grps-py project (no conf/server.yml) and no model file ({kinds}) in it, "
            "in a version directory (1/) or in a model's version directory (NAME/1/)"
        )
    names = [shown(str(model.path.relative_to(root))) for model in found]
    more = f" and {len(names) - _LISTED_FILES} more" if len(names) > _LISTED_FILES else ""
    raise ConfigError(
        f"{where}: {len(found)} model files ({', '.join(names[:_LISTED_FILES])}{more}); a model directory "
        "holds exactly one: serve several through a grps-py project (conf/server.yml, conf/inference.yml)"
    )


def _model_files(directory: Path) -> list[Path]:
    return sorted(
        path
        for path in directory.iterdir()
        if path.suffix in MODEL_FILE_TYPES and not path.name.startswith(".") and path.is_file()
    )


def _subdirectories(directory: Path) -> list[Path]:
    return sorted(path for path in directory.iterdir() if not path.name.startswith(".") and path.is_dir())

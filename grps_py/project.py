"""A grps project directory: its config files and the user code under src/."""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path

from grps_py.core.config import (
    InferenceSettings,
    ServerSettings,
    load_inference_settings,
    load_server_settings,
)
from grps_py.core.errors import ConfigError


@dataclass(frozen=True)
class Project:
    root: Path
    server: ServerSettings
    inference: InferenceSettings


def import_sources(root: Path) -> list[str]:
    """Import every .py file under ROOT/src so its register(...) calls take effect; returns module names."""
    src = root / "src"
    if not src.is_dir():
        return []
    if str(src) not in sys.path:
        sys.path.insert(0, str(src))  # user modules may import each other by name
    imported = []
    for path in sorted(src.rglob("*.py")):
        rel = path.relative_to(src).with_suffix("")
        name = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts) or "src"
        if name in sys.modules and getattr(sys.modules[name], "__file__", None) == str(path):
            continue
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise ConfigError(f"{path}: cannot be imported")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        imported.append(name)
    return imported


def load_project(root: Path, server_conf: Path | None = None, inference_conf: Path | None = None) -> Project:
    """Read ROOT/conf/{server,inference}.yml (or the given files) after importing ROOT/src."""
    root = root.resolve()
    if not root.is_dir():
        raise ConfigError(f"{root}: project directory does not exist")
    import_sources(root)
    server = load_server_settings(server_conf or root / "conf" / "server.yml", root)
    inference = load_inference_settings(inference_conf or root / "conf" / "inference.yml", root)
    return Project(root, server, inference)

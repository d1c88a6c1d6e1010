"""Importing the core loads no transport: each module of `grps_py/core` and `grps_py/backends`, imported
alone in a fresh interpreter, leaves tornado, grpc and protobuf unloaded (and the core loads no backend).

`tests/test_structure.py` reads the import statements of the same files (those in function bodies
too); this holds what they import transitively, `grps_py/__init__.py` included.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TRANSPORT = ("tornado", "grpc", "google.protobuf", "grps_py.protos", "grps_py.http", "grps_py.grpc")
BACKENDS = ("torch", "onnxruntime", "tensorflow", "tensorrt", "grps_py.backends")
# A backend module needs its framework: without it installed there is nothing to check.
FRAMEWORKS = {
    "grps_py.backends.torch": "torch",
    "grps_py.backends.onnxruntime": "onnxruntime",
    "grps_py.backends.tensorflow": "tensorflow",
    "grps_py.backends.tensorrt": "tensorrt",
}
# What a framework loads for itself: TensorFlow reads its graphs with protobuf.
FRAMEWORK_OWN = {"tensorflow": ("google.protobuf",)}

PROBE = """
import json, sys
import {module}
print(json.dumps(sorted(sys.modules)))
"""


def modules(folder: str) -> list[str]:
    paths = sorted((ROOT / "grps_py" / folder).glob("*.py"))
    names = [f"grps_py.{folder}.{p.stem}" for p in paths if p.stem != "__init__"]
    return [f"grps_py.{folder}", *names]


def loaded_by(module: str) -> list[str]:
    """The modules in sys.modules after importing `module` alone in a fresh interpreter."""
    result = subprocess.run(
        [sys.executable, "-c", PROBE.format(module=module)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, f"import {module} failed:\n{result.stderr}"
    loaded: list[str] = json.loads(result.stdout.splitlines()[-1])
    return loaded


def matching(loaded: list[str], prefixes: tuple[str, ...]) -> list[str]:
    return [name for name in loaded if any(name == p or name.startswith(p + ".") for p in prefixes)]


@pytest.fixture(scope="module")
def loads() -> dict[str, list[str]]:
    """What each module loads, the fresh interpreters run side by side (torch alone takes seconds)."""
    names = modules("core") + [m for m in modules("backends") if _installed(FRAMEWORKS.get(m))]
    with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as pool:
        return dict(zip(names, pool.map(loaded_by, names), strict=True))


def _installed(framework: str | None) -> bool:
    return framework is None or importlib.util.find_spec(framework) is not None


@pytest.mark.parametrize("module", modules("core"))
def test_a_core_module_loads_no_transport_and_no_backend(module: str, loads: dict[str, list[str]]) -> None:
    loaded = loads[module]
    assert not matching(loaded, TRANSPORT), f"import {module} loads {matching(loaded, TRANSPORT)}"
    assert not matching(loaded, BACKENDS), f"import {module} loads {matching(loaded, BACKENDS)}"


@pytest.mark.parametrize("module", modules("backends"))
def test_a_backend_module_loads_no_transport(module: str, loads: dict[str, list[str]]) -> None:
    if not _installed(FRAMEWORKS.get(module)):
        pytest.skip(f"{FRAMEWORKS[module]} is not installed")
    own = FRAMEWORK_OWN.get(FRAMEWORKS.get(module, ""), ())
    transport = tuple(prefix for prefix in TRANSPORT if prefix not in own)
    loaded = loads[module]
    assert not matching(loaded, transport), f"import {module} loads {matching(loaded, transport)}"


def test_the_probe_sees_a_transport_import() -> None:
    """The check itself: a module that does load protobuf is caught."""
    assert "google.protobuf" in matching(loaded_by("grps_py.protos.grps_pb2"), TRANSPORT)


def test_the_package_loads_no_transport_until_a_message_class_is_asked_for() -> None:
    assert not matching(loaded_by("grps_py"), TRANSPORT)


def test_the_public_api_is_still_importable_from_the_package() -> None:
    import grps_py

    for name in grps_py.__all__:
        assert getattr(grps_py, name) is not None, name
    from grps_py import GrpsMessage, ModelInferer, inferer_register

    assert GrpsMessage.__module__ == "grps_py.protos.grps_pb2"
    assert ModelInferer.__module__ == "grps_py.core.model"
    assert inferer_register.kind == "inferer"

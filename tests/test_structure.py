"""Conventions that keep the code in shape: transport-free core, one error table, one boundary each."""

from __future__ import annotations

import ast
import filecmp
import inspect
import subprocess
import sys
from pathlib import Path

from grps_py import status
from grps_py.core import errors
from grps_py.core.config import ServerSettings
from grps_py.grpc.boundary import BOUNDARY_MARK
from grps_py.grpc.grps_service import GrpsService
from grps_py.grpc.oip_service import OipService
from grps_py.http.app import build_direct_routes, route_table
from grps_py.http.base import BaseHandler
from grps_py.http.direct import DirectCall
from grps_py.protos import grps_pb2, open_inference_pb2

ROOT = Path(__file__).resolve().parent.parent
FORBIDDEN = ("tornado", "grpc", "google.protobuf", "grps_py.protos", "grps_py.http", "grps_py.grpc")


def imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for item in ast.walk(ast.parse(path.read_text())):
        if isinstance(item, ast.Import):
            names.update(alias.name for alias in item.names)
        elif isinstance(item, ast.ImportFrom) and item.module:
            names.add(item.module)
    return names


def test_core_and_backends_import_no_transport() -> None:
    for folder in ("core", "backends"):
        for path in (ROOT / "grps_py" / folder).glob("*.py"):
            bad = {m for m in imported_modules(path) if m.startswith(FORBIDDEN)}
            assert not bad, f"{path.name} imports {bad}"


def test_core_does_not_import_backends() -> None:
    for path in (ROOT / "grps_py" / "core").glob("*.py"):
        assert not {
            m for m in imported_modules(path) if m.startswith(("torch", "onnxruntime", "grps_py.backends"))
        }


def test_every_error_class_has_a_row() -> None:
    for cls in errors.ALL_ERRORS:
        assert cls in status.ERROR_TABLE, cls
    defined = {c for _, c in inspect.getmembers(errors, inspect.isclass) if issubclass(c, errors.GrpsError)}
    assert defined == set(errors.ALL_ERRORS)


def test_every_http_route_goes_through_the_boundary() -> None:
    for _, handler, _ in route_table(None, ServerSettings()):  # type: ignore[arg-type]
        assert issubclass(handler, BaseHandler), handler
        assert handler.write_error is BaseHandler.write_error


def test_every_direct_http_route_goes_through_the_boundary() -> None:
    routes = build_direct_routes(None, ServerSettings()).routes  # type: ignore[arg-type]
    assert routes
    for route in routes:
        assert issubclass(route.call, DirectCall), route.call
        assert route.call.fail is DirectCall.fail and route.call._run is DirectCall._run


def test_every_rpc_goes_through_the_boundary() -> None:
    services = [
        (grps_pb2.DESCRIPTOR.services_by_name["GrpsService"], GrpsService),
        (open_inference_pb2.DESCRIPTOR.services_by_name["GRPCInferenceService"], OipService),
    ]
    for descriptor, implementation in services:
        for method in descriptor.methods:
            impl = getattr(implementation, method.name)
            assert getattr(impl, BOUNDARY_MARK, False), method.name


def test_generated_protobuf_code_is_fresh(tmp_path: Path) -> None:
    subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_proto.py"), str(tmp_path)], check=True)
    generated = sorted(p.name for p in tmp_path.glob("*_pb2*"))
    assert generated, "gen_proto.py generated nothing"
    _match, mismatch, missing = filecmp.cmpfiles(
        tmp_path, ROOT / "grps_py" / "protos", generated, shallow=False
    )
    assert not mismatch and not missing, f"stale generated code: {mismatch + missing}; run `make proto`"

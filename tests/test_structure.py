"""Conventions that keep the code in shape: transport-free core, one error table, one boundary each."""

from __future__ import annotations

import ast
import filecmp
import importlib.util
import inspect
import subprocess
import sys
from pathlib import Path

from grps_py import status
from grps_py.core import backend_registry, errors, telemetry
from grps_py.core.config import ServerSettings
from grps_py.grpc.boundary import BOUNDARY_MARK
from grps_py.grpc.grps_service import GrpsService
from grps_py.grpc.oip_service import OipService
from grps_py.http.app import HttpRoutes
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
    assert list(status.ERROR_TABLE) == list(errors.ERROR_TABLE)
    for cls, row in errors.ERROR_TABLE.items():
        assert row.reason in telemetry.REASONS, cls
        assert (status.ERROR_TABLE[cls].http, status.ERROR_TABLE[cls].grpc.name) == (row.http, row.grpc)


# The metrics' failure reasons as they were before they became a column of the error table: a label
# that changes breaks dashboards and alerts, so a change here must be deliberate.
REASON_BY_ERROR = {
    errors.GrpsError: "internal",
    errors.InvalidInput: "invalid",
    errors.PayloadTooLarge: "invalid",
    errors.UnsupportedMediaType: "invalid",
    errors.Unauthenticated: "invalid",
    errors.PermissionDenied: "invalid",
    errors.ModelNotFound: "not_found",
    errors.ModelNotReady: "rejected",
    errors.Overloaded: "rejected",
    errors.DeadlineExceeded: "timeout",
    errors.Cancelled: "cancelled",
    errors.Unsupported: "internal",
    errors.ModelError: "model_error",
    errors.InternalError: "internal",
}
REASON_BY_STATUS = {404: "not_found", 499: "cancelled", 503: "rejected", 504: "timeout"}


def test_failure_reasons_keep_their_labels() -> None:
    assert telemetry.REASONS == (
        "invalid",
        "not_found",
        "rejected",
        "timeout",
        "cancelled",
        "model_error",
        "internal",
    )
    for cls, reason in REASON_BY_ERROR.items():
        assert telemetry.reason_of(cls(), 500) == reason, cls
    assert telemetry.reason_of(ValueError(), 400) == "internal"
    for code in range(100, 600):
        expected = None if code < 400 else REASON_BY_STATUS.get(code, "invalid" if code < 500 else "internal")
        assert telemetry.reason_of(None, code) == expected, code


def test_a_status_or_code_means_what_its_first_row_says() -> None:
    """The general rows come first: a bare 404 or NOT_FOUND is a missing thing, 504 a deadline."""
    first_code: dict[int, str] = {}
    first_status: dict[str, int] = {}
    for row in errors.ERROR_TABLE.values():
        first_code.setdefault(row.http, row.grpc)
        first_status.setdefault(row.grpc, row.http)
    general = {
        500: "INTERNAL",
        400: "INVALID_ARGUMENT",
        404: "NOT_FOUND",
        503: "UNAVAILABLE",
        504: "DEADLINE_EXCEEDED",
        499: "CANCELLED",
        501: "UNIMPLEMENTED",
        413: "RESOURCE_EXHAUSTED",
        401: "UNAUTHENTICATED",
        403: "PERMISSION_DENIED",
    }
    for http, code in general.items():
        assert first_code[http] == code and first_status[code] == http, (http, code)


def test_every_backend_has_a_loadable_spec() -> None:
    """Each inferer type's loader, and each converter's, names a module that exists (found, not
    imported: the check needs no framework) and a callable defined in it."""
    for spec in backend_registry.BACKENDS:
        assert spec.platform and spec.backend, spec
        assert spec.default_converter in backend_registry.CONVERTER_TYPES, spec
    refs = [s.loader for s in backend_registry.BACKENDS if s.loader] + [
        s.loader for s in backend_registry.CONVERTERS if s.loader
    ]
    for ref in refs:
        module, _, name = ref.partition(":")
        found = importlib.util.find_spec(module)
        assert found is not None and found.origin, ref
        assert f"class {name}(" in Path(found.origin).read_text(), ref


def http_routes() -> HttpRoutes:
    from grps_py.metrics import ServerMetrics

    return HttpRoutes(None, ServerSettings(), ServerMetrics({}))  # type: ignore[arg-type]


def test_every_http_route_goes_through_the_boundary() -> None:
    for _, handler, _ in http_routes().tornado:
        assert issubclass(handler, BaseHandler), handler
        assert handler.write_error is BaseHandler.write_error


def test_every_direct_http_route_goes_through_the_boundary() -> None:
    routes = http_routes().unary
    assert routes
    for route in routes:  # every unary route is answered by DirectCall itself: its one boundary
        assert all(callable(serve) for serve in route.methods.values()), route.pattern
    assert DirectCall.__subclasses__() == []


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


def test_the_route_table_shows_every_route_and_the_layer_that_serves_it() -> None:
    rows = {(row.pattern, row.layer): row for row in http_routes().table()}
    infer = rows[(r"/v2/models/([^/]+)(?:/versions/([^/]+))?/infer", "connection")]
    assert infer.methods == ("OPTIONS", "POST")
    assert rows[("/grps/v1/health/live", "connection")].methods == ("GET", "HEAD", "OPTIONS", "POST")
    # a predict is the connection's when unary, Tornado's when it streams: both rows are listed
    assert {layer for pattern, layer in rows if pattern == "/grps/v1/infer/predict"} == {
        "connection",
        "tornado",
    }
    assert (r"/v2/models/([^/]+)(?:/versions/([^/]+))?/generate_stream", "tornado") in rows
    assert ("/metrics", "tornado") in rows
    table = http_routes().table()
    first_tornado = next(i for i, row in enumerate(table) if row.layer == "tornado")
    assert all(row.layer == "connection" for row in table[:first_tornado])  # matched first

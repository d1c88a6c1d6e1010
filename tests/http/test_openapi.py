"""openapi.yaml against a live server: schemathesis generates requests (valid and invalid) for every
operation it describes and sends them to a real server on port 0 serving tests/projects/basic.

No answer may be a 5xx the request does not explain, and every answer must be one the description
lists, with the content type and body schema it gives. `OPENAPI_EXAMPLES` sets the examples per
operation (default 25). The description must also cover every /grps/v1 and /v2 route of the route
table, each with the methods it takes (the OpenAI-compatible /v1 routes too).
"""

from __future__ import annotations

import os
import re
import zlib
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
import schemathesis
import yaml
from hypothesis import HealthCheck, settings
from schemathesis import GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from schemathesis.config import SchemathesisConfig

from grps_py.core.config import ServerSettings
from grps_py.core.shared_memory import SHM_DIR
from grps_py.http.app import HttpRoutes
from grps_py.metrics import ServerMetrics
from support import BASIC, REPO, ServerThread, start_project

OPENAPI = REPO / "openapi.yaml"
EXAMPLES = int(os.environ.get("OPENAPI_EXAMPLES", "25"))
CHECKS = [
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]

# Not schemathesis.toml (the settings of the `st run` the docs show, tests/cli/test_openapi_cli.py): this
# run chooses its own checks, examples and target.
schema = schemathesis.openapi.from_path(OPENAPI, config=SchemathesisConfig())
schema.config.generation.update(modes=[GenerationMode.POSITIVE, GenerationMode.NEGATIVE])

# Generated model names would almost all be unknown (a 404 at once): most requests are pointed at
# models of the basic project that take any input, so the codecs and the adapters get real work.
# (Not the default DAG or `typed`: those models fail - a 500 by design - on inputs they cannot use;
# nor `identity-1` for a gmap: its numpy converter hands the maps to the model, which answers them back
# as outputs no tensor can hold.)
GRPS_MODELS = ["echo-1.0", "upper-1.0", "identity-1"]
GMAP_MODELS = ["echo-1.0", "upper-1.0"]
OIP_MODELS = {"identity": "1", "echo": "1.0", "params": "1", "versioned": "10", "tokens": "1"}
TIMEOUT_KEYS = ("Grps-Timeout-Us", "timeout_us", "timeout")
# A POSIX shared-memory object of this run, so that some system shared-memory registrations succeed
# (a generated key names no object: 400), and a few region names, so that status and unregister find them.
SHM_KEY = f"/grps-py-openapi-{os.getpid()}"
SHM_BYTES = 64
REGIONS = ["r0", "r1", "r2"]


@pytest.fixture(scope="module")
def served() -> Iterator[ServerThread]:
    """A server of its own: the run takes it offline now and then, which would disturb other tests."""
    thread = start_project(BASIC)
    yield thread
    thread.stop()


@pytest.fixture(scope="module")
def shared_object() -> Iterator[None]:
    """The object SHM_KEY names (where the host has POSIX shared memory), removed at the end."""
    path = SHM_DIR / SHM_KEY.lstrip("/")
    if SHM_DIR.is_dir():
        path.write_bytes(bytes(SHM_BYTES))
    yield
    path.unlink(missing_ok=True)


def pick(generated: str, choices: list[str]) -> str:
    """Mostly one of `choices`, picked by the generated value (so a failing example replays the same)."""
    index = zlib.crc32(generated.encode("utf-8", "surrogatepass")) % (len(choices) + 1)
    return choices[index] if index < len(choices) else generated


def steer(case: schemathesis.Case) -> None:
    """Point most requests at a real model (see GRPS_MODELS / OIP_MODELS), and most shared-memory ones at
    REGIONS and SHM_KEY."""
    params = case.path_parameters or {}
    if isinstance(params.get("region_name"), str):
        params["region_name"] = pick(params["region_name"], REGIONS)
    if case.path.startswith("/v2/systemsharedmemory/") and isinstance(case.body, dict):
        steer_registration(case.body)
    if isinstance(params.get("model_name"), str):
        name = pick(params["model_name"], list(OIP_MODELS))
        params["model_name"] = name
        if isinstance(params.get("model_version"), str) and name in OIP_MODELS:
            params["model_version"] = pick(params["model_version"], [OIP_MODELS[name]])
    if case.path == "/grps/v1/infer/predict":
        body = case.body if isinstance(case.body, dict) else {}
        models = GMAP_MODELS if body.get("gmap") is not None else GRPS_MODELS
        query = case.query if isinstance(case.query, dict) else None
        if query is not None:
            query["model"] = pick(str(query.get("model", "")), models)
        if isinstance(body.get("model"), str):
            body["model"] = pick(str(body["model"]), models)


def steer_registration(body: dict[str, Any]) -> None:
    """Half the time the object of this run, and then half the time a range inside it (sizes below 1 and
    negative offsets stay as they are)."""
    if isinstance(body.get("key"), str):
        body["key"] = pick(body["key"], [SHM_KEY])
    size, offset = body.get("byte_size"), body.get("offset", 0)
    if body.get("key") != SHM_KEY or type(size) is not int or type(offset) is not int:
        return
    if size > 0 and offset >= 0 and pick(str(size), ["in range"]) == "in range":
        body["byte_size"] = 1 + size % SHM_BYTES
        body["offset"] = offset % (SHM_BYTES - body["byte_size"] + 1)


def sets_a_timeout(case: schemathesis.Case) -> bool:
    """Whether the request asked for a timeout (then a 504 is its answer, not a server fault)."""
    places: list[Any] = [case.headers, case.query]
    if isinstance(case.body, dict):
        places.append(case.body.get("parameters"))
    return any(isinstance(place, Mapping) and any(key in place for key in TIMEOUT_KEYS) for place in places)


def explained(case: schemathesis.Case, status: int) -> bool:
    """A 5xx the request explains: the 504 of a timeout it set, the 501 of CUDA shared memory, which
    this server does not support (the only answer those routes describe), or of a repository load or
    unload on this server, whose models load at start-up only (model_control: none: the fuzzing must
    not change the models the other cases run)."""
    if status == 504:
        return sets_a_timeout(case)
    repository_change = case.path.startswith("/v2/repository/models/")
    return status == 501 and (case.path.startswith("/v2/cudasharedmemory/") or repository_change)


@schema.parametrize()
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)
def test_the_http_api_answers_as_described(
    case: schemathesis.Case, served: ServerThread, shared_object: None
) -> None:
    steer(case)
    response = case.call(base_url=served.http_url, timeout=20)
    if case.path.endswith("/health/offline"):
        served.server.executor.online()  # keep the server ready for the cases that follow
    status = response.status_code
    if status >= 500 and not explained(case, status):
        pytest.fail(f"{case.method} {case.formatted_path} answered {status}: {response.text[:300]}")
    case.validate_response(response, checks=CHECKS)


def forms(pattern: str) -> set[str]:
    """The paths a route pattern matches, one per combination of its optional parts, each parameter as
    `{}`: `/v2/models/([^/]+)(?:/versions/([^/]+))?/ready` -> `/v2/models/{}/ready` and
    `/v2/models/{}/versions/{}/ready`."""
    pattern = pattern.replace("([^/]+)", "{}").removesuffix("/?")
    innermost = re.search(r"\(\?:([^()]*)\)\?", pattern)
    if innermost is None:
        assert not re.search(r"[\\^$.|?*+()\[\]]", pattern), f"a pattern this test cannot read: {pattern}"
        return {pattern}
    head, tail = pattern[: innermost.start()], pattern[innermost.end() :]
    return forms(head + innermost.group(1) + tail) | forms(head + tail)


def test_the_description_covers_every_builtin_route() -> None:
    """Each /grps/v1, /v2 and /v1 (OpenAI) route of the route table (each form of its optional parts)
    is a path here, with the methods the route takes (HEAD and OPTIONS, which every route answers,
    aside); and the description has no path or method the server does not serve."""
    routes = HttpRoutes(None, ServerSettings(), ServerMetrics({}))  # type: ignore[arg-type]
    serves: dict[str, set[str]] = {}
    for row in routes.table():
        if row.pattern.startswith(("/grps/v1/", "/v2", "/v1/")):
            for form in forms(row.pattern):
                serves.setdefault(form, set()).update(set(row.methods) - {"HEAD", "OPTIONS"})
    paths = yaml.safe_load(OPENAPI.read_text())["paths"]
    described = {
        re.sub(r"\{[^}]+\}", "{}", path): {method.upper() for method in item if method != "parameters"}
        for path, item in paths.items()
    }
    assert described == serves

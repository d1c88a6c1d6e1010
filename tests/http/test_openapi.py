"""openapi.yaml against a live server: schemathesis generates requests (valid and invalid) for every
operation it describes and sends them to a real server on port 0 serving tests/projects/basic.

No answer may be a 5xx the request does not explain, and every answer must be one the description
lists, with the content type and body schema it gives. `OPENAPI_EXAMPLES` sets the examples per
operation (default 25).
"""

from __future__ import annotations

import os
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


@pytest.fixture(scope="module")
def served() -> Iterator[ServerThread]:
    """A server of its own: the run takes it offline now and then, which would disturb other tests."""
    thread = start_project(BASIC)
    yield thread
    thread.stop()


def pick(generated: str, choices: list[str]) -> str:
    """Mostly one of `choices`, picked by the generated value (so a failing example replays the same)."""
    index = zlib.crc32(generated.encode("utf-8", "surrogatepass")) % (len(choices) + 1)
    return choices[index] if index < len(choices) else generated


def steer(case: schemathesis.Case) -> None:
    """Point most requests at a real model (see GRPS_MODELS / OIP_MODELS)."""
    params = case.path_parameters or {}
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


def sets_a_timeout(case: schemathesis.Case) -> bool:
    """Whether the request asked for a timeout (then a 504 is its answer, not a server fault)."""
    places: list[Any] = [case.headers, case.query]
    if isinstance(case.body, dict):
        places.append(case.body.get("parameters"))
    return any(isinstance(place, Mapping) and any(key in place for key in TIMEOUT_KEYS) for place in places)


@schema.parametrize()
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)
def test_the_http_api_answers_as_described(case: schemathesis.Case, served: ServerThread) -> None:
    steer(case)
    response = case.call(base_url=served.http_url, timeout=20)
    if case.path.endswith("/health/offline"):
        served.server.executor.online()  # keep the server ready for the cases that follow
    status = response.status_code
    if status >= 500 and not (status == 504 and sets_a_timeout(case)):
        pytest.fail(f"{case.method} {case.formatted_path} answered {status}: {response.text[:300]}")
    case.validate_response(response, checks=CHECKS)


def test_the_description_covers_every_builtin_route() -> None:
    """Each /grps/v1 and /v2 route of the route table has a path here (versioned forms included)."""
    paths = set(yaml.safe_load(OPENAPI.read_text())["paths"])
    expected = {f"/grps/v1/health/{action}" for action in ("live", "ready", "online", "offline")}
    expected |= {"/grps/v1/infer/predict", "/grps/v1/metadata/server", "/grps/v1/metadata/model", "/v2"}
    expected |= {f"/grps/v1/monitor/{name}" for name in ("series", "models", "metrics")}
    expected |= {"/v2/health/live", "/v2/health/ready"}
    for model in ("/v2/models/{model_name}", "/v2/models/{model_name}/versions/{model_version}"):
        expected |= {model} | {
            f"{model}/{tail}" for tail in ("ready", "config", "infer", "generate", "generate_stream")
        }
    assert paths == expected

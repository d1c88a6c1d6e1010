"""Triton's model repository extension (index, load, unload) on the wire, without I/O: the HTTP calls to
send and how to read their answers, and the gRPC requests. Both transports build and read them here.

A load's `config` travels as Triton's clients send it: one model entry (inference.yml's format) as a
JSON *string* in the `config` parameter, over HTTP `{"parameters": {"config": "<JSON>"}}`, over gRPC
`parameters["config"].string_param`. The server answers errors as OIP does: `{"error": msg}`.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from grps_py.client.errors import GrpsClientError, answer_unreadable
from grps_py.client.http_wire import JSON, HttpCall, HttpUrl, error_of
from grps_py.protos import open_inference_pb2 as oip_pb2

__all__ = [
    "INDEX_FIELDS",
    "config_json",
    "index_call",
    "index_request",
    "index_rows",
    "load_call",
    "load_request",
    "model_name",
    "read_done",
    "read_index",
    "unload_call",
    "unload_request",
]

INDEX_FIELDS = ("name", "version", "state", "reason")
REPOSITORY = "/v2/repository"


def model_name(name: str) -> str:
    """A model's name as the caller gave it; an empty one is refused before anything is sent."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"a model name must be a non-empty string, not {name!r}")
    return name


def config_json(config: Mapping[str, Any] | None) -> str | None:
    """The model entry as the JSON text the server reads; ValueError for one JSON cannot hold."""
    if config is None:
        return None
    if not isinstance(config, Mapping):
        raise ValueError(f"a model config must be a mapping (one inference.yml model entry), not {config!r}")
    try:
        return json.dumps(dict(config), allow_nan=False, default=_plain)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"the model config cannot be sent as JSON: {exc}") from exc


def _plain(value: object) -> object:
    """json.dumps takes dicts and lists only: other mappings and sequences are written as those."""
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        return list(value)
    raise TypeError(f"{type(value).__name__} {value!r} is not a JSON value")


# --- HTTP ---------------------------------------------------------------------------------------


def _post(url: HttpUrl, path: str, document: dict[str, Any]) -> HttpCall:
    body = orjson.dumps(document)
    return HttpCall("POST", f"{url.base_path}{REPOSITORY}{path}", body, {"Content-Type": JSON})


def _model_path(name: str, action: str) -> str:
    return f"/models/{urllib.parse.quote(model_name(name), safe='')}/{action}"


def index_call(url: HttpUrl, ready: bool) -> HttpCall:
    return _post(url, "/index", {"ready": bool(ready)})


def load_call(url: HttpUrl, name: str, config: str | None) -> HttpCall:
    document = {} if config is None else {"parameters": {"config": config}}
    return _post(url, _model_path(name, "load"), document)


def unload_call(url: HttpUrl, name: str, unload_dependents: bool) -> HttpCall:
    document = {"parameters": {"unload_dependents": bool(unload_dependents)}}
    return _post(url, _model_path(name, "unload"), document)


def read_index(http_status: int, reason: str, body: bytes) -> list[dict[str, str]]:
    """The index answer: a JSON array of `{name, version, state, reason}` (reason may be left out)."""
    read_done(http_status, reason, body)
    try:
        rows = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise answer_unreadable(f"the server's repository index is not JSON: {exc}") from exc
    if not isinstance(rows, list):
        raise answer_unreadable("the server's repository index is not a JSON array")
    return [_index_row(row) for row in rows]


def _index_row(row: object) -> dict[str, str]:
    if not isinstance(row, dict):
        raise answer_unreadable("an entry of the server's repository index is not a JSON object")
    values = {field: row.get(field, "") for field in INDEX_FIELDS}
    if not all(isinstance(value, str) for value in values.values()):
        raise answer_unreadable("an entry of the server's repository index has a field that is not a string")
    return values


def read_done(http_status: int, reason: str, body: bytes) -> None:
    """A load or unload answer: 200 (its body, empty, says nothing more), else the server's error."""
    if http_status == 200:
        return
    message = _oip_error(body)
    if message is None:
        raise error_of(http_status, reason, body)  # a grps envelope, or what another server sent
    raise GrpsClientError.from_status(http_status, message)


def _oip_error(body: bytes) -> str | None:
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    message = document.get("error") if isinstance(document, dict) else None
    return message if isinstance(message, str) and message else None


# --- gRPC ---------------------------------------------------------------------------------------


def index_request(ready: bool) -> oip_pb2.RepositoryIndexRequest:
    return oip_pb2.RepositoryIndexRequest(ready=bool(ready))


def load_request(name: str, config: str | None) -> oip_pb2.RepositoryModelLoadRequest:
    request = oip_pb2.RepositoryModelLoadRequest(model_name=model_name(name))
    if config is not None:
        request.parameters["config"].string_param = config
    return request


def unload_request(name: str, unload_dependents: bool) -> oip_pb2.RepositoryModelUnloadRequest:
    request = oip_pb2.RepositoryModelUnloadRequest(model_name=model_name(name))
    request.parameters["unload_dependents"].bool_param = bool(unload_dependents)
    return request


def index_rows(response: oip_pb2.RepositoryIndexResponse) -> list[dict[str, str]]:
    return [{field: getattr(model, field) for field in INDEX_FIELDS} for model in response.models]

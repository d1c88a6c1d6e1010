"""`grps-py models list | load | unload | reload`: manage the models of a running server (Triton's model
repository extension, over HTTP or gRPC). Loading and unloading need a server started with
`model_control: explicit`, and are admin calls: the admin token (`--token`, or GRPS_ADMIN_TOKEN), or a
loopback caller when the server has none.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from grps_py.cli.remote import DEFAULT_PORTS, _failed
from grps_py.client import GrpsClient, GrpsClientError
from grps_py.client.auth import authorization
from grps_py.client.repository_wire import INDEX_FIELDS, config_json
from grps_py.core.untrusted import shown

__all__ = ["add_parsers"]

TOKEN_ENV = "GRPS_ADMIN_TOKEN"
DEFAULT_TIMEOUT_S = 300.0  # a load waits for the model to load and warm up
_CELL_CHARS = 200


class InputError(ValueError):
    """The command line asks for something that cannot be sent; the message says why."""


def add_parsers(commands: Any) -> None:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--url", help="the server, HOST:PORT (default 127.0.0.1:7080, or 127.0.0.1:7081 with --protocol grpc)"
    )
    common.add_argument("--protocol", choices=("http", "grpc"), default="http", help="default: http")
    common.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        help=f"seconds to wait for the answer ({DEFAULT_TIMEOUT_S:g}: a load waits for the model's warmup)",
    )
    common.add_argument(
        "--token", help=f"the server's admin token (default: ${TOKEN_ENV}; none: loopback callers only)"
    )

    models = commands.add_parser("models", help="list, load, reload or unload the models of a running server")
    actions = models.add_subparsers(dest="models_command", required=True, metavar="ACTION")

    listing = actions.add_parser("list", parents=[common], help="every model version and its state")
    listing.add_argument("--ready", action="store_true", help="the ready ones only")
    listing.add_argument("--json", action="store_true", help="print the index as JSON")
    listing.set_defaults(run=run_list)

    load = actions.add_parser(
        "load", parents=[common], help="load a model (again), from inference.yml or from --config"
    )
    load.add_argument("name", metavar="NAME", help="the model's name (inference.yml models[].name)")
    load.add_argument(
        "--config",
        type=Path,
        metavar="FILE",
        help="a YAML or JSON file holding one model entry in inference.yml's format (e.g. a new version)",
    )
    load.set_defaults(run=run_load)

    reload = actions.add_parser("reload", parents=[common], help="load a model again as inference.yml says")
    reload.add_argument("name", metavar="NAME")
    reload.set_defaults(run=run_reload)

    unload = actions.add_parser("unload", parents=[common], help="stop serving every version of a model")
    unload.add_argument("name", metavar="NAME")
    unload.add_argument(
        "--unload-dependents", action="store_true", help="unload it even when the server's DAG uses it"
    )
    unload.set_defaults(run=run_unload)


def run_list(args: argparse.Namespace) -> int:
    def listing(client: GrpsClient) -> int:
        index = client.repository_index(ready=args.ready)
        print(json.dumps(index, indent=2) if args.json else table(index))
        return 0

    return _calling(args, listing)


def run_load(args: argparse.Namespace) -> int:
    try:
        config = None if args.config is None else read_config(args.config, args.name)
    except InputError as exc:
        return _bad_input(str(exc))
    return _calling(args, lambda client: _done(lambda: client.load_model(args.name, config), "loaded"))


def run_reload(args: argparse.Namespace) -> int:
    return _calling(args, lambda client: _done(lambda: client.load_model(args.name), "reloaded"))


def run_unload(args: argparse.Namespace) -> int:
    def unload(client: GrpsClient) -> int:
        return _done(lambda: client.unload_model(args.name, args.unload_dependents), "unloaded")

    return _calling(args, unload)


def table(index: list[dict[str, str]]) -> str:
    """The index as aligned columns NAME VERSION STATE REASON; the server's text shown escaped."""
    rows = [[field.upper() for field in INDEX_FIELDS]]
    rows += [[shown(entry[field], _CELL_CHARS) for field in INDEX_FIELDS] for entry in index]
    widths = [max(len(row[column]) for row in rows) for column in range(len(INDEX_FIELDS))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows
    )


def read_config(path: Path, name: str) -> dict[str, Any]:
    """One model entry from a YAML or JSON file; it names model `name` (or no model: then it is `name`)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise InputError(f"--config: cannot read {path}: {reason}") from exc
    try:
        entry = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise InputError(f"--config: {path} is not YAML or JSON: {shown(exc, 300)}") from exc
    if not isinstance(entry, dict) or "models" in entry:
        raise InputError(f"--config: {path} must hold one model entry (a mapping with name, version, ...)")
    entry.setdefault("name", name)
    if entry["name"] != name:
        raise InputError(f"--config: {path} describes model '{shown(entry['name'])}', not '{shown(name)}'")
    try:
        config_json(entry)
    except ValueError as exc:
        raise InputError(f"--config: {path}: {exc}") from exc
    return entry


def _done(call: Callable[[], None], what: str) -> int:
    call()
    print(what)
    return 0


def _calling(args: argparse.Namespace, call: Callable[[GrpsClient], int]) -> int:
    """As `grps-py predict` calls: a failed call is one line on stderr and exit 1; a bad --url or token 2."""
    url = args.url or f"127.0.0.1:{DEFAULT_PORTS[args.protocol]}"
    token = args.token or os.environ.get(TOKEN_ENV) or None
    try:
        authorization(token)
    except ValueError as exc:
        return _bad_input(f"--token: {exc}")
    try:
        client = GrpsClient(url, protocol=args.protocol, timeout=args.timeout, token=token)
    except ValueError as exc:
        return _bad_input(f"--url: {exc}")
    try:
        with client:
            return call(client)
    except GrpsClientError as exc:
        if exc.status == 401:  # the server names the header to send; here the token comes from --token
            print(f"grps-py: {exc}; give the admin token with --token or ${TOKEN_ENV}", file=sys.stderr)
            return 1
        return _failed(exc)
    except ValueError as exc:  # a NAME the client refuses to send (an empty one)
        return _bad_input(str(exc))


def _bad_input(message: str) -> int:
    print(f"grps-py: {message}", file=sys.stderr)
    return 2

"""`grps-py predict | online | offline | ready`: call a running server over HTTP or gRPC."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from grps_py.cli.messages import TENSOR_FORMAT, InputError, Printer, build_request
from grps_py.client import GrpsClient, GrpsClientError, GrpsConnectionError, GrpsTimeoutError
from grps_py.client.errors import REFUSED
from grps_py.core.errors import InvalidInput

DEFAULT_PORTS = {"http": 7080, "grpc": 7081}
WAIT_POLL_S = 0.2  # `ready --wait`: the pause between two tries


def add_parsers(commands: Any) -> None:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--url", help="the server, HOST:PORT (default 127.0.0.1:7080, or 127.0.0.1:7081 with --protocol grpc)"
    )
    common.add_argument("--protocol", choices=("http", "grpc"), default="http", help="default: http")
    common.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for the answer (60)")
    common.add_argument(
        "--token", help="the server's admin token, for online/offline (default: $GRPS_ADMIN_TOKEN)"
    )

    predict = commands.add_parser("predict", parents=[common], help="send one request and show the answer")
    predict.add_argument("--model", help="name-version of the model to run (default: the server's DAG)")
    source = predict.add_mutually_exclusive_group()
    source.add_argument(
        "--json", metavar="JSON|@FILE", help='a GrpsMessage in JSON, e.g. \'{"str_data": "hi"}\''
    )
    source.add_argument("--file", type=Path, metavar="PATH", help="send the file's bytes as bin_data")
    source.add_argument("--str", dest="text", metavar="TEXT", help="send TEXT as str_data")
    source.add_argument(
        "--tensor",
        action="append",
        metavar=TENSOR_FORMAT,
        help="a tensor (repeat for several), e.g. x:float32:2,2:1,2,3,4; dtypes as numpy names them",
    )
    predict.add_argument("--stream", action="store_true", help="ask for a streamed answer, shown as it comes")
    predict.add_argument("--output", type=Path, metavar="FILE", help="write bin_data answers to FILE")
    predict.set_defaults(run=run_predict)

    for name, what in (
        ("online", "let the server take traffic (readiness answers ready)"),
        ("offline", "take the server out of traffic (readiness answers not ready; requests still run)"),
    ):
        commands.add_parser(name, parents=[common], help=what).set_defaults(run=_RUNS[name])
    ready = commands.add_parser(
        "ready", parents=[common], help="exit 0 when the server is ready, 1 when it is not"
    )
    ready.add_argument(
        "--wait",
        type=_seconds,
        metavar="SECONDS",
        help="keep asking (a server not yet listening counts as not ready) until it is ready, "
        "for up to SECONDS; exit 1 if it is not by then",
    )
    ready.set_defaults(run=run_ready)


def run_predict(args: argparse.Namespace) -> int:
    try:
        request = build_request(args)
        with _output(args.output) as output:
            printer = Printer(sys.stdout, output, args.output)

            def predict(client: GrpsClient) -> int:
                if args.stream:
                    for reply in client.predict_stream(request):
                        printer.show(reply)
                else:
                    printer.show(client.predict(request))
                return 0

            return _calling(args, predict)
    except InputError as exc:
        print(f"grps-py: {exc}", file=sys.stderr)
        return 2


def run_online(args: argparse.Namespace) -> int:
    return _calling(args, lambda client: _switched(client.online, "online"))


def run_offline(args: argparse.Namespace) -> int:
    return _calling(args, lambda client: _switched(client.offline, "offline"))


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds >= 0")
    return value


def run_ready(args: argparse.Namespace) -> int:
    if args.wait is not None:
        return _wait_ready(args)

    def ready(client: GrpsClient) -> int:
        is_ready = client.ready()
        print("ready" if is_ready else "not ready")
        return 0 if is_ready else 1

    return _calling(args, ready)


def _wait_ready(args: argparse.Namespace) -> int:
    """Ask until the server is ready; no connection, or no answer in time, is "not ready yet". Any other
    failure (a 404 from something that is no grps server, a refused token) ends the wait at once."""
    try:
        _client(args, args.timeout).close()  # a --url that is no address fails now, not at each try
    except ValueError as exc:
        print(f"grps-py: --url: {exc}", file=sys.stderr)
        return 2
    end = time.monotonic() + args.wait
    while True:
        timeout = max(min(args.timeout, end - time.monotonic()), WAIT_POLL_S)
        try:
            # A new client each try: a gRPC channel that failed to connect waits out a growing backoff.
            with _client(args, timeout) as client:
                if client.ready():
                    print("ready")
                    return 0
            last = "the server answers not ready"
        except (GrpsConnectionError, GrpsTimeoutError) as exc:
            last = str(exc)
        except GrpsClientError as exc:
            return _failed(exc)
        left = end - time.monotonic()
        if left <= 0:
            print(f"grps-py: not ready after {args.wait:g} s; last try: {last}", file=sys.stderr)
            return 1
        time.sleep(min(WAIT_POLL_S, left))


def _client(args: argparse.Namespace, timeout: float) -> GrpsClient:
    url = args.url or f"127.0.0.1:{DEFAULT_PORTS[args.protocol]}"
    token = args.token or os.environ.get("GRPS_ADMIN_TOKEN") or None
    return GrpsClient(url, protocol=args.protocol, timeout=timeout, token=token)


def _switched(switch: Callable[[], None], state: str) -> int:
    switch()
    print(state)
    return 0


def _calling(args: argparse.Namespace, call: Callable[[GrpsClient], int]) -> int:
    """A failed call is one line on stderr and exit status 1 (2 for a --url that is no address)."""
    try:
        client = _client(args, args.timeout)
    except ValueError as exc:
        print(f"grps-py: --url: {exc}", file=sys.stderr)
        return 2
    try:
        with client:
            return call(client)
    except GrpsClientError as exc:
        return _failed(exc)
    except InvalidInput as exc:  # an answer the printer cannot read
        print(f"grps-py: cannot read the answer: {exc.public_message}", file=sys.stderr)
        return 1


def _failed(exc: GrpsClientError) -> int:
    """The server's answer as `STATUS CODE: message`; a failure no server answered says what happened
    instead, so it cannot be taken for a 503 or 504 the server sent."""
    print(f"grps-py: {exc}{_advice(exc)}", file=sys.stderr)
    return 1


def _advice(exc: GrpsClientError) -> str:
    if isinstance(exc, GrpsTimeoutError):
        return "; wait longer with --timeout SECONDS"
    if isinstance(exc, GrpsConnectionError) and exc.connecting:
        if exc.reason == REFUSED:
            return "; is the server running? (grps-py serve PROJECT_DIR)"
        return "; check --url"
    return ""


@contextlib.contextmanager
def _output(path: Path | None) -> Iterator[BinaryIO | None]:
    if path is None:
        yield None
        return
    try:
        file = path.open("wb")
    except OSError as exc:
        raise InputError(f"--output: cannot write {path}: {exc.strerror or exc}") from exc
    with file:
        yield file


_RUNS = {"online": run_online, "offline": run_offline}

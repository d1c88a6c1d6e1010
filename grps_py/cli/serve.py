"""`grps-py serve` and `grps-py check`: load a project's models, then serve them or only report."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import os
import socket
import sys
import threading
import traceback
from pathlib import Path
from typing import Any, TextIO

from grps_py import event_loop, model_dir
from grps_py.codecs.grps_pb import GrpsMessageBridge
from grps_py.core.config import MODEL_CONTROL_MODES, ServerSettings, parse_server_settings
from grps_py.core.errors import ConfigError, ModelLoadError
from grps_py.core.executor import Executor
from grps_py.core.instance_thread import busy_threads
from grps_py.core.memory import libc, trim_malloc
from grps_py.core.node import ModelNode
from grps_py.core.warmup import Progress
from grps_py.core.yaml_fields import read_yaml
from grps_py.logs import LOGGERS, setup_logging
from grps_py.project import Project, load_project
from grps_py.server import GrpsServer
from grps_py.workers.group import WorkerGroup
from grps_py.workers.supervisor import GPU_ENV, Supervisor


def add_parsers(commands: Any) -> None:
    serve = commands.add_parser(
        "serve",
        help="serve PROJECT_DIR (conf/server.yml, conf/inference.yml, src/), or a model directory (no conf/: "
        "one model.onnx or model.pt, maybe in a version directory 1/, as KServe mounts it at /mnt/models)",
    )
    _project_arguments(serve)
    serve.add_argument(
        "--port", help='override interface.port: "HTTP" or "HTTP,GRPC" as in server.yml (0 picks a free port)'
    )
    serve.add_argument("--http-port", metavar="PORT", help="the HTTP port (env GRPS_HTTP_PORT); 0 picks one")
    serve.add_argument("--grpc-port", metavar="PORT", help="the gRPC port (env GRPS_GRPC_PORT); 0 picks one")
    serve.add_argument(
        "--workers",
        metavar="N|auto",
        help="worker processes sharing the ports (env GRPS_WORKERS; auto: one per core); overrides workers",
    )
    serve.add_argument(
        "--model-control",
        choices=MODEL_CONTROL_MODES,
        help="override model_control: none (models load at start only), explicit (the repository API "
        "loads and unloads them), poll (inference.yml and its files are watched)",
    )
    # A worker of a supervisor (grps_py/workers): not for people to give.
    serve.add_argument("--worker-dir", type=Path, help=argparse.SUPPRESS)
    serve.add_argument("--worker-index", type=int, default=0, help=argparse.SUPPRESS)
    serve.add_argument("--metrics-port", type=int, help=argparse.SUPPRESS)
    serve.set_defaults(run=run_serve)
    check = commands.add_parser(
        "check", help="validate PROJECT_DIR's configs and load (and warm up) every model, without serving"
    )
    _project_arguments(check)
    check.add_argument("-v", "--verbose", action="store_true", help="show the server's log as well")
    check.set_defaults(run=run_check)


def _project_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "project_dir",
        nargs="?",
        default=".",
        type=Path,
        metavar="PROJECT_DIR",
        help="default: the current directory",
    )
    parser.add_argument("--server-conf", type=Path, help="use this server.yml instead of PROJECT_DIR/conf's")
    parser.add_argument(
        "--inference-conf", type=Path, help="use this inference.yml instead of PROJECT_DIR/conf's"
    )
    parser.add_argument(
        "--model-name",
        help="the name a model directory's model is served under (KServe passes the InferenceService's); "
        "default: the directory's name. A project's models keep their own names",
    )


def terminal_progress(stream: TextIO) -> Progress | None:
    """Start-up steps are shown only to a person watching a terminal, never in redirected output."""
    if not stream.isatty():
        return None

    def show(line: str) -> None:
        print(line, file=stream, flush=True)

    return show


def project_settings(args: argparse.Namespace) -> Project:
    """The project's settings, with what `serve`'s options (or their environment variables) override in
    server.yml: interface.port (`--port`, `--http-port`, `--grpc-port`), model_control, workers."""
    bare = serves_model_dir(args)
    if bare:
        project = model_dir.project(args.project_dir, args.model_name or args.project_dir.resolve().name)
    else:
        project = load_project(args.project_dir, args.server_conf, args.inference_conf)
        if args.model_name:
            logging.getLogger("grps_py.server").info(
                "--model-name is for model directories: %s is a project, its models keep their names",
                project.root,
            )
    overrides = _server_overrides(args, project.server)
    if not overrides:
        return project
    path = args.server_conf or project.root / "conf" / "server.yml"
    if bare:
        data: dict[str, Any] = model_dir.server_data()
    else:
        data = read_yaml(path) or {}  # type: ignore[assignment]  # load_project checked it
    for key, (value, _) in overrides.items():
        if key == "port":
            data = {**data, "interface": {**(data.get("interface") or {}), "port": value}}
        else:
            data = {**data, key: value}
    said = ", ".join(origin for _, origin in overrides.values())
    server = parse_server_settings(data, f"{project.server.source} ({said})", project.root)
    return dataclasses.replace(project, server=server)


def _server_overrides(args: argparse.Namespace, server: ServerSettings) -> dict[str, tuple[Any, str]]:
    """server.yml keys -> (value, where it came from), for the options given (serve only)."""
    overrides: dict[str, tuple[Any, str]] = {}
    port = getattr(args, "port", None)
    http_port = _option(args, "http_port", "GRPS_HTTP_PORT")
    grpc_port = _option(args, "grpc_port", "GRPS_GRPC_PORT")
    if port is not None:
        overrides["port"] = (port, "interface.port from --port")
    elif http_port is not None or grpc_port is not None:
        iface = server.interface
        ports = [http_port or str(iface.http_port)]
        if iface.framework == "http+grpc":
            ports.append(grpc_port or str(iface.grpc_port))
        overrides["port"] = (",".join(ports), "interface.port from --http-port/--grpc-port")
    model_control = getattr(args, "model_control", None)
    if model_control is not None:
        overrides["model_control"] = (model_control, "model_control from --model-control")
    workers = _option(args, "workers", "GRPS_WORKERS")
    if workers is not None:
        overrides["workers"] = (
            workers if workers == "auto" else _int_or_text(workers),
            "workers from --workers",
        )
    return overrides


def _option(args: argparse.Namespace, name: str, env: str) -> str | None:
    value = getattr(args, name, None)
    if value is None and hasattr(args, name):  # serve's option, not given: its environment variable
        value = os.environ.get(env) or None
    return None if value is None else str(value)


def _int_or_text(text: str) -> int | str:
    """A number as YAML would read it (`--workers 4`), else the text (`auto`, or a value refused)."""
    return int(text) if text.strip().isdigit() else text


def serves_model_dir(args: argparse.Namespace) -> bool:
    """PROJECT_DIR is a model directory (grps_py/model_dir.py) when it has no conf/ and no config is given."""
    configs = (args.server_conf, args.inference_conf)
    return configs == (None, None) and model_dir.is_model_dir(args.project_dir)


def run_serve(args: argparse.Namespace) -> int:
    """Serve until SIGTERM/SIGINT, then exit 0 after the drain. A start-up fault (invalid config, a model
    that does not load, an error in the project's own code, a port in use) exits 2 after one line on
    stderr naming it, without a traceback."""
    limit_malloc_arenas()
    try:
        setup_logging(None)
        project = project_settings(args)
        if args.worker_dir is not None:
            project = _as_worker(project, args)
        elif project.server.workers > 1:
            check_ports(project.server)
            return Supervisor(_worker_argv(args), project.server, project.server.workers).run()
        group = None
        if args.worker_dir is not None:
            group = WorkerGroup(args.worker_dir, args.worker_index, project.server.workers)
        event_loop.run(_serve(project, group), project.server.event_loop)
    except (ConfigError, ModelLoadError, PortInUse) as exc:
        return _fail(str(exc))
    except KeyboardInterrupt:  # before the server took over the signals
        return 130
    except OSError as exc:
        return _fail(f"cannot listen: {exc}")
    except Exception as exc:
        return _fail(f"{type(exc).__name__}: {_first_line(exc)}{_where(exc, args.project_dir)}")
    return _exit_without_stuck_threads(0)


class PortInUse(Exception):
    """A configured port is taken by another process."""


def _fail(message: str) -> int:
    print(f"grps-py: {message}", file=sys.stderr)
    return 2


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else ""


def check_ports(settings: ServerSettings) -> None:
    """Fail fast, and clearly, on a configured port another process holds (gRPC would otherwise fail
    with its own log lines and a bare error). Port 0 is always free."""
    iface = settings.interface
    ports = [("HTTP", "interface.port", iface.http_port), ("gRPC", "interface.port", iface.grpc_port)]
    if settings.metrics.port:
        ports.append(("metrics", "metrics.port", settings.metrics.port))
    family = socket.AF_INET6 if ":" in iface.host else socket.AF_INET
    for what, key, port in ports:
        if not port or (what == "gRPC" and iface.framework != "http+grpc"):
            continue
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the servers bind
            try:
                probe.bind((iface.host, port))
            except OSError as exc:
                reason = os.strerror(exc.errno).lower() if exc.errno else str(exc)
                raise PortInUse(f"cannot listen on {iface.host}:{port} ({what}, {key}): {reason}") from None


def _exit_without_stuck_threads(code: int) -> int:
    """A model thread still running (a hung model) would hold the interpreter open after the drain:
    exit without waiting for it, once the logs are flushed."""
    me = threading.current_thread()
    stuck = [t for t in threading.enumerate() if t is not me and not t.daemon and t.is_alive()]
    for thread in stuck:
        thread.join(STUCK_THREAD_JOIN_S / len(stuck))  # idle worker threads end at once
    names = [t.name for t in stuck if t.is_alive()] + busy_threads()
    if not names:
        return code
    logging.getLogger("grps_py.server").warning(
        "exiting with %d model thread(s) still running: %s", len(names), ", ".join(names)
    )
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


STUCK_THREAD_JOIN_S = 1.0


M_ARENA_MAX = -8  # glibc's mallopt parameter
MALLOC_ARENAS = 2
MALLOC_TRIM_S = 30.0


def limit_malloc_arenas(count: int = MALLOC_ARENAS) -> None:
    """glibc gives threads their own malloc arenas (up to 8 per core), and memory freed in one is seldom
    returned, so a server with a thread per model instance creeps up in RSS for a long while (about
    0.7 MiB a minute in the soak, scripts/soak.py); a few arenas keep it flatter. Done before any
    thread starts; MALLOC_ARENA_MAX in the environment, read by glibc itself, wins."""
    mallopt = libc("mallopt")
    if mallopt is not None and "MALLOC_ARENA_MAX" not in os.environ:
        mallopt(M_ARENA_MAX, count)


async def trim_malloc_every(period_s: float = MALLOC_TRIM_S) -> None:
    """Give memory the allocator holds free back to the system now and then (glibc keeps freed chunks
    in its heaps: 2-6 MiB at a time under the soak's load, seen as a slow RSS creep otherwise)."""
    if libc("malloc_trim") is None:
        return
    loop = asyncio.get_running_loop()
    while True:
        await asyncio.sleep(period_s)
        await loop.run_in_executor(None, trim_malloc)  # walks the heaps: not on the event loop


def _worker_argv(args: argparse.Namespace) -> list[str]:
    """`serve`'s arguments for a worker, as this command was given them (the supervisor adds the ports
    it chose and the worker options)."""
    argv = [str(args.project_dir)]
    for option, value in (
        ("--server-conf", args.server_conf),
        ("--inference-conf", args.inference_conf),
        ("--model-control", args.model_control),
        ("--model-name", args.model_name),  # a model directory's workers serve it under the same name
    ):
        if value is not None:
            argv += [option, str(value)]
    return argv


def _as_worker(project: Project, args: argparse.Namespace) -> Project:
    """A worker's settings: the metrics port the supervisor chose, and its one GPU as device 0."""
    server = project.server
    if args.metrics_port is not None:
        server = dataclasses.replace(
            server, metrics=dataclasses.replace(server.metrics, port=args.metrics_port)
        )
    if server.gpu is not None and os.environ.get(GPU_ENV):
        server = dataclasses.replace(server, gpu=dataclasses.replace(server.gpu, devices=(0,)))
    return dataclasses.replace(project, server=server)


async def _serve(project: Project, group: WorkerGroup | None = None) -> None:
    if group is None:
        check_ports(project.server)
    server = GrpsServer(project.server, project.inference, group)
    setup_logging(server.settings.log)
    trimming = asyncio.ensure_future(trim_malloc_every())
    try:
        await server.serve(terminal_progress(sys.stderr))
    finally:
        trimming.cancel()


def run_check(args: argparse.Namespace) -> int:
    """Exit 0 after "ok", or 2 after one line naming what is wrong; errors raised by the project's own
    code (a module under src/ that fails to import) are reported that way too."""
    _quiet_logging(args.verbose)
    try:
        asyncio.run(_check(args))
    except (ConfigError, ModelLoadError) as exc:
        print(f"grps-py: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:
        print(f"grps-py: {type(exc).__name__}: {exc}{_where(exc, args.project_dir)}", file=sys.stderr)
        return 2
    print("ok")
    return 0


def _where(exc: BaseException, project_dir: Path) -> str:
    """Where in the project's own code the error was raised, when it was."""
    root = project_dir.resolve()
    inside = [f for f in traceback.extract_tb(exc.__traceback__) if Path(f.filename).is_relative_to(root)]
    return f" (at {inside[-1].filename}:{inside[-1].lineno})" if inside else ""


async def _check(args: argparse.Namespace) -> None:
    project = project_settings(args)
    executor = Executor(project.server, project.inference, GrpsMessageBridge())
    try:
        await executor.start(terminal_progress(sys.stderr))
        for node in executor.nodes.values():
            print(describe(node), flush=True)
    finally:
        executor.close()


def describe(node: ModelNode) -> str:
    """`model classifier-1.0.0: loaded (onnx on cpu (device: auto), 1 instance(s))`: where it really runs,
    as the server's log says it."""
    warmup = node.settings.warmup
    warmed = f", warmed up ({warmup.count} run(s))" if warmup else ""
    return f"model {node.key}: loaded ({node.summary()}{warmed})"


class _NoTracebacks(logging.Filter):
    """Drop log records carrying a traceback: `check` reports that failure itself, in one line."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.exc_info is None


def _quiet_logging(verbose: bool) -> None:
    """`check` prints its own lines; it shows only the log's warnings unless asked for everything."""
    setup_logging(None, logging.INFO if verbose else logging.WARNING)
    if verbose:
        return
    for name in LOGGERS:
        for handler in logging.getLogger(name).handlers:
            if not any(isinstance(f, _NoTracebacks) for f in handler.filters):
                handler.addFilter(_NoTracebacks())

"""`grps-py serve PROJECT_DIR`: serve a grps project."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from pathlib import Path

from grps_py.core.errors import ConfigError, ModelLoadError
from grps_py.logs import setup_logging
from grps_py.server import GrpsServer

log = logging.getLogger("grps_py.cli")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="grps-py", description="Serve models over the grps API and OIP v2.")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="serve PROJECT_DIR (conf/server.yml, conf/inference.yml, src/)")
    serve.add_argument("project_dir", nargs="?", default=".", type=Path)
    serve.add_argument("--server-conf", type=Path, help="use this server.yml instead of PROJECT_DIR/conf's")
    serve.add_argument(
        "--inference-conf", type=Path, help="use this inference.yml instead of PROJECT_DIR/conf's"
    )
    return parser


async def _serve(args: argparse.Namespace) -> None:
    setup_logging(None)
    server = GrpsServer.from_project(args.project_dir, args.server_conf, args.inference_conf)
    setup_logging(server.settings.log)
    await server.serve()


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        asyncio.run(_serve(args))
    except (ConfigError, ModelLoadError) as exc:
        print(f"grps-py: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"grps-py: cannot listen: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

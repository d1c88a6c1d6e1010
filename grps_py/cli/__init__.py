"""`grps-py`: serve a project, check it, start a new one, call a running server, or manage its models.

Exit codes: 0 success; 1 the operation failed (an error answer, a server that is not ready);
2 the input was wrong (bad arguments, an invalid project, a directory that is not empty).
"""

from __future__ import annotations

import argparse

from grps_py.cli import models, remote, scaffold, serve

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="grps-py", description="Serve models over the grps API and the Open Inference Protocol v2."
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    serve.add_parsers(commands)
    scaffold.add_parser(commands)
    remote.add_parsers(commands)
    models.add_parsers(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    code: int = args.run(args)
    return code

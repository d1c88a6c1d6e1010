"""`grps-py init NAME`: write a new project from the template shipped in grps_py/templates/project."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

TEMPLATE = Path(__file__).resolve().parent.parent / "templates" / "project"
PLACEHOLDER = "{{name}}"
_SKIPPED = ("__pycache__", ".pytest_cache", ".mypy_cache", "logs")


def add_parser(commands: Any) -> None:
    init = commands.add_parser(
        "init", help="write a new project (conf, src with a converter and an inferer, a client, a test)"
    )
    init.add_argument(
        "name", type=Path, metavar="NAME", help="the directory to create (must be new or empty)"
    )
    init.set_defaults(run=run_init)


def run_init(args: argparse.Namespace) -> int:
    target: Path = args.name
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        print(
            f"grps-py: {target} already exists and is not an empty directory; choose another NAME",
            file=sys.stderr,
        )
        return 2
    try:
        written = write_project(target, target.resolve().name)
    except OSError as exc:
        print(f"grps-py: cannot write {target}: {exc}", file=sys.stderr)
        return 2
    print(f"created {target} ({len(written)} files); next:")
    for step in ("check", "serve"):
        print(f"  grps-py {step} {target}")
    print(f"  python {target / 'client.py'}          # while it serves")
    print(f"  python -m pytest {target / 'test_project.py'}")
    return 0


def template_files() -> list[Path]:
    """The template's files, relative to it (caches a run of its own test may leave are skipped)."""
    return sorted(
        path.relative_to(TEMPLATE)
        for path in TEMPLATE.rglob("*")
        if path.is_file() and not any(part in _SKIPPED for part in path.relative_to(TEMPLATE).parts)
    )


def write_project(target: Path, name: str) -> list[Path]:
    """Copy the template into TARGET with the project name filled in; returns the files written."""
    written = []
    for rel in template_files():
        text = (TEMPLATE / rel).read_text(encoding="utf-8").replace(PLACEHOLDER, name)
        path = target / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written

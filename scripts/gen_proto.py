"""Generate grps_py/protos/*_pb2*.py from proto/*.proto (the one way they are made).

Usage: python scripts/gen_proto.py [OUT_DIR]   (default: grps_py/protos)
The generated modules import each other as `grps_py.protos.X_pb2`, so the package path is baked in.
"""

from __future__ import annotations

import sys
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
PROTO_DIR = ROOT / "proto"


def generate(out_dir: Path) -> list[Path]:
    """Compile every proto file into `out_dir`; returns the generated files."""
    out_dir.mkdir(parents=True, exist_ok=True)
    # Lay the protos out under grps_py/protos/ in a temporary include root so imports are package paths.
    staging = out_dir / "_staging"
    pkg = staging / "grps_py" / "protos"
    pkg.mkdir(parents=True, exist_ok=True)
    protos = sorted(PROTO_DIR.glob("*.proto"))
    for proto in protos:
        (pkg / proto.name).write_text(proto.read_text())
    args = [
        "grpc_tools.protoc",
        f"-I{staging}",
        f"--python_out={staging}",
        f"--pyi_out={staging}",
        f"--grpc_python_out={staging}",
        *[f"grps_py/protos/{p.name}" for p in protos],
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")
    written = []
    for generated in sorted(pkg.glob("*_pb2*.py*")):
        target = out_dir / generated.name
        target.write_text(generated.read_text())
        written.append(target)
    for leftover in sorted(staging.rglob("*"), reverse=True):
        leftover.unlink() if leftover.is_file() else leftover.rmdir()
    staging.rmdir()
    return written


if __name__ == "__main__":
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "grps_py" / "protos"
    for path in generate(out):
        print(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path)

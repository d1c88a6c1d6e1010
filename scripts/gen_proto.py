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
# Protos whose generated module registers its file in a private descriptor pool instead of the default
# one. Why: tritonclient.grpc defines the same fully-qualified names (`inference.ModelInferRequest`...)
# in the default pool, and one process may import both (our server and a tritonclient: the test suite,
# or a user's model that calls Triton); two files defining one name in a pool fail with "duplicate
# symbol". A private pool keeps our classes apart; the wire bytes are the same either way.
# Holds for protobuf's default upb backend. The pure-Python backend (PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION
# =python) registers every generated class in the default pool anyway, so there the two still collide.
PRIVATE_POOL = {"open_inference_pb2.py"}
_DEFAULT_POOL_CALL = "_descriptor_pool.Default().AddSerializedFile("
_PRIVATE_POOL_CALL = "_descriptor_pool.DescriptorPool().AddSerializedFile("


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
        code = generated.read_text()
        if generated.name in PRIVATE_POOL:
            code = _use_private_pool(code, generated.name)
        target.write_text(code)
        written.append(target)
    for leftover in sorted(staging.rglob("*"), reverse=True):
        leftover.unlink() if leftover.is_file() else leftover.rmdir()
    staging.rmdir()
    return written


def _use_private_pool(code: str, name: str) -> str:
    """Register the file in its own `DescriptorPool()` (see PRIVATE_POOL); fail loudly if protoc changed."""
    if code.count(_DEFAULT_POOL_CALL) != 1:
        raise SystemExit(
            f"{name}: expected one `{_DEFAULT_POOL_CALL}` line to rewrite; protoc output changed"
        )
    return code.replace(_DEFAULT_POOL_CALL, _PRIVATE_POOL_CALL)


if __name__ == "__main__":
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "grps_py" / "protos"
    for path in generate(out):
        print(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path)

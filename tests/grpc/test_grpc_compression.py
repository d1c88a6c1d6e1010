"""Compressed gRPC requests: refused by default (a decompression bomb costs the server nothing), accepted
with `limits.grpc_compressed_requests: true`.

gRPC core checks a compressed message's size against the limit before inflating it and inflates it
whole before checking again: a gzip message of a few hundred KB inflating to hundreds of MiB costs the
server that much memory on its way to RESOURCE_EXHAUSTED. So the bomb is sent to a server in a process of
its own, whose peak resident memory (VmHWM) is read before and after.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from grps_py.protos import grps_pb2, grps_pb2_grpc
from support import BASIC, LIGHT_INFERENCE, TESTS, ServerThread, start_project

Msg = grps_pb2.GrpsMessage
MIB = 1 << 20
BOMB_MIB = 200  # inflated; a few hundred KB on the wire, under the 64 MiB message limit
DISABLED = "Compression algorithm 'gzip' is disabled"
# A server in its own process: it prints its gRPC port, then serves until its stdin closes.
SERVE = textwrap.dedent(
    """
    import sys
    from pathlib import Path

    from support import BASIC, start_project

    server = start_project(BASIC, inference_conf=Path(sys.argv[1]), server_conf=Path(sys.argv[2]))
    print(server.server.grpc_port, flush=True)
    sys.stdin.read()
    server.stop()
    """
)


def write_project(tmp_path: Path, extra: str = "") -> tuple[Path, Path]:
    server_conf = tmp_path / "server.yml"
    server_conf.write_text("interface:\n  host: 127.0.0.1\n  port: 0,0\n" + extra)
    inference_conf = tmp_path / "inference.yml"
    inference_conf.write_text(LIGHT_INFERENCE)
    return inference_conf, server_conf


def peak_rss(pid: int) -> int:
    """The process's peak resident memory so far (VmHWM), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM in /proc/<pid>/status")


@pytest.fixture(scope="module")
def served_apart(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """A server with the default limits in a process of its own, and its gRPC target."""
    inference_conf, server_conf = write_project(tmp_path_factory.mktemp("compression"))
    tests = TESTS
    path = os.pathsep.join([str(tests.parent), str(tests), os.environ.get("PYTHONPATH", "")])
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVE, str(inference_conf), str(server_conf)],
        cwd=tests,
        env={**os.environ, "PYTHONPATH": path},  # this checkout's grps_py
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdin is not None
    try:
        port = int(proc.stdout.readline())
        yield proc, f"127.0.0.1:{port}"
    finally:
        proc.stdin.close()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def accepting(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    """A server with `limits.grpc_compressed_requests: true`."""
    paths = write_project(
        tmp_path_factory.mktemp("compressed"), "limits:\n  grpc_compressed_requests: true\n"
    )
    server = start_project(BASIC, *paths)
    yield server
    server.stop()


def predict(target: str, message: Msg, compression: grpc.Compression | None) -> Msg:
    with grpc.insecure_channel(target) as channel:
        reply: Msg = grps_pb2_grpc.GrpsServiceStub(channel).Predict(
            message, compression=compression, timeout=60
        )
        return reply


def test_a_gzip_bomb_is_refused_before_it_is_inflated(
    served_apart: tuple[subprocess.Popen[str], str],
) -> None:
    proc, target = served_apart
    assert predict(target, Msg(model="echo-1.0", str_data="warm"), None).str_data == "warm"
    before = peak_rss(proc.pid)
    bomb = Msg(model="echo-1.0", bin_data=bytes(BOMB_MIB * MIB))
    with pytest.raises(grpc.RpcError) as err:
        predict(target, bomb, grpc.Compression.Gzip)
    del bomb
    assert err.value.code() is grpc.StatusCode.UNIMPLEMENTED
    assert DISABLED in (err.value.details() or "")
    grown = peak_rss(proc.pid) - before
    assert grown < 100 * MIB, f"the server's peak RSS grew {grown / MIB:.0f} MiB"
    # The server is unharmed, and uncompressed requests are served as before.
    assert predict(target, Msg(model="echo-1.0", str_data="after"), None).str_data == "after"


@pytest.mark.parametrize("compression", [grpc.Compression.Gzip, grpc.Compression.Deflate])
def test_small_compressed_requests_are_refused_too_by_default(
    served_apart: tuple[subprocess.Popen[str], str], compression: grpc.Compression
) -> None:
    with pytest.raises(grpc.RpcError) as err:
        predict(served_apart[1], Msg(model="echo-1.0", str_data="x" * 10_000), compression)
    assert err.value.code() is grpc.StatusCode.UNIMPLEMENTED
    assert "is disabled" in (err.value.details() or "")


@pytest.mark.parametrize("compression", [grpc.Compression.Gzip, grpc.Compression.Deflate])
def test_with_the_setting_compressed_requests_are_served(
    accepting: ServerThread, compression: grpc.Compression
) -> None:
    text = "compressible " * 2_000
    assert predict(accepting.grpc_target, Msg(model="echo-1.0", str_data=text), compression).str_data == text
    assert predict(accepting.grpc_target, Msg(model="echo-1.0", str_data="plain"), None).str_data == "plain"

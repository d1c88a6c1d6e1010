"""What one small gRPC request costs in grps-py's own Python, counted rather than timed.

Timings on a shared 2-core VM vary by 15-30%, so a change of a few percent to the hot path cannot be
seen in them. This drives the identity model (`bench/projects/identity`) in one process, with no
transport: each request goes through the gRPC boundary (with a stand-in for grpc's context), the
codec, dataplane, executor, node, scheduler and metrics, and its model runs on the loop rather than
its thread, so that the same request runs the same code each time. It prints the bytecodes the
interpreter ran per request, by file and by function (`sys.settrace` with opcode events).

With `--plain N` it only sends N requests: run it twice under `valgrind --tool=callgrind` with two
values of N and divide the difference in instructions by the difference in N to get instructions per
request (repeat runs agree within about 1%).

    .venv/bin/python bench/hotpath.py [--api oip|grps] [--top 30]
    valgrind --tool=callgrind --callgrind-out-file=/dev/null .venv/bin/python bench/hotpath.py --plain 2000
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import sys
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import compare  # noqa: E402

from grps_py import event_loop  # noqa: E402
from grps_py.access import AccessGuard  # noqa: E402
from grps_py.core.instance_thread import InstanceThread  # noqa: E402
from grps_py.grpc.boundary import handler  # noqa: E402
from grps_py.grpc.grps_service import GrpsService  # noqa: E402
from grps_py.grpc.oip_service import OipService  # noqa: E402
from grps_py.server import GrpsServer  # noqa: E402

PROJECT = ROOT / "bench/projects/identity"
WARM_UP = 200


class Context:
    """What the boundary asks of grpc's ServicerContext, answered as for a plain call."""

    def invocation_metadata(self) -> tuple[()]:
        return ()

    def set_trailing_metadata(self, metadata: Any) -> None:
        pass

    def time_remaining(self) -> None:
        return None

    def peer(self) -> str:
        return "ipv4:127.0.0.1:1"

    async def abort(self, code: Any, message: str) -> None:
        raise RuntimeError(message)


def run_inline(
    self: InstanceThread, loop: asyncio.AbstractEventLoop, fn: Any, arg: Any, on_done: Any
) -> None:
    """InstanceThread.call without the thread: the hand-off's cost depends on timing, not on the code."""
    loop.call_soon(on_done, fn(arg))


class Counter:
    """Bytecodes run, by (file, function), while tracing."""

    def __init__(self) -> None:
        self.counts: collections.Counter[tuple[str, str]] = collections.Counter()

    def trace(self, frame: FrameType, event: str, arg: Any) -> Any:
        frame.f_trace_opcodes = True
        if event == "opcode":
            code = frame.f_code
            self.counts[(_short(code.co_filename), code.co_name)] += 1
        return self.trace


def _short(filename: str) -> str:
    return filename.replace(f"{ROOT}/", "").split("site-packages/")[-1]


async def main(args: argparse.Namespace) -> None:
    InstanceThread.call = run_inline  # type: ignore[method-assign]
    server = GrpsServer.from_project(PROJECT, PROJECT / "conf/server.yml")
    await server.start()
    guard, limits = AccessGuard(server.settings.security), server.settings.limits
    try:
        if args.api == "oip":
            call = handler(OipService(server.executor, guard, limits), "ModelInfer")
            _, body = compare.grpc_request(compare.CASES[2])  # OIP gRPC [1,16]
        else:
            call = handler(GrpsService(server.executor, guard, limits), "Predict")
            _, body = compare.grpc_request(compare.CASES[6])  # grps gRPC [1,16]
        context = Context()
        for _ in range(args.plain or WARM_UP):
            await call(body, context)
        if args.plain:
            return
        counter = Counter()
        sys.settrace(counter.trace)
        for _ in range(args.requests):
            await call(body, context)
        sys.settrace(None)
        report(counter.counts, args)
    finally:
        await server.stop(0)


def report(counts: collections.Counter[tuple[str, str]], args: argparse.Namespace) -> None:
    n = args.requests
    print(f"{args.api} gRPC [1,16]: {sum(counts.values()) / n:.0f} bytecodes per request")
    by_file: collections.Counter[str] = collections.Counter()
    for (filename, _), count in counts.items():
        by_file[filename] += count
    for filename, count in by_file.most_common(args.top):
        print(f"{count / n:8.0f}  {filename}")
    print()
    for (filename, function), count in counts.most_common(args.top):
        print(f"{count / n:8.0f}  {filename}:{function}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--api", choices=("oip", "grps"), default="oip")
    parser.add_argument("--requests", type=int, default=20, help="requests traced (after a warm-up)")
    parser.add_argument("--top", type=int, default=30, help="files and functions listed")
    parser.add_argument("--plain", type=int, default=0, metavar="N", help="send N requests, trace nothing")
    event_loop.run(main(parser.parse_args()))

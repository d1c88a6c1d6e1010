"""The load the benchmarks share: `concurrency` workers sending back to back, latencies recorded."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import grpc
import numpy as np
import orjson

Send = Callable[[], Awaitable[object]]


@dataclass(frozen=True)
class Load:
    requests_per_s: float
    p50_ms: float
    p99_ms: float
    errors: int = 0  # failed or timed-out requests (counted only when `drive` tolerates them)
    requests: int = 0  # answered requests


async def drive(send: Send, seconds: float, concurrency: int, request_timeout_s: float | None = None) -> Load:
    """Requests/s, p50 and p99 of `concurrency` workers sending back to back for `seconds`.

    With `request_timeout_s`, a request that fails or takes longer is counted in `errors` instead of
    ending the run: the run then lasts at most `seconds + request_timeout_s`."""
    latencies: list[float] = []
    errors = 0
    stop = time.perf_counter() + seconds

    async def worker() -> None:
        nonlocal errors
        while time.perf_counter() < stop:
            start = time.perf_counter()
            if request_timeout_s is None:
                await send()
            else:
                try:
                    await asyncio.wait_for(send(), request_timeout_s)
                except Exception:
                    errors += 1
                    continue
            latencies.append(time.perf_counter() - start)

    began = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.perf_counter() - began
    ordered = sorted(latencies) or [float("nan")]
    return Load(
        len(latencies) / elapsed,
        ordered[len(ordered) // 2] * 1e3,
        ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1e3,
        errors,
        len(latencies),
    )


class RawHttp:
    """The cheapest HTTP/1.1 client: keep-alive connections re-sending one pre-built request.

    The load client shares the machine with the server; aiohttp's parsing costs about as much CPU as
    the server's own work, so the benchmarks send pre-built bytes and read only Content-Length."""

    def __init__(self, host: str, port: int, path: str, body: bytes, headers: dict[str, str]) -> None:
        head = f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Length: {len(body)}\r\n"
        head += "".join(f"{name}: {value}\r\n" for name, value in headers.items())
        self.request = head.encode() + b"\r\n" + body
        self.host, self.port = host, port
        self._idle: asyncio.Queue[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = asyncio.Queue()
        self._all: list[asyncio.StreamWriter] = []

    async def send(self) -> bytes:
        """One request on a free connection (a new one when all are busy); the response body. A kept-alive
        connection the server closed meanwhile (an idle timeout between runs) is replaced, once."""
        fresh = self._idle.empty()
        if fresh:
            reader, writer = await self._connect()
        else:
            reader, writer = self._idle.get_nowait()
        writer.write(self.request)
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()
            if fresh:
                raise
            reader, writer = await self._connect()
            writer.write(self.request)
            head = await reader.readuntil(b"\r\n\r\n")
        status = head[9:12]
        lowered = head.lower()
        # the line's own start, so Inference-Header-Content-Length does not match
        if b"\r\ncontent-length:" in lowered:
            length = int(lowered.split(b"\r\ncontent-length:", 1)[1].split(b"\r\n", 1)[0])
            body = await reader.readexactly(length)
        else:  # chunked (uvicorn answers so when the app does not set a length)
            body = await self._read_chunks(reader)
        self._idle.put_nowait((reader, writer))
        if status != b"200":
            raise RuntimeError(f"HTTP {status.decode()}: {body[:200]!r}")
        return body

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        reader, writer = await asyncio.open_connection(self.host, self.port)
        self._all.append(writer)
        return reader, writer

    @staticmethod
    async def _read_chunks(reader: asyncio.StreamReader) -> bytes:
        chunks = []
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";", 1)[0], 16)
            if size == 0:
                await reader.readuntil(b"\r\n")  # no trailers are expected: the blank line
                return b"".join(chunks)
            chunks.append(await reader.readexactly(size))
            await reader.readexactly(2)

    async def close(self) -> None:
        for writer in self._all:
            writer.close()


class RawGrpc:
    """One unary method called with pre-serialized request bytes; the answer is read as bytes, not
    parsed (the client's protobuf work would otherwise weigh on the server sharing its cores)."""

    def __init__(self, channel: grpc.aio.Channel, method: str, request: bytes) -> None:
        self._call = channel.unary_unary(method)
        self.request = request

    async def send(self) -> bytes:
        reply: bytes = await self._call(self.request)
        return reply


def oip_binary_request(x: np.ndarray, output: str) -> tuple[bytes, dict[str, str]]:
    """The body and headers of an OIP HTTP binary-extension request: FP32 input `x`, output `output`
    asked for as binary data."""
    header = orjson.dumps(
        {
            "inputs": [
                {
                    "name": "x",
                    "shape": list(x.shape),
                    "datatype": "FP32",
                    "parameters": {"binary_data_size": x.nbytes},
                }
            ],
            "outputs": [{"name": output, "parameters": {"binary_data": True}}],
        }
    )
    headers = {
        "Content-Type": "application/octet-stream",
        "Inference-Header-Content-Length": str(len(header)),
    }
    return header + x.tobytes(), headers

"""A worker's view of its group: the traffic switch they share, and asking every worker something.

The supervisor's directory (private to this user) holds:
- `online`: "1" or "0", the traffic switch of the whole server. A worker reads it whenever readiness
  is asked and writes it (atomically, by rename) on online/offline, so a switch sent to one worker
  holds for all at once;
- `worker-<i>.sock`: worker i's socket, answering one request per connection: a JSON line
  `{"op": ..., ...}` in, a JSON line `{"status": 200, "body": ...}` out (`status` as the error table
  gives it when the operation failed, with the public message in `error`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson

from grps_py.core.errors import ERROR_TABLE, GrpsError, InternalError, error_row

log = logging.getLogger("grps_py.workers")

ONLINE_FILE = "online"
RESTARTS_FILE = "restarts"  # written by the supervisor
JOURNAL_FILE = "repository.jsonl"  # the repository operations given to the group, in order
MAX_LINE_BYTES = 64 << 20  # a metrics exposition of many models; the sockets are private to this user
ASK_TIMEOUT_S = 10.0
LOAD_TIMEOUT_S = 3600.0  # a repository load waits for every worker's model to load and warm up

Handler = Callable[[dict[str, Any]], Awaitable[Any]]


class _Refused(Exception):
    """An operation a worker refused: its status and public message."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.message, self.status = message, status

    def as_error(self) -> GrpsError:
        """The refusal as the error a client gets: the first class of the error table with its status."""
        for cls, row in ERROR_TABLE.items():
            if row.http == self.status:
                return cls(self.message)
        return InternalError(self.message)


class SharedTraffic:
    """The traffic switch of every worker: a file in the group's directory."""

    def __init__(self, directory: Path) -> None:
        self._path = directory / ONLINE_FILE

    @property
    def online(self) -> bool:
        try:
            return self._path.read_bytes()[:1] == b"1"
        except OSError:
            return False

    def set(self, online: bool) -> None:
        write_switch(self._path.parent, online)

    def start(self, online: bool) -> None:
        pass  # the supervisor set it from start_online before any worker started


def write_switch(directory: Path, online: bool) -> None:
    """Replace the switch at once (a reader sees the old file or the new one, never half of one)."""
    temporary = directory / f".{ONLINE_FILE}.{os.getpid()}"
    temporary.write_bytes(b"1" if online else b"0")
    os.replace(temporary, directory / ONLINE_FILE)


def socket_path(directory: Path, index: int) -> Path:
    return directory / f"worker-{index}.sock"


class WorkerGroup:
    """Worker `index` of `count`, in the supervisor's `directory`."""

    def __init__(self, directory: Path, index: int, count: int) -> None:
        self.directory = directory
        self.index = index
        self.count = count
        self.traffic = SharedTraffic(directory)
        self._server: asyncio.AbstractServer | None = None

    # -- answering the others -----------------------------------------------------------------
    async def serve(self, handler: Handler) -> None:
        """Answer the other workers' requests with `handler` (op -> a JSON-able body)."""
        path = socket_path(self.directory, self.index)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()  # a socket left by this worker's previous life

        async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                request = orjson.loads(await reader.readline())
                body = await handler(request)
                reply: dict[str, Any] = {"status": 200, "body": body}
            except GrpsError as exc:
                reply = {"status": error_row(exc).http, "error": exc.public_message}
            except Exception as exc:  # never a traceback across: the worker's log has it
                log.exception("worker %d: a request from another worker failed", self.index)
                reply = {"status": 500, "error": f"worker {self.index} failed: {type(exc).__name__}"}
            try:
                writer.write(orjson.dumps(reply) + b"\n")
                await writer.drain()
            finally:
                writer.close()

        self._server = await asyncio.start_unix_server(answer, path=str(path), limit=MAX_LINE_BYTES)

    def close(self) -> None:
        if self._server is not None:
            self._server.close()
        with contextlib.suppress(FileNotFoundError):
            socket_path(self.directory, self.index).unlink()

    def exposition(self, answering: int) -> bytes:
        """For /metrics, what no worker counts alone: the workers configured, those that answered this
        scrape (`answering`: the others are starting or restarting), and the supervisor's restarts."""
        try:
            restarts = int((self.directory / RESTARTS_FILE).read_text() or 0)
        except (OSError, ValueError):
            restarts = 0
        return (
            "# HELP grps_worker_restarts_total Worker processes started again after they ended.\n"
            "# TYPE grps_worker_restarts_total counter\n"
            f"grps_worker_restarts_total {restarts}.0\n"
            "# HELP grps_workers Worker processes the server runs (server.yml workers).\n"
            "# TYPE grps_workers gauge\n"
            f"grps_workers {self.count}.0\n"
            "# HELP grps_workers_serving Workers serving now (the others are starting or restarting).\n"
            "# TYPE grps_workers_serving gauge\n"
            f"grps_workers_serving {answering}.0\n"
        ).encode()

    # -- asking every worker ------------------------------------------------------------------
    async def ask_all(self, request: dict[str, Any], timeout_s: float = ASK_TIMEOUT_S) -> list[Any]:
        """Every worker's answer (this one's too, through its own socket: one path for all). A worker
        that is not there (restarting) is left out; a refusal raises the error its status means."""
        replies = await asyncio.gather(
            *(self._ask(i, request, timeout_s) for i in range(self.count)), return_exceptions=True
        )
        answers: list[Any] = []
        for index, reply in enumerate(replies):
            if isinstance(reply, _Refused):
                raise reply.as_error()
            if isinstance(reply, BaseException):
                log.debug("worker %d did not answer: %s", index, reply)
                continue
            answers.append(reply)
        return answers

    async def apply_everywhere(self, request: dict[str, Any]) -> object:
        """A repository operation in every worker; returns once each has applied it (a load waits for
        every worker's model to load and warm up). It is written to the journal first: a worker that
        starts later (or again) replays it, and serves what the others serve."""
        with (self.directory / JOURNAL_FILE).open("ab") as journal:
            journal.write(orjson.dumps(request) + b"\n")
        return await self.ask_all(request, LOAD_TIMEOUT_S)

    async def replay(self, apply: Handler) -> None:
        """The repository operations the group was given before this worker started, applied here in
        their order (one that fails is logged: it failed in the others too, or the worker says why)."""
        path = self.directory / JOURNAL_FILE
        if not path.exists():
            return
        for line in path.read_bytes().splitlines():
            request = orjson.loads(line)
            try:
                await apply(request)
            except GrpsError as exc:
                log.warning(
                    "worker %d: replaying %s %s: %s",
                    self.index,
                    request.get("op"),
                    request.get("name"),
                    exc.public_message,
                )

    async def _ask(self, index: int, request: dict[str, Any], timeout_s: float) -> Any:
        path = socket_path(self.directory, index)
        reader, writer = await asyncio.wait_for(
            asyncio.open_unix_connection(str(path), limit=MAX_LINE_BYTES), timeout_s
        )
        try:
            writer.write(orjson.dumps(request) + b"\n")
            await writer.drain()
            reply = orjson.loads(await asyncio.wait_for(reader.readline(), timeout_s))
        finally:
            writer.close()
        if reply.get("status") != 200:
            raise _Refused(str(reply.get("error", "failed")), int(reply.get("status", 500)))
        return reply.get("body")

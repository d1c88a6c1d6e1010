"""Logging setup: stderr always, plus a daily-rotated file when log.log_dir is set.

The access log (one line per request) is written as it comes but flushed to the OS in batches:
at most every `ACCESS_FLUSH_S` (the server calls `flush_access_log`), at once for warnings and
errors, and at shutdown, instead of a write system call per request.
"""

from __future__ import annotations

import io
import logging
import logging.handlers
import sys
from typing import Any

from grps_py.core.config import LogSettings

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
LOGGERS = ("grps_py", "tornado")
ACCESS_LOGGER = "tornado.access"
ACCESS_FLUSH_S = 0.5


class _DeferredFlush:
    """Per-record flushes are skipped for INFO records; `flush_now` (or a warning) writes them out."""

    def flush(self) -> None:  # called by logging after every record
        pass

    def flush_now(self) -> None:
        super().flush()  # type: ignore[misc]

    def handle(self, record: logging.LogRecord) -> bool:
        handled: bool = super().handle(record)  # type: ignore[misc]
        if record.levelno >= logging.WARNING:
            self.flush_now()
        return handled

    def close(self) -> None:
        self.flush_now()
        super().close()  # type: ignore[misc]


class DeferredStreamHandler(_DeferredFlush, logging.StreamHandler):  # type: ignore[type-arg]
    pass


class DeferredFileHandler(_DeferredFlush, logging.handlers.TimedRotatingFileHandler):
    pass


def setup_logging(settings: LogSettings | None, level: int = logging.INFO) -> None:
    """Our logs and Tornado's go to stderr and, when configured, a file; the access log batched."""
    for name in LOGGERS:
        _configure(logging.getLogger(name), settings, level, deferred=False)
    _configure(logging.getLogger(ACCESS_LOGGER), settings, level, deferred=True)


def flush_access_log() -> None:
    for handler in logging.getLogger(ACCESS_LOGGER).handlers:
        if isinstance(handler, _DeferredFlush):
            handler.flush_now()


def _stderr_buffered() -> Any:
    """stderr with a block buffer of its own (sys.stderr is line-buffered: a write per line)."""
    raw = io.FileIO(sys.stderr.fileno(), "w", closefd=False)
    return io.TextIOWrapper(io.BufferedWriter(raw, 1 << 16), encoding="utf-8", errors="replace")


def _configure(logger: logging.Logger, settings: LogSettings | None, level: int, deferred: bool) -> None:
    """Idempotent: the stderr handler is added once, the file handler once per log directory."""
    logger.setLevel(level)
    logger.propagate = False
    targets = {getattr(h, "baseFilename", "<stderr>") for h in logger.handlers}
    if "<stderr>" not in targets:
        stream = DeferredStreamHandler(_stderr_buffered()) if deferred else logging.StreamHandler()
        stream.setFormatter(logging.Formatter(FORMAT))
        logger.addHandler(stream)
    if settings is None or settings.log_dir is None:
        return
    path = settings.log_dir / "grps_server.log"
    if str(path.resolve()) in targets:
        return
    settings.log_dir.mkdir(parents=True, exist_ok=True)
    handler_class = DeferredFileHandler if deferred else logging.handlers.TimedRotatingFileHandler
    file_handler = handler_class(path, when="midnight", backupCount=settings.log_backup_count)
    file_handler.setFormatter(logging.Formatter(FORMAT))
    logger.addHandler(file_handler)

"""Logging setup: stderr always, plus a daily-rotated file when log.log_dir is set.

Model code's own lines (grps's `clogger`, the `grps_py.user` logger) also go to `grps_usr.log` in the
same directory, as grps writes them, rotated and capped as the server's file is; they stay in
`grps_server.log` too, so one grep there still finds everything about a request.

Every line carries the id of the request it was written for (`[id]` in text, `request_id` in JSON;
"-" outside a request), tracebacks included, so one grep finds all of a request. A line's message is
capped (`MAX_MESSAGE_CHARS`): a huge or binary value put in a message cannot flood the log. In the text
format a message is one line: a character that is not printable (a line break, a terminal escape) is
escaped as `repr` escapes it, so no value a client sent can start a line of its own that looks like ours
(`grps_py.core.untrusted`). Tracebacks keep their line breaks, each line prefixed with `[request id]`.

The access log (`ACCESS_LOGGER`, one line per request) and the log file are written as lines come but
flushed to the OS in batches: at most every `ACCESS_FLUSH_S` (the server calls `flush_access_log`),
at once for warnings and errors, and at shutdown, instead of a write system call per request.

The access log's own lines skip the logging machinery (a LogRecord, filters, a lock and a formatter
call per handler, for every request): `write_access_line`
formats each line once, as the handlers' formatter would, and queues it on our handlers, which write
the queue before any other record and at each flush. A handler attached by anyone else still gets
a LogRecord per line.
"""

from __future__ import annotations

import io
import logging
import logging.handlers
import sys
import time
from pathlib import Path
from typing import Any

import orjson

from grps_py.core import request_scope
from grps_py.core.config import LogSettings
from grps_py.core.untrusted import one_line

TEXT_FORMAT = "%(asctime)s %(levelname)s [%(request_id)s] %(name)s: %(message)s"
LOGGERS = ("grps_py", "tornado")
ACCESS_LOGGER = "grps_py.access"
TORNADO_ACCESS_LOGGER = "tornado.access"  # replaced by ours: silenced
ACCESS_FLUSH_S = 0.5
LOG_FILE = "grps_server.log"
USER_LOGGER = "grps_py.user"  # grps's `clogger`: what model code logs
USER_LOG_FILE = "grps_usr.log"
MAX_MESSAGE_CHARS = 4096  # per message, and per line of a traceback


def cap(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... [{len(text) - limit} more chars]"


class RequestIdFilter(logging.Filter):
    """Adds `request_id` to each record: the one given with `extra=`, else the current request's, else "-"."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not getattr(record, "request_id", ""):
            record.request_id = request_scope.current() or request_scope.NONE
        return True


class MessageCap(logging.Filter):
    """Formats the message once and caps it; handlers after this one reuse the result."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.args or len(str(record.msg)) > MAX_MESSAGE_CHARS:
            try:
                message = record.getMessage()
            except Exception:  # a bad log call: left for the handler to report as logging does
                return True
            record.msg, record.args = cap(message), None
        return True


def _exception_text(formatter: logging.Formatter, record: logging.LogRecord) -> str:
    """The traceback (and stack) of a record, each line capped; cached on the record as logging does."""
    if record.exc_info and not record.exc_text:
        text = formatter.formatException(record.exc_info)
        record.exc_text = "\n".join(cap(line) for line in text.splitlines())
    parts = [record.exc_text or "", formatter.formatStack(record.stack_info) if record.stack_info else ""]
    return "\n".join(p for p in parts if p)


class _Clock:
    """A record's local time as text, its date and seconds formatted once per second (strftime and the
    time zone lookup, not once per line)."""

    def __init__(self, fmt: str) -> None:
        self._fmt = fmt
        self._cached: tuple[int, str, str] = (-1, "", "")

    def parts(self, created: float) -> tuple[str, str, str]:
        """Date and seconds, milliseconds, and the UTC offset as +HH:MM."""
        second, text, zone = self._cached
        now = int(created)
        if now != second:
            local = time.localtime(now)
            offset = time.strftime("%z", local)
            text, zone = time.strftime(self._fmt, local), f"{offset[:3]}:{offset[3:]}"
            self._cached = (now, text, zone)
        return text, f"{int((created - now) * 1000):03d}", zone


class _OncePerRecord(logging.Formatter):
    """Handlers sharing this formatter (stderr and the file) format a record once, not once each."""

    _last: tuple[logging.LogRecord | None, str] = (None, "")

    def format(self, record: logging.LogRecord) -> str:
        last, text = self._last
        if last is record:
            return text
        text = self.render(record)
        self._last = (record, text)
        return text

    def render(self, record: logging.LogRecord) -> str:
        raise NotImplementedError


class TextFormatter(_OncePerRecord):
    """`time LEVEL [request id] logger: message`; each traceback line starts with `[request id]` too.
    The message is one line (`one_line`)."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)
        self._clock = _Clock("%Y-%m-%d %H:%M:%S")

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        if datefmt is not None:
            return super().formatTime(record, datefmt)
        text, millis, _ = self._clock.parts(record.created)
        return f"{text},{millis}"

    def access_line(self, created: float, rid: str, message: str, fields: dict[str, Any]) -> str:
        """What `format` makes of an access-log record (INFO, `ACCESS_LOGGER`) with these contents."""
        text, millis, _ = self._clock.parts(created)
        return f"{text},{millis} INFO [{rid}] {ACCESS_LOGGER}: {one_line(message)}"

    def render(self, record: logging.LogRecord) -> str:
        rid = getattr(record, "request_id", "") or request_scope.current() or request_scope.NONE
        record.request_id = rid  # also for a handler without RequestIdFilter
        record.message = one_line(record.getMessage())
        record.asctime = self.formatTime(record, self.datefmt)
        line = self.formatMessage(record)
        detail = _exception_text(self, record)
        if not detail:
            return line
        # Every line of a traceback starts with the id ("[-]" outside a request): an exception's message
        # may quote a request's value, line breaks and all, but it cannot start a line of its own.
        detail = "\n".join(f"[{rid}] {part}" for part in detail.splitlines())
        return f"{line}\n{detail}"


class JsonFormatter(_OncePerRecord):
    """One JSON object per line: time, level, logger, request_id, message, exc_info (a string, when there
    is a traceback), and the structured fields a record carries in `fields` (the access log's)."""

    def __init__(self) -> None:
        super().__init__()
        self._clock = _Clock("%Y-%m-%dT%H:%M:%S")

    def access_line(self, created: float, rid: str, message: str, fields: dict[str, Any]) -> str:
        """What `format` makes of an access-log record (INFO, `ACCESS_LOGGER`) with these contents."""
        text, millis, zone = self._clock.parts(created)
        doc = {
            "time": f"{text}.{millis}{zone}",
            "level": "INFO",
            "logger": ACCESS_LOGGER,
            "request_id": rid,
            "message": message,
            **fields,
        }
        return orjson.dumps(doc, default=str).decode()

    def render(self, record: logging.LogRecord) -> str:
        text, millis, zone = self._clock.parts(record.created)
        doc: dict[str, Any] = {
            "time": f"{text}.{millis}{zone}",
            "level": record.levelname,
            "logger": record.name,
            "request_id": getattr(record, "request_id", "") or request_scope.current() or request_scope.NONE,
            "message": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            doc.update(fields)
        detail = _exception_text(self, record)
        if detail:
            doc["exc_info"] = detail
        return orjson.dumps(doc, default=str).decode()


def make_formatter(fmt: str) -> logging.Formatter:
    return JsonFormatter() if fmt == "json" else TextFormatter()


class _DeferredFlush(logging.StreamHandler):  # type: ignore[type-arg]
    """Per-record flushes are skipped for INFO records; `flush_now` (or a warning) writes them out.
    Access-log lines queued by `write_access_line` are written before the next record, and at a flush."""

    queued: list[str]

    def flush(self) -> None:  # called by logging after every record
        pass

    def flush_now(self) -> None:
        self.acquire()
        try:
            self._write_queued()
        finally:
            self.release()
        super().flush()

    def queue_line(self, line: str) -> None:
        self.acquire()
        try:
            self.queued.append(line)
        finally:
            self.release()

    def _write_queued(self) -> None:
        """With the handler's lock held."""
        queued = getattr(self, "queued", None)
        if queued:
            self.queued = []
            if self.stream is None:  # a file handler after close(), say
                return
            self._before_write()
            self.stream.write("\n".join(queued) + "\n")

    def _before_write(self) -> None:
        pass

    def defers(self, record: logging.LogRecord) -> bool:
        return record.levelno < logging.WARNING

    def handle(self, record: logging.LogRecord) -> bool:
        if getattr(self, "queued", None):
            self.flush_now()  # lines queued before this record come before it
        handled: bool = super().handle(record)
        if not self.defers(record):
            self.flush_now()
        return handled

    def close(self) -> None:
        self.flush_now()
        super().close()


class DeferredStreamHandler(_DeferredFlush):
    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self.queued = []


class DeferredFileHandler(_DeferredFlush, logging.handlers.TimedRotatingFileHandler):
    """The log file: rotated at midnight, `log_backup_count` old files kept. One handler per file is
    shared by every logger, so the file rotates once (two handlers on one file would each rename it).
    Only the access log's INFO lines wait for `flush_access_log`: other lines reach the file at once,
    so a process killed or crashing leaves its last words there."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.queued = []

    def defers(self, record: logging.LogRecord) -> bool:
        return record.levelno < logging.WARNING and record.name == ACCESS_LOGGER

    def _before_write(self) -> None:
        if self.shouldRollover(None):  # type: ignore[arg-type]  # the time decides, not the record
            self.doRollover()


def write_access_line(logger: logging.Logger, rid: str, message: str, fields: dict[str, Any]) -> None:
    """One access-log line (INFO) on the access logger, by the fast path (see the module's docstring)."""
    created = time.time()
    line = ""
    formatter: Any = None
    for handler in logger.handlers:
        if handler.level > logging.INFO:
            continue
        if isinstance(handler, _DeferredFlush) and isinstance(handler.formatter, _OncePerRecord):
            if handler.formatter is not formatter:  # our handlers share one: the line is made once
                formatter = handler.formatter
                line = formatter.access_line(created, rid, cap(message), fields)
            handler.queue_line(line)
            continue
        extra = {"request_id": rid, "fields": fields}
        record = logger.makeRecord(logger.name, logging.INFO, __file__, 0, message, (), None, extra=extra)
        record.created = created
        handler.handle(record)


def setup_logging(settings: LogSettings | None, level: int | None = None) -> None:
    """Our logs and Tornado's go to stderr and, when configured, a file; the access log batched.

    `level` (default: `log.level`) applies to the grps_py and tornado loggers; the access log is at
    INFO when `log.access` is on, else at WARNING (no line per request). Idempotent: calling it again
    (with the server's settings after a first call with None) adjusts levels and formats in place."""
    log = settings or LogSettings()
    level = level if level is not None else logging.getLevelName(log.level.upper())
    formatter = make_formatter(log.format)
    stderr = _handler(logging.getLogger(LOGGERS[0]), "<stderr>") or _with_filters(logging.StreamHandler())
    access_stderr = _handler(logging.getLogger(ACCESS_LOGGER), "<stderr>") or _with_filters(
        DeferredStreamHandler(_stderr_buffered())
    )
    file = _file_handler(log) if settings is not None else None
    user_file = _user_file_handler(log) if settings is not None else None
    for name in LOGGERS:
        _attach(logging.getLogger(name), level, [stderr, file])
    _attach(
        logging.getLogger(ACCESS_LOGGER),
        logging.INFO if log.access else logging.WARNING,
        [access_stderr, file],
    )
    logging.getLogger(TORNADO_ACCESS_LOGGER).setLevel(logging.CRITICAL + 1)
    for handler in (stderr, access_stderr, file, user_file):
        if handler is not None:
            handler.setFormatter(formatter)


def flush_access_log() -> None:
    for handler in logging.getLogger(ACCESS_LOGGER).handlers:
        if isinstance(handler, _DeferredFlush):
            handler.flush_now()


def log_file_handler() -> DeferredFileHandler | None:
    """The handler writing the log file, when one is configured."""
    for handler in logging.getLogger(LOGGERS[0]).handlers:
        if isinstance(handler, DeferredFileHandler):
            return handler
    return None


def _stderr_buffered() -> Any:
    """stderr with a block buffer of its own (sys.stderr is line-buffered: a write per line)."""
    raw = io.FileIO(sys.stderr.fileno(), "w", closefd=False)
    return io.TextIOWrapper(io.BufferedWriter(raw, 1 << 16), encoding="utf-8", errors="replace")


def _with_filters(handler: logging.Handler) -> logging.Handler:
    handler.addFilter(RequestIdFilter())
    handler.addFilter(MessageCap())
    return handler


def _handler(logger: logging.Logger, target: str) -> logging.Handler | None:
    """The handler of ours writing to `target` (a file path, or "<stderr>") on this logger, if any."""
    for handler in logger.handlers:
        name = getattr(handler, "baseFilename", "<stderr>")
        if name == target and any(isinstance(f, RequestIdFilter) for f in handler.filters):
            return handler
    return None


def _file_handler(settings: LogSettings) -> logging.Handler | None:
    """The one handler for log_dir/grps_server.log (created once per directory)."""
    if settings.log_dir is None:
        return None
    path = str(Path(settings.log_dir, LOG_FILE).resolve())
    for name in (*LOGGERS, ACCESS_LOGGER):
        existing = _handler(logging.getLogger(name), path)
        if existing is not None:
            return existing
    settings.log_dir.mkdir(parents=True, exist_ok=True)
    handler = DeferredFileHandler(
        path, when="midnight", backupCount=settings.log_backup_count, encoding="utf-8"
    )
    return _with_filters(handler)


def user_log_handler() -> DeferredFileHandler | None:
    """The handler writing grps_usr.log, when one is configured."""
    for handler in logging.getLogger(USER_LOGGER).handlers:
        if isinstance(handler, DeferredFileHandler):
            return handler
    return None


def _user_file_handler(settings: LogSettings) -> logging.Handler | None:
    """The handler of log_dir/grps_usr.log on the user logger (which also propagates to the server's
    handlers). One at a time: a new log_dir closes the previous directory's file."""
    if settings.log_dir is None:
        return None
    path = str(Path(settings.log_dir, USER_LOG_FILE).resolve())
    user = logging.getLogger(USER_LOGGER)
    existing = user_log_handler()
    if existing is not None:
        if existing.baseFilename == path:
            return existing
        user.removeHandler(existing)
        existing.close()
    settings.log_dir.mkdir(parents=True, exist_ok=True)
    handler = _with_filters(
        DeferredFileHandler(path, when="midnight", backupCount=settings.log_backup_count, encoding="utf-8")
    )
    user.addHandler(handler)
    return handler


def _attach(logger: logging.Logger, level: int, handlers: list[logging.Handler | None]) -> None:
    logger.setLevel(level)
    logger.propagate = False
    for handler in handlers:
        if handler is not None and handler not in logger.handlers:
            logger.addHandler(handler)

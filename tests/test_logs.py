"""Logging: the deferred access-log handler, the text and JSON formats with request ids on every line,
capped messages, levels, and the daily-rotated file."""

from __future__ import annotations

import io
import json
import logging
import logging.handlers
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

from grps_py.core import request_scope
from grps_py.core.config import LogSettings
from grps_py.logs import (
    ACCESS_LOGGER,
    LOG_FILE,
    LOGGERS,
    MAX_MESSAGE_CHARS,
    USER_LOG_FILE,
    USER_LOGGER,
    DeferredStreamHandler,
    JsonFormatter,
    MessageCap,
    RequestIdFilter,
    TextFormatter,
    flush_access_log,
    log_file_handler,
    setup_logging,
    user_log_handler,
)


class CountingStream(io.StringIO):
    flushes = 0

    def flush(self) -> None:
        self.flushes += 1
        super().flush()


def test_info_lines_wait_for_flush_now_and_warnings_go_at_once() -> None:
    stream = CountingStream()
    handler = DeferredStreamHandler(stream)
    logger = logging.getLogger("grps_py.test_access")
    logger.addHandler(handler)
    logger.propagate = False
    logger.setLevel(logging.INFO)
    try:
        logger.warning("")  # a first record, so the counts below are about the handler alone
        before = stream.flushes
        logger.info("200 GET /a")
        logger.info("200 GET /b")
        assert stream.flushes == before and "/b" in stream.getvalue()
        handler.flush_now()
        assert stream.flushes == before + 1
        logger.warning("404 GET /nope")
        assert stream.flushes == before + 2
    finally:
        logger.removeHandler(handler)


# -- formats, request ids, caps, rotation -------------------------------------------------------------


@contextmanager
def configured(settings: LogSettings) -> Iterator[Path]:
    """setup_logging for one test, then the loggers as they were."""
    names = (*LOGGERS, ACCESS_LOGGER, USER_LOGGER, "tornado.access")
    saved = {
        n: (list(logging.getLogger(n).handlers), logging.getLogger(n).level, logging.getLogger(n).propagate)
        for n in names
    }
    setup_logging(settings)
    try:
        assert settings.log_dir is not None
        yield settings.log_dir / LOG_FILE
    finally:
        for name, (handlers, level, propagate) in saved.items():
            logger = logging.getLogger(name)
            for handler in [h for h in logger.handlers if h not in handlers]:
                logger.removeHandler(handler)
                handler.close()
            logger.setLevel(level)
            logger.propagate = propagate


def record(
    message: str, *args: object, exc: BaseException | None = None, **extra: object
) -> logging.LogRecord:
    rec = logging.LogRecord("grps_py.t", logging.ERROR, __file__, 1, message, args, None)
    if exc is not None:
        rec.exc_info = (type(exc), exc, exc.__traceback__)
    rec.__dict__.update(extra)
    return rec


def raised() -> BaseException:
    try:
        raise ValueError("bad thing")
    except ValueError as exc:
        return exc


def test_the_text_format_puts_the_request_id_on_every_line_of_a_record() -> None:
    rec = record("model %s raised", "m-1", exc=raised())
    with request_scope.scoped("rid-1"):
        RequestIdFilter().filter(rec)
    lines = TextFormatter().format(rec).splitlines()
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(rec.created)) + f",{int(rec.msecs):03d}"
    assert lines[0] == f"{when} ERROR [rid-1] grps_py.t: model m-1 raised"
    assert lines[1] == "[rid-1] Traceback (most recent call last):"
    assert lines[-1] == "[rid-1] ValueError: bad thing"
    assert all(line.startswith("[rid-1] ") for line in lines[1:])


def test_outside_a_request_the_id_is_a_dash_and_an_explicit_id_wins() -> None:
    rec = record("starting")
    RequestIdFilter().filter(rec)
    assert " [-] grps_py.t: starting" in TextFormatter().format(rec)
    rec = record("x", request_id="given")
    with request_scope.scoped("ambient"):
        RequestIdFilter().filter(rec)
    assert rec.request_id == "given"  # type: ignore[attr-defined]


def test_the_json_format_is_one_object_per_record() -> None:
    rec = record("line\nwith a newline", exc=raised(), request_id="rid-j", fields={"status": 500})
    text = JsonFormatter().format(rec)
    assert "\n" not in text
    doc = json.loads(text)
    assert doc["request_id"] == "rid-j" and doc["level"] == "ERROR" and doc["logger"] == "grps_py.t"
    assert doc["message"] == "line\nwith a newline" and doc["status"] == 500
    assert doc["exc_info"].startswith("Traceback") and doc["exc_info"].endswith("ValueError: bad thing")
    assert abs(datetime.fromisoformat(doc["time"]).timestamp() - rec.created) < 0.001


def test_messages_and_traceback_lines_are_capped() -> None:
    rec = record("body %s", b"\x00\xff" * 100_000)
    MessageCap().filter(rec)
    message = rec.getMessage()
    assert message.startswith("body b'\\x00\\xff") and message.endswith("more chars]")
    assert len(message) < MAX_MESSAGE_CHARS + 40
    try:
        raise ValueError("x" * 100_000)
    except ValueError as exc:
        rec = record("failed", exc=exc)
    assert max(len(line) for line in TextFormatter().format(rec).splitlines()) < MAX_MESSAGE_CHARS + 40


def test_levels_and_access_switch(tmp_path: Path) -> None:
    with configured(LogSettings(log_dir=tmp_path, level="WARNING", access=False)):
        assert logging.getLogger("grps_py").level == logging.WARNING
        assert not logging.getLogger(ACCESS_LOGGER).isEnabledFor(logging.INFO)
        assert not logging.getLogger("tornado.access").isEnabledFor(logging.CRITICAL)  # ours replaces it
    with configured(LogSettings(log_dir=tmp_path, level="DEBUG")):
        assert logging.getLogger("grps_py.model").isEnabledFor(logging.DEBUG)
        assert logging.getLogger(ACCESS_LOGGER).isEnabledFor(logging.INFO)


def test_one_file_handler_rotates_at_midnight_keeping_log_backup_count(tmp_path: Path) -> None:
    with configured(LogSettings(log_dir=tmp_path, log_backup_count=2)) as path:
        setup_logging(LogSettings(log_dir=tmp_path, log_backup_count=2))  # idempotent
        handler = log_file_handler()
        assert isinstance(handler, logging.handlers.TimedRotatingFileHandler)
        assert (handler.when, handler.backupCount) == ("MIDNIGHT", 2)
        for name in (*LOGGERS, ACCESS_LOGGER):  # shared: the file is renamed once a night, not per logger
            assert [h for h in logging.getLogger(name).handlers if getattr(h, "baseFilename", "")] == [
                handler
            ]
        for day in range(1, 6):
            (tmp_path / f"{LOG_FILE}.2020-01-0{day}").write_text("old\n")
        logging.getLogger("grps_py.t").warning("before the rollover")
        handler.doRollover()
        logging.getLogger("grps_py.t").warning("after the rollover")
        handler.flush_now()
        kept = sorted(p.name for p in tmp_path.glob(f"{LOG_FILE}.*"))
        assert len(kept) == 2 and kept[0] == f"{LOG_FILE}.2020-01-05"
        assert "before the rollover" in (tmp_path / kept[1]).read_text()
        assert "after the rollover" in path.read_text() and "before" not in path.read_text()


def test_the_file_gets_lines_at_once_and_access_lines_when_flushed(tmp_path: Path) -> None:
    with configured(LogSettings(log_dir=tmp_path)) as path:
        logging.getLogger("grps_py.t").info("a model loaded")
        logging.getLogger(ACCESS_LOGGER).info("a request")
        assert "a model loaded" in path.read_text() and "a request" not in path.read_text()
        flush_access_log()
        assert "a request" in path.read_text()


def test_clogger_writes_grps_usr_log_beside_the_server_log(tmp_path: Path) -> None:
    """grps's clogger file, rotated as the server's; the lines stay in the server log as well."""
    from grps_framework.logger.logger import clogger, logger

    with configured(LogSettings(log_dir=tmp_path, log_backup_count=3)) as path:
        setup_logging(LogSettings(log_dir=tmp_path, log_backup_count=3))  # idempotent: one handler
        handler = user_log_handler()
        assert isinstance(handler, logging.handlers.TimedRotatingFileHandler)
        assert (handler.when, handler.backupCount) == ("MIDNIGHT", 3)
        assert [h for h in logging.getLogger(USER_LOGGER).handlers if getattr(h, "baseFilename", "")] == [
            handler
        ]
        with request_scope.scoped("rid-user"):
            clogger.info("user says %s", "hi\nforged")
        logger.info("the server says hello")
        clogger.info("x" * (MAX_MESSAGE_CHARS + 10))
        user_lines = (tmp_path / USER_LOG_FILE).read_text().splitlines()
        assert user_lines[0].endswith("INFO [rid-user] grps_py.user: user says hi\\nforged")
        assert len(user_lines) == 2 and user_lines[1].endswith("... [10 more chars]")
        assert "user says hi" in path.read_text() and "the server says hello" in path.read_text()
        other = tmp_path / "other"
        setup_logging(LogSettings(log_dir=other))  # another directory: the first file is closed
        assert user_log_handler() is not handler and handler.stream is None
        clogger.warning("moved")
        assert "moved" in (other / USER_LOG_FILE).read_text()

"""Logging setup: stderr always, plus a daily-rotated file when log.log_dir is set."""

from __future__ import annotations

import logging
import logging.handlers

from grps_py.core.config import LogSettings

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


LOGGERS = ("grps_py", "tornado")


def setup_logging(settings: LogSettings | None, level: int = logging.INFO) -> None:
    """Our logs and Tornado's (access log included) go to stderr and, when configured, a file."""
    for name in LOGGERS:
        _configure(logging.getLogger(name), settings, level)


def _configure(logger: logging.Logger, settings: LogSettings | None, level: int) -> None:
    """Idempotent: the stderr handler is added once, the file handler once per log directory."""
    logger.setLevel(level)
    logger.propagate = False
    targets = {getattr(h, "baseFilename", "<stderr>") for h in logger.handlers}
    if "<stderr>" not in targets:
        stream = logging.StreamHandler()
        stream.setFormatter(logging.Formatter(FORMAT))
        logger.addHandler(stream)
    if settings is None or settings.log_dir is None:
        return
    path = settings.log_dir / "grps_server.log"
    if str(path.resolve()) in targets:
        return
    settings.log_dir.mkdir(parents=True, exist_ok=True)
    file_handler = logging.handlers.TimedRotatingFileHandler(
        path, when="midnight", backupCount=settings.log_backup_count
    )
    file_handler.setFormatter(logging.Formatter(FORMAT))
    logger.addHandler(file_handler)

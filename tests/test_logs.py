"""The access log handler: lines are written as they come and reach the OS only when flushed."""

from __future__ import annotations

import io
import logging

from grps_py.logs import DeferredStreamHandler


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

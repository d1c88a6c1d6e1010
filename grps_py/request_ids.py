"""Request ids: a random per-process prefix and a counter.

Unique within a process and across restarts (the prefix), ordered, and free of a system call per
request (uuid4 reads the OS random source each time).
"""

from __future__ import annotations

import itertools
import os

_PREFIX = os.urandom(4).hex()
_COUNTER = itertools.count(1)


def new_request_id() -> str:
    return f"{_PREFIX}{next(_COUNTER):08x}"

"""Built-in inference backends: `torch` (TorchScript), `onnx` (ONNX Runtime), `tensorflow` (a SavedModel)
and `tensorrt` (a serialized engine).

Each backend module imports its framework at module level, so it is imported only when a
configured model needs it (see `grps_py.core.backend_registry`). This package itself, `devices`,
`feeds`, `execution_providers` and `tensorrt_io` stay framework-free.
"""

from __future__ import annotations

import re

_ERROR_PREFIX = re.compile(r"^(\[ONNXRuntimeError\] : \d+ : [A-Z_]+ : |\w+(Error|Exception): )")
# ONNX Runtime kernel failures name the node, then a C++ source location and function; keep the node
# and the sentence, drop the internals.
_ORT_NODE_FAILURE = re.compile(r"running (\w+) node\. Name:'([^']*)' Status Message: (.*)")
_CPP_LOCATION = re.compile(r"\S+\.(?:h|hpp|cc|cpp|cu):\d+\s+(?:[\w:<>*&, ]*?::\w+\([^)]*\)\s+)?")
_MAX_MESSAGE_CHARS = 300


def short_error(exc: BaseException) -> str:
    """One line from a framework error, safe to show a client: no traceback, no serialized code.

    TorchScript puts its interpreter traceback first and the real error last; everything else
    puts the error first.
    """
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    line = lines[-1] if "Traceback of TorchScript" in str(exc) else lines[0]
    line = _CPP_LOCATION.sub("", _ERROR_PREFIX.sub("", line))
    node = _ORT_NODE_FAILURE.search(line)
    if node:
        op, name, detail = node.groups()
        line = f"{op} node{' ' + name if name else ''}: {detail}"
    if len(line) > _MAX_MESSAGE_CHARS:
        line = line[: _MAX_MESSAGE_CHARS - 3] + "..."
    return line


__all__ = ["short_error"]

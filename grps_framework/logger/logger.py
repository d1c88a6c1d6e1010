"""grps's `grps_framework.logger.logger`: `clogger`, the log model code writes to, and `logger`.

As in grps, `clogger`'s lines go to their own file, log_dir/grps_usr.log (rotated daily and kept as
grps_server.log is, by `grps_py.logs.setup_logging`). It is a child of the `grps_py` logger, so its lines
also reach the server's handlers (stderr and grps_server.log), named `grps_py.user`, with the request id.
"""

import logging

from grps_py.logs import USER_LOGGER

clogger = logging.getLogger(USER_LOGGER)
logger = logging.getLogger("grps_py")

__all__ = ["clogger", "logger"]

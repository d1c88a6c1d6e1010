"""grps's `grps_framework.logger.logger`: `clogger`, the log model code writes to, and `logger`.

grps writes `clogger` to its own file (grps_usr.log). Here it is a child of the `grps_py` logger, so
user lines go wherever the server's lines go (stderr and log_dir/grps_server.log, set up by
`grps_py.logs.setup_logging`), named `grps_py.user`.
"""

import logging

clogger = logging.getLogger("grps_py.user")
logger = logging.getLogger("grps_py")

__all__ = ["clogger", "logger"]

"""grps's `grps_apis.grps_pb2`: grps-py's generated module (same message classes)."""

from grps_py.protos.grps_pb2 import *  # noqa: F403

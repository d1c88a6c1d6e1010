"""grps's `grps_apis.grps_pb2_grpc`: grps-py's generated module (same stub and servicer)."""

from grps_py.protos.grps_pb2_grpc import *  # noqa: F403

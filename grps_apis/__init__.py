"""grps's client package `grps_apis` (its generated gRPC stubs), so grps client code runs unchanged:
`from grps_apis.grps_pb2 import GrpsMessage`, `from grps_apis.grps_pb2_grpc import GrpsServiceStub`.
The modules are grps-py's own generated ones (the same messages and stub)."""

from grps_apis import grps_pb2, grps_pb2_grpc

__all__ = ["grps_pb2", "grps_pb2_grpc"]

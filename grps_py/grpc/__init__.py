"""The gRPC adapter (grpc.aio on the same event loop as Tornado)."""

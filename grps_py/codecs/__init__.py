"""Codecs: pure functions between wire formats and the core's `Payload` (no I/O, no server state).

- `grps_pb`: `GrpsMessage` (protobuf) <-> `Payload`, the `MessageBridge` for user code, status replies.
- `grps_json`: the grps HTTP JSON (proto3 JSON) <-> `Payload`, without a protobuf round trip.

Nothing is imported here, so importing one codec does not load the others.
"""

"""Codecs: pure functions between wire formats and the core's `Payload` (no I/O, no server state).

- `grps_pb`: `GrpsMessage` (protobuf) <-> `Payload`, the `MessageBridge` for user code, status replies.
- `grps_json`: the grps HTTP JSON (proto3 JSON) <-> `Payload`, without a protobuf round trip.
- `json_values`: JSON shape checks and JSON values <-> numpy arrays, shared by the JSON codecs.
- `oip_json`, `oip_binary`, `oip_generate`: the Open Inference Protocol over HTTP (JSON, Triton's
  binary tensor extension, Triton's generate extension) <-> `OipRequest` / `OipResponse`.
- `oip_pb`: the Open Inference Protocol's protobuf messages <-> `OipRequest` / `OipResponse`.
- `limits`: what one request may carry (server.yml `limits`), checked by every decoder above.

Nothing is imported here, so importing one codec does not load the others.
"""

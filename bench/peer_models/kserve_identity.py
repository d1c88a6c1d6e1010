"""KServe peer: an identity model (`y` = `x`) on kserve.ModelServer, Open Inference Protocol v2.

    python kserve_identity.py --http_port 8080 --grpc_port 8081 [other kserve ModelServer flags]

kserve parses its own flags (e.g. --grpc_max_receive_message_length) from sys.argv at import time.
--host (ours) pins both listeners to one address: kserve 0.21 hard-codes 0.0.0.0 (HTTP) and [::] (gRPC).
"""

from __future__ import annotations

import argparse

import grpc.aio
import kserve
import kserve.protocol.rest.server as kserve_rest
from kserve import InferOutput, InferRequest, InferResponse


class Identity(kserve.Model):
    def __init__(self) -> None:
        super().__init__("identity")
        self.ready = True

    def predict(self, payload: InferRequest, headers: dict[str, str] | None = None) -> InferResponse:
        x = payload.inputs[0].as_numpy()
        y = InferOutput(name="y", shape=list(x.shape), datatype="FP32")
        # Binary (HTTP extension / gRPC raw contents) or JSON, as the request asked.
        y.set_data_from_numpy(x, binary_data=payload.use_binary_outputs)
        return InferResponse(
            response_id=payload.id or "",
            model_name=self.name,
            infer_outputs=[y],
            use_binary_outputs=payload.use_binary_outputs,
            requested_outputs=payload.request_outputs,
        )


def bind_to(host: str) -> None:
    """Make kserve's HTTP (uvicorn) and gRPC listeners bind `host` instead of every interface."""
    config_cls = kserve_rest.uvicorn.Config

    class HostConfig(config_cls):  # type: ignore[misc,valid-type]
        def __init__(self, *args: object, **kwargs: object) -> None:
            kwargs["host"] = host
            super().__init__(*args, **kwargs)

    kserve_rest.uvicorn.Config = HostConfig  # type: ignore[misc]

    server_fn = grpc.aio.server

    def server(*args: object, **kwargs: object) -> grpc.aio.Server:
        srv = server_fn(*args, **kwargs)
        add_port = srv.add_insecure_port
        srv.add_insecure_port = lambda address: add_port(address.replace("[::]", host, 1))  # type: ignore[method-assign]
        return srv

    grpc.aio.server = server  # type: ignore[assignment]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(parents=[kserve.model_server.parser])
    parser.add_argument("--host", default="127.0.0.1")
    args, _ = parser.parse_known_args()
    bind_to(args.host)
    kserve.ModelServer(http_port=args.http_port, grpc_port=args.grpc_port).start([Identity()])

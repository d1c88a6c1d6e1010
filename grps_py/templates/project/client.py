"""Call {{name}} with grps-py's client: `python client.py [--url HOST:PORT] [--protocol http|grpc]`.

Start the server first: `grps-py serve .` (HTTP on 7080, gRPC on 7081 as conf/server.yml says).
"""

from __future__ import annotations

import argparse

import numpy as np

from grps_py import GrpsMessage
from grps_py.client import GrpsClient


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", help="HOST:PORT (default 127.0.0.1:7080, or :7081 with --protocol grpc)")
    parser.add_argument("--protocol", choices=("http", "grpc"), default="http")
    args = parser.parse_args()
    url = args.url or ("127.0.0.1:7081" if args.protocol == "grpc" else "127.0.0.1:7080")
    client = GrpsClient(url, protocol=args.protocol, timeout=10.0)
    try:
        print("ready:", client.ready())
        x = np.array([1.0, 2.0, 3.0], dtype=np.float32)
        print("tensor in  :", x, "-> out:", client.predict(x, model="my_model-1.0.0"))
        # The answer comes back in the kind sent; send a GrpsMessage to take whatever the model answers.
        reply = client.predict(GrpsMessage(str_data="1,2,3"))  # no model named: the DAG my_dag runs
        print("text in    : '1,2,3' -> out:", list(reply.gtensors.tensors[0].flat_float32))
        for part in client.predict_stream(x, model="my_model"):
            print("streamed   :", part)
    finally:
        client.close()


if __name__ == "__main__":
    main()

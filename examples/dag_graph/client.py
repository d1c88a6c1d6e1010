"""Call the dag_graph example over HTTP and gRPC: one request runs prep, then trend and peaks side
by side, then merge.

Serve it first (`grps-py serve examples/dag_graph`), then in another shell run
`python examples/dag_graph/client.py [--url HOST:PORT] [--grpc HOST:PORT]`.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from grps_py.client import GrpsClient

SENSORS = ["steady", "rising", "spike"]
READINGS = np.array(
    [
        [20.1, 20.3, 19.9, 20.0, 20.2, 20.1, 19.8, 20.0],
        [20.0, 21.5, 23.1, 24.4, 26.0, 27.6, 29.1, 30.5],
        [20.0, 20.1, 19.9, 95.0, 20.0, 20.2, 19.9, 20.1],  # 95 is outside the range: prep clips it to 50
    ],
    dtype=np.float32,
)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--url", default="127.0.0.1:7080", help="the HTTP address (default %(default)s)")
    parser.add_argument("--grpc", default="127.0.0.1:7081", help="the gRPC address (default %(default)s)")
    args = parser.parse_args()
    for protocol, url in (("http", args.url), ("grpc", args.grpc)):
        with GrpsClient(url, protocol=protocol, timeout=10.0) as client:
            started = time.perf_counter()
            answer = client.predict({"readings": READINGS})  # no model named: the DAG sensor_pipeline
            took = time.perf_counter() - started
        print(f"{protocol} {url}: took {took:.2f} s with two 0.2 s branches")
        for name, slope, peak_z, alert in zip(
            SENSORS, answer["slope"], answer["peak_z"], answer["alert"], strict=True
        ):
            verdict = "yes" if alert else "no"
            print(f"  {name:7} slope {slope:+.2f}/sample  peak {peak_z:.1f} sd  alert={verdict}")


if __name__ == "__main__":
    main()

"""A Python client for the grps API over HTTP and gRPC.

from grps_py.client import GrpsClient, GrpsClientError

with GrpsClient("127.0.0.1:7080", protocol="http") as client:
    print(client.predict("hi", model="echo-1.0"))
"""

from grps_py.client.client import GrpsClient
from grps_py.client.errors import GrpsClientError

__all__ = ["GrpsClient", "GrpsClientError"]

"""A Python client for the grps API over HTTP and gRPC.

from grps_py.client import GrpsClient, GrpsClientError

with GrpsClient("127.0.0.1:7080", protocol="http") as client:
    print(client.predict("hi", model="echo-1.0"))

Every failure raises GrpsClientError; its subclasses GrpsConnectionError (no server reached, or the
connection broke) and GrpsTimeoutError (no answer in time) are the failures no server answered.
"""

from grps_py.client.client import GrpsClient
from grps_py.client.errors import GrpsClientError, GrpsConnectionError, GrpsTimeoutError

__all__ = ["GrpsClient", "GrpsClientError", "GrpsConnectionError", "GrpsTimeoutError"]

"""Shared fixtures: the basic test project's server, and HTTP and gRPC clients for it."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import httpx
import pytest

from grps_py.protos import grps_pb2_grpc
from support import BASIC, ServerThread, start_project


@pytest.fixture(scope="session")
def basic_server() -> Iterator[ServerThread]:
    server = start_project(BASIC)
    yield server
    server.stop()


@pytest.fixture
def http(basic_server: ServerThread) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=basic_server.http_url, timeout=30) as client:
        yield client


@pytest.fixture
def grps_stub(basic_server: ServerThread) -> Iterator[grps_pb2_grpc.GrpsServiceStub]:
    with grpc.insecure_channel(basic_server.grpc_target) as channel:
        yield grps_pb2_grpc.GrpsServiceStub(channel)

"""Triton's system shared-memory extension through tritonclient, over HTTP and gRPC alike: regions of
POSIX shared-memory objects (made by tritonclient.utils.shared_memory) registered, read, written,
bounds-checked and unregistered; who may register; CUDA shared memory refused."""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest
import tritonclient.grpc as tgrpc
import tritonclient.http as thttp
import tritonclient.utils.shared_memory as shm
from tritonclient import utils
from tritonclient.utils import InferenceServerException

from support import PROJECTS, ServerThread, start_project

PROTOCOLS = ["http", "grpc"]
OIP_EXT = PROJECTS / "oip_ext"
# What each refusal is, over either protocol.
CATEGORY = {
    "400": "invalid",
    "StatusCode.INVALID_ARGUMENT": "invalid",
    "401": "unauthenticated",
    "StatusCode.UNAUTHENTICATED": "unauthenticated",
    "404": "not_found",
    "StatusCode.NOT_FOUND": "not_found",
    "501": "unsupported",
    "StatusCode.UNIMPLEMENTED": "unsupported",
}


@pytest.fixture(scope="module")
def server() -> Iterator[ServerThread]:
    running = start_project(OIP_EXT)
    yield running
    running.stop()


class Regions:
    """Shared-memory objects made as a Triton client makes them, destroyed (and unregistered) after."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.handles: list[Any] = []
        self.prefix = f"grpspy_test_{uuid.uuid4().hex[:10]}"

    def make(self, name: str, byte_size: int, register: bool = True, offset: int = 0) -> Any:
        handle = shm.create_shared_memory_region(name, self.key(name), byte_size)
        self.handles.append(handle)
        if register:
            self.client.register_system_shared_memory(name, self.key(name), byte_size - offset, offset)
        return handle

    def key(self, name: str) -> str:
        return f"/{self.prefix}_{name}"

    def close(self) -> None:
        self.client.unregister_system_shared_memory()
        for handle in self.handles:
            shm.destroy_shared_memory_region(handle)


@pytest.fixture(params=PROTOCOLS)
def triton(request: pytest.FixtureRequest, server: ServerThread) -> Iterator[tuple[Any, Any]]:
    """(tritonclient's module, a client) for one protocol."""
    mod: Any = thttp if request.param == "http" else tgrpc
    url = server.http_url.removeprefix("http://") if request.param == "http" else server.grpc_target
    client = mod.InferenceServerClient(url)
    yield mod, client
    client.close()


@pytest.fixture
def regions(triton: tuple[Any, Any]) -> Iterator[Regions]:
    made = Regions(triton[1])
    yield made
    made.close()


def status(client: Any, name: str = "") -> dict[str, dict[str, Any]]:
    """The registered regions by name, whichever protocol answered."""
    if isinstance(client, tgrpc.InferenceServerClient):
        found = client.get_system_shared_memory_status(name, as_json=True).get("regions", {})
        return {
            k: {**v, "offset": int(v.get("offset", 0)), "byte_size": int(v["byte_size"])}
            for k, v in found.items()
        }
    return {region["name"]: region for region in client.get_system_shared_memory_status(name)}


def refusal(call: Any) -> tuple[str, str]:
    """(category, message) of the refusal `call()` raises."""
    with pytest.raises(InferenceServerException) as caught:
        call()
    return CATEGORY.get(str(caught.value.status()), str(caught.value.status())), caught.value.message()


def infer(
    mod: Any,
    client: Any,
    inputs: dict[str, tuple[np.ndarray, str, int, int]],
    outputs: dict[str, tuple[str, int, int]],
    model: str = "identity",
) -> Any:
    """Infer with inputs and outputs in shared memory: input name -> (array, region, byte size, offset),
    output name -> (region, byte size, offset)."""
    made = []
    for name, (array, region, size, offset) in inputs.items():
        item = mod.InferInput(name, list(array.shape), utils.np_to_triton_dtype(array.dtype))
        item.set_shared_memory(region, size, offset)
        made.append(item)
    wanted = []
    for name, (region, size, offset) in outputs.items():
        output = mod.InferRequestedOutput(name)
        output.set_shared_memory(region, size, offset)
        wanted.append(output)
    return client.infer(model, made, outputs=wanted or None)


def fds_on(key: str) -> int:
    """The descriptors this process (the server runs in it) holds on the object `key`."""
    target = f"/dev/shm/{key.lstrip('/')}"
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            count += os.readlink(f"/proc/self/fd/{fd}") == target
    return count


def test_inputs_are_read_from_and_outputs_written_to_registered_regions(
    triton: tuple[Any, Any], regions: Regions
) -> None:
    mod, client = triton
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    y = np.array([[7, -8]], np.int64)
    data = regions.make("in", x.nbytes + y.nbytes)
    out = regions.make("out", 256)
    shm.set_shared_memory_region(data, [x, y])
    result = infer(
        mod,
        client,
        {"x": (x, "in", x.nbytes, 0), "y": (y, "in", y.nbytes, x.nbytes)},
        {"x": ("out", x.nbytes + 16, 0), "y": ("out", 64, 128)},
    )
    np.testing.assert_array_equal(shm.get_contents_as_numpy(out, np.float32, [3, 4]), x)
    np.testing.assert_array_equal(shm.get_contents_as_numpy(out, np.int64, [1, 2], offset=128), y)
    outputs = (
        result.get_response()["outputs"] if mod is thttp else result.get_response(as_json=True)["outputs"]
    )
    by_name = {o["name"]: o for o in outputs}
    assert "data" not in by_name["x"] and [int(d) for d in by_name["x"]["shape"]] == [3, 4]
    parameters = {
        k: next(iter(v.values())) if isinstance(v, dict) else v for k, v in by_name["y"]["parameters"].items()
    }
    assert {k: str(v) for k, v in parameters.items()} == {
        "shared_memory_region": "out",
        "shared_memory_byte_size": "16",
        "shared_memory_offset": "128",
    }


def test_bytes_tensors_travel_through_shared_memory(triton: tuple[Any, Any], regions: Regions) -> None:
    mod, client = triton
    words = np.array([b"shared", b"", "m\u00e9moire".encode()], dtype=object)
    serialized = utils.serialize_byte_tensor(words)
    size = utils.serialized_byte_size(serialized)
    data = regions.make("words", size)
    out = regions.make("back", 128)
    shm.set_shared_memory_region(data, [serialized])
    infer(mod, client, {"w": (words, "words", size, 0)}, {"w": ("back", 128, 0)})
    np.testing.assert_array_equal(shm.get_contents_as_numpy(out, np.object_, [3]), words)


def test_status_lists_regions_and_unregister_closes_them(triton: tuple[Any, Any], regions: Regions) -> None:
    """The server holds one descriptor per region (the client, in this process too, holds its own)."""
    _, client = triton
    regions.make("a", 64, register=False)
    key = regions.key("a")
    clients_own = fds_on(key)
    client.register_system_shared_memory("a", key, 64)
    regions.make("b", 64, offset=16)
    assert fds_on(key) == clients_own + 1
    found = status(client)
    assert found["b"] == {"name": "b", "key": regions.key("b"), "offset": 16, "byte_size": 48}
    assert set(status(client, "a")) == {"a"}
    client.unregister_system_shared_memory("a")
    assert set(status(client)) == {"b"} and fds_on(key) == clients_own
    assert refusal(lambda: status(client, "a"))[0] == "not_found"
    client.unregister_system_shared_memory()  # every region
    assert status(client) == {} and fds_on(regions.key("b")) == clients_own


def test_a_region_is_shared_by_both_protocols(server: ServerThread, regions: Regions) -> None:
    """Registered over one protocol, a region serves requests over the other."""
    x = np.array([1.5, 2.5], np.float64)
    data = regions.make("both", x.nbytes)
    shm.set_shared_memory_region(data, [x])
    for mod, url in ((thttp, server.http_url.removeprefix("http://")), (tgrpc, server.grpc_target)):
        with mod.InferenceServerClient(url) as other:
            item = mod.InferInput("x", [2], "FP64")
            item.set_shared_memory("both", x.nbytes)
            np.testing.assert_array_equal(other.infer("identity", [item]).as_numpy("x"), x)


@pytest.mark.parametrize(
    ("key", "offset", "byte_size", "expected"),
    [
        ("missing", 0, 8, "Unable to open shared memory region"),
        ("small", 0, 65, "invalid args"),
        ("small", 60, 8, "invalid args"),
        ("small", 0, 0, "byte_size must be at least 1"),
        ("/../../etc/passwd", 0, 8, "is not a shared memory key"),
        ("", 0, 8, "is not a shared memory key"),
    ],
)
def test_registering_what_does_not_fit_is_invalid(
    triton: tuple[Any, Any], regions: Regions, key: str, offset: int, byte_size: int, expected: str
) -> None:
    _, client = triton
    regions.make("small", 64, register=False)
    shm_key = regions.key(key) if key in ("missing", "small") else key
    category, message = refusal(lambda: client.register_system_shared_memory("r", shm_key, byte_size, offset))
    assert category == "invalid" and expected in message, message
    assert status(client) == {}


def test_a_name_is_registered_once(triton: tuple[Any, Any], regions: Regions) -> None:
    _, client = triton
    regions.make("once", 8)
    category, message = refusal(lambda: client.register_system_shared_memory("once", regions.key("once"), 8))
    assert category == "invalid" and "already in manager" in message


def test_the_number_of_regions_is_bounded(triton: tuple[Any, Any], regions: Regions) -> None:
    _, client = triton
    regions.make("r0", 8)
    for i in range(1, 256):
        client.register_system_shared_memory(f"r{i}", regions.key("r0"), 8)
    category, message = refusal(lambda: client.register_system_shared_memory("r256", regions.key("r0"), 8))
    assert category == "invalid" and "256 regions are registered" in message


@pytest.mark.parametrize(
    ("region", "size", "offset", "expected"),
    [
        ("nowhere", 24, 0, "Unable to find shared memory region: 'nowhere'"),
        ("in", 20, 0, "needs 24 bytes, but shared_memory_byte_size is 20"),
        ("in", 24, 32, "Invalid offset for shared memory region"),
        ("in", 24, 16, "Invalid offset + byte size for shared memory region"),
    ],
)
def test_an_input_outside_its_region_is_invalid(
    triton: tuple[Any, Any], regions: Regions, region: str, size: int, offset: int, expected: str
) -> None:
    mod, client = triton
    regions.make("in", 32)
    x = np.zeros(6, np.float32)
    category, message = refusal(lambda: infer(mod, client, {"x": (x, region, size, offset)}, {}))
    assert category == "invalid" and expected in message, message


def test_an_output_region_too_small_is_invalid_and_left_alone(
    triton: tuple[Any, Any], regions: Regions
) -> None:
    mod, client = triton
    x = np.arange(4, dtype=np.int32)
    data = regions.make("in", x.nbytes)
    out = regions.make("out", 12)
    shm.set_shared_memory_region(data, [x])
    shm.set_shared_memory_region(out, [np.full(3, 9, np.int32)])
    category, message = refusal(
        lambda: infer(mod, client, {"x": (x, "in", x.nbytes, 0)}, {"x": ("out", 12, 0)})
    )
    assert category == "invalid" and "should be at least 16 bytes" in message, message
    np.testing.assert_array_equal(shm.get_contents_as_numpy(out, np.int32, [3]), [9, 9, 9])


def test_a_shrunk_object_is_invalid_rather_than_a_crash(triton: tuple[Any, Any], regions: Regions) -> None:
    """A client that truncates its object after registering it gets a 400: the server reads with pread,
    which cannot fault."""
    mod, client = triton
    regions.make("in", 4096)
    os.truncate(f"/dev/shm/{regions.key('in').lstrip('/')}", 8)
    x = np.zeros(16, np.float32)
    category, message = refusal(lambda: infer(mod, client, {"x": (x, "in", 64, 0)}, {}))
    assert category == "invalid" and "smaller than the registered range" in message


def test_cuda_shared_memory_is_not_supported(triton: tuple[Any, Any]) -> None:
    _, client = triton
    for call in (
        lambda: client.get_cuda_shared_memory_status(),
        lambda: client.register_cuda_shared_memory("c", b"\0" * 64, 0, 8),
        lambda: client.unregister_cuda_shared_memory(),
    ):
        category, message = refusal(call)
        assert category == "unsupported" and "CUDA shared memory is not supported" in message


def test_server_metadata_advertises_system_shared_memory_only(triton: tuple[Any, Any]) -> None:
    mod, client = triton
    meta = client.get_server_metadata(**({"as_json": True} if mod is tgrpc else {}))
    assert "system_shared_memory" in meta["extensions"]
    assert "cuda_shared_memory" not in meta["extensions"]


# --- who may register: an admin operation -------------------------------------------------------


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    conf = tmp_path_factory.mktemp("guarded") / "server.yml"
    conf.write_text(
        "interface: {host: 127.0.0.1, port: '0,0'}\n"
        "security: {admin_token: admin-secret, inference_tokens: [infer-secret]}\n"
    )
    running = start_project(OIP_EXT, server_conf=conf)
    yield running
    running.stop()


def test_registering_needs_the_admin_token(guarded: ServerThread) -> None:
    key = f"/grpspy_test_{uuid.uuid4().hex[:10]}"
    handle = shm.create_shared_memory_region("g", key, 8)
    admin = {"authorization": "Bearer admin-secret"}
    inference = {"authorization": "Bearer infer-secret"}
    try:
        for mod, url in (
            (thttp, guarded.http_url.removeprefix("http://")),
            (tgrpc, guarded.grpc_target),
        ):
            with mod.InferenceServerClient(url) as client:
                for headers in ({}, inference):
                    category, _ = refusal(
                        lambda h=headers: client.register_system_shared_memory("g", key, 8, headers=h)
                    )
                    assert category == "unauthenticated"
                    category, _ = refusal(lambda h=headers: client.get_system_shared_memory_status(headers=h))
                    assert category == "unauthenticated"
                client.register_system_shared_memory("g", key, 8, headers=admin)
                client.unregister_system_shared_memory(headers=admin)
    finally:
        shm.destroy_shared_memory_region(handle)


def test_a_page_of_another_site_cannot_register(server: ServerThread) -> None:
    reply = httpx.post(
        f"{server.http_url}/v2/systemsharedmemory/region/x/register",
        json={"key": "/x", "byte_size": 8},
        headers={"Origin": "https://elsewhere.example", "Sec-Fetch-Site": "cross-site"},
    )
    assert reply.status_code == 403 and "another site" in reply.json()["error"]


def test_register_requests_are_checked(server: ServerThread) -> None:
    url = f"{server.http_url}/v2/systemsharedmemory/region/x/register"
    cases = [
        ({"byte_size": 8}, "no 'key' field"),
        ({"key": "/x"}, "no 'byte_size' field"),
        ({"key": 5, "byte_size": 8}, "key must be a string"),
        ({"key": "/x", "byte_size": -1}, "'byte_size' must be a non-negative integer"),
        ({"key": "/x", "byte_size": 8, "offset": 1.5}, "'offset' must be a non-negative integer"),
    ]
    for body, expected in cases:
        reply = httpx.post(url, json=body)
        assert reply.status_code == 400 and expected in reply.json()["error"], (body, reply.text)

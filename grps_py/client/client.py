"""`GrpsClient`: the grps API from Python, the same calls over HTTP and gRPC.

    with GrpsClient("127.0.0.1:7080") as client:               # or ("127.0.0.1:7081", protocol="grpc")
        client.predict("hi", model="echo-1.0")                  # -> "hi"
        client.predict({"x": np.ones((1, 4), np.float32)})      # -> {"probs": array(...)}
        for part in client.predict_stream("5", model="stream-1.0"):
            print(part)
        client.load_model("echo")                                # model management (admin calls)

Every failure, the server's or the network's, raises `GrpsClientError` (the network's as its subclasses
`GrpsConnectionError` and `GrpsTimeoutError`). A client holds one connection (HTTP) or channel (gRPC)
and is not thread-safe: use one per thread.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Generator, Mapping
from types import TracebackType
from typing import Any, Protocol

import yaml

from grps_py.client.errors import GrpsClientError
from grps_py.client.grpc_transport import GrpcTransport
from grps_py.client.http_transport import HttpTransport
from grps_py.client.http_wire import HttpUrl
from grps_py.client.repository_wire import config_json
from grps_py.client.values import Data, Kind, Reply, Request, answer_of

__all__ = ["GrpsClient"]


class Transport(Protocol):
    def predict(self, request: Request, timeout_s: float | None) -> Reply: ...

    def predict_stream(self, request: Request, timeout_s: float | None) -> Generator[Reply, None, None]: ...

    def predict_stream_async(
        self, request: Request, timeout_s: float | None
    ) -> AsyncGenerator[Reply, None]: ...

    def health(self, action: str, timeout_s: float | None) -> tuple[bool, int, str]: ...

    def metadata(self, model: str | None, timeout_s: float | None) -> str: ...

    def repository_index(self, ready: bool, timeout_s: float | None) -> list[dict[str, str]]: ...

    def load_model(self, name: str, config: str | None, timeout_s: float | None) -> None: ...

    def unload_model(self, name: str, unload_dependents: bool, timeout_s: float | None) -> None: ...

    def close(self) -> None: ...


def _grpc_target(url: str) -> str:
    """gRPC wants `host:port`; a scheme the caller wrote out of habit is dropped."""
    return url.split("://", 1)[1].rstrip("/") if "://" in url else url


class GrpsClient:
    """A client of one grps server.

    `url` is `host:port` (or `http://host:port[/prefix]` for HTTP); `protocol` is "http" or "grpc";
    `timeout` (seconds, None for none) bounds every call unless the call gives its own. The server
    gets it too, as the request's deadline. `token` is the server's admin token (`security.admin_token`),
    sent with admin calls (online, offline, the model repository) as `Authorization: Bearer <token>`;
    without one, a server answers admin calls from loopback callers only.
    """

    def __init__(
        self, url: str, protocol: str = "http", timeout: float | None = 60.0, token: str | None = None
    ) -> None:
        self.timeout = timeout
        self._transport: Transport
        if protocol == "http":
            self._transport = HttpTransport(HttpUrl.parse(url), token)
        elif protocol == "grpc":
            self._transport = GrpcTransport(_grpc_target(url), token)
        else:
            raise ValueError(f"protocol must be 'http' or 'grpc', not {protocol!r}")

    def _timeout(self, timeout: float | None) -> float | None:
        return self.timeout if timeout is None else timeout

    def predict(self, data: Data, model: str | None = None, timeout: float | None = None) -> Data:
        """Run the model (`name-version`; None: the one a GrpsMessage names, else the default DAG).

        The answer has the type of `data`: str, bytes, a numpy array (the one tensor answered),
        a dict of arrays, or the GrpsMessage itself.
        """
        request = Request.of(data, model)
        reply = self._transport.predict(request, self._timeout(timeout))
        return answer_of(reply, request.kind)  # type: ignore[no-any-return]

    def predict_stream(
        self, data: Data, model: str | None = None, timeout: float | None = None
    ) -> Generator[Data, None, None]:
        """Each message the model streams, as `predict` would answer it. `timeout` bounds the whole stream.

        `close()` the generator to leave early (dropping it does the same): the server stops the model.
        """
        request = Request.of(data, model)  # bad data fails here, not at the first next()
        return _answers(self._transport.predict_stream(request, self._timeout(timeout)), request.kind)

    def predict_stream_async(
        self, data: Data, model: str | None = None, timeout: float | None = None
    ) -> AsyncGenerator[Data, None]:
        """`predict_stream` for asyncio: `async for part in client.predict_stream_async(...)`."""
        request = Request.of(data, model)
        return _answers_async(
            self._transport.predict_stream_async(request, self._timeout(timeout)), request.kind
        )

    def online(self) -> None:
        """Take traffic again (readiness turns true)."""
        self._switch("online")

    def offline(self) -> None:
        """Stop taking traffic from load balancers (readiness turns false; predictions still work)."""
        self._switch("offline")

    def _switch(self, action: str) -> None:
        ok, status, message = self._transport.health(action, self.timeout)
        if not ok:
            raise GrpsClientError.from_status(status, message)

    def live(self) -> bool:
        return self._transport.health("live", self.timeout)[0]

    def ready(self) -> bool:
        """False while the server is offline or loading models; raises when it cannot be reached."""
        return self._transport.health("ready", self.timeout)[0]

    def server_metadata(self) -> dict[str, Any]:
        """The server, its models and its DAG."""
        return _yaml_dict(self._transport.metadata(None, self.timeout))

    def model_metadata(self, name: str) -> dict[str, Any]:
        """A model's settings and inputs/outputs; `name` is `name-version`."""
        return _yaml_dict(self._transport.metadata(name, self.timeout))

    # --- the model repository (Triton's extension; the server needs `model_control: explicit` to load
    # and unload) ---

    def repository_index(self, ready: bool = False) -> list[dict[str, str]]:
        """Every model version the server knows: `{"name", "version", "state", "reason"}` each, state
        READY, LOADING, UNLOADING or UNAVAILABLE (reason says why). `ready`: the ready ones only."""
        return self._transport.repository_index(ready, self.timeout)

    def load_model(self, name: str, config: Mapping[str, Any] | None = None) -> None:
        """Load model `name`, or load it again, and return once it serves (loaded and warmed up: give
        the client a timeout that allows for it). `config`: one model entry in inference.yml's format
        (e.g. a new version); without it the server reads the model's entries from inference.yml again.
        A failed load raises, and the version served before keeps serving."""
        self._transport.load_model(name, config_json(config), self.timeout)

    def unload_model(self, name: str, unload_dependents: bool = False) -> None:
        """Stop serving every version of model `name` (requests in flight finish first). A model the
        server's DAG uses is refused unless `unload_dependents`."""
        self._transport.unload_model(name, unload_dependents, self.timeout)

    def close(self) -> None:
        self._transport.close()

    def __enter__(self) -> GrpsClient:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _answers(replies: Generator[Reply, None, None], kind: Kind) -> Generator[Any, None, None]:
    try:
        for reply in replies:
            yield answer_of(reply, kind)
    finally:
        replies.close()  # left early: close the stream now, not when the garbage collector gets to it


async def _answers_async(replies: AsyncGenerator[Reply, None], kind: Kind) -> AsyncGenerator[Any, None]:
    try:
        async for reply in replies:
            yield answer_of(reply, kind)
    finally:
        await replies.aclose()


def _yaml_dict(text: str) -> dict[str, Any]:
    """The server writes metadata as YAML in `str_data`."""
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise GrpsClientError(500, "INTERNAL", f"the server's metadata is not YAML: {exc}") from exc
    if not isinstance(value, dict):
        raise GrpsClientError(500, "INTERNAL", f"the server's metadata is not a mapping: {text[:80]!r}")
    return value

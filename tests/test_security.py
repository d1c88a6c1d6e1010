"""Security against real servers: admin routes, inference tokens, TLS (HTTP, gRPC, metrics port), mTLS."""

from __future__ import annotations

import contextlib
import shutil
import socket
import ssl
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import pytest

from grps_py.access import AccessGuard, bearer_token, grpc_peer_is_local, is_loopback
from grps_py.core.errors import ConfigError, PermissionDenied, Unauthenticated
from grps_py.core.protection import SecuritySettings
from grps_py.protos import grps_pb2, grps_pb2_grpc, open_inference_pb2, open_inference_pb2_grpc
from support import BASIC, LIGHT_INFERENCE, ServerThread, start_project

Msg = grps_pb2.GrpsMessage
OCTET = {"Content-Type": "application/octet-stream"}
ADMIN, TOKEN_A, TOKEN_B = "admin-secret", "infer-a", "infer-b"
OIP_DOC = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1], "data": [1.5]}]}


def start(tmp_path: Path, extra: str, host: str = "127.0.0.1") -> ServerThread:
    server_conf = tmp_path / "server.yml"
    server_conf.write_text(f"interface:\n  host: {host}\n  port: 0,0\n" + extra)
    inference_conf = tmp_path / "inference.yml"
    inference_conf.write_text(LIGHT_INFERENCE)
    return start_project(BASIC, inference_conf=inference_conf, server_conf=server_conf)


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def grpc_code(call: object) -> grpc.StatusCode:
    with pytest.raises(grpc.RpcError) as err:
        call()  # type: ignore[operator]
    return err.value.code()


def outward_address() -> str | None:
    """This host's address on a non-loopback interface (no packet is sent), or None."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))
        except OSError:
            return None
        address = str(probe.getsockname()[0])
    return None if is_loopback(address) else address


# --- the rules, without a server -------------------------------------------------------------------


def test_bearer_tokens_and_loopback_addresses() -> None:
    assert bearer_token("Bearer abc") == b"abc"
    assert bearer_token("bearer  abc ") == b"abc"
    assert bearer_token("Basic abc") is None and bearer_token("Bearer") is None and bearer_token(None) is None
    assert all(is_loopback(ip) for ip in ("127.0.0.1", "127.9.9.9", "::1", "::ffff:127.0.0.1"))
    assert not any(is_loopback(ip) for ip in ("10.0.0.1", "::ffff:10.0.0.1", "", "localhost"))
    assert grpc_peer_is_local("ipv4:127.0.0.1:5000") and grpc_peer_is_local("ipv6:[::1]:5000")
    assert grpc_peer_is_local("ipv6:%5B::1%5D:5000") and grpc_peer_is_local("unix:/tmp/sock")
    assert not grpc_peer_is_local("ipv4:10.1.2.3:5000") and not grpc_peer_is_local("ipv6:[2001:db8::1]:5000")
    guard = AccessGuard(SecuritySettings(inference_tokens=("a", "b")))
    guard.check_inference("Bearer b")
    with pytest.raises(Unauthenticated):
        guard.check_inference("Bearer c")
    guard.check_admin(None, local_caller=True)
    with pytest.raises(PermissionDenied):
        guard.check_admin(None, local_caller=False)


# --- admin routes ----------------------------------------------------------------------------------


def test_admin_routes_answer_loopback_callers_without_a_token(tmp_path: Path) -> None:
    server = start(tmp_path, "", host="0.0.0.0")
    try:
        with httpx.Client(base_url=server.http_url, timeout=30) as http:
            assert http.get("/grps/v1/health/offline").status_code == 200
            assert http.get("/grps/v1/health/online").status_code == 200
        with grpc.insecure_channel(server.grpc_target) as channel:
            assert grps_pb2_grpc.GrpsServiceStub(channel).Online(Msg()).status.code == 200
        remote = outward_address()
        if remote is None:
            pytest.skip("no non-loopback interface to call from")
        url = f"http://{remote}:{server.server.http_port}"
        with httpx.Client(base_url=url, timeout=30) as http:
            refused = http.get("/grps/v1/health/offline")
            assert refused.status_code == 403
            assert "loopback" in refused.json()["status"]["msg"]
            assert http.get("/grps/v1/health/ready").status_code == 200  # probes stay open
            assert (
                http.post("/grps/v1/infer/predict?model=echo", content=b"hi", headers=OCTET).content == b"hi"
            )
        with grpc.insecure_channel(f"{remote}:{server.server.grpc_port}") as channel:
            stub = grps_pb2_grpc.GrpsServiceStub(channel)
            assert grpc_code(lambda: stub.Offline(Msg())) == grpc.StatusCode.PERMISSION_DENIED
            assert stub.CheckReadiness(Msg()).status.code == 200
        assert server.server.executor.is_ready()  # nothing switched it off
    finally:
        server.stop()


def test_admin_token_is_required_when_configured(tmp_path: Path) -> None:
    server = start(tmp_path, f"security:\n  admin_token: {ADMIN}\n")
    try:
        with httpx.Client(base_url=server.http_url, timeout=30) as http:
            missing = http.get("/grps/v1/health/offline")
            assert missing.status_code == 401
            assert missing.headers["WWW-Authenticate"] == "Bearer"
            assert "Authorization: Bearer" in missing.json()["status"]["msg"]
            wrong = http.get("/grps/v1/health/offline", headers=bearer("nope"))
            assert wrong.status_code == 401 and "not accepted" in wrong.json()["status"]["msg"]
            assert http.get("/grps/v1/health/offline", headers={"Authorization": ADMIN}).status_code == 401
            assert server.server.executor.is_ready()
            assert http.get("/grps/v1/health/offline", headers=bearer(ADMIN)).status_code == 200
            assert not server.server.executor.is_ready()
            assert http.get("/grps/v1/health/live").status_code == 200  # probes stay open
            assert http.get("/grps/v1/health/ready").status_code == 503
            assert http.get("/v2/health/live").status_code == 200
        with grpc.insecure_channel(server.grpc_target) as channel:
            stub = grps_pb2_grpc.GrpsServiceStub(channel)
            assert grpc_code(lambda: stub.Online(Msg())) == grpc.StatusCode.UNAUTHENTICATED
            wrong_token = (("authorization", "Bearer nope"),)
            assert (
                grpc_code(lambda: stub.Online(Msg(), metadata=wrong_token)) == grpc.StatusCode.UNAUTHENTICATED
            )
            assert not server.server.executor.is_ready()
            assert stub.Online(Msg(), metadata=(("authorization", f"Bearer {ADMIN}"),)).status.code == 200
            assert server.server.executor.is_ready()
            assert stub.CheckLiveness(Msg()).status.code == 200
    finally:
        server.stop()


# --- inference tokens ------------------------------------------------------------------------------


@pytest.fixture
def tokens(tmp_path: Path) -> Iterator[ServerThread]:
    server = start(
        tmp_path,
        "  customized_predict_http:\n    - {path: /my/echo, model: echo-1.0}\n"
        f"security:\n  admin_token: {ADMIN}\n  inference_tokens: [{TOKEN_A}, {TOKEN_B}]\n",
    )
    yield server
    server.stop()


def test_inference_routes_need_a_token_over_http(tokens: ServerThread) -> None:
    routes = [
        ("/grps/v1/infer/predict?model=echo", {"content": b"hi", "headers": OCTET}),
        ("/my/echo", {"content": b"hi", "headers": OCTET}),
        ("/v2/models/identity/infer", {"json": OIP_DOC}),
        ("/v2/models/identity/generate", {"json": {"x": 1.5}}),
    ]
    with httpx.Client(base_url=tokens.http_url, timeout=30) as http:
        for path, kwargs in routes:
            headers = kwargs.get("headers", {})
            refused = http.post(path, **{**kwargs, "headers": headers})
            assert refused.status_code == 401, path
            body = refused.json()
            msg = body["error"] if path.startswith("/v2/") else body["status"]["msg"]
            assert "inference token" in msg, path
            wrong = http.post(path, **{**kwargs, "headers": {**headers, **bearer(ADMIN)}})
            assert wrong.status_code == 401, path
            for token in (TOKEN_A, TOKEN_B):
                answer = http.post(path, **{**kwargs, "headers": {**headers, **bearer(token)}})
                assert answer.status_code == 200, (path, answer.text)
        # Metadata, health and metrics stay open.
        for path in (
            "/grps/v1/metadata/server",
            "/grps/v1/health/ready",
            "/v2",
            "/v2/models/identity",
            "/metrics",
        ):
            assert http.get(path).status_code == 200, path


def test_inference_rpcs_need_a_token_over_grpc(tokens: ServerThread) -> None:
    good = (("authorization", f"Bearer {TOKEN_B}"),)
    with grpc.insecure_channel(tokens.grpc_target) as channel:
        stub = grps_pb2_grpc.GrpsServiceStub(channel)
        message = Msg(model="echo", str_data="hi")
        assert grpc_code(lambda: stub.Predict(message)) == grpc.StatusCode.UNAUTHENTICATED
        assert stub.Predict(message, metadata=good).str_data == "hi"
        streamed = stub.PredictStreaming(message)
        assert grpc_code(lambda: list(streamed)) == grpc.StatusCode.UNAUTHENTICATED
        assert [m.str_data for m in stub.PredictStreaming(message, metadata=good)] == ["hi"]
        assert stub.ServerMetadata(Msg()).status.code == 200  # open
        oip = open_inference_pb2_grpc.GRPCInferenceServiceStub(channel)
        request = open_inference_pb2.ModelInferRequest(model_name="identity")
        tensor = request.inputs.add(name="x", datatype="FP32", shape=[1])
        tensor.contents.fp32_contents.append(1.5)
        with pytest.raises(grpc.RpcError) as err:
            oip.ModelInfer(request)
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert "inference token" in (err.value.details() or "")
        assert [t.name for t in oip.ModelInfer(request, metadata=good).outputs] == ["x"]
        stream = oip.ModelStreamInfer(iter([request]))
        assert grpc_code(lambda: list(stream)) == grpc.StatusCode.UNAUTHENTICATED
        answers = list(oip.ModelStreamInfer(iter([request]), metadata=good))
        assert answers and not answers[0].error_message
        assert oip.ServerReady(open_inference_pb2.ServerReadyRequest()).ready  # open


# --- TLS -------------------------------------------------------------------------------------------


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def _leaf(directory: Path, ca: Path, ca_key: Path, name: str, usage: str) -> tuple[Path, Path]:
    """A certificate for `name` (localhost, 127.0.0.1 for the server) signed by the CA."""
    key, csr, cert, ext = (directory / f"{name}{suffix}" for suffix in (".key", ".csr", ".pem", ".ext"))
    ext.write_text(
        "basicConstraints=CA:FALSE\nsubjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid\n"
        f"extendedKeyUsage={usage}\nsubjectAltName=DNS:localhost,IP:127.0.0.1\n"
    )
    _openssl(
        "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", str(key), "-out", str(csr), "-subj", f"/CN={name}",
    )  # fmt: skip
    _openssl(
        "x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key), "-CAcreateserial",
        "-out", str(cert), "-days", "2", "-extfile", str(ext),
    )  # fmt: skip
    return cert, key


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A CA, a server certificate and a client certificate signed by it, and a stranger's certificate."""
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is needed to make test certificates")
    directory = tmp_path_factory.mktemp("certs")
    found: dict[str, Path] = {}
    for ca_name in ("ca", "other_ca"):
        ca, ca_key = directory / f"{ca_name}.pem", directory / f"{ca_name}.key"
        _openssl(
            "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", str(ca_key), "-out", str(ca), "-days", "2", "-subj", f"/CN=grps-py test {ca_name}",
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        )  # fmt: skip
        found[ca_name], found[f"{ca_name}_key"] = ca, ca_key
    found["server"], found["server_key"] = _leaf(
        directory, found["ca"], found["ca_key"], "server", "serverAuth"
    )
    found["client"], found["client_key"] = _leaf(
        directory, found["ca"], found["ca_key"], "client", "clientAuth"
    )
    found["stranger"], found["stranger_key"] = _leaf(
        directory, found["other_ca"], found["other_ca_key"], "stranger", "clientAuth"
    )
    return found


def tls_section(certs: dict[str, Path], client_ca: bool = False) -> str:
    text = f"tls:\n  cert_file: {certs['server']}\n  key_file: {certs['server_key']}\n"
    return text + (f"  client_ca_file: {certs['ca']}\n" if client_ca else "")


def grpc_channel(server: ServerThread, certs: dict[str, Path], client: str | None = None) -> grpc.Channel:
    credentials = grpc.ssl_channel_credentials(
        root_certificates=certs["ca"].read_bytes(),
        private_key=None if client is None else certs[f"{client}_key"].read_bytes(),
        certificate_chain=None if client is None else certs[client].read_bytes(),
    )
    return grpc.secure_channel(f"localhost:{server.server.grpc_port}", credentials)


def test_tls_serves_https_grpc_and_the_metrics_port(tmp_path: Path, certs: dict[str, Path]) -> None:
    server = start(tmp_path, "metrics:\n  port: 0\n" + tls_section(certs))
    try:
        https = f"https://127.0.0.1:{server.server.http_port}"
        with httpx.Client(base_url=https, verify=ssl.create_default_context(cafile=certs["ca"])) as http:
            answer = http.post("/grps/v1/infer/predict?model=echo", content=b"secret", headers=OCTET)
            assert answer.content == b"secret"
            metrics = http.get(f"https://127.0.0.1:{server.server.metrics_port}/metrics")
            assert metrics.status_code == 200 and b"grps_" in metrics.content
        with pytest.raises(httpx.TransportError):  # plain HTTP on the TLS port is not served
            httpx.get(f"http://127.0.0.1:{server.server.http_port}/grps/v1/health/live", timeout=10)
        with pytest.raises(httpx.TransportError):  # a client that does not trust the CA refuses it
            httpx.get(f"{https}/grps/v1/health/live", timeout=10)
        with grpc_channel(server, certs) as channel:
            assert (
                grps_pb2_grpc.GrpsServiceStub(channel).Predict(Msg(model="echo", str_data="s")).str_data
                == "s"
            )
        with grpc.insecure_channel(server.grpc_target) as channel:
            stub = grps_pb2_grpc.GrpsServiceStub(channel)
            assert grpc_code(lambda: stub.CheckLiveness(Msg(), timeout=5)) == grpc.StatusCode.UNAVAILABLE
    finally:
        server.stop()


def test_a_tls_client_that_never_handshakes_is_closed_after_idle_timeout(
    tmp_path: Path, certs: dict[str, Path]
) -> None:
    server = start(tmp_path, "limits:\n  idle_timeout_s: 0.5\n" + tls_section(certs))
    try:
        with socket.create_connection(("127.0.0.1", server.server.http_port), timeout=10) as silent:
            began = time.monotonic()
            with contextlib.suppress(ConnectionResetError):  # a reset also says it was closed
                assert silent.recv(100) == b""  # closed by the server, no handshake ever started
            assert time.monotonic() - began < 5
    finally:
        server.stop()


def test_grpc_client_certificates_are_required_with_client_ca_file(
    tmp_path: Path, certs: dict[str, Path]
) -> None:
    server = start(tmp_path, tls_section(certs, client_ca=True))
    try:
        with grpc_channel(server, certs, client="client") as channel:
            assert (
                grps_pb2_grpc.GrpsServiceStub(channel).Predict(Msg(model="echo", str_data="m")).str_data
                == "m"
            )
        for client in (None, "stranger"):  # no certificate, or one from another CA
            with grpc_channel(server, certs, client=client) as channel:
                live = grps_pb2_grpc.GrpsServiceStub(channel).CheckLiveness
                assert grpc_code(lambda: live(Msg(), timeout=5)) == grpc.StatusCode.UNAVAILABLE  # noqa: B023
        https = f"https://127.0.0.1:{server.server.http_port}"  # HTTP asks for no client certificate
        verify = ssl.create_default_context(cafile=certs["ca"])
        assert httpx.get(f"{https}/grps/v1/health/live", verify=verify, timeout=10).status_code == 200
    finally:
        server.stop()


def test_an_unusable_certificate_stops_start_up(tmp_path: Path, certs: dict[str, Path]) -> None:
    bad = tmp_path / "bad.pem"
    bad.write_text("not a certificate\n")
    with pytest.raises(ConfigError, match="tls: cannot load cert_file"):
        start(tmp_path, f"tls:\n  cert_file: {bad}\n  key_file: {certs['server_key']}\n")
    with pytest.raises(ConfigError, match="client_ca_file"):
        start(tmp_path, tls_section(certs) + f"  client_ca_file: {bad}\n")

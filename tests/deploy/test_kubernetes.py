"""deploy/kubernetes: every overlay renders with kustomize (alone and with every optional component),
every built-in object is valid against the Kubernetes schemas (offline, `kubernetes-validate`), the CRD
objects have the structure their operators expect, and the manifests agree with the server: the probe
paths are its routes, the ports are its ports, the drain timing adds up with its shutdown grace, and
the preStop hook really takes a real server offline.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import kubernetes_validate
import pytest
import yaml

from grps_py.cli import build_parser
from grps_py.cli.serve import project_settings
from grps_py.core.config import ServerSettings, load_server_settings, parse_server_settings
from grps_py.http.app import HttpRoutes
from grps_py.metrics import ServerMetrics
from support import BASIC, LIGHT_INFERENCE, REPO, ServerThread, start_project

KUBE = REPO / "deploy" / "kubernetes"
OVERLAYS = ("cpu", "gpu")
COMPONENTS = tuple(sorted(path.name for path in (KUBE / "components").iterdir() if path.is_dir()))
# Each overlay as shipped, and with every optional component switched on.
VARIANTS = [(overlay, ()) for overlay in OVERLAYS] + [(overlay, COMPONENTS) for overlay in OVERLAYS]
VARIANT_IDS = [f"{overlay}+{'+'.join(parts)}" if parts else overlay for overlay, parts in VARIANTS]
# The oldest Kubernetes these manifests are written for (appProtocol kubernetes.io/h2c is a standard
# value from 1.27) and the newest the schemas know.
K8S_VERSIONS = ("1.27", kubernetes_validate.latest_version())
CRD_GROUPS = ("monitoring.coreos.com",)
MARGIN_S = 5  # the least slack each timing must leave above what it covers
DRAIN_EXTRA_S = 2  # a stop takes at most 2 * shutdown_grace_s plus this (docs/operations.md, Drain)
STARTUP_BUDGET_S = 600  # model loading and warmup may take up to 10 minutes
PROJECT_DIR = Path("/project")  # where the images keep the project they serve
DOCKERFILES = {"cpu": REPO / "deploy" / "Dockerfile", "gpu": REPO / "deploy" / "Dockerfile.cuda"}

Objects = list[dict[str, Any]]


# --- rendering ---------------------------------------------------------------------------------


def kustomize_command(directory: Path) -> list[str]:
    """`kubectl kustomize` (kustomize built into kubectl) or a standalone `kustomize build`. Rendering
    patches, components and hashed ConfigMap names is kustomize's job: without either the manifests
    cannot be checked, and the test says so."""
    if kubectl := shutil.which("kubectl"):
        return [kubectl, "kustomize", str(directory)]
    if standalone := shutil.which("kustomize"):
        return [standalone, "build", str(directory)]
    pytest.skip("neither kubectl nor kustomize is on PATH: the kustomize overlays cannot be rendered")


def render(directory: Path) -> Objects:
    done = subprocess.run(kustomize_command(directory), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"kustomize {directory}: {done.stderr}"
    return [obj for obj in yaml.safe_load_all(done.stdout) if obj]


def with_components(overlay: str, components: tuple[str, ...], scratch: Path) -> Path:
    """A kustomization in `scratch` that is `overlay` plus `components`: what a user gets by
    uncommenting the overlay's `components:` lines. kustomize wants relative paths."""
    rel = Path(os.path.relpath(KUBE, scratch))
    scratch.mkdir(parents=True, exist_ok=True)
    (scratch / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [str(rel / "overlays" / overlay)],
                "components": [str(rel / "components" / name) for name in components],
            }
        )
    )
    return scratch


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, tuple[str, ...]], Objects]:
    scratch = tmp_path_factory.mktemp("kustomize")
    out = {}
    for overlay, parts in VARIANTS:
        plain = KUBE / "overlays" / overlay
        directory = with_components(overlay, parts, scratch / overlay) if parts else plain
        out[(overlay, parts)] = render(directory)
    return out


@pytest.fixture(params=VARIANTS, ids=VARIANT_IDS)
def objects(request: pytest.FixtureRequest, rendered: dict[Any, Objects]) -> Objects:
    return rendered[request.param]


def one(objects: Objects, kind: str, name: str | None = None) -> dict[str, Any]:
    found = [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def container(objects: Objects) -> dict[str, Any]:
    containers = one(objects, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return containers[0]


def pod_labels(objects: Objects) -> dict[str, str]:
    return one(objects, "Deployment")["spec"]["template"]["metadata"]["labels"]


def container_ports(objects: Objects) -> dict[str, int]:
    return {port["name"]: port["containerPort"] for port in container(objects)["ports"]}


def pod_server_conf(objects: Objects) -> ServerSettings:
    """The server.yml the pods run: the ConfigMap the Deployment mounts, at the path it passes."""
    args = container(objects)["args"]
    path = Path(args[args.index("--server-conf") + 1])
    mount = next(m for m in container(objects)["volumeMounts"] if m["mountPath"] == str(path.parent))
    volumes = one(objects, "Deployment")["spec"]["template"]["spec"]["volumes"]
    volume = next(v for v in volumes if v["name"] == mount["name"])
    config_map = one(objects, "ConfigMap", volume["configMap"]["name"])
    return parse_server_settings(yaml.safe_load(config_map["data"][path.name]), "configmap", PROJECT_DIR)


def prestop_script(objects: Objects) -> str:
    command = container(objects)["lifecycle"]["preStop"]["exec"]["command"]
    assert command[:2] == ["python3", "-c"], command  # python3: the name every Python image has
    return str(command[2])


def number_in(pattern: str, text: str) -> float:
    found = re.findall(pattern, text)
    assert len(found) == 1, f"expected one {pattern!r} in {text!r}"
    return float(found[0])


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return bool(selector) and all(labels.get(key) == value for key, value in selector.items())


# --- valid objects -----------------------------------------------------------------------------


def test_every_builtin_object_is_valid_kubernetes(objects: Objects) -> None:
    builtin = [o for o in objects if o["apiVersion"].split("/")[0] not in CRD_GROUPS]
    assert {o["kind"] for o in builtin} == {
        "ConfigMap",
        "Deployment",
        "HorizontalPodAutoscaler",
        "PodDisruptionBudget",
        "Service",
    }
    for obj in builtin:
        for version in K8S_VERSIONS:
            try:  # strict: a misspelt or misplaced field fails too
                kubernetes_validate.validate(obj, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                pytest.fail(f"{obj['kind']} {obj['metadata']['name']} (Kubernetes {version}): {exc}")


def test_the_service_monitor_has_the_operators_structure(rendered: dict[Any, Objects]) -> None:
    """kubernetes-validate has no schemas for CRDs: the fields the Prometheus operator's ServiceMonitor
    CRD (monitoring.coreos.com/v1) defines for what is used here, checked by hand."""
    objects = rendered[("cpu", COMPONENTS)]
    monitor = one(objects, "ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert set(monitor) == {"apiVersion", "kind", "metadata", "spec"}
    spec = monitor["spec"]
    assert set(spec) <= {"selector", "endpoints", "namespaceSelector", "jobLabel", "podTargetLabels"}
    assert set(spec["selector"]) == {"matchLabels"}
    assert all(isinstance(v, str) for v in spec["selector"]["matchLabels"].values())
    services = [o for o in objects if o["kind"] == "Service"]
    selected = [s for s in services if selects(spec["selector"]["matchLabels"], s["metadata"]["labels"])]
    assert [s["metadata"]["name"] for s in selected] == ["grps-py-metrics"]
    service_ports = {p["name"]: p for p in selected[0]["spec"]["ports"]}
    assert len(spec["endpoints"]) == 1
    for endpoint in spec["endpoints"]:
        assert set(endpoint) <= {"port", "path", "interval", "scrapeTimeout", "scheme"}
        assert endpoint["port"] in service_ports  # the Service's port name, not a number
        assert endpoint["path"] == "/metrics"
        assert re.fullmatch(r"(\d+(ms|s|m|h))+", endpoint["interval"])
    # with the operator scraping, the annotation-based job is told not to: no double counting
    annotations = one(objects, "Deployment")["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "false"


def test_the_adapter_rule_gives_the_metric_the_queue_time_hpa_asks_for(rendered: dict[Any, Objects]) -> None:
    config_map = yaml.safe_load((KUBE / "prometheus-adapter" / "adapter-config.yaml").read_text())
    for version in K8S_VERSIONS:
        kubernetes_validate.validate(config_map, version, strict=True)
    (rule,) = yaml.safe_load(config_map["data"]["config.yaml"])["rules"]
    assert rule["seriesQuery"].startswith("grps_queue_duration_seconds_count{")
    assert rule["resources"]["overrides"] == {
        "namespace": {"resource": "namespace"},
        "pod": {"resource": "pod"},
    }
    query = " ".join(rule["metricsQuery"].split())
    # the average queue time per request: rate of the histogram's sum over rate of its count
    assert re.search(
        r"sum\(rate\(grps_queue_duration_seconds_sum\{<<\.LabelMatchers>>\}\[\w+\]\)\) by \(<<\.GroupBy>>\)"
        r" / clamp_min\(sum\(rate\(grps_queue_duration_seconds_count\{<<\.LabelMatchers>>\}\[\w+\]\)\)"
        r" by \(<<\.GroupBy>>\), [\d.e-]+\)",
        query,
    ), query
    metric = rule["name"]["as"]
    assert re.fullmatch(rule["name"]["matches"], "grps_queue_duration_seconds_count")
    for overlay in OVERLAYS:
        hpa = one(rendered[(overlay, COMPONENTS)], "HorizontalPodAutoscaler")
        kinds = {m["type"] for m in hpa["spec"]["metrics"]}
        assert kinds == {"Resource", "Pods"}  # CPU stays; the HPA follows whichever asks for more
        pods = next(m["pods"] for m in hpa["spec"]["metrics"] if m["type"] == "Pods")
        assert pods["metric"]["name"] == metric
        assert pods["target"]["type"] == "AverageValue"
        plain = one(rendered[(overlay, ())], "HorizontalPodAutoscaler")
        assert [m["type"] for m in plain["spec"]["metrics"]] == ["Resource"]


# --- agreement with the server -----------------------------------------------------------------


def route_patterns() -> list[tuple[str, tuple[str, ...]]]:
    routes = HttpRoutes(None, ServerSettings(), ServerMetrics({}))  # type: ignore[arg-type]
    return [(row.pattern, row.methods) for row in routes.table()]


def served_with_get(path: str) -> bool:
    return any(re.fullmatch(pattern, path) and "GET" in methods for pattern, methods in route_patterns())


def test_probes_ask_the_servers_own_health_routes(objects: Objects) -> None:
    main = container(objects)
    http_port = container_ports(objects)["http"]
    assert main["startupProbe"]["httpGet"]["path"] == "/grps/v1/health/ready"  # models loaded, warmed up
    assert main["readinessProbe"]["httpGet"]["path"] == "/grps/v1/health/ready"  # and online
    assert main["livenessProbe"]["httpGet"]["path"] == "/grps/v1/health/live"  # not offline's business
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        get = main[probe]["httpGet"]
        assert served_with_get(get["path"]), f"{probe}: {get['path']} is no route of the server"
        assert get["port"] in ("http", http_port), probe
    url = re.findall(r"http://127\.0\.0\.1:(\d+)(/[^\"']*)", prestop_script(objects))
    assert len(url) == 1
    port, path = url[0]
    assert int(port) == http_port and path == "/grps/v1/health/offline"
    assert served_with_get(path)


def test_ports_agree_with_server_yml(objects: Objects) -> None:
    bundled = load_server_settings(REPO / "conf" / "server.yml", REPO).interface
    pods = pod_server_conf(objects)
    ports = container_ports(objects)
    assert ports["http"] == bundled.http_port == pods.interface.http_port == 7080
    assert ports["grpc"] == bundled.grpc_port == pods.interface.grpc_port == 7081
    assert ports["metrics"] == pods.metrics.port
    args = container(objects)["args"]
    assert args[args.index("--http-port") + 1] == str(ports["http"])
    assert args[args.index("--grpc-port") + 1] == str(ports["grpc"])
    annotations = one(objects, "Deployment")["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == str(ports["metrics"])
    assert annotations["prometheus.io/path"] == "/metrics"
    for service in (o for o in objects if o["kind"] == "Service"):
        for port in service["spec"]["ports"]:
            assert port["targetPort"] in ports, service["metadata"]["name"]
            assert port["port"] == ports[port["targetPort"]]


def test_grpc_is_announced_as_h2c_and_http_as_http(objects: Objects) -> None:
    ports = {
        o["metadata"]["name"]: [(p["targetPort"], p["appProtocol"]) for p in o["spec"]["ports"]]
        for o in objects
        if o["kind"] == "Service"
    }
    assert ports["grps-py-grpc"] == [("grpc", "kubernetes.io/h2c")]
    assert ports["grps-py-http"] == [("http", "http")]
    metrics = one(objects, "Service", "grps-py-metrics")["spec"]
    assert metrics["clusterIP"] == "None" and metrics["publishNotReadyAddresses"] is True


def test_the_container_command_serves_the_pods_settings(
    objects: Objects, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The container's command line and environment, read by grps-py's own CLI (the image's project and
    the mounted server.yml stood in for by the test project and the rendered ConfigMap)."""
    main = container(objects)
    assert main["command"] == ["grps-py"]
    args = build_parser().parse_args(main["args"])  # exits (fails) on an option serve does not have
    assert args.command == "serve" and args.project_dir == PROJECT_DIR
    config_map = one(objects, "ConfigMap")
    (tmp_path / "server.yml").write_text(config_map["data"]["server.yml"])
    args.project_dir, args.server_conf = BASIC, tmp_path / "server.yml"
    for variable in main["env"]:
        monkeypatch.setenv(variable["name"], variable["value"])
    server = project_settings(args).server
    ports = container_ports(objects)
    assert (server.interface.http_port, server.interface.grpc_port) == (ports["http"], ports["grpc"])
    assert server.metrics.port == ports["metrics"]
    workers = {v["name"]: v["value"] for v in main["env"]}["GRPS_WORKERS"]
    assert server.workers == int(workers)  # explicit: `auto` would count the node's cores, not the pod's


def test_the_drain_timing_adds_up(objects: Objects) -> None:
    """preStop waits until readiness has failed long enough for the endpoints to drop the pod; the
    grace period covers preStop plus both phases of the server's drain (docs/operations.md)."""
    spec = one(objects, "Deployment")["spec"]
    main = container(objects)
    readiness = main["readinessProbe"]
    unready_after_s = readiness["periodSeconds"] * readiness["failureThreshold"]
    script = prestop_script(objects)
    offline_timeout_s = number_in(r"timeout=(\d+(?:\.\d+)?)", script)
    sleep_s = number_in(r"time\.sleep\((\d+(?:\.\d+)?)\)", script)
    assert sleep_s >= unready_after_s + MARGIN_S
    shutdown_grace_s = pod_server_conf(objects).shutdown_grace_s
    prestop_s = offline_timeout_s + sleep_s
    grace = spec["template"]["spec"]["terminationGracePeriodSeconds"]
    assert grace >= prestop_s + 2 * shutdown_grace_s + DRAIN_EXTRA_S + MARGIN_S
    startup = main["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= STARTUP_BUDGET_S
    assert spec["progressDeadlineSeconds"] > STARTUP_BUDGET_S
    assert pod_server_conf(objects).start_online  # else the startupProbe on readiness never passes


def test_selectors_match_the_pods(objects: Objects) -> None:
    labels = pod_labels(objects)
    deployment = one(objects, "Deployment")
    assert selects(deployment["spec"]["selector"]["matchLabels"], labels)
    assert selects(one(objects, "PodDisruptionBudget")["spec"]["selector"]["matchLabels"], labels)
    for constraint in deployment["spec"]["template"]["spec"]["topologySpreadConstraints"]:
        assert selects(constraint["labelSelector"]["matchLabels"], labels)
    for service in (o for o in objects if o["kind"] == "Service"):
        assert selects(service["spec"]["selector"], labels), service["metadata"]["name"]
    target = one(objects, "HorizontalPodAutoscaler")["spec"]["scaleTargetRef"]
    assert target == {"apiVersion": "apps/v1", "kind": "Deployment", "name": deployment["metadata"]["name"]}
    hpa = one(objects, "HorizontalPodAutoscaler")["spec"]
    assert 1 <= hpa["minReplicas"] <= hpa["maxReplicas"]
    assert deployment["spec"]["template"]["spec"]["enableServiceLinks"] is False


def test_the_gpu_overlay_asks_for_a_gpu_and_the_cuda_image(rendered: dict[Any, Objects]) -> None:
    gpu, cpu = rendered[("gpu", ())], rendered[("cpu", ())]
    assert container(gpu)["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert "cuda" in container(gpu)["image"] and "cuda" not in container(cpu)["image"]
    gpu_pod = one(gpu, "Deployment")["spec"]["template"]["spec"]
    assert gpu_pod["nodeSelector"] and any(t["key"] == "nvidia.com/gpu" for t in gpu_pod["tolerations"])
    cpu_pod = one(cpu, "Deployment")["spec"]["template"]["spec"]
    assert "nvidia.com/gpu" not in str(cpu_pod)


def test_the_pods_fit_the_images_the_dockerfiles_build(rendered: dict[Any, Objects]) -> None:
    """Each overlay runs the image its Dockerfile's usage line builds, as the user that owns its project,
    serving the project directory it holds (the Dockerfiles are another part's: this catches drift)."""
    for overlay, dockerfile in DOCKERFILES.items():
        text = dockerfile.read_text()
        objects = rendered[(overlay, ())]
        main = container(objects)
        built = re.search(rf"docker build -f deploy/{dockerfile.name} -t (\S+) \.", text)
        assert built and main["image"] == built[1], overlay
        project = re.search(r"^CMD \[\"([^\"]+)\"\]$", text, re.MULTILINE)
        assert project and Path(project[1]) == PROJECT_DIR == Path(main["args"][1]), overlay
        uid = re.search(r"^ARG APP_UID=(\d+)$", text, re.MULTILINE)
        security = one(objects, "Deployment")["spec"]["template"]["spec"]["securityContext"]
        assert uid and security["runAsUser"] == int(uid[1]) and security["runAsNonRoot"], overlay


# --- against a real server ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def pod_like_server(
    rendered: dict[Any, Objects], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerThread]:
    """A server run with the pods' server.yml (on loopback and free ports) and the light models."""
    root = tmp_path_factory.mktemp("pod")
    config_map = one(rendered[("cpu", ())], "ConfigMap")
    conf = yaml.safe_load(config_map["data"]["server.yml"])
    conf["interface"] = {**conf["interface"], "host": "127.0.0.1", "port": "0,0"}
    conf["metrics"] = {**conf["metrics"], "port": 0}
    (root / "server.yml").write_text(yaml.safe_dump(conf))
    (root / "inference.yml").write_text(LIGHT_INFERENCE)
    server = start_project(BASIC, inference_conf=root / "inference.yml", server_conf=root / "server.yml")
    yield server
    server.stop()


def run_prestop(script: str, port: int) -> subprocess.CompletedProcess[str]:
    """The hook's own script, pointed at `port` and without its wait."""
    assert script.count("127.0.0.1:7080") == 1 and len(re.findall(r"time\.sleep\(\d+\)", script)) == 1
    pointed = script.replace("127.0.0.1:7080", f"127.0.0.1:{port}")
    here = re.sub(r"time\.sleep\(\d+\)", "time.sleep(0)", pointed)
    env = {k: v for k, v in os.environ.items() if k != "GRPS_ADMIN_TOKEN"}
    return subprocess.run([sys.executable, "-c", here], capture_output=True, text=True, timeout=30, env=env)


def test_the_prestop_hook_takes_a_real_server_out_of_readiness(
    rendered: dict[Any, Objects], pod_like_server: ServerThread
) -> None:
    objects = rendered[("cpu", ())]
    main = container(objects)
    with httpx.Client(base_url=pod_like_server.http_url, timeout=30) as http:
        assert http.get(main["readinessProbe"]["httpGet"]["path"]).status_code == 200
        done = run_prestop(prestop_script(objects), pod_like_server.server.http_port)
        assert done.returncode == 0, done.stderr
        assert http.get(main["readinessProbe"]["httpGet"]["path"]).status_code == 503  # endpoints drop it
        assert http.get(main["livenessProbe"]["httpGet"]["path"]).status_code == 200  # not restarted
        http.get("/grps/v1/health/online").raise_for_status()
        assert http.get(main["readinessProbe"]["httpGet"]["path"]).status_code == 200


def test_the_prestop_hook_never_fails_when_the_server_does_not_answer(rendered: dict[Any, Objects]) -> None:
    import socket

    with socket.socket() as unused:  # a port nothing listens on: bound, never listening
        unused.bind(("127.0.0.1", 0))
        done = run_prestop(prestop_script(rendered[("cpu", ())]), unused.getsockname()[1])
    assert done.returncode == 0, done.stderr


def test_the_metrics_port_serves_the_queue_time_histogram(pod_like_server: ServerThread) -> None:
    port = pod_like_server.server.metrics_port
    assert port is not None
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=30).text
    assert "# TYPE grps_queue_duration_seconds histogram" in text

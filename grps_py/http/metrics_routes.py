"""Monitoring over HTTP: the dashboard page at `/`, Prometheus `/metrics`, and the JSON the page reads.

The handlers only read the server's `ServerMetrics` (built and sampled by the server, injected here)
and the user metrics model code records (`app_monitor`, grps's API); they derive from BaseHandler so a
bad query answers the grps error envelope like any other route (an unknown series or model is a
ModelNotFound: the error table's 404).

Series names are grps's: the server's own (`qps`, `latency_cdf(ms)`, ...) also with grps's `*` in front
(`*qps`, as grps names its built-in metrics), and every user metric under the name model code gave it.
A single series (`?name=`) also carries grps's own form of it: `label` ("trend" or "cdf") and `data`
(`[[index, value], ...]`, null as 0; for a cdf, `[[percent, value], ...]` of the last complete bucket,
99.9 and 99.99 written as grps writes them, 100 and 101).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import tornado.web

from grps_py.app_metrics import AppMonitor, app_monitor
from grps_py.core.errors import InvalidInput, ModelNotFound
from grps_py.core.executor import Executor
from grps_py.http.base import BaseHandler, NotFoundHandler
from grps_py.http.policy import POLICY_SETTING, HttpPolicy, http_policy
from grps_py.metrics import WINDOWS, ServerMetrics
from grps_py.workers.group import WorkerGroup
from grps_py.workers.merge import WEIGHTED, merge_expositions, merge_series, merge_snapshots

Route = tuple[str, type[tornado.web.RequestHandler], dict[str, Any]]
DASHBOARD_DIR = Path(__file__).resolve().parent.parent / "dashboard"
SERIES, MODELS, SNAPSHOT = "/grps/v1/monitor/series", "/grps/v1/monitor/models", "/grps/v1/monitor/metrics"
BUILTIN_MARK = "*"  # grps names its own metrics `*qps`, `*latency_avg(ms)`, ...
# grps's x for the cdf's 99.9th and 99.99th percentiles (its dashboard's axis: 10 ... 99, 100, 101).
GRPS_PERCENT = {"p99.9": 100, "p99.99": 101}


def series_of(
    metrics: ServerMetrics, monitor: AppMonitor, name: str, model: str, window: str
) -> dict[str, Any]:
    """A series by any of its names: the server's (`qps`, or grps's `*qps`), else a user metric's.
    KeyError (naming what exists) or ValueError as `ServerMetrics.series` raises them."""
    builtin = metrics.series_names()
    if name in builtin:
        return metrics.series(name, model, window)
    if name in monitor.kinds():  # server-wide, as process series: asked for a model, the server's
        models = metrics.models()
        if model and model not in models:
            raise KeyError(f"unknown model {model!r}; models: {', '.join(models)}")
        return monitor.series(name, window)
    if name.startswith(BUILTIN_MARK) and name[1:] in builtin:
        return metrics.series(name[1:], model, window)
    names = ", ".join([*builtin, *monitor.kinds()])
    raise KeyError(f"unknown series {name!r}; series: {names}")


def grps_form(series: dict[str, Any]) -> dict[str, Any]:
    """grps's `label` and `data` for a series (what grps's own dashboard script reads)."""
    points = series["points"]
    if any(isinstance(point["v"], dict) for point in points):
        last: dict[str, float] = next((point["v"] for point in reversed(points) if point["v"]), {})
        data = [[GRPS_PERCENT.get(key, float(key[1:])), round(value, 2)] for key, value in last.items()]
        return {"label": "cdf", "data": data}
    data = [[index, 0 if point["v"] is None else round(point["v"], 2)] for index, point in enumerate(points)]
    return {"label": "trend", "data": data}


class MonitorHandler(BaseHandler):
    """Holds the metrics every monitoring route reads."""

    def initialize(
        self,
        executor: Executor,
        metrics: ServerMetrics | None = None,
        monitor: AppMonitor = app_monitor,
        group: WorkerGroup | None = None,
        **_: Any,
    ) -> None:
        super().initialize(executor)
        assert metrics is not None, "the monitoring routes are built with the server's metrics"
        self.metrics = metrics
        self.monitor = monitor
        self.group = group  # a worker of several: they answer for the whole server together

    def write_document(self, doc: Any) -> None:
        self.set_header("Cache-Control", "no-store")  # live data: a cached answer is a wrong answer
        self.write_json(orjson.dumps(doc))


class PrometheusHandler(MonitorHandler):
    """GET /metrics: the Prometheus text exposition."""

    async def get(self) -> None:
        body, content_type = self.metrics.exposition()
        if self.group is not None:
            texts = await self.group.ask_all({"op": "metrics"})
            body = merge_expositions(texts) + self.group.exposition(len(texts))
        self.set_header("Content-Type", content_type)
        self.finish(body)


class SeriesHandler(MonitorHandler):
    """GET ?name=N (one series) or ?names=A,B,C (several, keyed by name: the page polls them each second)."""

    async def get(self) -> None:
        model = self.get_query_argument("model", "")
        window = self.get_query_argument("window", "minute")
        names = self.get_query_argument("names", None)
        if names is not None:
            wanted = [name for name in (part.strip() for part in names.split(",")) if name]
            if not wanted:
                raise InvalidInput("?names= needs at least one series name")
            series = {name: await self._series(name, model, window) for name in wanted}
            self.write_document({"model": model, "window": window, "series": series})
            return
        name = self.get_query_argument("name", None)
        if not name:
            raise InvalidInput(f"give ?name=SERIES (or ?names=A,B,C); see {MODELS} for the names")
        series = await self._series(name, model, window)
        self.write_document({**series, **grps_form(series)})

    async def _series(self, name: str, model: str, window: str) -> dict[str, Any]:
        if self.group is None:
            return checked_series(self.metrics, self.monitor, name, model, window)
        request = {"op": "series", "name": name, "model": model, "window": window}
        answers = await self.group.ask_all(request)
        weights = await self.group.ask_all({**request, "name": "qps"}) if name in WEIGHTED else answers
        return merge_series(name, answers, [w["points"] for w in weights])


def checked_series(
    metrics: ServerMetrics, monitor: AppMonitor, name: str, model: str, window: str
) -> dict[str, Any]:
    """`series_of`, its errors (naming what exists) as 404 and 400."""
    try:
        return series_of(metrics, monitor, name, model, window)
    except KeyError as exc:
        raise ModelNotFound(str(exc.args[0]) if exc.args else f"unknown series {name!r}") from None
    except ValueError as exc:
        raise InvalidInput(str(exc)) from None


class ModelsHandler(MonitorHandler):
    """GET: what the page can ask for: model keys, series names, which of them exist per model, windows."""

    def get(self) -> None:
        models, names = self.metrics.models(), self.metrics.series_names()
        user = {name: kind for name, kind in self.monitor.kinds().items() if name not in names}
        self.write_document(
            {
                "models": models,
                "names": [*names, *user],
                "model_names": [name for name in names if models and self._per_model(name, models[0])],
                "user_metrics": user,  # name -> kind (inc, avg, max, min, cdf); server-wide
                "windows": [window.name for window in WINDOWS],
            }
        )

    def _per_model(self, name: str, model: str) -> bool:
        """Process and GPU series are server-wide: asked for a model, they answer for the server."""
        try:
            return bool(self.metrics.series(name, model, "minute")["model"] == model)
        except KeyError:
            return False


class SnapshotHandler(MonitorHandler):
    """GET: the latest value of every series, under grps's names (overall and per model); user metrics
    are in `overall` under their own names, as grps lists them beside its `*` metrics."""

    async def get(self) -> None:
        if self.group is not None:
            self.write_document(merge_snapshots(await self.group.ask_all({"op": "snapshot"})))
            return
        self.write_document(local_snapshot(self.metrics, self.monitor))


def local_snapshot(metrics: ServerMetrics, monitor: AppMonitor) -> dict[str, Any]:
    snapshot = metrics.snapshot()
    overall = snapshot["overall"]
    for name, value in monitor.latest().items():
        overall.setdefault(name, value)
    return snapshot


class DashboardHandler(BaseHandler):
    """GET /: the dashboard, one self-contained HTML page (its CSS and JS inlined, nothing external)."""

    def initialize(self, executor: Executor, page: bytes = b"", **_: Any) -> None:
        super().initialize(executor)
        self.page = page

    def get(self) -> None:
        self.set_header("Content-Type", "text/html; charset=utf-8")
        self.set_header("Cache-Control", "no-cache")
        self.finish(self.page)


def dashboard_page(directory: Path = DASHBOARD_DIR) -> bytes:
    """index.html with dashboard.css and dashboard.js inlined where it names them: one request, offline."""
    html = (directory / "index.html").read_text(encoding="utf-8")
    css = (directory / "dashboard.css").read_text(encoding="utf-8")
    js = (directory / "dashboard.js").read_text(encoding="utf-8")
    html = html.replace('<link rel="stylesheet" href="dashboard.css">', f"<style>\n{css}</style>")
    html = html.replace('<script src="dashboard.js"></script>', f"<script>\n{js}</script>")
    return html.encode("utf-8")


def monitor_routes(
    executor: Executor,
    metrics: ServerMetrics,
    monitor: AppMonitor = app_monitor,
    group: WorkerGroup | None = None,
) -> list[Route]:
    """The monitoring routes of the HTTP port (`monitor`: whose user metrics they show; `group`: the
    workers they speak for, when this is one of several)."""
    base: dict[str, Any] = {"executor": executor, "metrics": metrics, "monitor": monitor, "group": group}
    return [
        (r"/", DashboardHandler, {"executor": executor, "page": dashboard_page()}),
        (r"/metrics", PrometheusHandler, base),
        (SERIES, SeriesHandler, base),
        (MODELS, ModelsHandler, base),
        (SNAPSHOT, SnapshotHandler, base),
    ]


def build_metrics_app(
    executor: Executor,
    metrics: ServerMetrics,
    policy: HttpPolicy | None = None,
    group: WorkerGroup | None = None,
) -> tornado.web.Application:
    """The application of the separate `metrics.port`: /metrics only, under `policy` (by default the
    server's own limits: its route is open)."""
    app = tornado.web.Application(
        [(r"/metrics", PrometheusHandler, {"executor": executor, "metrics": metrics, "group": group})],
        default_handler_class=NotFoundHandler,
        default_handler_args={"executor": executor},
        compress_response=False,
    )
    app.settings[POLICY_SETTING] = policy or http_policy(executor.server_settings)
    return app

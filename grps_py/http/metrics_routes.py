"""Monitoring over HTTP: the dashboard page at `/`, Prometheus `/metrics`, and the JSON the page reads.

The handlers only read the server's `ServerMetrics` (built and sampled by the server, injected here);
they derive from BaseHandler so a bad query answers the grps error envelope like any other route
(an unknown series or model is a ModelNotFound: the error table's 404).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import tornado.web

from grps_py.core.errors import InvalidInput, ModelNotFound
from grps_py.core.executor import Executor
from grps_py.http.base import BaseHandler, NotFoundHandler
from grps_py.http.policy import POLICY_SETTING, HttpPolicy, http_policy
from grps_py.metrics import WINDOWS, ServerMetrics

Route = tuple[str, type[tornado.web.RequestHandler], dict[str, Any]]
DASHBOARD_DIR = Path(__file__).resolve().parent.parent / "dashboard"
SERIES, MODELS, SNAPSHOT = "/grps/v1/monitor/series", "/grps/v1/monitor/models", "/grps/v1/monitor/metrics"


class MonitorHandler(BaseHandler):
    """Holds the metrics every monitoring route reads."""

    def initialize(self, executor: Executor, metrics: ServerMetrics | None = None, **_: Any) -> None:
        super().initialize(executor)
        assert metrics is not None, "the monitoring routes are built with the server's metrics"
        self.metrics = metrics

    def write_document(self, doc: Any) -> None:
        self.set_header("Cache-Control", "no-store")  # live data: a cached answer is a wrong answer
        self.write_json(orjson.dumps(doc))


class PrometheusHandler(MonitorHandler):
    """GET /metrics: the Prometheus text exposition."""

    def get(self) -> None:
        body, content_type = self.metrics.exposition()
        self.set_header("Content-Type", content_type)
        self.finish(body)


class SeriesHandler(MonitorHandler):
    """GET ?name=N (one series) or ?names=A,B,C (several, keyed by name: the page polls them each second)."""

    def get(self) -> None:
        model = self.get_query_argument("model", "")
        window = self.get_query_argument("window", "minute")
        names = self.get_query_argument("names", None)
        if names is not None:
            wanted = [name for name in (part.strip() for part in names.split(",")) if name]
            if not wanted:
                raise InvalidInput("?names= needs at least one series name")
            series = {name: self._series(name, model, window) for name in wanted}
            self.write_document({"model": model, "window": window, "series": series})
            return
        name = self.get_query_argument("name", None)
        if not name:
            raise InvalidInput(f"give ?name=SERIES (or ?names=A,B,C); see {MODELS} for the names")
        self.write_document(self._series(name, model, window))

    def _series(self, name: str, model: str, window: str) -> dict[str, Any]:
        """ServerMetrics words its own errors (naming what exists); they become 404 and 400 here."""
        try:
            return self.metrics.series(name, model, window)
        except KeyError as exc:
            raise ModelNotFound(str(exc.args[0]) if exc.args else f"unknown series {name!r}") from None
        except ValueError as exc:
            raise InvalidInput(str(exc)) from None


class ModelsHandler(MonitorHandler):
    """GET: what the page can ask for: model keys, series names, which of them exist per model, windows."""

    def get(self) -> None:
        models, names = self.metrics.models(), self.metrics.series_names()
        self.write_document(
            {
                "models": models,
                "names": names,
                "model_names": [name for name in names if models and self._per_model(name, models[0])],
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
    """GET: the latest value of every series, under grps's names (overall and per model)."""

    def get(self) -> None:
        self.write_document(self.metrics.snapshot())


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


def monitor_routes(executor: Executor, metrics: ServerMetrics) -> list[Route]:
    """The monitoring routes of the HTTP port."""
    base: dict[str, Any] = {"executor": executor, "metrics": metrics}
    return [
        (r"/", DashboardHandler, {"executor": executor, "page": dashboard_page()}),
        (r"/metrics", PrometheusHandler, base),
        (SERIES, SeriesHandler, base),
        (MODELS, ModelsHandler, base),
        (SNAPSHOT, SnapshotHandler, base),
    ]


def build_metrics_app(
    executor: Executor, metrics: ServerMetrics, policy: HttpPolicy | None = None
) -> tornado.web.Application:
    """The application of the separate `metrics.port`: /metrics only, under `policy` (by default the
    server's own limits: its route is open)."""
    app = tornado.web.Application(
        [(r"/metrics", PrometheusHandler, {"executor": executor, "metrics": metrics})],
        default_handler_class=NotFoundHandler,
        default_handler_args={"executor": executor},
        compress_response=False,
    )
    app.settings[POLICY_SETTING] = policy or http_policy(executor.server_settings)
    return app

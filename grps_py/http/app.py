"""The one HTTP route table: every route of the HTTP port, and which layer serves it.

Unary routes (answered in one piece) are served on grps-py's own connection (`http/direct.py`); the
routes that stream, the user's custom routes and the monitoring pages go through Tornado's web layer
(`http/base.py`). Both keep the same rules through the request's lifecycle (grps_py/lifecycle.py).
`HttpRoutes.table()` lists them all, in the order a request is matched: the unary routes first, then
Tornado's; a path no route matches is Tornado's 404.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import tornado.web

from grps_py.core.config import ServerSettings
from grps_py.core.dataplane import OipDataplane
from grps_py.core.errors import ConfigError
from grps_py.core.executor import Executor
from grps_py.core.telemetry import OIP_HTTP
from grps_py.http.base import NotFoundHandler, implemented_methods, skip_tornado_access_log
from grps_py.http.custom import AliasPredictHandler, CustomPredictHandler
from grps_py.http.direct import DirectRoutes, UnaryRoute
from grps_py.http.grps import GrpsRoutes, grps_stream_routes
from grps_py.http.metrics_routes import monitor_routes
from grps_py.http.oip import OipRoutes, oip_stream_routes
from grps_py.http.oip_statistics import StatisticsRoutes
from grps_py.http.openai_routes import openai_routes
from grps_py.http.policy import POLICY_SETTING, HttpPolicy, http_policy
from grps_py.lifecycle import INFERENCE
from grps_py.metrics import ServerMetrics
from grps_py.workers.group import WorkerGroup

Route = tuple[str, type[tornado.web.RequestHandler], dict[str, Any]]


@dataclass(frozen=True)
class RouteRow:
    """One line of the route table: a path pattern, its methods, and the layer that serves it."""

    pattern: str
    methods: tuple[str, ...]
    layer: str  # "connection" (http/direct.py) or "tornado" (http/base.py)
    serves: str  # the code that answers it


def custom_routes(executor: Executor, settings: ServerSettings) -> list[Route]:
    """One route per configured path, matched literally (a "." in it is a dot, not any character)."""
    routes: list[Route] = []
    for route in settings.interface.customized_predict_http:
        if route.path is None:
            continue
        handler = CustomPredictHandler if route.customized_body else AliasPredictHandler
        routes.append((re.escape(route.path), handler, {"executor": executor, "route": route}))
    return routes


class HttpRoutes:
    """The routes of one server's HTTP port, built once from its settings, its executor and metrics."""

    def __init__(
        self,
        executor: Executor,
        settings: ServerSettings,
        metrics: ServerMetrics,
        group: WorkerGroup | None = None,
    ) -> None:
        self.executor = executor
        self.settings = settings
        self.policy: HttpPolicy = http_policy(settings)
        ctrl = settings.interface.predict_streaming_ctrl
        dataplane = OipDataplane(executor, OIP_HTTP)
        unary = [
            *GrpsRoutes(executor, self.policy, ctrl).unary_routes(),
            *StatisticsRoutes(executor).unary_routes(),  # before OipRoutes: /v2/models/stats is no model
            *OipRoutes(dataplane, self.policy).unary_routes(),
        ]
        # Tried in order for every request: the inference routes first, so an infer or predict is
        # matched after a pattern or two rather than after every health and metadata one.
        self.unary: list[UnaryRoute] = sorted(unary, key=lambda route: route.access != INFERENCE)
        builtin: list[Route] = [
            *grps_stream_routes(executor, ctrl),
            *oip_stream_routes(executor, dataplane),
            *monitor_routes(executor, metrics, group=group),
        ]
        custom = custom_routes(executor, settings)
        self._refuse_collisions(builtin, custom)
        # The OpenAI-compatible routes give way to a custom route at the same path (a grps project
        # answering /v1/chat/completions itself keeps doing so): matched after the custom routes.
        self.tornado: list[Route] = [*custom, *builtin, *openai_routes(executor, settings.openai_prefix)]

    def _refuse_collisions(self, builtin: list[Route], custom: list[Route]) -> None:
        """A custom path that a built-in route also matches stops start-up: one of them would be
        unreachable."""
        patterns = [(route.pattern, "a unary route") for route in self.unary]
        patterns += [(pattern, handler.__name__) for pattern, handler, _ in builtin]
        for route in self.settings.interface.customized_predict_http:
            for pattern, name in patterns:
                if route.path is not None and re.fullmatch(pattern, route.path):
                    raise ConfigError(
                        f"{self.settings.source}: interface.customized_predict_http: path "
                        f"{route.path!r} is a built-in route ({name}); choose another path"
                    )

    def direct(self) -> DirectRoutes:
        return DirectRoutes(self.unary, self.executor.telemetry, self.policy)

    def app(self) -> tornado.web.Application:
        app = tornado.web.Application(
            self.tornado,
            default_handler_class=NotFoundHandler,
            default_handler_args={"executor": self.executor},
            compress_response=False,
            log_function=skip_tornado_access_log,  # our access log writes each request once, with its id
        )
        app.settings[POLICY_SETTING] = self.policy  # body limit and tokens, read by every handler
        return app

    def table(self) -> list[RouteRow]:
        """Every route, in the order a request is matched, with the layer that serves it."""
        rows = [
            RouteRow(r.pattern, tuple(sorted(r.allowed)), "connection", _name(next(iter(r.methods.values()))))
            for r in self.unary
        ]
        for pattern, handler, options in self.tornado:
            custom = options.get("route")
            methods = set(custom.methods) if custom is not None else implemented_methods(handler)
            rows.append(RouteRow(pattern, tuple(sorted(methods)), "tornado", handler.__name__))
        return rows


def _name(serve: Any) -> str:
    return str(getattr(serve, "__qualname__", serve))

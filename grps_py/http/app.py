"""The one HTTP route table: the Tornado application built from it, and the direct routes in front of it."""

from __future__ import annotations

import re
from typing import Any

import tornado.web

from grps_py.core.config import ServerSettings
from grps_py.core.errors import ConfigError
from grps_py.core.executor import Executor
from grps_py.http.base import NotFoundHandler, skip_tornado_access_log
from grps_py.http.custom import AliasPredictHandler, CustomPredictHandler
from grps_py.http.direct import DirectRoutes
from grps_py.http.grps import (
    HealthHandler,
    ModelMetadataHandler,
    PredictHandler,
    ServerMetadataHandler,
    direct_predict_route,
)
from grps_py.http.monitor import monitor_routes
from grps_py.http.oip import direct_infer_route, oip_routes
from grps_py.http.policy import POLICY_SETTING, http_policy

Route = tuple[str, type[tornado.web.RequestHandler], dict[str, Any]]


def grps_routes(executor: Executor, settings: ServerSettings) -> list[Route]:
    ctrl = settings.interface.predict_streaming_ctrl
    base: dict[str, Any] = {"executor": executor}
    routes: list[Route] = [
        (f"/grps/v1/health/{action}", HealthHandler, {**base, "action": action})
        for action in ("online", "offline", "live", "ready")
    ]
    routes += [
        (r"/grps/v1/infer/predict", PredictHandler, {**base, "streaming_ctrl": ctrl}),
        (r"/grps/v1/metadata/server", ServerMetadataHandler, base),
        (r"/grps/v1/metadata/model", ModelMetadataHandler, base),
    ]
    return routes


def custom_routes(executor: Executor, settings: ServerSettings) -> list[Route]:
    """One route per configured path, matched literally (a "." in it is a dot, not any character)."""
    routes: list[Route] = []
    for route in settings.interface.customized_predict_http:
        if route.path is None:
            continue
        handler = CustomPredictHandler if route.customized_body else AliasPredictHandler
        routes.append((re.escape(route.path), handler, {"executor": executor, "route": route}))
    return routes


def route_table(executor: Executor, settings: ServerSettings) -> list[Route]:
    builtin = grps_routes(executor, settings) + oip_routes(executor) + monitor_routes(executor)
    custom = custom_routes(executor, settings)
    _refuse_collisions(settings, builtin)
    # Tornado tries the patterns in order: inference routes first, so a predict or infer request is
    # matched after a few patterns rather than after every health and metadata one.
    builtin.sort(key=lambda route: not getattr(route[1], "inference", False))
    return custom + builtin


def _refuse_collisions(settings: ServerSettings, builtin: list[Route]) -> None:
    """A custom path that a built-in route also matches stops start-up: one of them would be unreachable."""
    for route in settings.interface.customized_predict_http:
        for pattern, handler, _ in builtin:
            if route.path is not None and re.fullmatch(pattern, route.path):
                raise ConfigError(
                    f"{settings.source}: interface.customized_predict_http: path {route.path!r} is a "
                    f"built-in route ({handler.__name__}); choose another path"
                )


def build_app(executor: Executor, settings: ServerSettings) -> tornado.web.Application:
    app = tornado.web.Application(
        route_table(executor, settings),
        default_handler_class=NotFoundHandler,
        default_handler_args={"executor": executor},
        compress_response=False,
        log_function=skip_tornado_access_log,  # our access log writes each request once, with its id
    )
    app.settings[POLICY_SETTING] = http_policy(settings)  # body limit and tokens, read by every handler
    return app


def build_direct_routes(executor: Executor, settings: ServerSettings) -> DirectRoutes:
    """The hot routes the connection answers itself (http/direct.py): OIP infer and unary grps predict.
    Their paths stay in the app's table too, for their other methods and for streaming predicts."""
    policy = http_policy(settings)
    ctrl = settings.interface.predict_streaming_ctrl
    return DirectRoutes([direct_infer_route(executor, policy), direct_predict_route(executor, policy, ctrl)])

"""The one HTTP route table and the Tornado application built from it."""

from __future__ import annotations

from typing import Any

import tornado.web

from grps_py.core.config import ServerSettings
from grps_py.core.executor import Executor
from grps_py.http.base import NotFoundHandler
from grps_py.http.custom import CustomPredictHandler
from grps_py.http.grps import (
    HealthHandler,
    ModelMetadataHandler,
    PredictHandler,
    ServerMetadataHandler,
)
from grps_py.http.oip import oip_routes

Route = tuple[str, type[tornado.web.RequestHandler], dict[str, Any]]


def grps_routes(executor: Executor, settings: ServerSettings) -> list[Route]:
    ctrl = settings.interface.customized_predict_http.streaming_ctrl
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
    custom = settings.interface.customized_predict_http
    if not custom.path:
        return []
    handler = CustomPredictHandler if custom.customized_body else PredictHandler
    return [(custom.path, handler, {"executor": executor, "streaming_ctrl": custom.streaming_ctrl})]


def route_table(executor: Executor, settings: ServerSettings) -> list[Route]:
    return custom_routes(executor, settings) + grps_routes(executor, settings) + oip_routes(executor)


def build_app(executor: Executor, settings: ServerSettings) -> tornado.web.Application:
    return tornado.web.Application(
        route_table(executor, settings),
        default_handler_class=NotFoundHandler,
        default_handler_args={"executor": executor},
        compress_response=False,
    )

"""Triton's statistics extension over HTTP: `GET /v2/models[/{model}[/versions/{version}]]/stats`.

The answer is Triton's `{"model_stats": [...]}` (core/statistics.py builds each entry); a model or
version that is not served answers 404 with the OIP error body. `/v2/models/stats` is matched before a
model's metadata route (`/v2/models/{model}`), as Triton does: a model named "stats" keeps its other
routes but not that one.
"""

from __future__ import annotations

import orjson

from grps_py.core.executor import Executor
from grps_py.http.direct import Answer, DirectCall, UnaryRoute
from grps_py.http.policy import oip_error_body

STATS = r"/v2/models(?:/([^/]+)(?:/versions/([^/]+))?)?/stats"


class StatisticsRoutes:
    """The unary statistics route over one executor (read when a request comes, never before: the
    route table is also built without one)."""

    def __init__(self, executor: Executor) -> None:
        self.executor = executor

    async def statistics(self, call: DirectCall) -> Answer:
        model, version = call.args
        stats = self.executor.model_statistics(model, version)
        return Answer(orjson.dumps({"model_stats": stats}))

    def unary_routes(self) -> list[UnaryRoute]:
        return [UnaryRoute(STATS, {"GET": self.statistics}, oip_error_body)]

"""What a worker answers the other workers of its group (over its socket, grps_py/workers/group.py):
its own metrics, series and snapshot, for the one answering a scrape or the dashboard; and the
repository operations one of them was asked for, applied here too."""

from __future__ import annotations

from typing import Any

from grps_py.app_metrics import app_monitor
from grps_py.core.errors import InvalidInput
from grps_py.core.repository import ModelRepository
from grps_py.core.untrusted import shown
from grps_py.http.metrics_routes import checked_series, local_snapshot
from grps_py.metrics import ServerMetrics


class PeerRequests:
    """Answers one worker's request to this one: `{"op": ..., ...}` -> a JSON-able body."""

    def __init__(self, metrics: ServerMetrics, repository: ModelRepository) -> None:
        self.metrics = metrics
        self.repository = repository

    async def answer(self, request: dict[str, Any]) -> Any:
        op = request.get("op")
        metrics = self.metrics
        if op == "metrics":
            return metrics.exposition()[0].decode()
        if op == "series":
            return checked_series(
                metrics, app_monitor, str(request["name"]), str(request["model"]), str(request["window"])
            )
        if op == "snapshot":
            return local_snapshot(metrics, app_monitor)
        repository = self.repository
        if op == "load":
            await repository.load(str(request["name"]), request.get("config"))
            return None
        if op == "unload":
            await repository.unload(str(request["name"]), bool(request.get("unload_dependents")))
            return None
        raise InvalidInput(f"unknown operation {shown(str(op), 40)!r}")

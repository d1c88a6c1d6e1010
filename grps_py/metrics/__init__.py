"""Server metrics: Prometheus exposition and the dashboard's time series, one instance per server."""

from __future__ import annotations

from grps_py.metrics.series import WINDOWS, Window
from grps_py.metrics.server_metrics import ServerMetrics

__all__ = ["WINDOWS", "ServerMetrics", "Window"]

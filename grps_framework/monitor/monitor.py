"""grps's `grps_framework.monitor.monitor`: `app_monitor`, the process-wide user metrics."""

from grps_py.app_metrics import app_monitor

__all__ = ["app_monitor"]

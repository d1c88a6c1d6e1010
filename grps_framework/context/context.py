"""grps's `grps_framework.context.context`: the per-request context model code receives."""

from grps_py.core.context import GrpsContext

__all__ = ["GrpsContext"]

"""grps's `grps_framework.model_infer.inferer`: the inferer base class and its registry."""

from grps_py.core.model import ModelInferer, inferer_register

__all__ = ["ModelInferer", "inferer_register"]

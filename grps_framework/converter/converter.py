"""grps's `grps_framework.converter.converter`: the converter base class and its registry."""

from grps_py.core.model import Converter, converter_register

__all__ = ["Converter", "converter_register"]

"""grps's Python import paths, so a project written for grps's framework runs on grps-py unchanged.

Every module here is a thin alias: the names are grps-py's own objects (`grps_framework.converter.
converter.Converter is grps_py.Converter`), so there is one implementation and one registry. The one
exception is `grps_framework.test` (grps's `GrpsTest`), a small facade over grps-py's project loader
and executor.
"""

"""grps's `grps_framework.logger`."""

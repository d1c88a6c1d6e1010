"""grps's `grps_framework.context`."""

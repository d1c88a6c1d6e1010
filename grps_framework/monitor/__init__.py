"""grps's `grps_framework.monitor`."""

"""grps's `grps_framework.converter`."""

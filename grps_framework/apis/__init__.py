"""grps's `grps_framework.apis`: the generated grps protobuf messages."""

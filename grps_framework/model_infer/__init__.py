"""grps's `grps_framework.model_infer`."""

"""Models for the model management tests (tests/cli/test_models_cli.py and
tests/client/test_client_repository.py): each answers which of them ran."""

from __future__ import annotations

from grps_py import GrpsContext, GrpsMessage, ModelInferer, inferer_register


class Greeter(ModelInferer):
    """converter none: answers `<tag>: <str_data>`, so a test sees which model version ran."""

    def __init__(self, tag: str) -> None:
        super().__init__()
        self.tag = tag

    def infer(self, inp: GrpsMessage, context: GrpsContext) -> GrpsMessage:
        return GrpsMessage(str_data=f"{self.tag}: {inp.str_data}")


# One instance per model version: a registered instance is shared by every model that names it.
inferer_register.register("lifecycle_cli_greeter_v1", Greeter("greeter v1"))
inferer_register.register("lifecycle_cli_spare", Greeter("spare v1"))
inferer_register.register("lifecycle_cli_spare_v2", Greeter("spare v2"))

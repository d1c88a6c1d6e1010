# The inferer of the stacker model: batch_infer gets the whole stacked batch at once (grps's contract)
# and records what it got, so a test can see requests were batched.
# Written against grps's framework API only (grps_framework.*), as a grps project is.

from grps_framework.context.context import GrpsContext
from grps_framework.logger.logger import clogger
from grps_framework.model_infer.inferer import ModelInferer, inferer_register

# (requests, rows) of every batch_infer call.
BATCHES = []


class StackingInferer(ModelInferer):
    def init(self, path, device=None, args=None):
        super().init(path, device, args)
        # grps's base class keeps these as _path, _device and _args.
        self.factor = float(self._args.get("factor", 1))
        clogger.info("stacking inferer init, path: %s, device: %s", self._path, self._device)

    def load(self):
        return True

    def infer(self, inp, context: GrpsContext):
        return inp * self.factor

    def batch_infer(self, inp, contexts: list):
        BATCHES.append((len(contexts), inp.shape[0]))
        return inp * self.factor


inferer_register.register("stacking_inferer", StackingInferer())

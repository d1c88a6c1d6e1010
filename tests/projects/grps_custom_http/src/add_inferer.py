# The inferer of grps's customized-HTTP example: c = a + b on the converter's dict.
import http
import traceback

from grps_framework.context.context import GrpsContext
from grps_framework.logger.logger import clogger
from grps_framework.model_infer.inferer import ModelInferer, inferer_register


class AddInferer(ModelInferer):
    def init(self, path, device=None, args=None):
        super().init(path, device, args)
        clogger.info("add inferer init, path: %s, device: %s, args: %s", path, device, args)

    def load(self):
        return True

    def infer(self, inp, context: GrpsContext):
        try:
            if "a" not in inp or "b" not in inp:
                raise KeyError(f"infer input error, need key a and b, inp: {inp}")
            return {"c": inp["a"] + inp["b"]}
        except Exception:
            message = traceback.format_exc()
            context.set_err_msg(message)
            context.set_http_response(
                (message, http.HTTPStatus.INTERNAL_SERVER_ERROR, {"Content-Type": "text/plain"})
            )
            clogger.error("add inferer failed: %s", message)
            return {}


inferer_register.register("your_inferer", AddInferer())

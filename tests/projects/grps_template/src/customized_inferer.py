# The greeter model: greets text (streaming it when asked) and scales float tensors by inferer_args.scale.
# Written against grps's framework API only (grps_framework.*), as a grps project is.

import time

from grps_framework.apis import grps_pb2
from grps_framework.context.context import GrpsContext
from grps_framework.logger.logger import clogger
from grps_framework.model_infer.inferer import ModelInferer, inferer_register
from grps_framework.monitor.monitor import app_monitor


class GreeterInferer(ModelInferer):
    def init(self, path, device=None, args=None):
        super().init(path, device, args)
        self.scale = float((args or {}).get("scale", 1))
        clogger.info("greeter inferer init, path: %s, device: %s, args: %s", path, device, args)

    def load(self):
        clogger.info("greeter inferer load")
        return True

    def infer(self, inp, context: GrpsContext):
        started = time.perf_counter()
        try:
            return self._answer(inp, context)
        finally:
            app_monitor.cdf("greeter_infer_ms", (time.perf_counter() - started) * 1e3)

    def _answer(self, inp, context: GrpsContext):
        if "x" in inp:
            app_monitor.avg("greeter_rows", inp["x"].shape[0])
            return {"y": inp["x"] * self.scale}
        text = inp["text"]
        if text == "whoami":
            # grps's context.converter / context.inferer: the model running this request.
            converter = type(context.converter).__name__
            return {"text": f"converter {converter}, inferer is me: {context.inferer is self}"}
        if text == "fail":
            # grps's way to refuse a request: the client gets this message with an error status.
            context.set_err_msg("greeter cannot greet 'fail'")
            return {}
        app_monitor.max("greeter_text_len_max", len(text))
        app_monitor.min("greeter_text_len_min", len(text))
        if context.if_streaming():
            for part in ("hello", text):
                if context.if_disconnected():
                    break
                context.stream_respond(grps_pb2.GrpsMessage(str_data=part))
            if text == "fail late":
                # An error after messages were streamed: the client has them, then the failure.
                context.set_err_msg("greeter failed after streaming")
                return {}
        return {"text": f"hello {text}"}


inferer_register.register("greeter_inferer", GreeterInferer())

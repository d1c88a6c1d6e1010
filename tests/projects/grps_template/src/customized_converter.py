# Pre- and post-processing of the greeter model: GrpsMessage in, a dict for the inferer, GrpsMessage out.
# Written against grps's framework API only (grps_framework.*), as a grps project is.

import numpy as np

from grps_framework.apis.grps_pb2 import DataType, GenericTensor, GrpsMessage
from grps_framework.context.context import GrpsContext
from grps_framework.converter.converter import Converter, converter_register
from grps_framework.logger.logger import clogger
from grps_framework.monitor.monitor import app_monitor


class GreeterConverter(Converter):
    """Text requests become {'text': str}; a float tensor becomes {'x': ndarray}."""

    def init(self, path=None, args=None):
        super().init(path, args)
        clogger.info("greeter converter init, path: %s, args: %s", path, args)

    def preprocess(self, inp: GrpsMessage, context: GrpsContext):
        app_monitor.inc("greeter_requests")
        if inp.str_data == "refuse":
            # grps's way to refuse a request in preprocess: infer and postprocess do not run, and the
            # client gets this message with an error status.
            context.set_err_msg("greeter converter refuses 'refuse'")
            return None
        if inp.gtensors.tensors:
            tensor = inp.gtensors.tensors[0]
            context.put_user_data("kind", "tensor")
            return {"x": np.asarray(tensor.flat_float32, dtype=np.float32).reshape(list(tensor.shape))}
        context.put_user_data("kind", "text")
        return {"text": inp.str_data}

    def postprocess(self, inp, context: GrpsContext) -> GrpsMessage:
        out = GrpsMessage()
        if context.get_user_data("kind") == "tensor":
            y = inp["y"]
            out.gtensors.tensors.append(
                GenericTensor(
                    name="y", dtype=DataType.DT_FLOAT32, shape=list(y.shape), flat_float32=y.ravel().tolist()
                )
            )
        else:
            out.str_data = inp.get("text", "")
        return out


converter_register.register("greeter_converter", GreeterConverter())

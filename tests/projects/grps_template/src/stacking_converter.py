# Batching the grps way: batch_preprocess stacks every request's float tensor into one array, and
# batch_postprocess cuts the batched output back into one GrpsMessage per request.
# Written against grps's framework API only (grps_framework.*), as a grps project is.

import numpy as np

from grps_framework.apis.grps_pb2 import DataType, GenericTensor, GrpsMessage
from grps_framework.context.context import GrpsContext
from grps_framework.converter.converter import Converter, converter_register
from grps_framework.logger.logger import clogger


class StackingConverter(Converter):
    """A request is one float tensor of shape [rows, cols]; negative values are refused."""

    def init(self, path=None, args=None):
        super().init(path, args)
        clogger.info("stacking converter init, path: %s, args: %s", self._path, self._args)

    def preprocess(self, inp: GrpsMessage, context: GrpsContext):
        # A request that runs alone takes the batch path with a batch of one.
        return self.batch_preprocess([inp], [context])

    def postprocess(self, inp, context: GrpsContext) -> GrpsMessage:
        return self.batch_postprocess(inp, [context])[0]

    def batch_preprocess(self, inps: list, contexts: list):
        arrays = []
        for inp, context in zip(inps, contexts, strict=True):
            tensor = inp.gtensors.tensors[0]
            x = np.asarray(tensor.flat_float32, dtype=np.float32).reshape(list(tensor.shape))
            if (x < 0).any():
                # grps's way to refuse one request of a batch: it adds no rows, and gets this message.
                context.set_err_msg("stacker refuses negative values")
                x = x[:0]
            context.put_user_data("rows", x.shape[0])
            arrays.append(x)
        return np.concatenate(arrays)

    def batch_postprocess(self, inp, contexts: list) -> list:
        outs, start = [], 0
        for context in contexts:
            rows = context.get_user_data("rows")
            y = inp[start : start + rows]
            start += rows
            out = GrpsMessage()
            out.gtensors.tensors.append(
                GenericTensor(
                    name="y", dtype=DataType.DT_FLOAT32, shape=list(y.shape), flat_float32=y.ravel().tolist()
                )
            )
            outs.append(out)
        return outs


converter_register.register("stacking_converter", StackingConverter())

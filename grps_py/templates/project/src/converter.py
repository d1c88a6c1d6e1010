"""The converter: the request (a GrpsMessage) -> the inferer's input, and its output -> the answer."""

from __future__ import annotations

from typing import Any

import numpy as np

from grps_py import Converter, DataType, GrpsContext, GrpsMessage, InvalidInput, converter_register


class MyConverter(Converter):
    """Takes numbers as a float32 tensor (gtensors) or as text ("1,2,3" in str_data); answers tensor y."""

    def init(self, path: str | None = None, args: dict[str, Any] | None = None) -> None:
        super().init(path, args)  # `converter_path` and `converter_args` from inference.yml

    def preprocess(self, inp: GrpsMessage, context: GrpsContext) -> np.ndarray:
        which = inp.WhichOneof("data_oneof")
        if which == "str_data":
            try:
                return np.array([float(v) for v in inp.str_data.split(",")], dtype=np.float32)
            except ValueError:
                raise InvalidInput("str_data must be numbers separated by commas, e.g. 1,2,3") from None
        if which == "gtensors" and len(inp.gtensors.tensors) == 1:
            tensor = inp.gtensors.tensors[0]
            if tensor.dtype != DataType.DT_FLOAT32:
                raise InvalidInput("send x as a float32 tensor")
            return np.array(tensor.flat_float32, dtype=np.float32).reshape(tuple(tensor.shape))
        raise InvalidInput("send one float32 tensor x, or numbers as text in str_data")

    def postprocess(self, inp: np.ndarray, context: GrpsContext) -> GrpsMessage:
        out = GrpsMessage()
        tensor = out.gtensors.tensors.add(name="y", dtype=DataType.DT_FLOAT32, shape=list(inp.shape))
        tensor.flat_float32.extend(inp.ravel().tolist())
        return out


converter_register.register("my_converter", MyConverter())

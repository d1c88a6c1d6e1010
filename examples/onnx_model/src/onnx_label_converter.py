"""The built-in numpy converter, extended: the answer also names each predicted class.

Subclassing `NumpyConverter` keeps its tensor handling (the ONNX session gets `dict[str, ndarray]`
and its outputs go back as named tensors); only `postprocess` adds one output.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from grps_py import GrpsContext, ModelError, NumpyConverter, Payload, converter_register


class LabelConverter(NumpyConverter):
    def init(self, path: str | None = None, args: dict[str, Any] | None = None) -> None:
        super().init(path, args)
        self.classes = [str(name) for name in self.args.get("classes", [])]

    def postprocess(self, inp: dict[str, np.ndarray], context: GrpsContext) -> Payload:
        labels = inp["label"]
        if labels.size and not 0 <= int(labels.max()) < len(self.classes):
            raise ModelError(f"the model answered label {int(labels.max())}, which has no class name")
        names = np.array([self.classes[i] for i in labels.tolist()], dtype=object)
        return super().postprocess({**inp, "class_name": names}, context)


converter_register.register("onnx_label_converter", LabelConverter())

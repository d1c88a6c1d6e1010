"""Triton python-backend model for bench/reload.py: every element of both outputs is this version's constant.

The constant comes from version.txt beside this file, read once when the instance starts, so one loaded
instance always answers the same number: an answer mixing two numbers would mean two versions met in it.
"""

from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args: dict) -> None:
        folder = Path(args["model_repository"]) / args["model_version"]
        self.constant = np.float32(float((folder / "version.txt").read_text()))

    def execute(self, requests: list) -> list:
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "x").as_numpy()
            answer = np.full(x.shape, self.constant, np.float32)
            outputs = [pb_utils.Tensor(name, answer) for name in ("y", "z")]
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses

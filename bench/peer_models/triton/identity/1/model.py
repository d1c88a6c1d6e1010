"""Triton python-backend identity model: returns input `x` unchanged as output `y`."""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests: list) -> list:
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "x")
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("y", x.as_numpy())]))
        return responses

"""tritonclient over HTTP and over gRPC behind one small interface, for the OIP parity suite."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import tritonclient.grpc as tgrpc
import tritonclient.http as thttp
from tritonclient.utils import InferenceServerException

from support import GRPC_CATEGORY, HTTP_CATEGORY, ServerThread

# The typed `InferTensorContents` field each datatype travels in (FP16 and BF16 travel only raw).
CONTENTS_FIELD = {
    "BOOL": "bool_contents",
    "UINT8": "uint_contents",
    "UINT16": "uint_contents",
    "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
    "BYTES": "bytes_contents",
}


@dataclass
class Answer:
    outputs: dict[str, np.ndarray] = field(default_factory=dict)
    id: str = ""
    error: str = ""  # the category when the request failed
    message: str = ""


class OipClient:
    """One protocol's tritonclient; `binary` picks HTTP's binary extension (gRPC is always raw)."""

    def __init__(self, protocol: str, server: ServerThread, binary: bool = True) -> None:
        self.protocol = protocol
        self.binary = binary
        self.mod: Any = thttp if protocol == "http" else tgrpc
        url = server.http_url.removeprefix("http://") if protocol == "http" else server.grpc_target
        self.client: Any = self.mod.InferenceServerClient(url=url)

    def close(self) -> None:
        self.client.close()

    def inputs(self, arrays: dict[str, np.ndarray], datatypes: dict[str, str] | None = None) -> list[Any]:
        made = []
        for name, array in arrays.items():
            datatype = (datatypes or {}).get(name) or datatype_for(array)
            item = self.mod.InferInput(name, list(array.shape), datatype)
            if self.protocol == "http":
                item.set_data_from_numpy(array, binary_data=self.binary)
            else:
                item.set_data_from_numpy(array)
            made.append(item)
        return made

    def requested(self, names: list[str] | None, class_count: int = 0) -> list[Any] | None:
        """Requested outputs; `class_count` asks for each one's top classes (classification)."""
        if names is None:
            return None
        if self.protocol == "http":
            return [
                thttp.InferRequestedOutput(name, binary_data=self.binary, class_count=class_count)
                for name in names
            ]
        return [tgrpc.InferRequestedOutput(name, class_count=class_count) for name in names]

    def infer(
        self,
        model: str,
        arrays: dict[str, np.ndarray],
        *,
        version: str = "",
        outputs: list[str] | None = None,
        request_id: str = "",
        parameters: dict[str, Any] | None = None,
        datatypes: dict[str, str] | None = None,
        class_count: int = 0,
        **options: Any,
    ) -> Answer:
        """`options` go to tritonclient's infer as they are (sequence_id, priority, ...)."""
        try:
            result = self.client.infer(
                model,
                self.inputs(arrays, datatypes),
                model_version=version,
                outputs=self.requested(outputs, class_count),
                request_id=request_id,
                parameters=parameters,
                **options,
            )
        except InferenceServerException as exc:
            return Answer(error=self.category(exc), message=exc.message())
        response = result.get_response()
        if self.protocol == "http":
            names = [o["name"] for o in response["outputs"]]
            rid = response.get("id", "")
        else:
            names = [o.name for o in response.outputs]
            rid = response.id
        return Answer({name: result.as_numpy(name) for name in names}, rid)

    def category(self, exc: InferenceServerException) -> str:
        status = str(exc.status())
        if self.protocol == "http":
            return HTTP_CATEGORY.get(int(status), status)
        return {str(code): name for code, name in GRPC_CATEGORY.items()}.get(status, status)


def datatype_for(array: np.ndarray) -> str:
    from tritonclient.utils import np_to_triton_dtype

    return str(np_to_triton_dtype(array.dtype))

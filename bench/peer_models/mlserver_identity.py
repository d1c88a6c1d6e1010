"""MLServer peer: a custom runtime whose `predict` returns input `x` unchanged as output `y`.

bench/peers.py copies this file next to model-settings.json, which names it as
`mlserver_identity.IdentityModel`; MLServer imports it from that folder.
"""

from __future__ import annotations

from mlserver import MLModel
from mlserver.codecs import NumpyCodec
from mlserver.types import InferenceRequest, InferenceResponse


class IdentityModel(MLModel):
    async def load(self) -> bool:
        return True

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        x = NumpyCodec.decode_input(payload.inputs[0])
        return InferenceResponse(
            model_name=self.name, id=payload.id, outputs=[NumpyCodec.encode_output("y", x)]
        )

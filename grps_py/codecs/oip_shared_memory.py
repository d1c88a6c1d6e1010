"""Tensors in system shared memory (Triton's extension), for both OIP transports: inputs read from the
regions a request names, outputs written to them.

The tensor bytes are the binary extension's layout (`oip_binary`): little-endian, row-major, BYTES as
length-prefixed elements. Everything a request names is checked before the model runs: each region
exists and holds the named range; an input's byte size is its shape's exactly (a BYTES input's is read
and checked element by element). An output's range must hold the output: a larger one is fine (the
answer says how many bytes were written), a smaller one is a 400 and nothing is written.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from grps_py.codecs.json_values import input_label
from grps_py.codecs.limits import DEFAULT_LIMITS
from grps_py.codecs.oip_binary import tensor_from_bytes, tensor_to_bytes, wire_dtype
from grps_py.core.datatypes import BYTES, datatype_of
from grps_py.core.errors import InvalidInput, ModelError
from grps_py.core.oip import (
    SHARED_MEMORY_BYTE_SIZE,
    SHARED_MEMORY_OFFSET,
    SHARED_MEMORY_REGION,
    OipRequest,
    OipResponse,
)
from grps_py.core.protection import LimitsSettings
from grps_py.core.shared_memory import RegionSlice, SharedMemoryRegions
from grps_py.core.types import Tensor
from grps_py.core.untrusted import shown

__all__ = ["OutputPlaces", "read_inputs"]

_LENGTH_BYTES = 4  # a BYTES element's length prefix


@dataclass(frozen=True)
class OutputPlaces:
    """Where a request's outputs go, resolved before it runs: output name -> its slice of a region."""

    slices: dict[str, RegionSlice]

    def place(self, response: OipResponse) -> None:
        """Write each output the request sent to shared memory; the answer then carries its parameters
        (region, bytes written, offset) instead of its data."""
        if not self.slices:
            return
        for tensor in response.outputs:
            piece = self.slices.get(tensor.name)
            if piece is None:
                continue
            array = tensor.array
            datatype = datatype_of(array.dtype)
            if datatype is None:
                raise ModelError(
                    f"output '{tensor.name}' has numpy dtype {array.dtype}, which OIP cannot carry"
                )
            data = tensor_to_bytes(array, datatype)
            if len(data) > piece.size:
                raise InvalidInput(
                    f"{piece.label}: its shared memory ({piece.size} bytes) should be at least "
                    f"{len(data)} bytes to hold the result"
                )
            piece.write(data)
            answer = {SHARED_MEMORY_REGION: piece.region.name, SHARED_MEMORY_BYTE_SIZE: len(data)}
            if piece.start:
                answer[SHARED_MEMORY_OFFSET] = piece.start
            response.placed[tensor.name] = answer


NO_PLACES = OutputPlaces({})


def read_inputs(
    request: OipRequest, regions: SharedMemoryRegions, limits: LimitsSettings = DEFAULT_LIMITS
) -> OutputPlaces:
    """Put the request's shared-memory inputs into `request.inputs` (in their places), and resolve where
    its outputs go. Raises InvalidInput for a region, range or size that does not fit."""
    if not request.uses_shared_memory:
        return NO_PLACES
    slices = {}
    for wanted in request.outputs:
        if wanted.shared_memory is not None:
            slices[wanted.name] = regions.slice(wanted.shared_memory, f"output '{shown(wanted.name, 64)}'")
    for shared in sorted(request.shared_inputs, key=lambda item: item.index):
        label = input_label(shared.name)
        piece = regions.slice(shared.ref, label)
        _check_size(shared.datatype, shared.shape, piece.size, label, limits)
        array = tensor_from_bytes(piece.read(), shared.datatype, shared.shape, label, limits)
        request.inputs.insert(shared.index, Tensor(shared.name, array))
    request.shared_inputs = []
    return OutputPlaces(slices)


def _check_size(datatype: str, shape: list[int], size: int, label: str, limits: LimitsSettings) -> None:
    """Refuse a byte size that cannot be the tensor's before reading it: exact for fixed-size
    datatypes; for BYTES, what `count` elements of at most `limits.string_bytes` each could take."""
    count = math.prod(shape)
    if datatype == BYTES:
        most = count * (_LENGTH_BYTES + limits.string_bytes)
        if not count * _LENGTH_BYTES <= size <= most:
            raise InvalidInput(
                f"{label}: {SHARED_MEMORY_BYTE_SIZE} {size} cannot hold {count} BYTES elements "
                f"(from {count * _LENGTH_BYTES} to {most} bytes)"
            )
        return
    expected = count * wire_dtype(datatype).itemsize
    if size != expected:
        raise InvalidInput(
            f"{label}: shape {shape} of {datatype} needs {expected} bytes, but "
            f"{SHARED_MEMORY_BYTE_SIZE} is {size}"
        )

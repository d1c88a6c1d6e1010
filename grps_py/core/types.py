"""The internal currency: tensors (numpy arrays, or torch tensors inside a DAG), text, bytes, maps.

A wire message is built only at the edge, by a codec. `Payload` holds exactly one kind of data;
`PayloadKind.MESSAGE` holds a wire message produced by user code (converter `none` or a customized
converter) and is converted by a `MessageBridge` only when something needs its contents.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import ml_dtypes
import numpy as np

if TYPE_CHECKING:
    from grps_py.core.context import GrpsContext


@dataclass(frozen=True)
class DTypeInfo:
    """One row of the dtype table: the grps enum name and number, numpy dtype and proto flat field."""

    grps_name: str
    grps_number: int
    numpy_dtype: np.dtype[Any]
    flat_field: str


# The grps DataType enum. Strings are numpy object arrays of `str`.
DTYPES: tuple[DTypeInfo, ...] = (
    DTypeInfo("DT_UINT8", 1, np.dtype(np.uint8), "flat_uint8"),
    DTypeInfo("DT_INT8", 2, np.dtype(np.int8), "flat_int8"),
    DTypeInfo("DT_INT16", 3, np.dtype(np.int16), "flat_int16"),
    DTypeInfo("DT_INT32", 4, np.dtype(np.int32), "flat_int32"),
    DTypeInfo("DT_INT64", 5, np.dtype(np.int64), "flat_int64"),
    DTypeInfo("DT_FLOAT16", 6, np.dtype(np.float16), "flat_float16"),
    DTypeInfo("DT_FLOAT32", 7, np.dtype(np.float32), "flat_float32"),
    DTypeInfo("DT_FLOAT64", 8, np.dtype(np.float64), "flat_float64"),
    DTypeInfo("DT_STRING", 9, np.dtype(object), "flat_string"),
)
DTYPE_BY_NAME: dict[str, DTypeInfo] = {d.grps_name: d for d in DTYPES}
DTYPE_BY_NUMBER: dict[int, DTypeInfo] = {d.grps_number: d for d in DTYPES}
DTYPE_BY_FLAT_FIELD: dict[str, DTypeInfo] = {d.flat_field: d for d in DTYPES}
# numpy kinds that have no grps dtype of their own are widened to one that holds every value.
_NUMPY_WIDENING: dict[np.dtype[Any], np.dtype[Any]] = {
    np.dtype(np.bool_): np.dtype(np.uint8),
    np.dtype(np.uint16): np.dtype(np.int32),
    np.dtype(np.uint32): np.dtype(np.int64),
    np.dtype(np.uint64): np.dtype(np.int64),
    np.dtype(ml_dtypes.bfloat16): np.dtype(np.float32),
}
_DTYPE_BY_NUMPY: dict[np.dtype[Any], DTypeInfo] = {d.numpy_dtype: d for d in DTYPES}


def dtype_for_array(array: np.ndarray[Any, Any]) -> tuple[DTypeInfo, np.ndarray[Any, Any]]:
    """The grps dtype for a numpy array, and the array converted to it where it needs widening."""
    dt = array.dtype
    if not dt.isnative:  # big-endian input: the tables hold native dtypes
        array = array.astype(dt.newbyteorder("="))
        dt = array.dtype
    if dt.kind in ("U", "S"):
        return DTYPE_BY_NAME["DT_STRING"], array.astype(object)
    info = _DTYPE_BY_NUMPY.get(dt)
    if info is not None:
        return info, array
    wider = _NUMPY_WIDENING.get(dt)
    if wider is None:
        raise TypeError(f"numpy dtype {dt} has no grps dtype")
    return _DTYPE_BY_NUMPY[wider], array.astype(wider)


def to_numpy(data: Any) -> np.ndarray[Any, Any]:
    """A numpy view of tensor data: numpy arrays pass through, torch tensors are moved to the CPU."""
    if isinstance(data, np.ndarray):
        return data
    if hasattr(data, "detach") and hasattr(data, "cpu"):  # a torch tensor, without importing torch
        return data.detach().cpu().numpy()  # type: ignore[no-any-return]
    return np.asarray(data)


@dataclass
class Tensor:
    """A named tensor. `data` is a numpy array, or a torch tensor while inside a DAG."""

    name: str
    data: Any

    @property
    def array(self) -> np.ndarray[Any, Any]:
        data = self.data
        return data if type(data) is np.ndarray else to_numpy(data)  # inline: runs per tensor


# gmap's typed maps, keyed by the proto field names s_s, s_b, s_i32, s_i64, s_f, s_d.
GMAP_FIELDS: tuple[str, ...] = ("s_s", "s_b", "s_i32", "s_i64", "s_f", "s_d")
GenericMap = dict[str, dict[str, Any]]


class PayloadKind(enum.Enum):
    EMPTY = "empty"
    TENSORS = "tensors"
    TEXT = "text"
    BYTES = "bytes"
    MAP = "map"
    MESSAGE = "message"


@dataclass
class Payload:
    """What a request carries in, or a response carries out. Build it with the class methods."""

    kind: PayloadKind
    value: Any = None

    @classmethod
    def empty(cls) -> Payload:
        return cls(PayloadKind.EMPTY)

    @classmethod
    def of_tensors(cls, tensors: list[Tensor]) -> Payload:
        return cls(PayloadKind.TENSORS, tensors)

    @classmethod
    def of_text(cls, text: str) -> Payload:
        return cls(PayloadKind.TEXT, text)

    @classmethod
    def of_bytes(cls, data: bytes) -> Payload:
        return cls(PayloadKind.BYTES, data)

    @classmethod
    def of_map(cls, gmap: GenericMap) -> Payload:
        return cls(PayloadKind.MAP, gmap)

    @classmethod
    def of_message(cls, message: Any) -> Payload:
        return cls(PayloadKind.MESSAGE, message)

    @property
    def tensors(self) -> list[Tensor]:
        """The tensors of a TENSORS payload (an empty list for any other kind)."""
        return self.value if self.kind is PayloadKind.TENSORS else []

    def __iter__(self) -> Iterator[Tensor]:
        return iter(self.tensors)


class MessageBridge(Protocol):
    """Converts between payloads and the wire message that user code sees (`GrpsMessage`).

    Implemented outside the core (codecs/grps_pb.py) and injected, so the core imports no protobuf.
    """

    def to_message(self, payload: Payload) -> Any: ...

    def from_message(self, message: Any) -> Payload: ...

    def is_message(self, obj: Any) -> bool: ...


@dataclass
class InferRequest:
    """One prediction request. `model` is `name-version` (or a unique name); empty runs the default DAG."""

    payload: Payload
    context: GrpsContext
    model: str = ""
    request_id: str = ""
    protocol: str = ""  # grps_py.core.telemetry's label (grps-http, oip-grpc, ...), for stream metrics


@dataclass
class InferResponse:
    """One prediction answer (or one message of a stream)."""

    payload: Payload
    model: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

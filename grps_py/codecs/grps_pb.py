"""`GrpsMessage` (protobuf) <-> `Payload`, for gRPC and for user code that wants the wire message.

Float tensors cross the protobuf boundary as raw packed bytes (`MergeFromString` to write,
`SerializeToString` + `numpy.frombuffer` to read) instead of one Python float per element. Integer and
string tensors go element by element: upb's own loop is quicker than a numpy varint codec.

The tensor checks shared with `grps_json` (shape fit, dtype lookup, value ranges) live here too, so
both transports reject the same requests with the same messages.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from grps_py.codecs.limits import (
    DEFAULT_LIMITS,
    UNLIMITED,
    ElementBudget,
    check_length,
    check_strings,
    check_tensors,
)
from grps_py.codecs.pb_wire import encode_varint, split_field
from grps_py.core.errors import InvalidInput, ModelError
from grps_py.core.protection import LimitsSettings
from grps_py.core.types import (
    DTYPE_BY_FLAT_FIELD,
    DTYPE_BY_NAME,
    DTYPE_BY_NUMBER,
    GMAP_FIELDS,
    DTypeInfo,
    GenericMap,
    Payload,
    PayloadKind,
    Tensor,
    dtype_for_array,
)
from grps_py.core.untrusted import shown
from grps_py.protos import grps_pb2

__all__ = [
    "GrpsMessageBridge",
    "message_to_payload",
    "payload_to_message",
    "status_message",
]

Array = np.ndarray[Any, Any]
_STRING = DTYPE_BY_NAME["DT_STRING"]
# Proto float fields are packed fixed-width little-endian values; float16 travels as a proto float.
_WIRE_DTYPE_BY_FLAT_FIELD: dict[str, np.dtype[Any]] = {
    "flat_float16": np.dtype("<f4"),
    "flat_float32": np.dtype("<f4"),
    "flat_float64": np.dtype("<f8"),
}
# Up to this many values, iterating a packed field is quicker than cutting it out of the serialized
# tensor; above it, the other way round.
_ITERATE_UP_TO = 32
_FLAT_FIELD_NUMBERS: dict[str, int] = {
    name: grps_pb2.GenericTensor.DESCRIPTOR.fields_by_name[name].number for name in DTYPE_BY_FLAT_FIELD
}
_LENGTH_DELIMITED = 2


# --- shared tensor checks (also used by grps_json) ---------------------------------------------


def tensor_label(name: str, index: int) -> str:
    """How errors name a tensor: by name, or by position when it has none."""
    return f"tensor '{shown(name, 64)}'" if name else f"tensor #{index}"


def dtype_info(number: int, label: str) -> DTypeInfo:
    """The dtype row for an enum number; DT_INVALID or an unknown number is the client's error."""
    info = DTYPE_BY_NUMBER.get(number)
    if info is None:
        what = "dtype is not set (DT_INVALID)" if number == 0 else f"unknown dtype {number}"
        raise InvalidInput(f"{label}: {what}")
    return info


def check_flat_fields(populated: Sequence[str], info: DTypeInfo, label: str) -> None:
    """Data must sit in the one flat field that belongs to the dtype."""
    for field_name in populated:
        if field_name != info.flat_field:
            raise InvalidInput(
                f"{label}: dtype {info.grps_name} expects its data in {info.flat_field}, not in {field_name}"
            )


def fit_shape(flat: Array, shape: list[int], label: str) -> Array:
    """Reshape flat data to `shape`; an empty shape is a scalar and takes exactly one value."""
    if flat.size != math.prod(shape):
        raise InvalidInput(f"{label}: {flat.size} values do not fit shape {shape}")
    try:
        return flat.reshape(shape)
    except ValueError:  # more dims than numpy holds (64), or a huge shape with a zero in it
        raise InvalidInput(f"{label}: shape {shape} cannot be used") from None


def narrow_ints(wide: Array, info: DTypeInfo, label: str) -> Array:
    """int64 values -> the tensor's integer dtype, refusing values it cannot hold (300 in DT_UINT8)."""
    if wide.dtype == info.numpy_dtype:  # int64: nothing to narrow
        return wide
    bounds = np.iinfo(info.numpy_dtype)
    if wide.size and (wide.min() < bounds.min or wide.max() > bounds.max):
        offender = wide[(wide < bounds.min) | (wide > bounds.max)][0]
        raise InvalidInput(f"{label}: {offender} is out of range for {info.grps_name}")
    return wide.astype(info.numpy_dtype)


# The largest finite value of each float dtype: values within it narrow without overflow.
_FLOAT_MAX = {np.dtype(t): float(np.finfo(t).max) for t in (np.float16, np.float32, np.float64)}


def narrow_floats(wide: Array, info: DTypeInfo, label: str) -> Array:
    """Floats -> the tensor's float dtype; a finite value that overflows it (1e39 in float32) is refused."""
    largest = _FLOAT_MAX.get(info.numpy_dtype)
    if largest is not None and wide.size and -largest <= wide.min() and wide.max() <= largest:
        return wide.astype(info.numpy_dtype)  # every value fits (NaN fails the test): nothing to check
    with np.errstate(over="ignore"):
        narrow = wide.astype(info.numpy_dtype)
    if np.isinf(narrow).any():
        overflowed = np.isinf(narrow) & np.isfinite(wide)
        if overflowed.any():
            raise InvalidInput(f"{label}: {wide[overflowed][0]} is out of range for {info.grps_name}")
    return narrow


def string_values(flat: Array) -> list[str]:
    """String tensor values as `str`; bytes (from numpy `S` arrays) are read as UTF-8."""
    return [value.decode() if isinstance(value, bytes) else str(value) for value in flat.tolist()]


# --- GrpsMessage -> Payload --------------------------------------------------------------------


def message_to_payload(msg: grps_pb2.GrpsMessage, limits: LimitsSettings = DEFAULT_LIMITS) -> Payload:
    """The payload a request message carries. Tensors are checked and become numpy arrays.

    A `gmap` becomes a dict holding all six maps (`GMAP_FIELDS`), empty ones included, so that
    `payload.value["s_s"]` never fails. `ndarray` exists only in HTTP JSON and is refused here.
    Anything beyond `limits` is an `InvalidInput`.
    """
    which = msg.WhichOneof("data_oneof")
    if which is None:
        return Payload.empty()
    if which == "bin_data":
        check_length(len(msg.bin_data), "bin_data", limits)
        return Payload.of_bytes(msg.bin_data)
    if which == "str_data":
        check_strings([msg.str_data], "str_data", limits)
        return Payload.of_text(msg.str_data)
    if which == "gtensors":
        tensors = msg.gtensors.tensors
        check_tensors(len(tensors), limits)
        budget = ElementBudget(limits)
        return Payload.of_tensors(
            [_read_tensor(tensor, i, budget, limits) for i, tensor in enumerate(tensors)]
        )
    if which == "gmap":
        gmap = {name: dict(getattr(msg.gmap, name)) for name in GMAP_FIELDS}
        for name in ("s_s", "s_b"):
            check_strings(list(gmap[name].values()), f"gmap.{name}", limits)
        return Payload.of_map(gmap)
    raise InvalidInput("ndarray is only for HTTP JSON; send gtensors over gRPC")


def _read_tensor(
    tensor: grps_pb2.GenericTensor, index: int, budget: ElementBudget, limits: LimitsSettings
) -> Tensor:
    label = tensor_label(tensor.name[:64], index)
    info = dtype_info(tensor.dtype, label)
    populated = [field.name for field, _ in tensor.ListFields() if field.name in DTYPE_BY_FLAT_FIELD]
    check_flat_fields(populated, info, label)
    shape = list(tensor.shape)
    budget.take_shape(shape, label)
    return Tensor(tensor.name, fit_shape(_read_flat(tensor, info, label, limits), shape, label))


def _read_flat(tensor: grps_pb2.GenericTensor, info: DTypeInfo, label: str, limits: LimitsSettings) -> Array:
    values = getattr(tensor, info.flat_field)
    if info is _STRING:
        check_strings(values, label, limits)
        strings = np.empty(len(values), dtype=object)
        strings[:] = list(values)
        return strings
    wire_dtype = _WIRE_DTYPE_BY_FLAT_FIELD.get(info.flat_field)
    if wire_dtype is None:
        return narrow_ints(np.fromiter(values, np.int64, count=len(values)), info, label)
    count = len(values)
    if count <= _ITERATE_UP_TO:
        return narrow_floats(np.fromiter(values, wire_dtype, count=count), info, label)
    raw = _packed_field_bytes(tensor, _FLAT_FIELD_NUMBERS[info.flat_field])
    if len(raw) == count * wire_dtype.itemsize:
        wide = np.frombuffer(raw, dtype=wire_dtype)
    else:  # not one packed run (never seen from upb); read it the slow, sure way
        wide = np.fromiter(values, wire_dtype, count=count)
    return narrow_floats(wide, info, label)


def _packed_field_bytes(tensor: grps_pb2.GenericTensor, field_number: int) -> bytes:
    """The payload of one packed repeated field, cut out of the serialized tensor.

    Why: serializing is a memcpy in upb, whereas iterating the field makes one Python object per value.
    """
    _, values = split_field(tensor.SerializeToString(), field_number)
    return b"".join(values)


# --- Payload -> GrpsMessage --------------------------------------------------------------------


def payload_to_message(payload: Payload, msg: grps_pb2.GrpsMessage | None = None) -> grps_pb2.GrpsMessage:
    """The message for a payload. With `msg`, its data is replaced and its status and model are kept.

    A MESSAGE payload returns the held message itself (or copies its data into `msg`).
    """
    if payload.kind is PayloadKind.MESSAGE:
        return _held_message(payload.value, msg)
    target = grps_pb2.GrpsMessage() if msg is None else msg
    target.ClearField("data_oneof")
    _WRITERS[payload.kind](payload.value, target)
    return target


def _held_message(held: Any, msg: grps_pb2.GrpsMessage | None) -> grps_pb2.GrpsMessage:
    if not isinstance(held, grps_pb2.GrpsMessage):
        raise TypeError(f"a MESSAGE payload must hold a GrpsMessage, not {type(held).__name__}")
    if msg is None or msg is held:
        return held
    which = held.WhichOneof("data_oneof")
    msg.ClearField("data_oneof")
    if which in ("bin_data", "str_data"):
        setattr(msg, which, getattr(held, which))
    elif which is not None:
        getattr(msg, which).CopyFrom(getattr(held, which))
    return msg


def _write_nothing(_: None, msg: grps_pb2.GrpsMessage) -> None:
    pass


def _write_text(text: str, msg: grps_pb2.GrpsMessage) -> None:
    msg.str_data = text


def _write_bytes(data: bytes, msg: grps_pb2.GrpsMessage) -> None:
    msg.bin_data = bytes(data)


def _write_map(gmap: GenericMap, msg: grps_pb2.GrpsMessage) -> None:
    msg.gmap.SetInParent()  # an empty map is still a gmap answer
    for name, entries in gmap.items():
        if name not in GMAP_FIELDS:
            raise ValueError(f"gmap has no map '{name}'; expected one of {', '.join(GMAP_FIELDS)}")
        getattr(msg.gmap, name).update(entries)


def _write_tensors(tensors: list[Tensor], msg: grps_pb2.GrpsMessage) -> None:
    msg.gtensors.SetInParent()  # no tensors is still a gtensors answer
    for tensor in tensors:
        _write_tensor(tensor, msg.gtensors.tensors.add())


def _write_tensor(tensor: Tensor, out: grps_pb2.GenericTensor) -> None:
    info, array = dtype_for_array(tensor.array)
    out.name = tensor.name
    out.dtype = info.grps_number  # type: ignore[assignment]
    out.shape.extend(array.shape)
    flat = array.ravel()
    wire_dtype = _WIRE_DTYPE_BY_FLAT_FIELD.get(info.flat_field)
    if wire_dtype is not None:
        _merge_packed(out, _FLAT_FIELD_NUMBERS[info.flat_field], flat.astype(wire_dtype).tobytes())
    elif info is _STRING:
        getattr(out, info.flat_field).extend(string_values(flat))
    else:
        getattr(out, info.flat_field).extend(flat.tolist())


def _merge_packed(out: grps_pb2.GenericTensor, field_number: int, raw: bytes) -> None:
    """Append raw little-endian values to a packed field by parsing them as wire bytes (no per-value work)."""
    if raw:
        key = encode_varint(field_number << 3 | _LENGTH_DELIMITED)
        out.MergeFromString(key + encode_varint(len(raw)) + raw)


_WRITERS: dict[PayloadKind, Callable[[Any, grps_pb2.GrpsMessage], None]] = {
    PayloadKind.EMPTY: _write_nothing,
    PayloadKind.TEXT: _write_text,
    PayloadKind.BYTES: _write_bytes,
    PayloadKind.MAP: _write_map,
    PayloadKind.TENSORS: _write_tensors,
}


# --- bridge and status -------------------------------------------------------------------------


class GrpsMessageBridge:
    """The `MessageBridge` that shows user code a `GrpsMessage` (injected into the core)."""

    def to_message(self, payload: Payload) -> grps_pb2.GrpsMessage:
        return payload_to_message(payload)

    def from_message(self, message: Any) -> Payload:
        if not isinstance(message, grps_pb2.GrpsMessage):
            raise TypeError(f"expected a grps GrpsMessage, got {type(message).__name__}")
        try:
            return message_to_payload(message, UNLIMITED)  # the model's own answer: no request limits
        except InvalidInput as exc:  # user code built it, so it is the model's fault, not the client's
            raise ModelError(f"the model returned an invalid GrpsMessage: {exc.public_message}") from exc

    def is_message(self, obj: Any) -> bool:
        return isinstance(obj, grps_pb2.GrpsMessage)


def status_message(code: int, msg: str, ok: bool) -> grps_pb2.GrpsMessage:
    """A reply holding only the status envelope (health checks, errors)."""
    flag = grps_pb2.Status.SUCCESS if ok else grps_pb2.Status.FAILURE
    return grps_pb2.GrpsMessage(status=grps_pb2.Status(code=code, msg=msg, status=flag))

"""The caller's values <-> the grps data they travel as.

A request is a str (`str_data`), bytes (`bin_data`), a numpy array (one unnamed tensor), a dict of
named arrays (`gtensors`) or a `GrpsMessage` sent as it is. The answer comes back in the kind of the
request, so a caller never unpacks a message; when the model answers another kind of data the call
fails with a message that says so (send a `GrpsMessage` to receive whatever the model answers).
The conversions are the server's own codecs (`grps_py.codecs`), so both sides agree on every dtype.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from grps_py.client.errors import GrpsClientError, answer_unreadable
from grps_py.codecs import grps_pb
from grps_py.core.errors import InvalidInput
from grps_py.core.types import Payload, PayloadKind, Tensor, dtype_for_array
from grps_py.protos import grps_pb2

__all__ = ["Data", "Kind", "Reply", "Request", "answer_of"]

Array = np.ndarray[Any, Any]
Message = grps_pb2.GrpsMessage
# What predict accepts; it answers the same type.
Data = TypeVar("Data", str, bytes, Array, dict[str, Array], Message)
# What a transport hands back: HTTP decodes JSON straight to a Payload, gRPC receives a message.
Reply = Payload | Message


class Kind(enum.Enum):
    TEXT = "str"
    BYTES = "bytes"
    ARRAY = "a numpy array"
    DICT = "a dict of numpy arrays"
    MESSAGE = "a GrpsMessage"


@dataclass(frozen=True)
class Request:
    """One prediction request: its kind (the kind of the answer), its data and the model to run."""

    kind: Kind
    data: Any
    model: str

    @classmethod
    def of(cls, data: Any, model: str | None) -> Request:
        """Check and normalise the caller's value; data the grps API cannot carry is refused here (400)."""
        if isinstance(data, Message):
            return cls(Kind.MESSAGE, data, data.model if model is None else model)
        if isinstance(data, str):
            return cls(Kind.TEXT, data, model or "")
        if isinstance(data, (bytes, bytearray, memoryview)):
            return cls(Kind.BYTES, bytes(data), model or "")
        if isinstance(data, np.ndarray):
            return cls(Kind.ARRAY, [Tensor("", _sendable(data, "the array"))], model or "")
        if isinstance(data, Mapping):
            tensors = [
                Tensor(_name(key), _sendable(np.asarray(value), f"'{key}'")) for key, value in data.items()
            ]
            return cls(Kind.DICT, tensors, model or "")
        raise TypeError(
            "predict takes a str, bytes, a numpy array, a dict of numpy arrays or a GrpsMessage, "
            f"not {type(data).__name__}"
        )

    def payload(self) -> Payload:
        """The data as the server's codecs take it (HTTP)."""
        if self.kind is Kind.MESSAGE:
            try:
                return grps_pb.message_to_payload(self.data)
            except InvalidInput as exc:  # the server would refuse it the same way
                raise GrpsClientError(400, "INVALID_ARGUMENT", exc.public_message) from exc
        if self.kind is Kind.TEXT:
            return Payload.of_text(self.data)
        if self.kind is Kind.BYTES:
            return Payload.of_bytes(self.data)
        return Payload.of_tensors(self.data)

    def message(self) -> Message:
        """The data as a GrpsMessage naming the model (gRPC). The caller's message is not changed."""
        if self.kind is Kind.MESSAGE and self.data.model == self.model:
            return self.data  # type: ignore[no-any-return]
        msg = Message()
        if self.kind is Kind.MESSAGE:
            msg.CopyFrom(self.data)
        else:
            grps_pb.payload_to_message(self.payload(), msg)
        msg.model = self.model
        return msg


def _name(key: object) -> str:
    if not isinstance(key, str):
        raise TypeError(f"tensor names must be str, not {type(key).__name__}")
    return key


def _sendable(array: Array, label: str) -> Array:
    """The array in a dtype grps has (bool becomes uint8, uint32 int64, ...), or a 400 for one it has not."""
    try:
        return dtype_for_array(array)[1]
    except TypeError as exc:
        raise GrpsClientError(400, "INVALID_ARGUMENT", f"{label} cannot be sent: {exc}") from exc


# --- answers ------------------------------------------------------------------------------------


def answer_of(reply: Reply, kind: Kind) -> Any:
    """The answer in the kind of the request."""
    if kind is Kind.MESSAGE:
        return reply if isinstance(reply, Message) else _message_of(reply)
    payload = reply if isinstance(reply, Payload) else _payload_of(reply)
    return _READERS[kind](payload)


def _message_of(payload: Payload) -> Message:
    """An HTTP answer as the message gRPC would have given (a successful HTTP answer is 200 / OK)."""
    msg = grps_pb.payload_to_message(payload)
    msg.status.code, msg.status.msg = 200, "OK"
    msg.status.status = grps_pb2.Status.SUCCESS
    return msg


def _payload_of(msg: Message) -> Payload:
    try:
        return grps_pb.message_to_payload(msg)
    except InvalidInput as exc:
        raise answer_unreadable(f"the server's answer cannot be read: {exc.public_message}") from exc


def _describe(payload: Payload) -> str:
    if payload.kind is PayloadKind.TENSORS:
        return f"{len(payload.tensors)} tensor(s) ({', '.join(repr(t.name) for t in payload.tensors)})"
    return {PayloadKind.TEXT: "str_data", PayloadKind.BYTES: "bin_data", PayloadKind.MAP: "a gmap"}.get(
        payload.kind, "no data"
    )


def _mismatch(payload: Payload, kind: Kind) -> GrpsClientError:
    return answer_unreadable(
        f"the model answered {_describe(payload)} where {kind.value} was expected; "
        "send a GrpsMessage to receive any answer"
    )


def _text(payload: Payload) -> str:
    if payload.kind is PayloadKind.TEXT:
        return str(payload.value)
    if payload.kind is PayloadKind.EMPTY:
        return ""
    raise _mismatch(payload, Kind.TEXT)


def _bytes(payload: Payload) -> bytes:
    if payload.kind is PayloadKind.BYTES:
        return bytes(payload.value)
    if payload.kind is PayloadKind.EMPTY:
        return b""
    raise _mismatch(payload, Kind.BYTES)


def _array(payload: Payload) -> Array:
    if payload.kind is PayloadKind.TENSORS and len(payload.tensors) == 1:
        return payload.tensors[0].array
    raise _mismatch(payload, Kind.ARRAY)


def _dict(payload: Payload) -> dict[str, Array]:
    """Named tensors by name; an unnamed one as `output_{i}`, as the server names unnamed outputs."""
    if payload.kind is PayloadKind.EMPTY:
        return {}
    if payload.kind is not PayloadKind.TENSORS:
        raise _mismatch(payload, Kind.DICT)
    arrays = {t.name or f"output_{i}": t.array for i, t in enumerate(payload.tensors)}
    if len(arrays) != len(payload.tensors):
        raise answer_unreadable(f"the answer repeats a tensor name: {_describe(payload)}")
    return arrays


_READERS: dict[Kind, Callable[[Payload], Any]] = {
    Kind.TEXT: _text,
    Kind.BYTES: _bytes,
    Kind.ARRAY: _array,
    Kind.DICT: _dict,
}

"""What `grps-py predict` sends (built from its options) and how it shows what comes back."""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any, BinaryIO, TextIO

import numpy as np

from grps_py.codecs.grps_json import decode_request
from grps_py.codecs.grps_pb import message_to_payload, payload_to_message
from grps_py.core.errors import InvalidInput
from grps_py.core.types import DTYPES, GMAP_FIELDS, Payload, PayloadKind, Tensor, dtype_for_array
from grps_py.protos import grps_pb2

TENSOR_FORMAT = "NAME:DTYPE:SHAPE:VALUES"
HEX_PREVIEW_BYTES = 32
_TRUE, _FALSE = ("true", "1"), ("false", "0")
_SUPPORTED = ", ".join([*(d.numpy_dtype.name for d in DTYPES if d.numpy_dtype.kind != "O"), "bool", "str"])


class InputError(ValueError):
    """The command line describes a request that cannot be built; the message says why."""


def build_request(args: argparse.Namespace) -> grps_pb2.GrpsMessage:
    """The GrpsMessage described by --json, --file, --str or --tensor (empty without any); --model wins."""
    model = ""
    if args.json is not None:
        payload, model = _json_payload(args.json)
    elif args.file is not None:
        payload = Payload.of_bytes(_read(args.file, "--file"))
    elif args.text is not None:
        payload = Payload.of_text(args.text)
    elif args.tensor:
        payload = Payload.of_tensors(parse_tensors(args.tensor))
    else:
        payload = Payload.empty()
    message = payload_to_message(payload)
    message.model = args.model or model
    return message


def _read(path: Path, option: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise InputError(f"{option}: cannot read {path}: {exc.strerror or exc}") from exc


def _json_payload(text: str) -> tuple[Payload, str]:
    """A GrpsMessage in the grps HTTP JSON form, inline or from @FILE, read by the server's own codec."""
    body = _read(Path(text[1:]), "--json") if text.startswith("@") else text.encode()
    try:
        return decode_request(body)
    except InvalidInput as exc:
        raise InputError(f"--json: {exc.public_message}") from exc


def parse_tensors(specs: list[str]) -> list[Tensor]:
    tensors = [parse_tensor(spec) for spec in specs]
    names = [t.name for t in tensors]
    if len(set(names)) != len(names):
        raise InputError(f"--tensor: names must differ, got {names}")
    return tensors


def parse_tensor(spec: str) -> Tensor:
    """`x:float32:2,2:1,2,3,4`: dtype as numpy names it (str for strings); an empty shape is a scalar."""
    parts = spec.split(":", 3)
    if len(parts) != 4 or not parts[0]:
        raise InputError(f"--tensor {spec!r}: expected {TENSOR_FORMAT}, e.g. x:float32:2,2:1,2,3,4")
    name, dtype_name, shape_text, values_text = parts
    try:
        dtype = _dtype(dtype_name)
        shape = _shape(shape_text)
        values = values_text.split(",") if values_text else []
        if len(values) != math.prod(shape):
            raise InputError(
                f"{len(values)} value(s) do not fill shape {list(shape)} ({math.prod(shape)} needed)"
            )
        array = _array(values, dtype).reshape(shape)
    except InputError as exc:
        raise InputError(f"--tensor {spec!r}: {exc}") from None
    return Tensor(name, array)


def _dtype(name: str) -> np.dtype[Any]:
    try:
        dtype = np.dtype(name)
        dtype_for_array(np.empty(0, dtype))  # refuses a dtype grps has no room for (complex, ...)
    except TypeError:
        raise InputError(f"unknown dtype {name!r}; use one of {_SUPPORTED}") from None
    return dtype


def _shape(text: str) -> tuple[int, ...]:
    if not text.strip():
        return ()
    parts = text.split(",")
    if not all(part.strip().isdigit() for part in parts):
        raise InputError(f"shape {text!r} is not valid; expected dims >= 0 separated by commas, e.g. 2,3")
    return tuple(int(part) for part in parts)


def _array(values: list[str], dtype: np.dtype[Any]) -> np.ndarray[Any, Any]:
    try:
        if dtype.kind in "USO":
            return np.array(values, dtype=object)
        if dtype.kind == "b":
            return np.array([_boolean(v) for v in values], dtype=dtype)
        parse = int if dtype.kind in "iu" else float
        return np.array([parse(v) for v in values], dtype=dtype)
    except (ValueError, OverflowError) as exc:
        raise InputError(f"values do not fit dtype {dtype.name}: {exc}") from None


def _boolean(text: str) -> bool:
    if text.strip().lower() not in (*_TRUE, *_FALSE):
        raise ValueError(f"{text!r} is not true, false, 1 or 0")
    return text.strip().lower() in _TRUE


class Printer:
    """Shows replies readably: tensors as name, dtype, shape and values; text as is; bytes as their
    length and a hex preview, or written to --output (a stream's byte chunks one after the other)."""

    def __init__(self, out: TextIO, output: BinaryIO | None = None, output_path: Path | None = None) -> None:
        self.out = out
        self.output = output
        self.output_path = output_path

    def show(self, message: grps_pb2.GrpsMessage) -> None:
        payload = message_to_payload(message)
        if payload.kind is PayloadKind.TENSORS:
            for tensor in payload.tensors:
                self._line(tensor_text(tensor))
        elif payload.kind is PayloadKind.TEXT:
            self._line(payload.value)
        elif payload.kind is PayloadKind.BYTES:
            self._bytes(payload.value)
        elif payload.kind is PayloadKind.MAP:
            for field in GMAP_FIELDS:
                for key, value in sorted(payload.value[field].items()):
                    self._line(f"{key} = {value!r}")
        else:
            self._line("(no data)")

    def _bytes(self, data: bytes) -> None:
        if self.output is not None:
            self.output.write(data)
            self._line(f"bin_data: {len(data)} bytes written to {self.output_path}")
            return
        more = "..." if len(data) > HEX_PREVIEW_BYTES else ""
        self._line(f"bin_data: {len(data)} bytes: {data[:HEX_PREVIEW_BYTES].hex(' ')}{more}")

    def _line(self, text: str) -> None:
        print(text, file=self.out, flush=True)


def tensor_text(tensor: Tensor) -> str:
    """`y float32 shape=[2, 3]:` then the values, on the same line when they fit on one."""
    array = tensor.array
    dtype = "str" if array.dtype.kind == "O" else array.dtype.name
    values = np.array2string(array, separator=", ", threshold=200, max_line_width=100)
    head = f"{tensor.name or '(unnamed)'} {dtype} shape={list(array.shape)}:"
    return f"{head}\n{values}" if "\n" in values else f"{head} {values}"

"""The API model code implements (grps names), the registries, and the built-in numpy converter.

User code subclasses `ModelInferer` / `Converter` and registers an instance:

    inferer_register.register("my_inferer", MyInferer())

`infer`, `preprocess` and `postprocess` may also be `async def`. Built-in inferer and converter
types are looked up in `backend_registry` and imported only when a configured model needs them, so
the core never imports torch or onnxruntime itself.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Generic, TypeVar

import numpy as np

from grps_py.core.batch_merge import merge_batch, split_batch
from grps_py.core.context import GrpsContext
from grps_py.core.errors import InvalidInput
from grps_py.core.types import Payload, PayloadKind, Tensor, to_numpy


class _Alias:
    """grps's name for one of grps-py's attributes: grps's base classes keep `_path`, `_device` and
    `_args`, so grps code reads (and may assign) those; here they are `path`, `device` and `args`."""

    def __init__(self, target: str) -> None:
        self.target = target

    def __get__(self, obj: object, owner: type | None = None) -> Any:
        return self if obj is None else getattr(obj, self.target)

    def __set__(self, obj: object, value: Any) -> None:
        setattr(obj, self.target, {} if self.target == "args" and value is None else value)


class ModelInferer:
    """Runs a model. Subclass and override `load` and `infer` (and `batch_infer` for batching).

    `init` keeps the model's `inferer_path`, `device` and `inferer_args` as `path`, `device` and `args`;
    grps's names `_path`, `_device` and `_args` are the same attributes.
    """

    _path = _Alias("path")
    _device = _Alias("device")
    _args = _Alias("args")

    def __init__(self) -> None:
        self.path: str | None = None
        self.device: str | None = None
        self.args: dict[str, Any] = {}

    def init(self, path: str | None, device: str | None = None, args: dict[str, Any] | None = None) -> None:
        """Receives the model's `inferer_path`, `device` and `inferer_args` before `load`."""
        self.path = path
        self.device = device
        self.args = dict(args or {})

    def load(self) -> bool:
        """Loads the model; return False to fail start-up."""
        return True

    def infer(self, inp: Any, context: GrpsContext) -> Any:
        raise NotImplementedError(f"{type(self).__name__} does not implement infer")

    def batch_infer(self, inp: Any, contexts: list[GrpsContext]) -> Any:
        """One inference for a batch (dynamic batching).

        `inp` is what the converter's `batch_preprocess` returned (grps: the merged batch, answered
        with the batch's output for `batch_postprocess`), or, when the converter has no
        `batch_preprocess` of its own, the list of per-request inputs (answer a list, one output per
        request). This default runs `infer` on each item of such a list.
        """
        return [self.infer(x, ctx) for x, ctx in zip(inp, contexts, strict=True)]


class Converter:
    """Pre- and post-processing around an inferer.

    `speaks_messages` is True for user converters: `preprocess` receives the request's GrpsMessage
    and `postprocess` returns a GrpsMessage. Built-in converters speak `Payload` instead.
    `init` keeps `converter_path` and `converter_args` as `path` and `args` (grps: `_path`, `_args`).

    For dynamic batching, a converter may merge and split the batch itself, as grps's do: override
    `batch_preprocess` to return the batch's one input for the inferer's `batch_infer`, and
    `batch_postprocess` to turn its output into one message per request (see `instance.py`).
    """

    speaks_messages = True
    _path = _Alias("path")
    _args = _Alias("args")

    def __init__(self) -> None:
        self.path: str | None = None
        self.args: dict[str, Any] = {}

    def init(self, path: str | None = None, args: dict[str, Any] | None = None) -> None:
        self.path = path
        self.args = dict(args or {})

    def preprocess(self, inp: Any, context: GrpsContext) -> Any:
        return inp

    def postprocess(self, inp: Any, context: GrpsContext) -> Any:
        return inp

    def batch_preprocess(self, inps: list[Any], contexts: list[GrpsContext]) -> Any:
        """The batch's input for `batch_infer`. Overriding it opts into grps's whole-batch contract;
        this default (per-request `preprocess`) is never called by the server."""
        return [self.preprocess(inp, ctx) for inp, ctx in zip(inps, contexts, strict=True)]

    def batch_postprocess(self, inp: Any, contexts: list[GrpsContext]) -> list[Any]:
        """One answer per request from the batch's output (`batch_infer`'s result; a list of per-request
        outputs when the converter has no `batch_preprocess`). This default runs `postprocess` on each."""
        return [self.postprocess(out, ctx) for out, ctx in zip(inp, contexts, strict=True)]


class NoneConverter(Converter):
    """converter_type `none`: the inferer receives and returns GrpsMessage itself."""


class NumpyConverter(Converter):
    """converter_type `numpy`: named tensors arrive as dict[str, ndarray], unnamed ones as a list.

    The inferer may return a dict (names kept), a list or tuple (`output_{i}`), a single array
    (`output`), a str, bytes, or a Payload. Subclasses change `to_model` / `from_model` to work in
    another tensor library (the torch converter moves tensors to the model's device).
    """

    speaks_messages = False

    def to_model(self, array: np.ndarray[Any, Any]) -> Any:
        return array

    def from_model(self, data: Any) -> Any:
        return to_numpy(data) if not isinstance(data, np.ndarray) else data

    def preprocess(self, inp: Payload, context: GrpsContext) -> Any:
        kind = inp.kind
        if kind is PayloadKind.TENSORS:
            tensors: list[Tensor] = inp.value
            names = [t.name for t in tensors]
            if all(names) and len(set(names)) == len(names):
                return {t.name: self.to_model(t.data) for t in tensors}
            return [self.to_model(t.data) for t in tensors]
        if kind is PayloadKind.EMPTY:
            raise InvalidInput("request carries no data")
        return inp.value

    def postprocess(self, inp: Any, context: GrpsContext) -> Payload:
        return outputs_to_payload(inp, self.from_model)

    def merge_batch(self, items: list[Any]) -> tuple[Any, list[int]] | None:
        """Dynamic batching: the preprocessed inputs concatenated along dim 0, and each one's rows."""
        return merge_batch(items)

    def split_batch(self, out: Any, rows: list[int]) -> list[Any] | None:
        """The inferer's batched output cut back into one output per request (None if it cannot be)."""
        return split_batch(out, rows)


def outputs_to_payload(out: Any, convert: Any = to_numpy) -> Payload:
    """Turn what an inferer returned into a Payload, naming unnamed outputs `output` / `output_{i}`."""
    if isinstance(out, Payload):
        return out
    if isinstance(out, str):
        return Payload.of_text(out)
    if isinstance(out, (bytes, bytearray, memoryview)):
        return Payload.of_bytes(bytes(out))
    if isinstance(out, Mapping):
        return Payload.of_tensors([Tensor(str(name), convert(value)) for name, value in out.items()])
    if isinstance(out, Sequence) and not isinstance(out, np.ndarray):
        return Payload.of_tensors([Tensor(f"output_{i}", convert(value)) for i, value in enumerate(out)])
    if out is None:
        return Payload.empty()
    return Payload.of_tensors([Tensor("output", convert(out))])


T = TypeVar("T")


class Registry(Generic[T]):
    """Named instances registered by user code (grps's inferer_register / converter_register)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: dict[str, T] = {}

    def register(self, name: str, instance: T) -> None:
        """Registers `instance` under `name`, replacing any earlier one (as grps does)."""
        self._items[name] = instance

    def get(self, name: str) -> T | None:
        return self._items.get(name)

    def names(self) -> list[str]:
        return sorted(self._items)

    def unregister(self, name: str) -> None:
        self._items.pop(name, None)


class InfererRegistry(Registry[ModelInferer]):
    """`inferer_register`, with grps's `model_inferer_dict` and `get_model_inferer` besides."""

    @property
    def model_inferer_dict(self) -> dict[str, ModelInferer]:
        """The registered inferers by name (the registry's own dict, as grps's)."""
        return self._items

    def get_model_inferer(self, name: str) -> ModelInferer:
        """The inferer registered as `name`; RuntimeError when there is none (as grps)."""
        if name not in self._items:
            raise RuntimeError(f"Model inferer name {name} not registered.")
        return self._items[name]


class ConverterRegistry(Registry[Converter]):
    """`converter_register`, with grps's `converter_dict` and `get_converter` besides."""

    @property
    def converter_dict(self) -> dict[str, Converter]:
        """The registered converters by name (the registry's own dict, as grps's)."""
        return self._items

    def get_converter(self, name: str) -> Converter:
        """The converter registered as `name`; ValueError when there is none (as grps)."""
        if name not in self._items:
            raise ValueError(f"Converter {name} not registered.")
        return self._items[name]


inferer_register = InfererRegistry("inferer")
converter_register = ConverterRegistry("converter")

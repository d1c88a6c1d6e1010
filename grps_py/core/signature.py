"""A model's tensor signature: its declared inputs and outputs, and the checks made against them.

Declared in inference.yml as `models[].inputs` / `models[].outputs` (`{name, datatype, shape}`, OIP
datatype names, -1 for a variable dimension); read from the model where the backend can tell
(ONNX). Requests are checked against declared inputs before the model runs, so a bad one is a
400 naming the tensor instead of an error from deep inside the model. A model whose converter hands
it tensors (numpy, torch) takes nothing but tensors when it declares its inputs: a grps request
carrying `bin_data`, `str_data`, a `gmap` or no data is a 400 naming the declared inputs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from grps_py.core.datatypes import BYTES, OIP_DTYPES, datatype_of
from grps_py.core.errors import InvalidInput
from grps_py.core.types import Payload, PayloadKind, Tensor
from grps_py.core.untrusted import shown

# Names a model's outputs get when it returns them unnamed (see core.model.outputs_to_payload).
_UNNAMED_OUTPUT = "output"
# What a request carries instead of tensors, as grps names it (a message from user code is left to the
# converter, which reads its tensors).
_NOT_TENSORS = {
    PayloadKind.BYTES: "bin_data",
    PayloadKind.TEXT: "str_data",
    PayloadKind.MAP: "a gmap",
    PayloadKind.EMPTY: "no data",
}


@dataclass(frozen=True)
class TensorSpec:
    """One declared tensor. `datatype` is None and `shape` None where the model does not tell."""

    name: str
    datatype: str | None = None
    shape: tuple[int, ...] | None = None
    # An output's class labels (Triton's `label_filename`): the file as inference.yml names it, where it
    # is (resolved against the project), and its lines once the catalog has read them.
    label_filename: str | None = None
    label_path: Path | None = field(default=None, repr=False, compare=False)
    labels: tuple[str, ...] = field(default=(), repr=False, compare=False)
    # The datatype's numpy dtype, the rank and the (index, size) of each fixed dimension: the checks
    # run per request, so they are worked out once here.
    _dtype: np.dtype[Any] | None = field(init=False, repr=False, compare=False)
    _rank: int = field(init=False, repr=False, compare=False)
    _fixed: tuple[tuple[int, int], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        fixed = tuple((i, size) for i, size in enumerate(self.shape or ()) if size >= 0)
        object.__setattr__(self, "_dtype", OIP_DTYPES.get(self.datatype or ""))
        object.__setattr__(self, "_rank", len(self.shape or ()))
        object.__setattr__(self, "_fixed", fixed)

    def describe_shape(self) -> str:
        return "any shape" if self.shape is None else "[" + ", ".join(map(str, self.shape)) + "]"

    def fits(self, shape: tuple[int, ...]) -> bool:
        """Whether a tensor of `shape` has the declared rank and fixed dimensions."""
        if self.shape is None:
            return True
        if len(shape) != self._rank:
            return False
        for index, size in self._fixed:  # noqa: SIM110 (a loop: all() would build a generator per call)
            if shape[index] != size:
                return False
        return True


def spec_from_description(item: Mapping[str, Any]) -> TensorSpec:
    """A backend's {name, dtype (numpy name or "string"), shape} (its `describe()`) as a TensorSpec."""
    dtype = item.get("dtype")
    datatype = None
    if dtype == "string":
        datatype = BYTES
    elif dtype:
        datatype = datatype_of(np.dtype(dtype))
    shape = item.get("shape")
    return TensorSpec(str(item["name"]), datatype, None if shape is None else tuple(int(d) for d in shape))


def declaration_conflicts(
    declared: Sequence[TensorSpec], found: Sequence[TensorSpec], kind: str
) -> list[str]:
    """Where inference.yml's declared inputs or outputs (`kind`) contradict the model file's: a name it
    lacks, another datatype, another rank or another fixed dim. A declaration may be narrower (a fixed
    dim where the file's is dynamic) or leave things out (no datatype, no shape)."""
    if not found:
        return []
    by_name = {spec.name: spec for spec in found}
    problems = []
    for spec in declared:
        model = by_name.get(spec.name)
        if model is None:
            problems.append(f"{kind} '{spec.name}' is not one of the model's ({', '.join(by_name)})")
            continue
        if spec.datatype and model.datatype and spec.datatype != model.datatype:
            problems.append(
                f"{kind} '{spec.name}' is declared {spec.datatype}; the model's is {model.datatype}"
            )
        if spec.shape is not None and model.shape is not None:
            pairs = list(zip(spec.shape, model.shape, strict=False))
            if len(spec.shape) != len(model.shape) or any(d >= 0 and m >= 0 and d != m for d, m in pairs):
                problems.append(
                    f"{kind} '{spec.name}' is declared {spec.describe_shape()}; "
                    f"the model's is {model.describe_shape()}"
                )
    return problems


def check_input(spec: TensorSpec, tensor: Tensor) -> None:
    """The tensor's datatype, rank and fixed dimensions must match its declaration."""
    array = tensor.array
    # The declared dtype itself needs no lookup; anything else (another byte order, str for BYTES) does.
    if spec.datatype is not None and (spec._dtype is None or array.dtype != spec._dtype):
        got = datatype_of(array.dtype)
        if got != spec.datatype:
            raise InvalidInput(
                f"input '{spec.name}' expects datatype {spec.datatype}, got {got or array.dtype}"
            )
    if not spec.fits(array.shape):
        raise InvalidInput(
            f"input '{spec.name}' expects shape {spec.describe_shape()}, got {list(array.shape)}"
        )


def check_inputs(specs: Sequence[TensorSpec], tensors: list[Tensor], model: str) -> list[Tensor]:
    """Check a request's tensors against declared inputs; returns them, named in declared order.

    Tensors without names (grps requests may send them so) take the declared names by position.
    """
    expected = ", ".join(spec.name for spec in specs)
    if tensors and not any(t.name for t in tensors) and len(tensors) == len(specs):
        tensors = [Tensor(spec.name, t.data) for spec, t in zip(specs, tensors, strict=True)]
    by_name = {t.name: t for t in tensors}
    declared = {spec.name for spec in specs}
    for t in tensors:
        if t.name not in declared:
            raise InvalidInput(f"unknown input '{shown(t.name)}' for model '{model}'; its inputs: {expected}")
    if len(by_name) != len(tensors):
        raise InvalidInput(f"an input is given twice for model '{model}'")
    missing = [spec.name for spec in specs if spec.name not in by_name]
    if missing:
        raise InvalidInput(f"missing input '{missing[0]}' for model '{model}'; its inputs: {expected}")
    for spec in specs:
        check_input(spec, by_name[spec.name])
    return [by_name[spec.name] for spec in specs]


class DeclaredInputs:
    """`check_inputs` for one model, with what it needs worked out once at load: it runs per request.

    `tensors_only`: the model's converter hands it tensors (numpy, torch), so a request must carry
    tensors (`checked` refuses bin_data, str_data, a gmap or no data, naming the declared inputs)."""

    def __init__(self, specs: Sequence[TensorSpec], tensors_only: bool = False) -> None:
        self.specs = tuple(specs)
        self.tensors_only = tensors_only
        names = [spec.name for spec in self.specs]
        # Declared names are unique (config checks it); None keeps the full check if they were not.
        self._names = names if len(set(names)) == len(names) else None

    def checked(self, payload: Payload, model: str) -> Payload:
        """A request's payload checked against the declaration: tensors by `check` (named by it when sent
        unnamed); anything else refused when the model takes tensors only, passed on otherwise."""
        if payload.kind is PayloadKind.TENSORS:
            tensors = self.check(payload.value, model)
            return payload if tensors is payload.value else Payload(PayloadKind.TENSORS, tensors)
        carried = _NOT_TENSORS.get(payload.kind) if self.tensors_only else None
        if carried is not None:
            expected = ", ".join(spec.name for spec in self.specs)
            raise InvalidInput(
                f"model '{model}' takes tensors (its declared inputs: {expected}); the request carries "
                f"{carried}: send them as gtensors (grps) or inputs (OIP)"
            )
        return payload

    def check(self, tensors: list[Tensor], model: str) -> list[Tensor]:
        """As `check_inputs`; `tensors` itself when they are already named and in declared order."""
        if [t.name for t in tensors] == self._names:  # the usual request: every input, in declared order
            for spec, tensor in zip(self.specs, tensors, strict=True):
                check_input(spec, tensor)
            return tensors
        return check_inputs(self.specs, tensors, model)


def name_outputs(specs: Sequence[TensorSpec], tensors: list[Tensor]) -> list[Tensor]:
    """Outputs a model returned unnamed (`output`, `output_0`...) take the declared names by position."""
    count = len(tensors)
    if not specs or len(specs) != count:
        return tensors
    if count == 1:
        unnamed = tensors[0].name in ("", _UNNAMED_OUTPUT, f"{_UNNAMED_OUTPUT}_0")
    else:
        unnamed = all(t.name in ("", f"{_UNNAMED_OUTPUT}_{i}") for i, t in enumerate(tensors))
    if not unnamed:
        return tensors
    return [Tensor(spec.name, t.data) for spec, t in zip(specs, tensors, strict=True)]


def messages_can_carry(tensors: list[Tensor]) -> None:
    """A GrpsMessage holds uint8, int8-64, float16-64 and UTF-8 strings: refuse anything else, saying why."""
    allowed = ("UINT8", "INT8", "INT16", "INT32", "INT64", "FP16", "FP32", "FP64", BYTES)
    for t in tensors:
        datatype = datatype_of(t.array.dtype)
        if datatype not in allowed:
            raise InvalidInput(
                f"input '{shown(t.name)}' has datatype {datatype}, which this model's GrpsMessage cannot "
                f"carry (it takes {', '.join(allowed)}); the model needs converter_type numpy to take it"
            )
        if datatype == BYTES:
            for value in t.array.flat:
                if isinstance(value, bytes):
                    try:
                        value.decode()
                    except UnicodeDecodeError:
                        raise InvalidInput(
                            f"input '{shown(t.name)}' holds bytes that are not UTF-8, which a GrpsMessage "
                            "string cannot carry; the model needs converter_type numpy to take it"
                        ) from None

"""A generative model's request as it arrives over any protocol: its prompt (a tensor, a string or a
grps map, after the numpy converter's preprocess) and its options (request parameters, or a grps map's
values), each checked and bounded before it is used."""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from grps_py.core.errors import InvalidInput
from grps_py.core.generation_config import GenerationSettings
from grps_py.core.types import GMAP_FIELDS
from grps_py.core.untrusted import shown
from grps_py.generation.api import GenerationRequest, Tokenizer
from grps_py.generation.batcher import MAX_STOP_CHARS, MAX_STOP_STRINGS

TEXT_INPUT = "text_input"
INPUT_IDS = "input_ids"
TASKS = ("generate", "embed")
_OPTIONS = ("max_tokens", "temperature", "top_p", "seed", "stop", "task", "ignore_eos")
_MAX_TEMPERATURE = 100.0


@dataclass(frozen=True)
class Prompt:
    ids: list[int]
    tensors: bool  # it came as a tensor: the answer is tensors too (else text)
    options: Mapping[str, Any] = field(default_factory=dict)

    @property
    def task(self) -> str:
        task = self.options.get("task", "generate")
        if task not in TASKS:
            raise InvalidInput(f"parameter 'task' must be one of {', '.join(TASKS)}, not {shown(task)}")
        return str(task)


def parse_prompt(inp: Any, parameters: Mapping[str, Any], tokenizer: Tokenizer) -> Prompt:
    """The prompt's token ids and its options (the request's parameters; a grps map's own values)."""
    options = {key: parameters[key] for key in _OPTIONS if key in parameters}
    if isinstance(inp, dict) and INPUT_IDS in inp:
        return Prompt(_ids(inp[INPUT_IDS]), True, options)
    if isinstance(inp, dict) and TEXT_INPUT in inp:
        return Prompt(tokenizer.encode(_one_text(inp[TEXT_INPUT])), True, options)
    if isinstance(inp, dict) and inp and set(inp) <= set(GMAP_FIELDS):
        values = {key: value for typed in inp.values() for key, value in typed.items()}
        if not isinstance(values.get("prompt"), str):
            raise InvalidInput("a generation map needs its prompt as the string s_s.prompt")
        options.update({key: values[key] for key in _OPTIONS if key in values})
        return Prompt(tokenizer.encode(values["prompt"]), False, options)
    if isinstance(inp, str):
        return Prompt(tokenizer.encode(inp), False, options)
    if isinstance(inp, bytes):
        return Prompt(tokenizer.encode(_utf8(inp)), False, options)
    raise InvalidInput(
        f"a generative model takes a '{TEXT_INPUT}' (BYTES) or '{INPUT_IDS}' (INT64) tensor, a prompt "
        "string, or a map with s_s.prompt"
    )


def sampling_options(
    prompt: Prompt, settings: GenerationSettings, timeout_s: float | None
) -> GenerationRequest:
    options = prompt.options
    max_tokens = _integer(options, "max_tokens", 1, settings.max_tokens_limit)
    temperature = _number(options, "temperature", 0.0, _MAX_TEMPERATURE)
    top_p = _number(options, "top_p", 0.0, 1.0)
    if top_p == 0.0:
        raise InvalidInput("parameter 'top_p' must be above 0")
    return GenerationRequest(
        prompt_ids=prompt.ids,
        max_tokens=settings.max_tokens if max_tokens is None else max_tokens,
        temperature=1.0 if temperature is None else temperature,
        top_p=1.0 if top_p is None else top_p,
        seed=_integer(options, "seed", -(2**63), 2**64 - 1),
        stop=_stop(options.get("stop")),
        timeout_s=timeout_s,
        ignore_eos=_flag(options, "ignore_eos"),
    )


def _flag(options: Mapping[str, Any], key: str) -> bool:
    value = options.get(key, False)
    if isinstance(value, int | np.integer) and value in (0, 1):  # grps maps carry flags as integers
        return bool(value)
    raise InvalidInput(f"parameter '{key}' must be true or false, not {shown(value)}")


def _ids(array: Any) -> list[int]:
    values = np.asarray(array)
    if values.dtype.kind not in "iu":
        raise InvalidInput(f"'{INPUT_IDS}' must hold integers (INT64 or INT32), not {values.dtype}")
    return [int(v) for v in values.reshape(-1)]


def _one_text(array: Any) -> str:
    values = np.asarray(array, dtype=object).reshape(-1)
    if values.size != 1:
        raise InvalidInput(f"'{TEXT_INPUT}' must hold one prompt, not {values.size}")
    value = values[0]
    if isinstance(value, bytes):
        return _utf8(value)
    if isinstance(value, str):
        return value
    raise InvalidInput(f"'{TEXT_INPUT}' must be a string (BYTES)")


def _utf8(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidInput("the prompt is not UTF-8 text") from None


def _integer(options: Mapping[str, Any], key: str, low: int, high: int) -> int | None:
    value = options.get(key)
    if value is None:
        return None
    if isinstance(value, str) and value.lstrip("-").isdigit() and len(value) <= 20:
        value = int(value)  # grps maps and query strings carry numbers as text
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or not low <= value <= high:
        raise InvalidInput(f"parameter '{key}' must be an integer from {low} to {high}, not {shown(value)}")
    return int(value)


def _number(options: Mapping[str, Any], key: str, low: float, high: float) -> float | None:
    value = options.get(key)
    if value is None:
        return None
    if isinstance(value, str) and len(value) <= 32:
        with contextlib.suppress(ValueError):
            value = float(value)
    number = (
        float(value) if isinstance(value, int | float | np.number) and not isinstance(value, bool) else None
    )
    if number is None or not math.isfinite(number) or not low <= number <= high:
        raise InvalidInput(f"parameter '{key}' must be a number from {low:g} to {high:g}, not {shown(value)}")
    return number


def _stop(value: Any) -> tuple[str, ...]:
    """A string, a list of strings, or (where parameters hold only scalars) a JSON list of them."""
    if value is None:
        return ()
    if isinstance(value, str) and value.startswith("[") and len(value) <= 8192:
        with contextlib.suppress(ValueError):  # else a stop string that begins with "["
            value = json.loads(value)
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops):
        raise InvalidInput("parameter 'stop' must be a non-empty string or a list of them")
    if len(stops) > MAX_STOP_STRINGS or any(len(s) > MAX_STOP_CHARS for s in stops):
        raise InvalidInput(
            f"parameter 'stop' takes at most {MAX_STOP_STRINGS} strings "
            f"of at most {MAX_STOP_CHARS} characters"
        )
    return tuple(stops)

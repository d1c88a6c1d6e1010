"""The sampling and streaming keys every generating request shares: `max_tokens`, `temperature`
[0, 2], `top_p` (0, 1], `seed` (int64), `stop` (a string or up to 4, none empty), `n` 1..16, `stream`
and `stream_options` (only with `stream: true`; `include_usage`, and `include_obfuscation` only false).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from grps_py.generation.api import GenerationRequest
from grps_py.openai.errors import InvalidParameter
from grps_py.openai.fields import (
    INT64_MAX,
    INT64_MIN,
    Fields,
    Trivial,
    boolean,
    integer,
    is_false,
    number,
    or_default,
    path,
    text,
    wrong_type,
)

__all__ = [
    "MAX_N",
    "MAX_STOP_CHARS",
    "MAX_STOP_SEQUENCES",
    "MAX_TOKENS",
    "Sampling",
    "Streaming",
    "parse_chat_max_tokens",
    "parse_max_tokens",
    "parse_n",
    "parse_sampling",
    "parse_streaming",
]

MAX_N = 16
MAX_STOP_SEQUENCES = 4  # as OpenAI
MAX_STOP_CHARS = 1024
MAX_TOKENS = 2**31 - 1

_STREAM_OPTIONS_UNSUPPORTED: dict[str, Trivial] = {"include_obfuscation": is_false}


@dataclass(frozen=True)
class Sampling:
    """How each choice is generated. `max_tokens` None: as many as the model has room for."""

    max_tokens: int | None = None
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    n: int = 1

    def generation_request(
        self, prompt_ids: list[int], default_max_tokens: int, choice: int = 0
    ) -> GenerationRequest:
        """The `GenerationRequest` of one choice. With a seed, choice i samples with `seed + i` (taken
        modulo 2**64, so never negative): the n choices differ, and a request sent again repeats them."""
        seed = None if self.seed is None else (self.seed + choice) % 2**64
        return GenerationRequest(
            prompt_ids=prompt_ids,
            max_tokens=or_default(self.max_tokens, default_max_tokens),
            temperature=self.temperature,
            top_p=self.top_p,
            seed=seed,
            stop=self.stop,
        )


@dataclass(frozen=True)
class Streaming:
    stream: bool = False
    include_usage: bool = False  # a last chunk with `choices: []` and the usage


def parse_max_tokens(fields: Fields, key: str = "max_tokens") -> int | None:
    return integer(fields.take(key), key, 1, MAX_TOKENS)


def parse_chat_max_tokens(fields: Fields) -> int | None:
    """`max_completion_tokens`, or its older name `max_tokens`; both only when equal."""
    legacy = parse_max_tokens(fields, "max_tokens")
    current = parse_max_tokens(fields, "max_completion_tokens")
    if legacy is not None and current is not None and legacy != current:
        raise InvalidParameter(
            f"'max_tokens' ({legacy}) and 'max_completion_tokens' ({current}) differ; give one",
            "max_completion_tokens",
        )
    return or_default(current, legacy)


def parse_n(fields: Fields) -> int:
    return or_default(integer(fields.take("n"), "n", 1, MAX_N), 1)


def parse_sampling(fields: Fields, max_tokens: int | None, n: int) -> Sampling:
    return Sampling(
        max_tokens=max_tokens,
        temperature=or_default(number(fields.take("temperature"), "temperature", 0.0, 2.0), 1.0),
        top_p=or_default(number(fields.take("top_p"), "top_p", 0.0, 1.0, low_open=True), 1.0),
        seed=integer(fields.take("seed"), "seed", INT64_MIN, INT64_MAX),
        stop=_stop(fields.take("stop")),
        n=n,
    )


def _stop(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (_stop_sequence(value, "stop"),)
    if not isinstance(value, list):
        raise wrong_type("stop", "a string or an array of strings", value)
    if len(value) > MAX_STOP_SEQUENCES:
        raise InvalidParameter(
            f"'stop' has {len(value)} sequences; at most {MAX_STOP_SEQUENCES} are taken", "stop"
        )
    return tuple(_stop_sequence(item, path("stop", index)) for index, item in enumerate(value))


def _stop_sequence(value: Any, param: str) -> str:
    sequence = text(value, param, MAX_STOP_CHARS, non_empty=True)
    if sequence is None:
        raise wrong_type(param, "a string", value)
    return sequence


def parse_streaming(fields: Fields) -> Streaming:
    stream = boolean(fields.take("stream"), "stream")
    options = fields.take("stream_options")
    if options is None:
        return Streaming(stream)
    if not stream:
        raise InvalidParameter("'stream_options' is only taken when 'stream' is true", "stream_options")
    option_fields = Fields(options, "stream_options")
    option_fields.refuse_unsupported(_STREAM_OPTIONS_UNSUPPORTED)
    include_usage = boolean(option_fields.take("include_usage"), "stream_options.include_usage")
    option_fields.finish()
    return Streaming(stream, include_usage)

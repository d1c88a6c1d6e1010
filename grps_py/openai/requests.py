"""OpenAI API request bodies, parsed and checked: `POST /v1/chat/completions`, `/v1/completions` and
`/v1/embeddings` -> `ChatRequest`, `CompletionRequest`, `EmbeddingRequest`.

What is taken, as the OpenAI API defines it:

- chat: `model`, `messages` (roles system, developer, user, assistant; content a string or a list of
  `{"type": "text", "text": ...}` parts, joined with a line break), `max_tokens` or
  `max_completion_tokens` (both may be given only when equal), `temperature` [0, 2], `top_p` (0, 1],
  `seed` (int64), `stop` (a string or up to 4, none empty), `n` 1..16, `stream`,
  `stream_options.include_usage` (only with `stream: true`), `user` and `safety_identifier`;
- completions: `model`, `prompt` (a string, or a list of strings: prompt p's choices are indexes
  p*n .. p*n+n-1), the same sampling keys (`max_tokens` defaults to 16, as OpenAI documents), `stream`,
  `stream_options`, `user`;
- embeddings: `model`, `input` (a non-empty string or a list of them), `encoding_format` `float` or
  `base64` (little-endian float32 bytes: the official clients ask for it by default, so it is
  supported), `user`.

Everything else is refused with a 400 that names the parameter (`InvalidParameter`). That is
deliberate: a parameter is never ignored silently, since a client that sets `tools`, `logprobs` or
`response_format: json_object` expects an answer shaped by it, and an unknown key is most often a
misspelt one. Parameters the API defines but this server does not do are accepted only at a value that
asks for nothing (null, `logprobs: false`, `frequency_penalty: 0`, `response_format: {"type": "text"}`,
`best_of` equal to `n`, ...): see the `*_UNSUPPORTED` tables. Token-id prompts and inputs, tool and
function messages, non-text content parts and message `name`s are refused the same way.

Every string and list is bounded: the constants here and in `messages` and `sampling`, and
`limits.string_bytes` for each text (a message, a prompt, an input); the body's nesting is held to
`limits.json_depth` before it is parsed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from grps_py.codecs.json_values import load
from grps_py.codecs.limits import DEFAULT_LIMITS, for_body
from grps_py.core.errors import InvalidInput
from grps_py.core.protection import LimitsSettings
from grps_py.openai.errors import INVALID_TYPE, UNSUPPORTED_PARAMETER, InvalidParameter
from grps_py.openai.fields import (
    Fields,
    Trivial,
    bounded_list,
    is_empty_object,
    is_false,
    is_one_of,
    is_zero,
    never,
    or_default,
    path,
    show,
    strings_within,
    text,
    wrong_type,
)
from grps_py.openai.messages import ChatMessage, parse_messages
from grps_py.openai.sampling import (
    Sampling,
    Streaming,
    parse_chat_max_tokens,
    parse_max_tokens,
    parse_n,
    parse_sampling,
    parse_streaming,
)

__all__ = [
    "CHAT_UNSUPPORTED",
    "COMPLETION_UNSUPPORTED",
    "EMBEDDING_UNSUPPORTED",
    "ChatMessage",
    "ChatRequest",
    "CompletionRequest",
    "EmbeddingRequest",
    "Sampling",
    "Streaming",
    "parse_chat_request",
    "parse_completion_request",
    "parse_embedding_request",
]

MAX_MODEL_CHARS = 256
MAX_USER_CHARS = 256  # `user`, `safety_identifier`
MAX_PROMPTS = 64
MAX_COMPLETION_CHOICES = 256  # prompts x n: the sequences one completion request may start
MAX_EMBEDDING_INPUTS = 2048  # as OpenAI
COMPLETION_DEFAULT_MAX_TOKENS = 16  # OpenAI's default for /v1/completions

EncodingFormat = Literal["float", "base64"]

# Parameters the API defines that this server does not do, with the values that ask for nothing.
_SAMPLING_UNSUPPORTED: dict[str, Trivial] = {
    "frequency_penalty": is_zero,
    "presence_penalty": is_zero,
    "logit_bias": is_empty_object,
}
CHAT_UNSUPPORTED: dict[str, Trivial] = {
    **_SAMPLING_UNSUPPORTED,
    "audio": never,
    "function_call": is_one_of("none"),
    "functions": never,
    "logprobs": is_false,
    "metadata": never,
    "modalities": is_one_of(["text"]),
    "moderation": never,
    "parallel_tool_calls": never,
    "prediction": never,
    "prompt_cache_key": never,
    "prompt_cache_options": never,
    "prompt_cache_retention": never,
    "reasoning_effort": never,
    "response_format": is_one_of({"type": "text"}),
    "service_tier": is_one_of("auto", "default"),
    "store": is_false,
    "tool_choice": is_one_of("none"),
    "tools": never,
    "top_logprobs": never,
    "verbosity": never,
    "web_search_options": never,
}
COMPLETION_UNSUPPORTED: dict[str, Trivial] = {
    **_SAMPLING_UNSUPPORTED,
    "echo": is_false,
    "logprobs": never,
    "suffix": is_one_of(""),
}  # `best_of` is taken when it equals `n`: see _best_of
EMBEDDING_UNSUPPORTED: dict[str, Trivial] = {"dimensions": never}


# --- what a request asks for -------------------------------------------------------------------


@dataclass(frozen=True)
class ChatRequest:
    model: str
    messages: tuple[ChatMessage, ...]
    sampling: Sampling
    streaming: Streaming
    user: str | None = None
    safety_identifier: str | None = None

    def template_input(self) -> list[dict[str, str]]:
        return [message.template_input() for message in self.messages]


@dataclass(frozen=True)
class CompletionRequest:
    model: str
    prompts: tuple[str, ...]  # one choice set of `sampling.n` per prompt
    sampling: Sampling
    streaming: Streaming
    user: str | None = None


@dataclass(frozen=True)
class EmbeddingRequest:
    model: str
    inputs: tuple[str, ...]
    encoding_format: EncodingFormat = "float"
    user: str | None = None


# --- parsing -----------------------------------------------------------------------------------


def parse_chat_request(body: bytes | memoryview, limits: LimitsSettings = DEFAULT_LIMITS) -> ChatRequest:
    """A `/v1/chat/completions` body; anything wrong, unknown or unsupported is an `InvalidParameter`."""
    limits = for_body(limits, len(body))
    fields = _body(body, limits)
    fields.refuse_unsupported(CHAT_UNSUPPORTED)
    model = _model(fields)
    messages = parse_messages(fields.required("messages"), limits)
    sampling = parse_sampling(fields, parse_chat_max_tokens(fields), parse_n(fields))
    streaming = parse_streaming(fields)
    user = text(fields.take("user"), "user", MAX_USER_CHARS)
    safety_identifier = text(fields.take("safety_identifier"), "safety_identifier", MAX_USER_CHARS)
    fields.finish()
    return ChatRequest(model, messages, sampling, streaming, user, safety_identifier)


def parse_completion_request(
    body: bytes | memoryview, limits: LimitsSettings = DEFAULT_LIMITS
) -> CompletionRequest:
    """A `/v1/completions` body; anything wrong, unknown or unsupported is an `InvalidParameter`."""
    limits = for_body(limits, len(body))
    fields = _body(body, limits)
    fields.refuse_unsupported(COMPLETION_UNSUPPORTED)
    model = _model(fields)
    prompts = _texts(fields.required("prompt"), "prompt", MAX_PROMPTS, limits, allow_empty=True)
    max_tokens = parse_max_tokens(fields)
    n = parse_n(fields)
    _best_of(fields.take("best_of"), n)
    if len(prompts) * n > MAX_COMPLETION_CHOICES:
        raise InvalidParameter(
            f"'n' ({n}) x {len(prompts)} prompts make {len(prompts) * n} choices; at most "
            f"{MAX_COMPLETION_CHOICES} are taken",
            "n",
        )
    sampling = parse_sampling(fields, or_default(max_tokens, COMPLETION_DEFAULT_MAX_TOKENS), n)
    streaming = parse_streaming(fields)
    user = text(fields.take("user"), "user", MAX_USER_CHARS)
    fields.finish()
    return CompletionRequest(model, prompts, sampling, streaming, user)


def parse_embedding_request(
    body: bytes | memoryview, limits: LimitsSettings = DEFAULT_LIMITS
) -> EmbeddingRequest:
    """A `/v1/embeddings` body; anything wrong, unknown or unsupported is an `InvalidParameter`."""
    limits = for_body(limits, len(body))
    fields = _body(body, limits)
    fields.refuse_unsupported(EMBEDDING_UNSUPPORTED)
    model = _model(fields)
    inputs = _texts(fields.required("input"), "input", MAX_EMBEDDING_INPUTS, limits, allow_empty=False)
    encoding_format = fields.take("encoding_format")
    if encoding_format not in (None, "float", "base64"):
        raise InvalidParameter(
            f"'encoding_format' must be 'float' or 'base64', got {show(encoding_format)}", "encoding_format"
        )
    user = text(fields.take("user"), "user", MAX_USER_CHARS)
    fields.finish()
    return EmbeddingRequest(model, inputs, encoding_format or "float", user)


def _body(body: bytes | memoryview, limits: LimitsSettings) -> Fields:
    try:
        document = load(body, "the body is not valid JSON", limits)
    except InvalidInput as exc:  # the body as a whole is wrong, no one parameter
        raise InvalidParameter(exc.public_message, None, "invalid_json") from None
    if not isinstance(document, dict):
        raise InvalidParameter(f"the body must be a JSON object, got {show(document)}", None, INVALID_TYPE)
    return Fields(document)


def _model(fields: Fields) -> str:
    model = text(fields.required("model"), "model", MAX_MODEL_CHARS, non_empty=True)
    assert model is not None  # required() refused null
    return model


def _best_of(value: Any, n: int) -> None:
    """`best_of` asks for more candidates than choices, ranked by log-probability: taken only equal
    to `n`, when it asks for nothing more."""
    if value is not None and not (type(value) is int and value == n):
        raise InvalidParameter(
            f"'best_of' is supported only equal to n ({n}); got {show(value)}",
            "best_of",
            UNSUPPORTED_PARAMETER,
        )


# --- prompts and inputs ------------------------------------------------------------------------


def _texts(
    value: Any, param: str, max_items: int, limits: LimitsSettings, allow_empty: bool
) -> tuple[str, ...]:
    """A string or an array of strings (`prompt`, `input`); token ids are refused by name."""
    if not isinstance(value, (str, list)):
        raise wrong_type(param, "a string or an array of strings", value)
    texts: Sequence[Any] = [value] if isinstance(value, str) else bounded_list(value, param, max_items)
    for index, item in enumerate(texts):
        where = param if isinstance(value, str) else path(param, index)
        if isinstance(item, (int, list)) and not isinstance(item, bool):
            raise InvalidParameter(
                f"'{param}' as token ids is not supported: send text", param, UNSUPPORTED_PARAMETER
            )
        if not isinstance(item, str):
            raise wrong_type(where, "a string", item)
        if not allow_empty and not item:
            raise InvalidParameter(f"'{where}' must not be empty", where)
    strings_within(list(texts), param, limits)
    return tuple(texts)

"""The OpenAI wire format (`grps_py.openai`): every accepted field, every refusal naming its parameter,
the bounds, answers validated by the official `openai` package's own pydantic types, SSE framing, and
errors in OpenAI's shape.

The last part hands our bytes to the official client itself (sync and async) through its HTTP client's
in-memory transport: what it sends must pass our parsers, and what we answer must parse as it expects.
There is no server here yet (the format is transport-free); the transport tests come with the routes.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Callable
from typing import Any

import httpx2
import numpy as np
import openai
import orjson
import pydantic
import pytest
from openai.types import Completion, CreateEmbeddingResponse, Model
from openai.types import completion_create_params as completion_params
from openai.types import embedding_create_params as embedding_params
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.chat import completion_create_params as chat_params

from grps_py.codecs.limits import DEFAULT_LIMITS
from grps_py.core import errors
from grps_py.core.protection import LimitsSettings
from grps_py.openai import (
    SSE_DONE,
    ChatChoice,
    ChatChunks,
    ChatMessage,
    CompletionChoice,
    CompletionChunks,
    InvalidParameter,
    Sampling,
    Streaming,
    Usage,
    chat_completion,
    embedding_list,
    encode,
    error_answer,
    error_document,
    error_event,
    model_list,
    model_object,
    new_id,
    parse_chat_request,
    parse_completion_request,
    parse_embedding_request,
    sse_event,
    text_completion,
)
from grps_py.openai import messages as chat_messages
from grps_py.openai import requests as wire
from grps_py.openai import sampling as sampling_keys

Parse = Callable[[bytes], Any]
USER = {"role": "user", "content": "hi"}


def body(base: dict[str, Any], drop: tuple[str, ...], fields: dict[str, Any]) -> bytes:
    document = {key: value for key, value in base.items() if key not in drop}
    document.update(fields)
    return orjson.dumps(document)


def chat(*drop: str, **fields: Any) -> bytes:
    """A body with the usual required keys, less those named in `drop`, with `fields` set."""
    return body({"model": "m", "messages": [USER]}, drop, fields)


def completion(*drop: str, **fields: Any) -> bytes:
    """A body with the usual required keys, less those named in `drop`, with `fields` set."""
    return body({"model": "m", "prompt": "once"}, drop, fields)


def embedding(*drop: str, **fields: Any) -> bytes:
    """A body with the usual required keys, less those named in `drop`, with `fields` set."""
    return body({"model": "m", "input": "text"}, drop, fields)


def refused(parse: Parse, data: bytes, param: str | None, code: str | None = None) -> dict[str, Any]:
    """The request is a 400 in OpenAI's shape whose `param` is `param` and whose message names it."""
    with pytest.raises(InvalidParameter) as info:
        parse(data)
    status, answer = error_answer(info.value)
    error: dict[str, Any] = orjson.loads(answer)["error"]
    assert status == 400
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param
    if param is not None:
        assert f"'{param}'" in error["message"]
    if code is not None:
        assert error["code"] == code
    assert "\n" not in error["message"]
    return error


# --- chat: accepted ----------------------------------------------------------------------------


def test_chat_takes_every_supported_field() -> None:
    request = parse_chat_request(
        chat(
            messages=[
                {"role": "system", "content": "be brief"},
                {"role": "developer", "content": [{"type": "text", "text": "rule"}]},
                {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
                {"role": "assistant", "content": "ok"},
            ],
            max_tokens=7,
            max_completion_tokens=7,
            temperature=0.5,
            top_p=0.9,
            seed=-3,
            stop=["\n\n", "END"],
            n=3,
            stream=True,
            stream_options={"include_usage": True},
            user="u-1",
            safety_identifier="s-1",
        )
    )
    assert request.model == "m"
    assert request.messages == (
        ChatMessage("system", "be brief"),
        ChatMessage("developer", "rule"),
        ChatMessage("user", "a\nb"),
        ChatMessage("assistant", "ok"),
    )
    assert request.sampling == Sampling(
        max_tokens=7, temperature=0.5, top_p=0.9, seed=-3, stop=("\n\n", "END"), n=3
    )
    assert request.streaming == Streaming(stream=True, include_usage=True)
    assert (request.user, request.safety_identifier) == ("u-1", "s-1")
    assert request.template_input()[2] == {"role": "user", "content": "a\nb"}


def test_chat_defaults_and_nulls() -> None:
    nulls = dict.fromkeys(
        ["max_tokens", "max_completion_tokens", "temperature", "top_p", "seed", "stop", "n", "stream"]
    )
    for data in (chat(), chat(**nulls, stream_options=None, user=None)):
        request = parse_chat_request(data)
        assert request.sampling == Sampling()
        assert request.streaming == Streaming()
        assert request.user is None


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"max_tokens": 5}, 5),
        ({"max_completion_tokens": 6}, 6),
        ({"max_tokens": 4, "max_completion_tokens": 4}, 4),
        ({"max_tokens": None, "max_completion_tokens": 9}, 9),
    ],
)
def test_chat_max_tokens_either_name(fields: dict[str, Any], expected: int) -> None:
    assert parse_chat_request(chat(**fields)).sampling.max_tokens == expected


def test_chat_max_tokens_that_differ_are_refused() -> None:
    error = refused(parse_chat_request, chat(max_tokens=4, max_completion_tokens=5), "max_completion_tokens")
    assert "'max_tokens'" in error["message"]


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("temperature", 0),
        ("temperature", 2),
        ("temperature", 1.25),
        ("top_p", 1),
        ("top_p", 1e-9),
        ("n", 1),
        ("n", 16),
        ("seed", 2**63 - 1),
        ("seed", -(2**63)),
        ("stop", "x"),
        ("stop", ["a", "b", "c", "d"]),
        ("max_tokens", 1),
        ("max_tokens", 2**31 - 1),
        ("user", "u" * wire.MAX_USER_CHARS),
    ],
)
def test_chat_values_at_their_bounds(key: str, value: Any) -> None:
    parse_chat_request(chat(**{key: value}))


def test_stop_string_becomes_one_sequence() -> None:
    assert parse_chat_request(chat(stop="###")).sampling.stop == ("###",)


def test_include_obfuscation_false_is_taken() -> None:
    request = parse_chat_request(chat(stream=True, stream_options={"include_obfuscation": False}))
    assert request.streaming == Streaming(stream=True, include_usage=False)


# --- chat: refused -----------------------------------------------------------------------------

# A value of every unsupported chat parameter that asks for something this server does not do.
CHAT_REFUSED = {
    "frequency_penalty": 0.5,
    "presence_penalty": -1,
    "logit_bias": {"50256": -100},
    "audio": {"voice": "alloy", "format": "wav"},
    "function_call": "auto",
    "functions": [{"name": "f"}],
    "logprobs": True,
    "metadata": {"k": "v"},
    "modalities": ["text", "audio"],
    "moderation": {"model": "omni-moderation-latest"},
    "parallel_tool_calls": False,
    "prediction": {"type": "content", "content": "x"},
    "prompt_cache_key": "k",
    "prompt_cache_options": {"mode": "explicit"},
    "prompt_cache_retention": "24h",
    "reasoning_effort": "low",
    "response_format": {"type": "json_object"},
    "service_tier": "flex",
    "store": True,
    "tool_choice": "auto",
    "tools": [{"type": "function", "function": {"name": "f"}}],
    "top_logprobs": 2,
    "verbosity": "low",
    "web_search_options": {},
}
# Values of unsupported parameters that ask for nothing, and are taken.
CHAT_TRIVIAL = [
    ("frequency_penalty", 0),
    ("frequency_penalty", 0.0),
    ("presence_penalty", 0),
    ("logit_bias", {}),
    ("function_call", "none"),
    ("logprobs", False),
    ("modalities", ["text"]),
    ("response_format", {"type": "text"}),
    ("service_tier", "auto"),
    ("service_tier", "default"),
    ("store", False),
    ("tool_choice", "none"),
]


def test_the_refusal_samples_cover_every_unsupported_parameter() -> None:
    assert set(CHAT_REFUSED) == set(wire.CHAT_UNSUPPORTED)


@pytest.mark.parametrize("key", sorted(CHAT_REFUSED))
def test_unsupported_chat_parameter_is_refused_by_name(key: str) -> None:
    refused(parse_chat_request, chat(**{key: CHAT_REFUSED[key]}), key, "unsupported_parameter")


@pytest.mark.parametrize(("key", "value"), CHAT_TRIVIAL)
def test_unsupported_chat_parameter_at_a_value_that_asks_nothing_is_taken(key: str, value: Any) -> None:
    assert parse_chat_request(chat(**{key: value})).messages == (ChatMessage("user", "hi"),)


@pytest.mark.parametrize("key", sorted(CHAT_REFUSED))
def test_unsupported_chat_parameter_set_to_null_is_taken(key: str) -> None:
    parse_chat_request(chat(**{key: None}))


@pytest.mark.parametrize(
    ("key", "value"),
    [("logprobs", 0), ("frequency_penalty", False), ("store", 0), ("tool_choice", ["none"])],
)
def test_trivial_values_are_matched_type_for_type(key: str, value: Any) -> None:
    refused(parse_chat_request, chat(**{key: value}), key, "unsupported_parameter")


def official_keys(params: Any) -> set[str]:
    return set(params.__required_keys__) | set(params.__optional_keys__)


CHAT_TAKEN = {
    "model",
    "messages",
    "max_tokens",
    "max_completion_tokens",
    "temperature",
    "top_p",
    "seed",
    "stop",
    "n",
    "stream",
    "stream_options",
    "user",
    "safety_identifier",
}


def test_every_parameter_of_the_official_chat_client_is_taken_or_refused_by_name() -> None:
    official = official_keys(chat_params.CompletionCreateParamsStreaming)
    assert official <= CHAT_TAKEN | set(wire.CHAT_UNSUPPORTED), (
        official - CHAT_TAKEN - set(wire.CHAT_UNSUPPORTED)
    )


@pytest.mark.parametrize("role", ["tool", "function"])
def test_tool_and_function_messages_are_refused(role: str) -> None:
    data = chat(messages=[USER, {"role": role, "content": "42", "tool_call_id": "c1"}])
    refused(parse_chat_request, data, "messages[1].role", "unsupported_parameter")


@pytest.mark.parametrize("role", ["bot", "", "USER"])
def test_unknown_roles_are_refused(role: str) -> None:
    refused(
        parse_chat_request,
        chat(messages=[{"role": role, "content": "x"}]),
        "messages[0].role",
        "invalid_value",
    )


@pytest.mark.parametrize("key", ["name", "tool_calls", "function_call", "refusal", "audio", "tool_call_id"])
def test_message_fields_that_are_not_supported_are_refused(key: str) -> None:
    message = {"role": "assistant", "content": "x", key: "v"}
    refused(parse_chat_request, chat(messages=[message]), f"messages[0].{key}", "unsupported_parameter")


@pytest.mark.parametrize(
    "part",
    [
        {"type": "image_url", "image_url": {"url": "http://x/y.png"}},
        {"type": "input_audio", "input_audio": {"data": "", "format": "wav"}},
        {"type": "file", "file": {"file_id": "f"}},
        {"type": "refusal", "refusal": "no"},
    ],
)
def test_content_parts_other_than_text_are_refused(part: dict[str, Any]) -> None:
    data = chat(messages=[{"role": "user", "content": [{"type": "text", "text": "a"}, part]}])
    refused(parse_chat_request, data, "messages[0].content[1].type", "unsupported_parameter")


@pytest.mark.parametrize(
    ("message", "param"),
    [
        ({"role": "user"}, "messages[0].content"),
        ({"content": "x"}, "messages[0].role"),
        ({"role": "user", "content": None}, "messages[0].content"),
        ({"role": "user", "content": 5}, "messages[0].content"),
        ({"role": "user", "content": []}, "messages[0].content"),
        ({"role": "user", "content": [{"type": "text"}]}, "messages[0].content[0].text"),
        ({"role": "user", "content": [{"type": "text", "text": 1}]}, "messages[0].content[0].text"),
        ({"role": "user", "content": [{"text": "x"}]}, "messages[0].content[0].type"),
        ({"role": "user", "content": ["x"]}, "messages[0].content[0]"),
        ({"role": 1, "content": "x"}, "messages[0].role"),
    ],
)
def test_malformed_messages_are_refused(message: dict[str, Any], param: str) -> None:
    refused(parse_chat_request, chat(messages=[message]), param)


def test_messages_not_a_list_or_empty_are_refused() -> None:
    refused(parse_chat_request, chat(messages="hi"), "messages", "invalid_type")
    refused(parse_chat_request, chat(messages=[]), "messages")
    refused(parse_chat_request, chat(messages=["hi"]), "messages[0]", "invalid_type")
    refused(parse_chat_request, chat("messages"), "messages", "missing_required_parameter")


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("temperature", -0.1),
        ("temperature", 2.01),
        ("temperature", "1"),
        ("temperature", True),
        ("top_p", 0),
        ("top_p", 1.01),
        ("top_p", -1),
        ("n", 0),
        ("n", 17),
        ("n", 2.0),
        ("n", True),
        ("seed", 2**63),
        ("seed", 1.5),
        ("seed", "7"),
        ("max_tokens", 0),
        ("max_tokens", -1),
        ("max_tokens", 2**31),
        ("max_tokens", 5.0),
        ("max_tokens", True),
        ("max_completion_tokens", 0),
        ("stop", ""),
        ("stop", 5),
        ("stop", {"a": 1}),
        ("stop", ["a", "b", "c", "d", "e"]),
        ("stream", "true"),
        ("stream", 1),
        ("user", 5),
        ("user", "u" * (wire.MAX_USER_CHARS + 1)),
        ("safety_identifier", "s" * (wire.MAX_USER_CHARS + 1)),
    ],
)
def test_chat_values_out_of_bounds_are_refused(key: str, value: Any) -> None:
    refused(parse_chat_request, chat(**{key: value}), key)


@pytest.mark.parametrize(
    ("stop", "param"),
    [
        (["a", ""], "stop[1]"),
        (["a", 3], "stop[1]"),
        ([None], "stop[0]"),
        (["x" * (sampling_keys.MAX_STOP_CHARS + 1)], "stop[0]"),
    ],
)
def test_bad_stop_sequences_are_refused_by_index(stop: list[Any], param: str) -> None:
    refused(parse_chat_request, chat(stop=stop), param)


@pytest.mark.parametrize(
    ("model", "code"),
    [("", "invalid_value"), (5, "invalid_type"), ("m" * (wire.MAX_MODEL_CHARS + 1), "invalid_value")],
)
def test_bad_model_names_are_refused(model: Any, code: str) -> None:
    refused(parse_chat_request, chat(model=model), "model", code)


def test_a_missing_model_is_refused() -> None:
    refused(parse_chat_request, chat("model"), "model", "missing_required_parameter")
    refused(parse_chat_request, chat(model=None), "model", "missing_required_parameter")


def test_stream_options_need_a_stream() -> None:
    refused(parse_chat_request, chat(stream_options={"include_usage": True}), "stream_options")
    refused(parse_chat_request, chat(stream=False, stream_options={"include_usage": True}), "stream_options")
    refused(parse_chat_request, chat(stream=True, stream_options=[]), "stream_options", "invalid_type")
    refused(
        parse_chat_request,
        chat(stream=True, stream_options={"include_usage": "yes"}),
        "stream_options.include_usage",
        "invalid_type",
    )
    refused(
        parse_chat_request,
        chat(stream=True, stream_options={"include_obfuscation": True}),
        "stream_options.include_obfuscation",
        "unsupported_parameter",
    )


@pytest.mark.parametrize(
    ("data", "param"),
    [
        (chat(temprature=0.5), "temprature"),
        (chat(messages=[{"role": "user", "content": "x", "extra": 1}]), "messages[0].extra"),
        (chat(messages=[{"role": "user", "content": [{"type": "text", "text": "x", "cache": 1}]}]), None),
        (
            chat(stream=True, stream_options={"include_usage": True, "chunk_size": 3}),
            "stream_options.chunk_size",
        ),
    ],
)
def test_unknown_keys_are_refused_by_name(data: bytes, param: str | None) -> None:
    with pytest.raises(InvalidParameter) as info:
        parse_chat_request(data)
    error = error_document(info.value)["error"]
    assert error["code"] == "unknown_parameter"
    if param is None:
        param = "messages[0].content[0].cache"
    assert error["param"] == param
    assert f"'{param}'" in error["message"]


def test_several_unknown_keys_are_named_and_counted() -> None:
    data = chat(**{f"k{index}": index for index in range(8)})
    error = refused(parse_chat_request, data, "k0", "unknown_parameter")
    assert all(f"'k{index}'" in error["message"] for index in range(5))
    assert "and 3 more" in error["message"]


def test_hostile_keys_and_values_are_escaped_and_cut() -> None:
    data = chat(**{"evil\nkey\u202e" + "x" * 10_000: 1})
    with pytest.raises(InvalidParameter) as info:
        parse_chat_request(data)
    error = error_document(info.value)["error"]
    assert "\n" not in error["message"] and "\u202e" not in error["message"]
    assert "evil\\nkey" in error["message"]
    assert len(error["message"]) < 500
    assert "\n" not in error["param"] and len(error["param"]) < 200
    long_value = refused(parse_chat_request, chat(temperature="\u202e" + "y" * 100_000), "temperature")
    assert "\u202e" not in long_value["message"] and len(long_value["message"]) < 300


def test_bodies_that_are_not_objects_or_json_are_refused() -> None:
    for data in (b"[]", b'"x"', b"null", b"{", b"", b"\xff"):
        with pytest.raises(InvalidParameter) as info:
            parse_chat_request(data)
        status, answer = error_answer(info.value)
        assert status == 400
        assert orjson.loads(answer)["error"]["param"] is None


# --- bounds ------------------------------------------------------------------------------------


def test_message_and_part_counts_are_bounded() -> None:
    many = [USER] * (chat_messages.MAX_MESSAGES + 1)
    refused(parse_chat_request, chat(messages=many), "messages")
    parse_chat_request(chat(messages=many[:-1]))
    parts = [{"type": "text", "text": "x"}] * (chat_messages.MAX_CONTENT_PARTS + 1)
    refused(parse_chat_request, chat(messages=[{"role": "user", "content": parts}]), "messages[0].content")


def test_texts_are_held_to_limits_string_bytes() -> None:
    limits = LimitsSettings(string_bytes=16)
    parse_chat_request(chat(messages=[{"role": "user", "content": "é" * 8}]), limits)  # 16 bytes
    for content in ("é" * 9, [{"type": "text", "text": "x" * 10}, {"type": "text", "text": "y" * 10}]):
        data = chat(messages=[USER, {"role": "user", "content": content}])
        with pytest.raises(InvalidParameter) as info:
            parse_chat_request(data, limits)
        assert info.value.param == "messages[1].content"
        assert "limits.string_bytes" in info.value.public_message
    with pytest.raises(InvalidParameter) as info:
        parse_completion_request(completion(prompt=["ok", "z" * 17]), limits)
    assert info.value.param == "prompt"
    with pytest.raises(InvalidParameter) as info:
        parse_embedding_request(embedding(input="z" * 17), limits)
    assert info.value.param == "input"


def test_nesting_is_held_to_limits_json_depth() -> None:
    data = chat(messages=[{"role": "user", "content": [{"type": "text", "text": "x"}]}])  # 5 deep
    parse_chat_request(data, LimitsSettings(json_depth=5))
    with pytest.raises(InvalidParameter) as info:
        parse_chat_request(data, LimitsSettings(json_depth=4))
    assert info.value.param is None and "json_depth" in info.value.public_message
    deep = b'{"model": "m", "messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    with pytest.raises(InvalidParameter):
        parse_chat_request(deep, DEFAULT_LIMITS)


# --- completions -------------------------------------------------------------------------------


def test_completion_takes_every_supported_field() -> None:
    request = parse_completion_request(
        completion(
            prompt=["a", "", "c"],
            max_tokens=9,
            temperature=0,
            top_p=0.5,
            seed=1,
            stop="\n",
            n=2,
            best_of=2,
            stream=True,
            stream_options={"include_usage": False},
            user="u",
            echo=False,
            suffix=None,
            logprobs=None,
            frequency_penalty=0,
            presence_penalty=0.0,
            logit_bias={},
        )
    )
    assert request.prompts == ("a", "", "c")
    assert request.sampling == Sampling(max_tokens=9, temperature=0.0, top_p=0.5, seed=1, stop=("\n",), n=2)
    assert request.streaming == Streaming(stream=True)
    assert request.user == "u"


def test_completion_defaults_to_16_tokens_and_one_prompt() -> None:
    request = parse_completion_request(completion())
    assert request.prompts == ("once",)
    assert request.sampling == Sampling(max_tokens=wire.COMPLETION_DEFAULT_MAX_TOKENS)
    assert request.streaming == Streaming()


@pytest.mark.parametrize("prompt", [[1, 2, 3], [[1, 2], [3]], ["a", 7], [["a"]]])
def test_token_id_prompts_are_refused(prompt: Any) -> None:
    refused(parse_completion_request, completion(prompt=prompt), "prompt", "unsupported_parameter")


@pytest.mark.parametrize(
    ("fields", "param", "code"),
    [
        ({"echo": True}, "echo", "unsupported_parameter"),
        ({"suffix": "end"}, "suffix", "unsupported_parameter"),
        ({"logprobs": 0}, "logprobs", "unsupported_parameter"),
        ({"logprobs": 5}, "logprobs", "unsupported_parameter"),
        ({"best_of": 3}, "best_of", "unsupported_parameter"),
        ({"best_of": 2, "n": 3}, "best_of", "unsupported_parameter"),
        ({"best_of": True}, "best_of", "unsupported_parameter"),
        ({"frequency_penalty": 1}, "frequency_penalty", "unsupported_parameter"),
        ({"presence_penalty": 0.1}, "presence_penalty", "unsupported_parameter"),
        ({"logit_bias": {"1": 2}}, "logit_bias", "unsupported_parameter"),
        ({"max_completion_tokens": 5}, "max_completion_tokens", "unknown_parameter"),
        ({"messages": [USER]}, "messages", "unknown_parameter"),
        ({"prompt": None}, "prompt", "missing_required_parameter"),
        ({"prompt": []}, "prompt", "invalid_value"),
        ({"prompt": {"text": "x"}}, "prompt", "invalid_type"),
        ({"prompt": 7}, "prompt", "invalid_type"),
        ({"prompt": ["a", None]}, "prompt[1]", "invalid_type"),
        ({"prompt": ["a", True]}, "prompt[1]", "invalid_type"),
        ({"max_tokens": 0}, "max_tokens", "invalid_value"),
        ({"n": 17}, "n", "invalid_value"),
        ({"stream_options": {"include_usage": True}}, "stream_options", "invalid_value"),
        ({"stop": ["a"] * 5}, "stop", "invalid_value"),
    ],
)
def test_completion_refusals_name_their_parameter(fields: dict[str, Any], param: str, code: str) -> None:
    refused(parse_completion_request, completion(**fields), param, code)


def test_completion_prompt_count_and_choices_are_bounded() -> None:
    refused(parse_completion_request, completion(prompt=["p"] * (wire.MAX_PROMPTS + 1)), "prompt")
    parse_completion_request(completion(prompt=["p"] * wire.MAX_PROMPTS, n=4))
    too_many = wire.MAX_COMPLETION_CHOICES // sampling_keys.MAX_N + 1
    refused(parse_completion_request, completion(prompt=["p"] * too_many, n=sampling_keys.MAX_N), "n")


COMPLETION_TAKEN = {"model", "prompt", "max_tokens", "temperature", "top_p", "seed", "stop", "n", "best_of"}
COMPLETION_TAKEN |= {"stream", "stream_options", "user"}


def test_every_parameter_of_the_official_completion_client_is_taken_or_refused_by_name() -> None:
    official = official_keys(completion_params.CompletionCreateParamsStreaming)
    known = COMPLETION_TAKEN | set(wire.COMPLETION_UNSUPPORTED)
    assert official <= known, official - known


# --- embeddings --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "inputs", "encoding"),
    [
        ({}, ("text",), "float"),
        ({"input": ["a", "b"], "encoding_format": "float"}, ("a", "b"), "float"),
        ({"encoding_format": "base64", "user": "u"}, ("text",), "base64"),
        ({"encoding_format": None, "dimensions": None}, ("text",), "float"),
    ],
)
def test_embedding_takes_every_supported_field(
    fields: dict[str, Any], inputs: tuple[str, ...], encoding: str
) -> None:
    request = parse_embedding_request(embedding(**fields))
    assert (request.model, request.inputs, request.encoding_format) == ("m", inputs, encoding)


@pytest.mark.parametrize(
    ("fields", "param", "code"),
    [
        ({"dimensions": 256}, "dimensions", "unsupported_parameter"),
        ({"input": [1, 2]}, "input", "unsupported_parameter"),
        ({"input": [[1, 2]]}, "input", "unsupported_parameter"),
        ({"input": ""}, "input", "invalid_value"),
        ({"input": ["a", ""]}, "input[1]", "invalid_value"),
        ({"input": []}, "input", "invalid_value"),
        ({"input": None}, "input", "missing_required_parameter"),
        ({"input": ["t"] * (wire.MAX_EMBEDDING_INPUTS + 1)}, "input", "invalid_value"),
        ({"encoding_format": "int8"}, "encoding_format", "invalid_value"),
        ({"encoding_format": 1}, "encoding_format", "invalid_value"),
        ({"temperature": 1}, "temperature", "unknown_parameter"),
        ({"user": ["u"]}, "user", "invalid_type"),
    ],
)
def test_embedding_refusals_name_their_parameter(fields: dict[str, Any], param: str, code: str) -> None:
    refused(parse_embedding_request, embedding(**fields), param, code)


def test_every_parameter_of_the_official_embedding_client_is_taken_or_refused_by_name() -> None:
    official = official_keys(embedding_params.EmbeddingCreateParams)
    known = {"model", "input", "encoding_format", "user"} | set(wire.EMBEDDING_UNSUPPORTED)
    assert official <= known, official - known


# --- sampling -> generation --------------------------------------------------------------------


def test_sampling_makes_one_generation_request_per_choice() -> None:
    sampling = Sampling(max_tokens=None, temperature=0.7, top_p=0.8, seed=-1, stop=("x",), n=2)
    first = sampling.generation_request([1, 2], default_max_tokens=50)
    second = sampling.generation_request([1, 2], default_max_tokens=50, choice=1)
    assert (first.prompt_ids, first.max_tokens, first.temperature, first.top_p, first.stop) == (
        [1, 2],
        50,
        0.7,
        0.8,
        ("x",),
    )
    assert (first.seed, second.seed) == (2**64 - 1, 0)
    assert Sampling(max_tokens=3).generation_request([1], 50).max_tokens == 3
    assert Sampling().generation_request([1], 50).seed is None


# --- answers, validated by the official types --------------------------------------------------


def wire_json(document: dict[str, Any]) -> Any:
    return orjson.loads(encode(document))


def test_ids_have_openai_prefixes_and_differ() -> None:
    ids = {new_id("chatcmpl") for _ in range(100)}
    assert len(ids) == 100 and all(each.startswith("chatcmpl-") for each in ids)
    assert new_id("cmpl").startswith("cmpl-")


def test_chat_completion_is_a_valid_chat_completion() -> None:
    choices = [ChatChoice(0, "Hello there", "stop"), ChatChoice(1, "Hi", "length")]
    document = wire_json(chat_completion("chatcmpl-1", 1700000000, "m", choices, Usage(5, 4)))
    answer = ChatCompletion.model_validate(document)
    assert answer.object == "chat.completion" and answer.id == "chatcmpl-1" and answer.model == "m"
    assert answer.created == 1700000000
    assert [(c.index, c.message.role, c.message.content, c.finish_reason) for c in answer.choices] == [
        (0, "assistant", "Hello there", "stop"),
        (1, "assistant", "Hi", "length"),
    ]
    assert answer.usage is not None
    assert (answer.usage.prompt_tokens, answer.usage.completion_tokens, answer.usage.total_tokens) == (
        5,
        4,
        9,
    )


@pytest.mark.parametrize("include_usage", [False, True])
def test_chat_chunks_are_valid_chunks_in_openai_order(include_usage: bool) -> None:
    chunks = ChatChunks("chatcmpl-2", 1700000001, "m", include_usage)
    documents = [
        chunks.role(0),
        chunks.content(0, "Hel"),
        chunks.content(0, "lo"),
        chunks.finish(0, "stop"),
    ]
    if include_usage:
        documents.append(chunks.usage(Usage(3, 2)))
    parsed = [ChatCompletionChunk.model_validate(wire_json(each)) for each in documents]
    assert all(
        c.id == "chatcmpl-2" and c.object == "chat.completion.chunk" and c.created == 1700000001
        for c in parsed
    )
    assert parsed[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in parsed[:4]) == "Hello"
    assert [c.choices[0].finish_reason for c in parsed[:4]] == [None, None, None, "stop"]
    for document in documents[:4]:
        assert ("usage" in wire_json(document)) is include_usage
        if include_usage:
            assert wire_json(document)["usage"] is None
    if include_usage:
        last = parsed[-1]
        assert last.choices == [] and last.usage is not None
        assert (last.usage.prompt_tokens, last.usage.completion_tokens, last.usage.total_tokens) == (3, 2, 5)


def test_text_completion_is_a_valid_completion() -> None:
    choices = [CompletionChoice(0, " upon a time", "length"), CompletionChoice(1, "", "stop")]
    answer = Completion.model_validate(wire_json(text_completion("cmpl-1", 1, "m", choices, Usage(2, 3))))
    assert answer.object == "text_completion"
    assert [(c.index, c.text, c.finish_reason) for c in answer.choices] == [
        (0, " upon a time", "length"),
        (1, "", "stop"),
    ]
    assert answer.usage is not None and answer.usage.total_tokens == 5


@pytest.mark.parametrize("include_usage", [False, True])
def test_completion_chunks_are_valid_completions(include_usage: bool) -> None:
    chunks = CompletionChunks("cmpl-2", 2, "m", include_usage)
    final = Completion.model_validate(wire_json(chunks.finish(1, "length")))
    assert [(c.index, c.text, c.finish_reason) for c in final.choices] == [(1, "", "length")]
    # Mid-stream chunks say `finish_reason: null`, as OpenAI's own streams do; the `Completion` type
    # (written for whole answers) wants one, and that is the only thing it finds missing.
    with pytest.raises(pydantic.ValidationError) as info:
        Completion.model_validate(wire_json(chunks.text(1, "once")))
    assert {error["loc"][-1] for error in info.value.errors()} == {"finish_reason"}
    assert wire_json(chunks.text(1, "once"))["choices"][0]["text"] == "once"
    if include_usage:
        assert wire_json(chunks.text(0, "x"))["usage"] is None
        last = Completion.model_validate(wire_json(chunks.usage(Usage(4, 1))))
        assert last.choices == [] and last.usage is not None and last.usage.total_tokens == 5


VECTORS = np.array([[0.1, -2.5, 3e-8], [1.0, 0.0, 123456.789]], dtype=np.float64)


def test_float_embeddings_are_a_valid_embedding_list() -> None:
    answer = CreateEmbeddingResponse.model_validate(wire_json(embedding_list("m", VECTORS, "float", 7)))
    assert answer.object == "list" and answer.model == "m"
    assert [each.index for each in answer.data] == [0, 1]
    assert all(each.object == "embedding" for each in answer.data)
    got = np.array([each.embedding for each in answer.data], dtype=np.float32)
    assert np.array_equal(got, VECTORS.astype(np.float32))  # float32's shortest digits read back exactly
    assert (answer.usage.prompt_tokens, answer.usage.total_tokens) == (7, 7)


def test_base64_embeddings_are_little_endian_float32() -> None:
    document = wire_json(embedding_list("m", VECTORS, "base64", 7))
    CreateEmbeddingResponse.model_validate({**document, "data": []})  # the envelope; data is strings
    for row, item in zip(VECTORS, document["data"], strict=True):
        assert np.array_equal(
            np.frombuffer(base64.b64decode(item["embedding"]), dtype="<f4"), row.astype("<f4")
        )


@pytest.mark.parametrize(
    "vectors",
    [
        np.array([[np.nan]]),
        np.array([[np.inf, 1.0]]),
        np.array([[1e300]]),
        np.array([1.0, 2.0]),
        np.array([["a"]]),
    ],
)
def test_embeddings_json_cannot_carry_are_the_models_error(vectors: np.ndarray[Any, Any]) -> None:
    with pytest.raises(errors.ModelError):
        embedding_list("m", vectors, "float", 1)


def test_models_are_valid_models() -> None:
    listed = wire_json(model_list([model_object("tiny", 1700000000), model_object("big", 5, owned_by="me")]))
    assert listed["object"] == "list"
    models = [Model.model_validate(each) for each in listed["data"]]
    assert [(m.id, m.object, m.created, m.owned_by) for m in models] == [
        ("tiny", "model", 1700000000, "grps-py"),
        ("big", "model", 5, "me"),
    ]


# --- SSE framing -------------------------------------------------------------------------------


def test_sse_events_are_one_data_line_and_a_blank_line() -> None:
    chunks = ChatChunks("chatcmpl-3", 3, "m")
    tricky = "line\n\ndata: [DONE]\r\n\u2028end"
    frame = sse_event(chunks.content(0, tricky))
    assert frame.startswith(b"data: ") and frame.endswith(b"\n\n")
    assert frame.count(b"\n") == 2 and b"\r" not in frame
    assert orjson.loads(frame[len(b"data: ") : -2])["choices"][0]["delta"]["content"] == tricky
    assert SSE_DONE == b"data: [DONE]\n\n"


# --- errors ------------------------------------------------------------------------------------

ERROR_SHAPES: dict[type[errors.GrpsError], tuple[int, str, str | None]] = {
    errors.GrpsError: (500, "server_error", None),
    errors.InvalidInput: (400, "invalid_request_error", None),
    errors.PayloadTooLarge: (413, "invalid_request_error", "request_too_large"),
    errors.UnsupportedMediaType: (415, "invalid_request_error", "unsupported_media_type"),
    errors.Unauthenticated: (401, "authentication_error", "invalid_api_key"),
    errors.PermissionDenied: (403, "permission_error", "permission_denied"),
    errors.NotFound: (404, "not_found_error", None),
    errors.ModelNotFound: (404, "not_found_error", "model_not_found"),
    errors.RouteNotFound: (404, "not_found_error", "unknown_url"),
    errors.ModelNotReady: (503, "server_error", "model_not_ready"),
    errors.Overloaded: (503, "server_error", "server_overloaded"),
    errors.DeadlineExceeded: (504, "timeout_error", "timeout"),
    errors.Cancelled: (499, "cancelled_error", "cancelled"),
    errors.Unsupported: (501, "server_error", "unsupported"),
    errors.ModelError: (500, "server_error", "model_error"),
    errors.InternalError: (500, "server_error", "internal_error"),
}


def test_every_error_class_has_an_openai_shape() -> None:
    assert set(ERROR_SHAPES) == set(errors.ALL_ERRORS)


@pytest.mark.parametrize("cls", list(ERROR_SHAPES), ids=lambda cls: cls.__name__)
def test_errors_take_the_error_tables_status(cls: type[errors.GrpsError]) -> None:
    status, answer = error_answer(cls("what went wrong"), request_id="rid-7")
    assert (status, errors.error_row(cls()).http) == (ERROR_SHAPES[cls][0], ERROR_SHAPES[cls][0])
    assert orjson.loads(answer) == {
        "error": {
            "message": "what went wrong [request_id=rid-7]",
            "type": ERROR_SHAPES[cls][1],
            "param": None,
            "code": ERROR_SHAPES[cls][2],
        }
    }


def test_unexpected_exceptions_are_internal_and_say_nothing_more() -> None:
    status, answer = error_answer(RuntimeError("secret /etc/passwd at 0xdeadbeef"))
    assert status == 500
    assert orjson.loads(answer)["error"] == {
        "message": "internal server error",
        "type": "server_error",
        "param": None,
        "code": "internal_error",
    }


def test_error_messages_and_request_ids_are_one_line() -> None:
    document = error_document(errors.ModelError("line one\nline two"), request_id="a\nb")
    assert "\n" not in document["error"]["message"]
    assert document["error"]["message"].endswith("[request_id=a\\nb]")


def test_error_event_is_an_sse_error() -> None:
    frame = error_event(errors.DeadlineExceeded(), request_id="r")
    assert frame.startswith(b"data: ") and frame.endswith(b"\n\n") and frame.count(b"\n") == 2
    assert orjson.loads(frame[6:-2])["error"]["code"] == "timeout"


# --- the official client against our bytes -----------------------------------------------------


class Wire:
    """What an OpenAI route does with these modules, in memory: parse what the official client sends,
    answer with what the builders make (or the error it raised)."""

    def __init__(self, stream_error: BaseException | None = None) -> None:
        self.stream_error = stream_error
        self.seen: list[Any] = []

    def answer(self, request: httpx2.Request) -> httpx2.Response:
        try:
            return self._answer(request)
        except errors.GrpsError as exc:
            status, data = error_answer(exc, request_id="rid")
            return httpx2.Response(status, headers={"content-type": "application/json"}, content=data)

    def _answer(self, request: httpx2.Request) -> httpx2.Response:
        route = request.url.path
        if route == "/v1/models":
            return self.json(model_list([model_object("m", 1)]))
        if route.startswith("/v1/models/"):
            if route != "/v1/models/m":
                raise errors.ModelNotFound(f"model '{route.rsplit('/', 1)[1]}' is not served")
            return self.json(model_object("m", 1))
        if route == "/v1/chat/completions":
            return self.chat(parse_chat_request(request.content))
        if route == "/v1/completions":
            return self.completion(parse_completion_request(request.content))
        if route == "/v1/embeddings":
            embed = parse_embedding_request(request.content)
            self.seen.append(embed)
            vectors = np.arange(len(embed.inputs) * 3, dtype=np.float32).reshape(-1, 3) / 7
            return self.json(embedding_list(embed.model, vectors, embed.encoding_format, len(embed.inputs)))
        raise errors.RouteNotFound()

    def chat(self, request: wire.ChatRequest) -> httpx2.Response:
        self.seen.append(request)
        text = request.messages[-1].content[::-1]
        n = request.sampling.n
        if not request.streaming.stream:
            choices = [ChatChoice(index, text, "stop") for index in range(n)]
            return self.json(
                chat_completion(new_id("chatcmpl"), 1, request.model, choices, Usage(2, len(text)))
            )
        chunks = ChatChunks(new_id("chatcmpl"), 1, request.model, request.streaming.include_usage)
        events = [chunks.role(index) for index in range(n)]
        events += [chunks.content(index, letter) for letter in text for index in range(n)]
        if self.stream_error is not None:
            return self.events(events, error=self.stream_error)
        events += [chunks.finish(index, "stop") for index in range(n)]
        if request.streaming.include_usage:
            events.append(chunks.usage(Usage(2, n * len(text))))
        return self.events(events)

    def completion(self, request: wire.CompletionRequest) -> httpx2.Response:
        self.seen.append(request)
        n = request.sampling.n
        texts = [prompt.upper() for prompt in request.prompts for _ in range(n)]
        if not request.streaming.stream:
            choices = [CompletionChoice(index, text, "length") for index, text in enumerate(texts)]
            return self.json(text_completion(new_id("cmpl"), 1, request.model, choices, Usage(1, len(texts))))
        chunks = CompletionChunks(new_id("cmpl"), 1, request.model, request.streaming.include_usage)
        events = [chunks.text(index, text) for index, text in enumerate(texts)]
        events += [chunks.finish(index, "length") for index in range(len(texts))]
        if request.streaming.include_usage:
            events.append(chunks.usage(Usage(1, len(texts))))
        return self.events(events)

    @staticmethod
    def json(document: dict[str, Any]) -> httpx2.Response:
        return httpx2.Response(200, headers={"content-type": "application/json"}, content=encode(document))

    @staticmethod
    def events(documents: list[dict[str, Any]], error: BaseException | None = None) -> httpx2.Response:
        frames = b"".join(map(sse_event, documents))
        frames += error_event(error, request_id="rid") if error is not None else SSE_DONE
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=frames)


def client(wire_: Wire) -> openai.OpenAI:
    transport = httpx2.MockTransport(wire_.answer)
    return openai.OpenAI(
        api_key="k", base_url="http://grps/v1", max_retries=0, http_client=httpx2.Client(transport=transport)
    )


def test_official_client_chat_unary_and_n() -> None:
    answer = client(Wire()).chat.completions.create(
        model="m",
        messages=[{"role": "system", "content": "s"}, {"role": "user", "content": "abc"}],
        n=2,
        max_completion_tokens=5,
        temperature=0.2,
        seed=4,
        stop=["z"],
        user="u",
    )
    assert [choice.message.content for choice in answer.choices] == ["cba", "cba"]
    assert answer.usage is not None and answer.usage.total_tokens == 5


def test_official_client_chat_stream_with_usage() -> None:
    wire_ = Wire()
    stream = client(wire_).chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "hello"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert wire_.seen[0].streaming == Streaming(stream=True, include_usage=True)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "olleh"
    assert chunks[-2].choices[0].finish_reason == "stop"
    assert chunks[-1].choices == [] and chunks[-1].usage is not None and chunks[-1].usage.total_tokens == 7


def test_official_client_sees_an_error_event_as_an_api_error() -> None:
    stream = client(Wire(stream_error=errors.ModelError("the model broke"))).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "abc"}], stream=True
    )
    got: list[str] = []
    with pytest.raises(openai.APIError) as info:
        for chunk in stream:
            got.append(chunk.choices[0].delta.content or "")
    assert "".join(got) == "cba"
    assert "the model broke" in info.value.message
    assert isinstance(info.value.body, dict) and info.value.body["code"] == "model_error"


def test_official_client_completions_unary_and_stream() -> None:
    openai_client = client(Wire())
    answer = openai_client.completions.create(model="m", prompt=["ab", "cd"], n=2, best_of=2, echo=False)
    assert [(c.index, c.text) for c in answer.choices] == [(0, "AB"), (1, "AB"), (2, "CD"), (3, "CD")]
    stream = openai_client.completions.create(
        model="m", prompt="xy", stream=True, stream_options={"include_usage": True}, max_tokens=3
    )
    chunks = list(stream)
    assert chunks[0].choices[0].text == "XY"
    assert chunks[1].choices[0].finish_reason == "length"
    assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens == 2


@pytest.mark.parametrize("encoding_format", [None, "float", "base64"])
def test_official_client_embeddings(encoding_format: str | None) -> None:
    wire_ = Wire()
    extra = {} if encoding_format is None else {"encoding_format": encoding_format}
    answer = client(wire_).embeddings.create(model="m", input=["a", "b"], **extra)  # type: ignore[arg-type]
    expected = np.arange(6, dtype=np.float32).reshape(2, 3) / 7
    if encoding_format == "base64":  # the client hands the base64 strings through as they came
        got = np.stack([np.frombuffer(base64.b64decode(str(e.embedding)), "<f4") for e in answer.data])
    else:  # without a format the client asks for base64 and decodes it itself
        got = np.array([e.embedding for e in answer.data], dtype=np.float32)
    assert np.array_equal(got, expected)
    assert wire_.seen[0].encoding_format == (encoding_format or "base64")


def test_official_client_models() -> None:
    openai_client = client(Wire())
    assert [(m.id, m.owned_by) for m in openai_client.models.list()] == [("m", "grps-py")]
    assert openai_client.models.retrieve("m").id == "m"
    with pytest.raises(openai.NotFoundError) as info:
        openai_client.models.retrieve("nope\nx")
    assert info.value.code == "model_not_found" and info.value.type == "not_found_error"


@pytest.mark.parametrize(
    ("kwargs", "param", "code"),
    [
        ({"tools": [{"type": "function", "function": {"name": "f"}}]}, "tools", "unsupported_parameter"),
        ({"logprobs": True, "top_logprobs": 2}, "logprobs", "unsupported_parameter"),
        ({"response_format": {"type": "json_object"}}, "response_format", "unsupported_parameter"),
        ({"extra_body": {"guided_json": {}}}, "guided_json", "unknown_parameter"),
        ({"temperature": 3}, "temperature", "invalid_value"),
    ],
)
def test_official_client_gets_refusals_as_bad_request_errors(
    kwargs: dict[str, Any], param: str, code: str
) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client(Wire()).chat.completions.create(
            model="m", messages=[{"role": "user", "content": "x"}], **kwargs
        )
    assert (info.value.param, info.value.code, info.value.type) == (param, code, "invalid_request_error")
    assert info.value.status_code == 400


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (errors.Unauthenticated(), openai.AuthenticationError),
        (errors.PermissionDenied(), openai.PermissionDeniedError),
        (errors.ModelNotFound(), openai.NotFoundError),
        (errors.Overloaded(), openai.InternalServerError),
        (errors.PayloadTooLarge(), openai.APIStatusError),
    ],
)
def test_official_client_maps_our_statuses(error: errors.GrpsError, expected: type[Exception]) -> None:
    def fail(request: httpx2.Request) -> httpx2.Response:
        status, data = error_answer(error)
        return httpx2.Response(status, headers={"content-type": "application/json"}, content=data)

    transport = httpx2.MockTransport(fail)
    openai_client = openai.OpenAI(
        api_key="k", base_url="http://grps/v1", max_retries=0, http_client=httpx2.Client(transport=transport)
    )
    with pytest.raises(expected) as info:
        openai_client.models.list()
    assert isinstance(info.value, openai.APIStatusError)
    assert info.value.message.endswith(error.public_message)
    assert isinstance(info.value.body, dict) and info.value.body["message"] == error.public_message


def test_official_async_client_streams() -> None:
    async def run() -> str:
        transport = httpx2.MockTransport(Wire().answer)
        async_client = openai.AsyncOpenAI(
            api_key="k",
            base_url="http://grps/v1",
            max_retries=0,
            http_client=httpx2.AsyncClient(transport=transport),
        )
        stream = await async_client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "async"}], stream=True
        )
        return "".join([chunk.choices[0].delta.content or "" async for chunk in stream])

    assert asyncio.run(run()) == "cnysa"

"""Chat `messages`: roles system, developer, user and assistant; content a string or a list of
`{"type": "text", "text": ...}` parts, joined with a line break (as vLLM's OpenAI server joins them).

Tool and function messages, non-text parts (images, audio, files, refusals) and the message fields
that go with them (`name`, `tool_calls`, `function_call`, `refusal`, `audio`, `tool_call_id`) are
refused naming the field: the server calls no tools and its models read text only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from grps_py.core.protection import LimitsSettings
from grps_py.openai.errors import UNSUPPORTED_PARAMETER, InvalidParameter
from grps_py.openai.fields import Fields, Trivial, bounded_list, never, path, show, strings_within, wrong_type

__all__ = ["MAX_CONTENT_PARTS", "MAX_MESSAGES", "PART_SEPARATOR", "ROLES", "ChatMessage", "parse_messages"]

MAX_MESSAGES = 2048
MAX_CONTENT_PARTS = 256  # text parts of one message
PART_SEPARATOR = "\n"  # between the text parts of one message
ROLES = ("system", "developer", "user", "assistant")

_MESSAGE_UNSUPPORTED: dict[str, Trivial] = {
    "name": never,
    "audio": never,
    "function_call": never,
    "refusal": never,
    "tool_calls": never,
    "tool_call_id": never,
}


@dataclass(frozen=True)
class ChatMessage:
    role: str  # one of ROLES
    content: str  # text parts joined with PART_SEPARATOR

    def template_input(self) -> dict[str, str]:
        """The message as `GenerativeModel.chat_prompt` takes it."""
        return {"role": self.role, "content": self.content}


def parse_messages(value: Any, limits: LimitsSettings) -> tuple[ChatMessage, ...]:
    """`messages`: 1 to MAX_MESSAGES, each text within `limits.string_bytes`."""
    items = bounded_list(value, "messages", MAX_MESSAGES)
    return tuple(_message(item, path("messages", index), limits) for index, item in enumerate(items))


def _message(value: Any, where: str, limits: LimitsSettings) -> ChatMessage:
    fields = Fields(value, where)
    role = _role(fields.required("role"), fields.path("role"))
    fields.refuse_unsupported(_MESSAGE_UNSUPPORTED)
    content = _content(fields.required("content"), fields.path("content"), limits)
    fields.finish()
    return ChatMessage(role, content)


def _role(value: Any, param: str) -> str:
    if not isinstance(value, str):
        raise wrong_type(param, "a string", value)
    if value in ("tool", "function"):
        raise InvalidParameter(
            f"'{param}' {show(value)} is not supported: this server does not call tools",
            param,
            UNSUPPORTED_PARAMETER,
        )
    if value not in ROLES:
        raise InvalidParameter(f"'{param}' must be one of {', '.join(ROLES)}; got {show(value)}", param)
    return value


def _content(value: Any, param: str, limits: LimitsSettings) -> str:
    """A message's text: a string, or its text parts joined."""
    if isinstance(value, str):
        content = value
    elif isinstance(value, list):
        parts = bounded_list(value, param, MAX_CONTENT_PARTS)
        content = PART_SEPARATOR.join(
            _text_part(part, path(param, index)) for index, part in enumerate(parts)
        )
    else:
        raise wrong_type(param, "a string or an array of text parts", value)
    strings_within([content], param, limits)
    return content


def _text_part(value: Any, where: str) -> str:
    fields = Fields(value, where)
    kind = fields.required("type")
    if kind != "text":
        param = fields.path("type")
        raise InvalidParameter(
            f"'{param}' {show(kind)} is not supported: only text parts are", param, UNSUPPORTED_PARAMETER
        )
    part = fields.required("text")
    if not isinstance(part, str):
        raise wrong_type(fields.path("text"), "a string", part)
    fields.finish()
    return part

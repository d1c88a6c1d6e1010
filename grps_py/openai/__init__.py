"""The OpenAI API's wire format, free of any transport: request bodies parsed and checked into
dataclasses (`requests`), answers and stream chunks built as JSON documents with SSE framing
(`answers`), and errors in OpenAI's shape with the server's statuses (`errors`).
"""

from grps_py.openai.answers import (
    SSE_DONE,
    ChatChoice,
    ChatChunks,
    CompletionChoice,
    CompletionChunks,
    Usage,
    chat_completion,
    embedding_list,
    encode,
    model_list,
    model_object,
    new_id,
    now,
    sse_event,
    text_completion,
)
from grps_py.openai.errors import InvalidParameter, error_answer, error_document, error_event, error_status
from grps_py.openai.requests import (
    ChatMessage,
    ChatRequest,
    CompletionRequest,
    EmbeddingRequest,
    Sampling,
    Streaming,
    parse_chat_request,
    parse_completion_request,
    parse_embedding_request,
)

__all__ = [
    "SSE_DONE",
    "ChatChoice",
    "ChatChunks",
    "ChatMessage",
    "ChatRequest",
    "CompletionChoice",
    "CompletionChunks",
    "CompletionRequest",
    "EmbeddingRequest",
    "InvalidParameter",
    "Sampling",
    "Streaming",
    "Usage",
    "chat_completion",
    "embedding_list",
    "encode",
    "error_answer",
    "error_document",
    "error_event",
    "error_status",
    "model_list",
    "model_object",
    "new_id",
    "now",
    "parse_chat_request",
    "parse_completion_request",
    "parse_embedding_request",
    "sse_event",
    "text_completion",
]

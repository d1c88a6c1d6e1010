"""An OpenAI-style chat completions model, answering `POST /v1/chat/completions` itself.

The "assistant" is a stand-in for a language model: it replies "You said: <the last user message>",
one token per word. With `"stream": true` in the body each token is a server-sent event carrying a
`chat.completion.chunk`, then a last chunk with the finish reason, then `data: [DONE]`; without it
the answer is one `chat.completion` document. The same model answers the grps API too (str_data in,
str_data out, or streamed token by token), since there is no HTTP request to read there.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

from grps_py import GrpsContext, GrpsMessage, HttpRequest, InvalidInput, ModelInferer, inferer_register


def reply_tokens(prompt: str, max_tokens: int) -> tuple[list[str], str]:
    """The reply's tokens (each word with its leading space, as language models emit them) and the
    finish reason: "stop", or "length" when max_tokens cut it short."""
    words = ["You", "said:", *prompt.split()] if prompt.strip() else ["Say", "something", "first."]
    tokens = [words[0], *(" " + word for word in words[1:])]
    return tokens[:max_tokens], "stop" if len(tokens) <= max_tokens else "length"


def read_chat_request(request: HttpRequest) -> tuple[str, str, int]:
    """(model, last user message, max_tokens) from the body; a malformed body is a 400 saying why."""
    doc = request.get_json()  # unparsable JSON is a 400 already
    if not isinstance(doc, dict):
        raise InvalidInput("the body must be a JSON object")
    messages = doc.get("messages")
    if not isinstance(messages, list) or not messages:
        raise InvalidInput("'messages' must be a non-empty list of {role, content}")
    users = [m for m in messages if isinstance(m, dict) and m.get("role") == "user"]
    if not users or not isinstance(users[-1].get("content"), str):
        raise InvalidInput("'messages' needs a user message with string content")
    max_tokens = doc.get("max_tokens") or 256
    if not isinstance(max_tokens, int) or max_tokens < 1:
        raise InvalidInput("'max_tokens' must be a positive integer")
    return str(doc.get("model") or "grps-py-echo"), users[-1]["content"], max_tokens


class ChatModel(ModelInferer):
    def init(self, path: str | None, device: str | None = None, args: dict[str, Any] | None = None) -> None:
        super().init(path, device, args)
        self.delay_s = float(self.args.get("delay_s", 0.02))

    def infer(self, inp: GrpsMessage, context: GrpsContext) -> GrpsMessage:
        request = context.get_http_request()
        if request is None:  # the grps API: the prompt is str_data
            return self.answer_grps(inp.str_data, context)
        model, prompt, max_tokens = read_chat_request(request)
        tokens, finish = reply_tokens(prompt, max_tokens)
        completion_id = f"chatcmpl-{context.request_id}"
        if not context.if_streaming():
            context.set_http_response(
                {
                    "id": completion_id,
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": model,
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": "".join(tokens)},
                            "finish_reason": finish,
                        }
                    ],
                    "usage": {
                        "prompt_tokens": len(prompt.split()),
                        "completion_tokens": len(tokens),
                        "total_tokens": len(prompt.split()) + len(tokens),
                    },
                }
            )
            return GrpsMessage()
        for chunk in self.chunks(completion_id, model, tokens, finish):
            if context.if_disconnected():  # the client went away: stop generating
                return GrpsMessage()
            context.customized_http_stream_respond(f"data: {json.dumps(chunk)}\n\n")
        context.customized_http_stream_respond("data: [DONE]\n\n", final=True)
        return GrpsMessage()

    def chunks(
        self, completion_id: str, model: str, tokens: list[str], finish: str
    ) -> Iterator[dict[str, Any]]:
        """The stream's chunks: the role first, one per token (paced), then the finish reason."""
        created = int(time.time())

        def chunk(delta: dict[str, str], finish_reason: str | None = None) -> dict[str, Any]:
            return {
                "id": completion_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
            }

        yield chunk({"role": "assistant", "content": ""})
        for token in tokens:
            yield chunk({"content": token})
            time.sleep(self.delay_s)
        yield chunk({}, finish)

    def answer_grps(self, prompt: str, context: GrpsContext) -> GrpsMessage:
        tokens, _ = reply_tokens(prompt, 256)
        if not context.if_streaming():
            return GrpsMessage(str_data="".join(tokens))
        for token in tokens:
            if context.if_disconnected():
                break
            context.stream_respond(GrpsMessage(str_data=token))
            time.sleep(self.delay_s)
        return GrpsMessage()


inferer_register.register("sse_chat_model", ChatModel())

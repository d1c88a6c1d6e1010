"""Models for the custom HTTP routes test (tests/http/test_custom_http.py)."""

from __future__ import annotations

import time
from typing import Any

import orjson

from grps_py.core.context import GrpsContext
from grps_py.core.model import ModelInferer, inferer_register
from grps_py.protos.grps_pb2 import GrpsMessage


class UpperInferer(ModelInferer):
    """grps messages: str_data upper-cased; streams one message per word when asked."""

    def infer(self, inp: GrpsMessage, context: GrpsContext) -> GrpsMessage:
        words = inp.str_data.split()
        if context.if_streaming():
            for word in words:
                context.stream_respond(GrpsMessage(str_data=word.upper()))
            return GrpsMessage()
        return GrpsMessage(str_data=inp.str_data.upper())


class InspectInferer(ModelInferer):
    """Answers with what it saw of the raw request, in the form `?form=` asks for."""

    def infer(self, inp: Any, context: GrpsContext) -> GrpsMessage:
        request = context.get_http_request()
        assert request is not None
        form = request.get_query("form", "dict")
        seen = {
            "method": request.method,
            "path": request.path,
            "content_type": request.content_type,
            "mimetype": request.mimetype,
            "header": request.headers.get("x-probe", ""),  # looked up in lower case on purpose
            "args": request.args,
            "remote_addr": request.remote_addr,
            "size": len(request.get_data()),
        }
        if form == "json":
            seen["json"] = request.get_json()  # malformed JSON: the client gets 400
        if form in ("dict", "json"):
            context.set_http_response(seen)
        elif form == "str":
            context.set_http_response(f"{request.method} {request.path}")
        elif form == "bytes":
            context.set_http_response(b"\x00\x01raw")
        elif form == "tuple":
            context.set_http_response(("made", 201, {"X-Made": "yes", "Content-Type": "text/x-made"}))
        elif form == "pair":
            context.set_http_response(({"error": "no such thing"}, 404))
        elif form == "pair_headers":  # Flask's (body, headers)
            context.set_http_response(("made", {"X-Made": "yes"}))
        elif form == "generator":  # streamed as it is made, as Flask streams a generator
            context.set_http_response(chunk for chunk in ["a\n", b"b\n"])
        elif form == "reported":  # grps's rule: an error reported with an answer set sends the answer
            context.set_err_msg("refused on purpose")
            context.set_http_response(("refused", 422))
        elif form == "reported_only":
            context.set_err_msg("refused on purpose")
        elif form == "reach":  # what the request object leads to, two references deep
            context.set_http_response(sorted(reachable_types(request)))
        elif form == "bad":
            context.set_http_response(object())
        elif form == "raise":
            raise RuntimeError("failed on purpose")
        return GrpsMessage()


def reachable_types(root: object) -> set[str]:
    """Module-qualified type names of the objects `root` refers to, and those they refer to."""
    import gc

    level1 = gc.get_referents(root)
    return {f"{type(obj).__module__}.{type(obj).__qualname__}" for obj in level1 + gc.get_referents(*level1)}


class WordsInferer(ModelInferer):
    """Custom body streaming: one raw chunk per word of the body; unary: the word count."""

    def infer(self, inp: Any, context: GrpsContext) -> GrpsMessage:
        request = context.get_http_request()
        assert request is not None
        body = request.get_data()
        text = body.decode()
        if request.mimetype == "application/json":
            text = str(request.get_json().get("text", ""))
        words = text.split()
        if context.if_streaming():
            for i, word in enumerate(words):
                context.customized_http_stream_respond(word + "\n", final=i == len(words) - 1)
            context.customized_http_stream_respond("after final\n")  # dropped: final was sent
            return GrpsMessage()
        context.set_http_response(f"{len(words)} words")
        return GrpsMessage()


class ChatInferer(ModelInferer):
    """An OpenAI-style chat completion that echoes the last user message word by word.

    With `"stream": true` each word is one server-sent event (`chat.completion.chunk`), then
    `data: [DONE]`; it stops early when the client goes away. `"delay_s"` paces the words."""

    def infer(self, inp: Any, context: GrpsContext) -> GrpsMessage:
        request = context.get_http_request()
        assert request is not None
        doc = request.get_json()
        messages = doc.get("messages") or [{"content": ""}]
        words = str(messages[-1].get("content", "")).split()
        delay_s = float(doc.get("delay_s", 0))
        model = doc.get("model", "echo")
        if not words:  # an OpenAI-style error answer, also when a stream was asked for
            error = {"message": "the last message is empty", "type": "invalid_request_error"}
            context.set_http_response({"error": error}, 400)
            return GrpsMessage()
        if not context.if_streaming():
            message = {"role": "assistant", "content": " ".join(words)}
            context.set_http_response(
                {
                    "object": "chat.completion",
                    "model": model,
                    "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                }
            )
            return GrpsMessage()
        for word in words:
            if context.if_disconnected():
                return GrpsMessage()
            chunk = {
                "object": "chat.completion.chunk",
                "model": model,
                "choices": [{"index": 0, "delta": {"content": word}, "finish_reason": None}],
            }
            context.customized_http_stream_respond(b"data: " + orjson.dumps(chunk) + b"\n\n")
            time.sleep(delay_s)
        context.customized_http_stream_respond("data: [DONE]\n\n", final=True)
        return GrpsMessage()


inferer_register.register("upper", UpperInferer())
inferer_register.register("inspect", InspectInferer())
inferer_register.register("words", WordsInferer())
inferer_register.register("chat", ChatInferer())

"""Models used by the transport tests: each shows one behaviour of the serving path."""

from __future__ import annotations

import json
import threading
import time

import numpy as np

from grps_py import Converter, GrpsContext, GrpsMessage, ModelInferer, converter_register, inferer_register

# Both graph branches wait here for each other: a DAG that ran them one after the other would
# time out on this barrier, so a passing graph test proves the branches really ran concurrently.
BRANCH_BARRIER = threading.Barrier(2, timeout=10)
# What the streaming model saw, for the disconnect test.
STREAM_LOG: dict[str, object] = {"disconnected": False, "sent": 0}
# The size of every batch the batched model ran.
BATCH_SIZES: list[int] = []


class EchoInferer(ModelInferer):
    """converter none: receives the GrpsMessage and answers it back."""

    def infer(self, inp: GrpsMessage, context: GrpsContext) -> GrpsMessage:
        out = GrpsMessage()
        out.CopyFrom(inp)
        out.ClearField("model")
        return out


class StreamInferer(ModelInferer):
    """Streams `count` messages (str_data is the count); checks for a client that went away."""

    def infer(self, inp: GrpsMessage, context: GrpsContext) -> GrpsMessage:
        count = int(inp.str_data or "3")
        delay = float(self.args.get("delay_s", 0.0))
        STREAM_LOG.update(disconnected=False, sent=0)
        if not context.if_streaming():
            return GrpsMessage(str_data=f"unary {count}")
        for i in range(count):
            if context.if_disconnected():
                STREAM_LOG["disconnected"] = True
                break
            context.stream_respond(GrpsMessage(str_data=f"chunk {i}"))
            STREAM_LOG["sent"] = i + 1
            time.sleep(delay)
        return GrpsMessage()


class RaisingInferer(ModelInferer):
    def infer(self, inp: GrpsMessage, context: GrpsContext) -> GrpsMessage:
        raise ValueError("boom: the model cannot handle this")


class ReportingInferer(ModelInferer):
    """Reports an error through its context, as grps model code does."""

    def infer(self, inp: GrpsMessage, context: GrpsContext) -> GrpsMessage:
        context.set_has_err(True)
        context.set_err_msg("reporter refused the input")
        return GrpsMessage()


class ScaleInferer(ModelInferer):
    """numpy converter: x -> {out_name: x * scale + shift}."""

    def infer(self, inp: dict[str, np.ndarray], context: GrpsContext) -> dict[str, np.ndarray]:
        x = next(iter(inp.values())) if isinstance(inp, dict) else inp[0]
        scale = float(self.args.get("scale", 1.0))
        shift = float(self.args.get("shift", 0.0))
        return {str(self.args.get("out", "x")): x * scale + shift}


class BranchInferer(ScaleInferer):
    def infer(self, inp: dict[str, np.ndarray], context: GrpsContext) -> dict[str, np.ndarray]:
        BRANCH_BARRIER.wait()
        return super().infer(inp, context)


class JoinInferer(ModelInferer):
    def infer(self, inp: dict[str, np.ndarray], context: GrpsContext) -> dict[str, np.ndarray]:
        return {"sum": inp["a"] + inp["b"]}


class AsyncUpperInferer(ModelInferer):
    """An `async def` infer runs on the event loop."""

    async def infer(self, inp: GrpsMessage, context: GrpsContext) -> GrpsMessage:
        return GrpsMessage(str_data=inp.str_data.upper())


class PrefixConverter(Converter):
    """A customized converter: str_data -> str, str -> GrpsMessage with a prefix."""

    def preprocess(self, inp: GrpsMessage, context: GrpsContext) -> str:
        return inp.str_data

    def postprocess(self, inp: object, context: GrpsContext) -> GrpsMessage:
        return GrpsMessage(str_data=f"{self.args.get('prefix', '')}{inp}")


class BatchedInferer(ModelInferer):
    """Batched with converter none: str_data "bad" fails its own request only."""

    def infer(self, inp: GrpsMessage, context: GrpsContext) -> GrpsMessage:
        if inp.str_data == "bad":
            raise ValueError("bad row")
        return GrpsMessage(str_data=inp.str_data + "!")

    def batch_infer(self, inps: list[GrpsMessage], contexts: list[GrpsContext]) -> list[GrpsMessage]:
        BATCH_SIZES.append(len(inps))
        return [self.infer(inp, ctx) for inp, ctx in zip(inps, contexts, strict=True)]


class PostprocessStreamer(ModelInferer):
    """numpy converter: streams each row of x through the converter's postprocess."""

    def infer(self, inp: dict[str, np.ndarray], context: GrpsContext) -> dict[str, np.ndarray]:
        x = inp["x"]
        for row in x:
            context.stream_respond_with_postprocess({"row": row * 10})
        return {"row": x}


class ContextProbe(ModelInferer):
    """Answers with where and how it ran: thread, deadline, and how many ran at once."""

    running = 0
    peak = 0
    lock = threading.Lock()

    def infer(self, inp: GrpsMessage, context: GrpsContext) -> GrpsMessage:
        with self.lock:
            ContextProbe.running += 1
            ContextProbe.peak = max(ContextProbe.peak, ContextProbe.running)
        try:
            time.sleep(float(inp.str_data or 0))
        finally:
            with self.lock:
                ContextProbe.running -= 1
        remaining = context.time_remaining()
        out = GrpsMessage()
        out.gmap.s_s["thread"] = threading.current_thread().name
        out.gmap.s_d["remaining_s"] = -1.0 if remaining is None else remaining
        return out


class CustomHttpInferer(ModelInferer):
    """For a customized_body route: reads the raw request and answers it itself."""

    def infer(self, inp: GrpsMessage, context: GrpsContext) -> GrpsMessage:
        request = context.get_http_request()
        assert request is not None
        if context.if_streaming():
            for word in request.body.decode().split():
                context.customized_http_stream_respond(word.upper() + "\n")
            return GrpsMessage()
        text = f"{request.method} {request.get_query('name', '?')} {request.body.decode()}"
        context.set_http_response(
            text.encode(), status=201, content_type="text/plain", headers={"X-Custom": "1"}
        )
        return GrpsMessage()


class FailingLoadInferer(ModelInferer):
    def load(self) -> bool:
        raise OSError("disk on fire")


class IdentityInferer(ModelInferer):
    def infer(self, inp: object, context: GrpsContext) -> object:
        return inp


class ParamsInferer(ModelInferer):
    """numpy converter: answers the request parameters it received, as JSON in one BYTES element."""

    def infer(self, inp: dict[str, np.ndarray], context: GrpsContext) -> dict[str, np.ndarray]:
        return {"params": np.array([json.dumps(context.parameters, sort_keys=True).encode()], dtype=object)}


class VersionInferer(ModelInferer):
    """Answers which version of the model ran."""

    def infer(self, inp: dict[str, np.ndarray], context: GrpsContext) -> dict[str, np.ndarray]:
        return {"version": np.array([str(self.args["v"]).encode()], dtype=object)}


class TypedSumInferer(ModelInferer):
    """Declared inputs a [-1, 3] FP32 and b [-1] INT64; returns its one output unnamed (named by config)."""

    def infer(self, inp: dict[str, np.ndarray], context: GrpsContext) -> np.ndarray:
        assert list(inp) == ["a", "b"], list(inp)
        return inp["a"] + inp["b"][:, None].astype(np.float32)


# What the token streamer saw, for the disconnect tests.
TOKEN_LOG: dict[str, object] = {"disconnected": False, "sent": 0}


class TokenStreamer(ModelInferer):
    """Streams the words of text_input one by one (text_output); answers the whole text when not streaming."""

    def infer(self, inp: dict[str, np.ndarray], context: GrpsContext) -> dict[str, np.ndarray] | None:
        words = b" ".join(inp["text_input"].reshape(-1).tolist()).split()
        delay = float(context.get_parameter("delay_s", self.args.get("delay_s", 0.0)))
        if not context.if_streaming():
            return {"text_output": np.array([b" ".join(words)], dtype=object)}
        TOKEN_LOG.update(disconnected=False, sent=0)
        for i, word in enumerate(words):
            if context.if_disconnected():
                TOKEN_LOG["disconnected"] = True
                return None
            context.stream_respond_with_postprocess({"text_output": np.array([word], dtype=object)})
            TOKEN_LOG["sent"] = i + 1
            time.sleep(delay)
        return None


inferer_register.register("echo", EchoInferer())
inferer_register.register("stream", StreamInferer())


class OutOfMemoryError(RuntimeError):
    """Named as torch's: the server counts it as a GPU out-of-memory failure."""


class OomInferer(ModelInferer):
    def infer(self, inp: object, context: GrpsContext) -> object:
        raise OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")


inferer_register.register("raiser", RaisingInferer())
inferer_register.register("oom", OomInferer())
inferer_register.register("reporter", ReportingInferer())
inferer_register.register("double", ScaleInferer())
inferer_register.register("add_one", ScaleInferer())
inferer_register.register("branch_a", BranchInferer())
inferer_register.register("branch_b", BranchInferer())
inferer_register.register("join", JoinInferer())
inferer_register.register("upper", AsyncUpperInferer())
inferer_register.register("identity", IdentityInferer())
inferer_register.register("params", ParamsInferer())
inferer_register.register("version_9", VersionInferer())
inferer_register.register("version_10", VersionInferer())
inferer_register.register("typed_sum", TypedSumInferer())
inferer_register.register("tokens", TokenStreamer())
inferer_register.register("batched", BatchedInferer())
inferer_register.register("postprocess_streamer", PostprocessStreamer())
inferer_register.register("probe", ContextProbe())
inferer_register.register("custom_http", CustomHttpInferer())
inferer_register.register("failing_load", FailingLoadInferer())
converter_register.register("prefix", PrefixConverter())

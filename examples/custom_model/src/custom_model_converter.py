"""The converter of the sentiment model: the request (a GrpsMessage) <-> what the inferer speaks.

A request is one text in `str_data`, or several as a string tensor `text` (gtensors; what an Open
Inference Protocol BYTES input becomes). The inferer gets the texts as word lists and answers
labels and scores; the answer mirrors the request: text for text, tensors for tensors.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from grps_py import Converter, DataType, GrpsContext, GrpsMessage, InvalidInput, converter_register

WORD = re.compile(r"[a-z']+")


class SentimentConverter(Converter):
    def init(self, path: str | None = None, args: dict[str, Any] | None = None) -> None:
        super().init(path, args)  # converter_path and converter_args from inference.yml
        self.max_texts = int(self.args.get("max_texts", 64))

    def preprocess(self, inp: GrpsMessage, context: GrpsContext) -> list[list[str]]:
        which = inp.WhichOneof("data_oneof")
        if which == "str_data":
            texts = [inp.str_data]
        elif which == "gtensors" and len(inp.gtensors.tensors) == 1:
            tensor = inp.gtensors.tensors[0]
            if tensor.dtype != DataType.DT_STRING:
                raise InvalidInput("send the texts as a string tensor")
            texts = list(tensor.flat_string)
        else:
            raise InvalidInput("send one text as str_data, or texts as one string tensor 'text'")
        if not texts or len(texts) > self.max_texts:
            raise InvalidInput(f"send between 1 and {self.max_texts} texts, not {len(texts)}")
        # postprocess answers in the form the request came in
        context.put_user_data("answer_as_text", which == "str_data")
        return [WORD.findall(text.lower()) for text in texts]

    def postprocess(self, inp: dict[str, Any], context: GrpsContext) -> GrpsMessage:
        labels: list[str] = inp["label"]
        scores: np.ndarray = inp["score"]
        if context.get_user_data("answer_as_text"):
            return GrpsMessage(str_data=f"{labels[0]} ({scores[0]:+.2f})")
        out = GrpsMessage()
        label = out.gtensors.tensors.add(name="label", dtype=DataType.DT_STRING, shape=[len(labels)])
        label.flat_string.extend(labels)
        score = out.gtensors.tensors.add(name="score", dtype=DataType.DT_FLOAT32, shape=[len(scores)])
        score.flat_float32.extend(scores.tolist())
        return out


converter_register.register("custom_model_converter", SentimentConverter())

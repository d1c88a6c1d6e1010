"""A batch on one model instance, under both batch contracts, and errors reported through the context.

grps's contract (a converter with its own `batch_preprocess`): the merged input goes whole to
`batch_infer`, its output whole to `batch_postprocess`, which answers one item per request.
grps-py's contract (no `batch_preprocess`): per-request steps around one inference. Model code here
works on numpy arrays directly; the instance does not care what the items are.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from grps_py.core.context import GrpsContext
from grps_py.core.instance import ModelInstance, Outcome
from grps_py.core.model import Converter, ModelInferer, outputs_to_payload


class StackingConverter(Converter):
    """grps's contract: stacks the requests' rows into one array and cuts the output back by rows."""

    def __init__(self, answers: int | None = None) -> None:
        super().__init__()
        self.answers = answers  # how many answers batch_postprocess gives (None: one per request)
        self.alone = 0  # per-request preprocess calls

    def preprocess(self, inp: Any, context: GrpsContext) -> Any:
        self.alone += 1
        if (inp < 0).any():
            context.set_err_msg("negative values refused")
            return None
        return inp

    def batch_preprocess(self, inps: list[Any], contexts: list[GrpsContext]) -> Any:
        for x, ctx in zip(inps, contexts, strict=True):
            if (x < 0).any():
                ctx.set_err_msg("negative values refused")
            ctx.put_user_data("rows", 0 if ctx.has_err() else len(x))
        return np.concatenate([x for x, ctx in zip(inps, contexts, strict=True) if not ctx.has_err()])

    def batch_postprocess(self, inp: Any, contexts: list[GrpsContext]) -> list[Any]:
        outs, start = [], 0
        for ctx in contexts:
            rows = ctx.get_user_data("rows")
            outs.append(inp[start : start + rows])
            start += rows
        return outs[: self.answers]


class ListConverter(Converter):
    """grps-py's list-in/list-out contract, written with batch methods."""

    def batch_preprocess(self, inps: list[Any], contexts: list[GrpsContext]) -> list[Any]:
        return [x + 1 for x in inps]

    def batch_postprocess(self, inp: Any, contexts: list[GrpsContext]) -> list[Any]:
        return [y * 10 for y in inp]


class StepConverter(Converter):
    """No batch methods: per-request steps. A request of all zeros reports an error in preprocess."""

    def preprocess(self, inp: Any, context: GrpsContext) -> Any:
        if not inp.any():
            context.set_err_msg("zeros refused")
            return None
        return inp


class Doubler(ModelInferer):
    """Doubles; records the size of what each batch_infer call got. Rows of 13 make it fail."""

    def __init__(self) -> None:
        super().__init__()
        self.batches: list[int] = []
        self.calls = 0

    def infer(self, inp: Any, context: GrpsContext) -> Any:
        self.calls += 1
        if (inp == 13).any():
            raise ValueError("13 is unlucky")
        return inp * 2

    def batch_infer(self, inp: Any, contexts: list[GrpsContext]) -> Any:
        self.batches.append(len(inp))
        if isinstance(inp, list):
            return [self.infer(x, ctx) for x, ctx in zip(inp, contexts, strict=True)]
        return self.infer(inp, contexts[0])


class PlainDoubler(ModelInferer):
    """Only `infer`: no batch_infer of its own."""

    def infer(self, inp: Any, context: GrpsContext) -> Any:
        return inp * 2


@pytest.fixture
def make() -> Iterator[Any]:
    made: list[ModelInstance] = []

    def build(inferer: ModelInferer, converter: Converter) -> ModelInstance:
        made.append(ModelInstance("m-1", 0, "cpu", inferer, converter, outputs_to_payload))
        return made[-1]

    yield build
    for instance in made:
        instance.close()


def arrays(*rows: list[float]) -> list[Any]:
    return [np.array(r, dtype=np.float32) for r in rows]


def contexts(count: int) -> list[GrpsContext]:
    return [GrpsContext() for _ in range(count)]


def values(outcomes: list[Outcome]) -> list[Any]:
    return [None if out is None else out.tolist() for out, _ in outcomes]


def errors(outcomes: list[Outcome]) -> list[str | None]:
    return [None if err is None else str(err) for _, err in outcomes]


# -- grps's contract -------------------------------------------------------------------------------
def test_a_merged_batch_goes_whole_through_batch_infer(make: Any) -> None:
    converter, inferer = StackingConverter(), Doubler()
    outcomes = make(inferer, converter).run_batch(arrays([1, 2], [3], [4, 5, 6]), contexts(3))
    assert values(outcomes) == [[2, 4], [6], [8, 10, 12]] and errors(outcomes) == [None] * 3
    assert inferer.batches == [6]  # one inference over all six rows
    assert converter.alone == 0  # preprocess never ran per request


def test_a_failing_merged_batch_runs_each_request_alone(make: Any) -> None:
    converter, inferer = StackingConverter(), Doubler()
    outcomes = make(inferer, converter).run_batch(arrays([1], [13], [2]), contexts(3))
    assert values(outcomes) == [[2], None, [4]]
    assert errors(outcomes) == [None, "13 is unlucky", None]
    assert inferer.batches == [3] and converter.alone == 3


def test_a_wrong_number_of_answers_runs_each_request_alone(make: Any) -> None:
    converter, inferer = StackingConverter(answers=1), Doubler()
    outcomes = make(inferer, converter).run_batch(arrays([1], [2]), contexts(2))
    assert values(outcomes) == [[2], [4]] and errors(outcomes) == [None, None]
    assert converter.alone == 2


def test_a_merged_batch_needs_the_inferers_batch_infer(make: Any) -> None:
    converter = StackingConverter()
    outcomes = make(PlainDoubler(), converter).run_batch(arrays([1], [2, 3]), contexts(2))
    assert values(outcomes) == [[2], [4, 6]] and converter.alone == 2


def test_a_request_reported_in_batch_preprocess_fails_alone(make: Any) -> None:
    inferer = Doubler()
    ctxs = contexts(3)
    outcomes = make(inferer, StackingConverter()).run_batch(arrays([1], [-1], [2, 3]), ctxs)
    assert values(outcomes) == [[2], None, [4, 6]] and errors(outcomes) == [None] * 3
    assert [ctx.get_err_msg() for ctx in ctxs] == ["", "negative values refused", ""]
    assert inferer.batches == [3]


def test_a_reported_request_is_not_run_again_when_its_batch_fails(make: Any) -> None:
    converter = StackingConverter()
    ctxs = contexts(3)
    outcomes = make(Doubler(), converter).run_batch(arrays([1], [-1], [13]), ctxs)
    assert values(outcomes) == [[2], None, None]
    assert errors(outcomes) == [None, None, "13 is unlucky"]
    assert ctxs[1].get_err_msg() == "negative values refused"
    assert converter.alone == 2  # the refused request kept its answer from batch_preprocess


def test_a_batch_whose_every_request_reported_stops_before_infer(make: Any) -> None:
    inferer = Doubler()
    outcomes = make(inferer, StackingConverter()).run_batch(arrays([-1], [-2]), contexts(2))
    assert outcomes == [(None, None), (None, None)]
    assert inferer.batches == [] and inferer.calls == 0


# -- grps-py's contract ----------------------------------------------------------------------------
def test_list_in_list_out_batch_methods_still_work(make: Any) -> None:
    inferer = Doubler()
    outcomes = make(inferer, ListConverter()).run_batch(arrays([1], [2], [3]), contexts(3))
    assert values(outcomes) == [[40], [60], [80]]
    assert inferer.batches == [3]


def test_a_request_reported_in_preprocess_leaves_the_batch(make: Any) -> None:
    inferer = Doubler()
    ctxs = contexts(3)
    outcomes = make(inferer, StepConverter()).run_batch(arrays([1], [0], [2]), ctxs)
    assert values(outcomes) == [[2], None, [4]] and errors(outcomes) == [None] * 3
    assert ctxs[1].get_err_msg() == "zeros refused"
    assert inferer.batches == [2]  # the reported request never reached the inferer


# -- one request -----------------------------------------------------------------------------------
def test_an_error_reported_in_preprocess_stops_the_request(make: Any) -> None:
    inferer = Doubler()
    ctx = GrpsContext()
    assert make(inferer, StepConverter()).run_one(np.zeros(2), ctx) is None
    assert ctx.get_err_msg() == "zeros refused" and inferer.calls == 0


def test_an_error_reported_by_async_code_stops_the_request(make: Any) -> None:
    calls: list[Any] = []

    class AsyncInferer(ModelInferer):
        async def infer(self, inp: Any, context: GrpsContext) -> Any:
            calls.append(inp)
            context.set_err_msg("async refusal")

    class Recorder(Converter):
        def postprocess(self, inp: Any, context: GrpsContext) -> Any:
            calls.append("postprocess")
            return inp

    instance = make(AsyncInferer(), Recorder())
    ctx = GrpsContext()
    assert asyncio.run(instance.run_async(np.ones(1), ctx)) is None
    assert ctx.get_err_msg() == "async refusal" and len(calls) == 1  # postprocess did not run
    refused, doubler = GrpsContext(), Doubler()
    assert asyncio.run(make(doubler, StepConverter()).run_async(np.zeros(1), refused)) is None
    assert refused.get_err_msg() == "zeros refused" and doubler.calls == 0

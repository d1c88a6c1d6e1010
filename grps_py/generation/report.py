"""A generative model's batcher reporting to the server's observers, under its model's key."""

from __future__ import annotations

from collections.abc import Callable

from grps_py.core.observer import SchedulerObserver


class GenerationReport:
    """A `GenerationObserver` (generation/batcher.py) for one model node. Its waiting sequences count
    those in the batcher's queue and those still in the model's own queue (`queued()`)."""

    def __init__(self, observer: SchedulerObserver, model: str, queued: Callable[[], int]) -> None:
        self._observer = observer
        self._model = model
        self._queued = queued
        self._running = 0
        self._waiting = 0

    def first_token(self, seconds: float) -> None:
        self._observer.first_token(self._model, seconds)

    def token_gap(self, seconds: float) -> None:
        self._observer.token_gap(self._model, seconds)

    def tokens(self, count: int) -> None:
        self._observer.tokens_generated(self._model, count)

    def running(self, count: int) -> None:
        self._running = count
        self._observer.sequences(self._model, count, self._waiting + self._queued())

    def waiting(self, count: int) -> None:
        self._waiting = count
        self._observer.sequences(self._model, self._running, count + self._queued())

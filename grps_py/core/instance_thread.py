"""The thread of one model instance: it runs what the event loop hands it, one thing at a time, in order.

It is an `Executor` (for `run_in_executor`: batches, async models' sync steps) with a faster path for
the hot one, `call`: one request of an unbatched model, whose outcome is handed back to the loop by a
callback. Outcomes that finish while the loop is busy are handed back together, with one wake-up of
the loop: under load the thread and the loop each wake the other once per burst of requests rather than
once per request. Each wake-up is a context switch, and on a small machine the switches between the
loop's thread and a model's cost more CPU than the Python either runs (bench/compare.py).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import queue
import threading
import weakref
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any, TypeVar

log = logging.getLogger("grps_py.model")
T = TypeVar("T")
_STOP = object()
_ALL: weakref.WeakSet[InstanceThread] = weakref.WeakSet()


def busy_threads() -> list[str]:
    """The names of the instance threads running something now (e.g. a hung model at exit). The
    threads are daemons: one that never returns does not hold the interpreter open."""
    return sorted(t.name for t in list(_ALL) if t.busy)


class InstanceThread(Executor):
    def __init__(self, name: str) -> None:
        self.name = name
        self._inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._start_lock = threading.Lock()
        # Outcomes waiting for the loop, and whether the loop was already asked to take them.
        self._done: collections.deque[tuple[Callable[[Any], None], Any]] = collections.deque()
        self._wake_asked = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self.busy = False
        _ALL.add(self)

    # -- the hot path ----------------------------------------------------------------------------
    def call(
        self, loop: asyncio.AbstractEventLoop, fn: Callable[[Any], T], arg: Any, on_done: Callable[[T], None]
    ) -> None:
        """Run `fn(arg)` on the thread, then `on_done(result)` on `loop`. `fn` must not raise."""
        self._loop = loop
        self._put((fn, arg, on_done))

    def _deliver(self) -> None:
        """On the loop: hand back every outcome that is ready (asked for again after this starts)."""
        self._wake_asked = False
        done = self._done
        while done:
            on_done, result = done.popleft()
            on_done(result)

    # -- Executor --------------------------------------------------------------------------------
    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        future: Future[T] = Future()
        self._put((_run_into, (future, fn, args, kwargs), None))
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """No new work; with `cancel_futures`, what is queued and not started is dropped (its futures
        cancelled). The running call, if any, goes on: a thread cannot be stopped."""
        self._closed = True
        if cancel_futures:
            while True:
                try:
                    _fn, arg, on_done = self._inbox.get_nowait()
                except queue.Empty:
                    break
                if on_done is None and arg is not _STOP:
                    arg[0].cancel()
        self._inbox.put((_STOP, _STOP, None))
        if wait and self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()

    # -- the thread ------------------------------------------------------------------------------
    def _put(self, item: tuple[Any, Any, Any]) -> None:
        if self._closed:
            raise RuntimeError(f"{self.name} is shut down")
        if self._thread is None:
            with self._start_lock:
                if self._thread is None:
                    self._thread = threading.Thread(target=self._work, name=self.name, daemon=True)
                    self._thread.start()
        self._inbox.put(item)

    def _work(self) -> None:
        inbox, done = self._inbox, self._done
        while True:
            fn, arg, on_done = inbox.get()
            if fn is _STOP:
                return
            self.busy = True
            try:
                result = fn(arg)
            except BaseException:  # a broken contract: keep the thread, lose this one call
                log.exception("%s: a call raised instead of returning its outcome", self.name)
                continue
            finally:
                self.busy = False
            if on_done is None:
                continue  # an Executor job: its future holds the outcome
            done.append((on_done, result))
            if not self._wake_asked:
                self._wake_asked = True
                try:
                    self._loop.call_soon_threadsafe(self._deliver)  # type: ignore[union-attr]
                except RuntimeError:  # the loop closed: nobody waits for the outcome
                    done.clear()


def _run_into(job: tuple[Future[Any], Callable[..., Any], tuple[Any, ...], dict[str, Any]]) -> None:
    future, fn, args, kwargs = job
    if not future.set_running_or_notify_cancel():
        return
    try:
        future.set_result(fn(*args, **kwargs))
    except BaseException as exc:
        future.set_exception(exc)

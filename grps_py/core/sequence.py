"""Sequence batching (Triton's `sequence_batching`): stateful models whose requests come in sequences.

A client names its sequence with the request parameters `sequence_id` (an integer 1..2**64-1 or a
non-empty string: Triton's correlation id), `sequence_start` on its first request and `sequence_end`
on its last. The server:

- gives each sequence a slot for its life (at most `slots` sequences run at once; a new sequence past
  that waits for one to end, counted in the model's queue): with the `direct` strategy the slot is on
  one instance, and every request of the sequence runs there; with `oldest` any instance runs any
  request, and batches mix the sequences' requests;
- runs a sequence's requests one at a time, in the order they came;
- delivers the control inputs the model asks for as tensors beside its own inputs, one row per
  request: START (1 on a sequence's first request), END (1 on its last), READY (1: a request is
  there) and CORRID (the sequence id; BYTES for a string id);
- ends a sequence whose client sent nothing for `max_sequence_idle_us` (its slot goes to the next).

A request for a sequence that was never started (or was ended) answers 400, as Triton does.
The model keeps the state of each sequence itself (by CORRID); `direct` lets an instance keep it in
its own memory, since its sequences never move.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from grps_py.core.errors import InvalidInput, Overloaded
from grps_py.core.untrusted import shown
from grps_py.core.yaml_fields import Fields

log = logging.getLogger("grps_py.sequence")

DIRECT, OLDEST = "direct", "oldest"
START, END, READY, CORRID = "start", "end", "ready", "corrid"
CONTROL_KINDS = (START, END, READY, CORRID)
SEQUENCE_PARAMETERS = ("sequence_id", "sequence_start", "sequence_end")
# The datatypes Triton allows: for the flags (its int32/fp32/bool _false_true), for the id.
FLAG_DATATYPES = {"INT32": np.int32, "FP32": np.float32, "BOOL": np.bool_}
CORRID_DATATYPES = {
    "UINT64": np.uint64,
    "INT64": np.int64,
    "UINT32": np.uint32,
    "INT32": np.int32,
    "BYTES": None,
}
MAX_STRING_ID = 128  # characters of a string sequence id
MAX_INT_ID = 2**64 - 1
NO_SLOT = -1  # a sequence whose start waits for a slot

SEQUENCE_KEYS = (
    "strategy",
    "max_sequence_idle_us",
    "max_candidate_sequences",
    "control_inputs",
    "control_datatype",
    "corrid_datatype",
)


@dataclass(frozen=True)
class SequenceSettings:
    strategy: str = DIRECT
    max_sequence_idle_us: int = 1_000_000  # Triton's default: a second
    max_candidate_sequences: int = 0  # sequences at once; 0: one per batch slot of every instance
    control_inputs: tuple[tuple[str, str], ...] = ()  # (kind, tensor name)
    control_datatype: str = "INT32"
    corrid_datatype: str = "UINT64"

    def control_name(self, kind: str) -> str | None:
        return next((name for k, name in self.control_inputs if k == kind), None)


def parse_sequence_batching(fields: Fields) -> SequenceSettings | None:
    """The model's `sequence_batching` block (None when it has none)."""
    if not fields.data:
        return None
    defaults = SequenceSettings()
    controls = fields.section("control_inputs", CONTROL_KINDS)
    names = tuple((kind, name) for kind in CONTROL_KINDS if (name := controls.opt_text(kind)) is not None)
    if len({name for _, name in names}) != len(names):
        fields.fail("control_inputs", controls.data, "a different tensor name for each control")
    return SequenceSettings(
        strategy=fields.opt_text("strategy", (DIRECT, OLDEST)) or defaults.strategy,
        max_sequence_idle_us=fields.integer("max_sequence_idle_us", defaults.max_sequence_idle_us, 1),
        max_candidate_sequences=fields.integer("max_candidate_sequences", 0, 0),
        control_inputs=names,
        control_datatype=fields.opt_text("control_datatype", tuple(FLAG_DATATYPES))
        or defaults.control_datatype,
        corrid_datatype=fields.opt_text("corrid_datatype", tuple(CORRID_DATATYPES))
        or defaults.corrid_datatype,
    )


SequenceId = int | str


@dataclass(frozen=True)
class SequenceRequest:
    """What a request says about its sequence."""

    sequence_id: SequenceId
    start: bool
    end: bool


def sequence_request(parameters: dict[str, Any] | None, model: str) -> SequenceRequest:
    """The request's sequence parameters, checked (a sequence model needs an id on every request)."""
    parameters = parameters or {}
    sequence_id = parameters.get("sequence_id", 0)
    if type(sequence_id) is int:
        if not 0 <= sequence_id <= MAX_INT_ID:
            raise InvalidInput(f"parameter 'sequence_id' must be 1..2**64-1 or a string, not {sequence_id}")
    elif isinstance(sequence_id, str):
        if len(sequence_id) > MAX_STRING_ID:
            raise InvalidInput(f"parameter 'sequence_id' is longer than {MAX_STRING_ID} characters")
    else:
        raise InvalidInput("parameter 'sequence_id' must be an integer or a string")
    if sequence_id in (0, ""):
        raise InvalidInput(
            f"inference request to model '{model}' must specify a non-zero or non-empty 'sequence_id' "
            "(the model uses sequence batching)"
        )
    flags = []
    for name in ("sequence_start", "sequence_end"):
        value = parameters.get(name, False)
        if not isinstance(value, bool):
            raise InvalidInput(f"parameter '{name}' must be true or false")
        flags.append(value)
    return SequenceRequest(sequence_id, flags[0], flags[1])


class Sequence:
    """One running sequence: its slot, its requests in order, its idle timer."""

    __slots__ = ("id", "idle_timer", "in_order", "requests", "slot")

    def __init__(self, sequence_id: SequenceId, slot: int) -> None:
        self.id = sequence_id
        self.slot = slot
        self.in_order = asyncio.Lock()  # FIFO: the sequence's requests run in the order they came
        self.requests = 0  # admitted and not finished
        self.idle_timer: asyncio.TimerHandle | None = None


class SequenceBatcher:
    """The sequences of one model: slots, order, control inputs and idle ends.

    `slots` is how many sequences run at once; `instances` how the slots are spread (direct: slot s is
    on instance s % instances). `max_waiting` bounds the new sequences waiting for a slot."""

    def __init__(
        self, model: str, settings: SequenceSettings, slots: int, instances: int, max_waiting: int
    ) -> None:
        self.model = model
        self.settings = settings
        self.slots = settings.max_candidate_sequences or slots
        self.instances = max(1, instances)
        self.max_waiting = max_waiting
        self.active: dict[SequenceId, Sequence] = {}
        self._free = list(range(self.slots - 1, -1, -1))  # pop() gives the lowest slot
        self._waiting: deque[asyncio.Future[int]] = deque()
        self._flag_type = FLAG_DATATYPES[settings.control_datatype]
        self._corrid_type = CORRID_DATATYPES[settings.corrid_datatype]

    # -- what a request goes through ---------------------------------------------------------
    @asynccontextmanager
    async def admitted(self, request: SequenceRequest) -> AsyncIterator[Sequence]:
        """The request's sequence, once the request's turn in it came (a start takes a slot first,
        waiting while every slot is taken); leaving ends the sequence after its last request."""
        sequence = self.active.get(request.sequence_id)
        if sequence is None:
            if not request.start:
                raise InvalidInput(
                    f"inference request for sequence {_shown_id(request.sequence_id)} to model "
                    f"'{self.model}' must specify 'sequence_start' on its first request (the sequence "
                    "is not running: never started, ended, or idle past max_sequence_idle_us)"
                )
            # Known at once, so the requests that follow it wait their turn instead of being refused
            # while it waits for a slot. A start for a running sequence starts it again in its slot.
            sequence = self.active[request.sequence_id] = Sequence(request.sequence_id, NO_SLOT)
        sequence.requests += 1
        self._stop_idle_timer(sequence)
        try:
            async with sequence.in_order:
                if sequence.slot == NO_SLOT:
                    if self.active.get(sequence.id) is not sequence:  # its start never got a slot
                        raise InvalidInput(
                            f"sequence {_shown_id(sequence.id)} of model '{self.model}' did not start"
                        )
                    try:
                        sequence.slot = await self._take_slot()
                    except BaseException:
                        self._end(sequence, "no slot")
                        raise
                yield sequence
        finally:
            sequence.requests -= 1
            if request.end:
                self._end(sequence, "its last request")
            elif sequence.requests == 0 and self.active.get(sequence.id) is sequence:
                self._start_idle_timer(sequence)

    async def _take_slot(self) -> int:
        if self._free:
            return self._free.pop()
        if len(self._waiting) >= self.max_waiting:
            raise Overloaded(
                f"model '{self.model}' runs {self.slots} sequences and {len(self._waiting)} more wait to "
                "start; retry later"
            )
        waiter: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._waiting.append(waiter)
        try:
            return await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self._give_back_slot(waiter.result())  # handed over as it gave up
            else:
                self._waiting.remove(waiter)
            raise

    def _give_back_slot(self, slot: int) -> None:
        while self._waiting:
            waiter = self._waiting.popleft()
            if not waiter.done():
                waiter.set_result(slot)
                return
        self._free.append(slot)
        self._free.sort(reverse=True)

    def _end(self, sequence: Sequence, why: str) -> None:
        if self.active.get(sequence.id) is not sequence:
            return
        self._stop_idle_timer(sequence)
        del self.active[sequence.id]
        log.debug("sequence %s of model '%s' ended: %s", _shown_id(sequence.id), self.model, why)
        if sequence.slot != NO_SLOT:
            self._give_back_slot(sequence.slot)
            sequence.slot = NO_SLOT

    def _start_idle_timer(self, sequence: Sequence) -> None:
        idle_s = self.settings.max_sequence_idle_us / 1e6
        sequence.idle_timer = asyncio.get_running_loop().call_later(idle_s, self._idle, sequence)

    def _stop_idle_timer(self, sequence: Sequence) -> None:
        if sequence.idle_timer is not None:
            sequence.idle_timer.cancel()
            sequence.idle_timer = None

    def _idle(self, sequence: Sequence) -> None:
        sequence.idle_timer = None
        if sequence.requests == 0:
            log.info(
                "sequence %s of model '%s' ended: no request for %d us (max_sequence_idle_us)",
                _shown_id(sequence.id),
                self.model,
                self.settings.max_sequence_idle_us,
            )
            self._end(sequence, "idle")

    def instance_of(self, sequence: Sequence) -> int | None:
        """The instance a sequence's requests run on (direct), or None: any (oldest)."""
        return sequence.slot % self.instances if self.settings.strategy == DIRECT else None

    # -- control inputs ----------------------------------------------------------------------
    def controls(self, request: SequenceRequest, batched: bool) -> list[tuple[str, np.ndarray[Any, Any]]]:
        """The control tensors for one request, by name: shape [1], or [1, 1] for a batching model."""
        shape = (1, 1) if batched else (1,)
        out = []
        for kind, name in self.settings.control_inputs:
            if kind == CORRID:
                out.append((name, self._corrid(request.sequence_id, shape)))
                continue
            on = {START: request.start, END: request.end, READY: True}[kind]
            out.append((name, np.full(shape, on, dtype=self._flag_type)))
        return out

    def _corrid(self, sequence_id: SequenceId, shape: tuple[int, ...]) -> np.ndarray[Any, Any]:
        dtype = self._corrid_type
        if dtype is None:  # BYTES: the id as text
            return np.full(shape, str(sequence_id).encode(), dtype=object)
        if isinstance(sequence_id, str):
            raise InvalidInput(
                f"model '{self.model}' takes integer sequence ids (its CORRID is "
                f"{self.settings.corrid_datatype}), not a string"
            )
        if sequence_id > np.iinfo(dtype).max:
            raise InvalidInput(
                f"sequence_id {sequence_id} does not fit model '{self.model}''s CORRID "
                f"({self.settings.corrid_datatype})"
            )
        return np.full(shape, sequence_id, dtype=dtype)

    def close(self) -> None:
        for sequence in list(self.active.values()):
            self._stop_idle_timer(sequence)
        self.active.clear()
        for waiter in self._waiting:
            waiter.cancel()
        self._waiting.clear()


def _shown_id(sequence_id: SequenceId) -> str:
    return f"'{shown(sequence_id, 40)}'" if isinstance(sequence_id, str) else str(sequence_id)

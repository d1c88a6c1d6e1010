"""A Prometheus counter family whose children count on plain attributes, for the per-request hot path.

prometheus_client's Counter takes a lock and checks the metric on every `inc`, and every request
counts one answer. These children are only written on the event loop's thread, so `inc` is one
addition; the family writes the same samples as prometheus_client's Counter when it is scraped:
`_total`, and `_created` while its counters write one (`PROMETHEUS_DISABLE_CREATED_SERIES`,
`prometheus_client.disable_created_metrics()`).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterator, MutableMapping, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.metrics_core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector


@functools.cache
def _probe() -> Counter:
    return Counter("grps_py_created_probe", "", registry=None)  # registered nowhere, never scraped


def created_series() -> bool:
    """Whether prometheus_client's own counters write a `_created` sample now: read from what one of
    them collects, so both of its switches (the environment variable, the functions) count."""
    return any(sample.name.endswith("_created") for metric in _probe().collect() for sample in metric.samples)


def drop_children(
    children: MutableMapping[tuple[str, ...], Any],
    values: tuple[str, ...],
    labelnames: tuple[str, ...],
    name: str,
) -> None:
    """A family's `remove`: drop the children whose first label values are `values`."""
    if len(values) > len(labelnames):
        raise ValueError(f"{name} takes labels {labelnames}, not {values}")
    width = len(values)
    for key in [key for key in children if key[:width] == values]:
        del children[key]  # on the event loop's thread, as every write: a scrape reads a copy


class FastCounter:
    """One labelled child. Written on the event loop's thread only (no lock)."""

    __slots__ = ("created", "value")

    def __init__(self) -> None:
        self.value = 0.0
        self.created = time.time()

    def inc(self, amount: float = 1) -> None:
        if amount < 0:
            raise ValueError("Counters can only be incremented by non-negative amounts.")
        self.value += amount


class CounterFamily(Collector):
    def __init__(
        self, name: str, documentation: str, labelnames: Sequence[str], registry: CollectorRegistry
    ) -> None:
        self.name = name.removesuffix("_total")
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self._children: dict[tuple[str, ...], FastCounter] = {}
        registry.register(self)

    def labels(self, *values: str) -> FastCounter:
        if len(values) != len(self.labelnames):
            raise ValueError(f"{self.name} takes labels {self.labelnames}, not {values}")
        child = self._children.get(values)
        if child is None:
            child = self._children[values] = FastCounter()
        return child

    def remove(self, *values: str) -> None:
        """Stop exporting every child whose first label values are `values`: one child when every
        label is given (as prometheus_client's `remove`), all of a model's when only its leading
        labels are. A removed child may still be counted by whoever holds it; it is not scraped."""
        drop_children(self._children, values, self.labelnames, self.name)

    def describe(self) -> list[Metric]:
        return [CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)]

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)
        created = created_series()
        for values, child in list(self._children.items()):
            family.add_metric(list(values), child.value, created=child.created if created else None)
        yield family

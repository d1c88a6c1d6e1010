"""A Prometheus histogram family whose children count on plain lists, for the per-request hot path.

prometheus_client's Histogram takes a lock and checks the metric twice per observation, and the
server observes four histograms per request. These children are only written on the
event loop's thread, so `observe` is one bisect and two additions; the family turns the counts into the
same samples (`_bucket` with `le`, `_count`, `_sum`) when it is scraped.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator, Sequence

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from grps_py.metrics.fast_counter import drop_children


class FastHistogram:
    """One labelled child. Observed on the event loop's thread only (no lock)."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last: above every bound (+Inf)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1  # the first bound >= value: le semantics
        self.sum += value


class HistogramFamily(Collector):
    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str],
        buckets: Sequence[float],
        registry: CollectorRegistry,
    ) -> None:
        self.name, self.documentation = name, documentation
        self.labelnames = tuple(labelnames)
        self.bounds = tuple(float(b) for b in buckets)
        self._le = [floatToGoString(b) for b in self.bounds] + ["+Inf"]  # type: ignore[no-untyped-call]
        self._children: dict[tuple[str, ...], FastHistogram] = {}
        registry.register(self)

    def labels(self, *values: str) -> FastHistogram:
        if len(values) != len(self.labelnames):
            raise ValueError(f"{self.name} takes labels {self.labelnames}, not {values}")
        child = self._children.get(values)
        if child is None:
            child = self._children[values] = FastHistogram(self.bounds)
        return child

    def remove(self, *values: str) -> None:
        """Stop exporting every child whose first label values are `values`: one child when every
        label is given (as prometheus_client's `remove`), all of a model's when only its leading
        labels are. A removed child may still be observed by whoever holds it; it is not scraped."""
        drop_children(self._children, values, self.labelnames, self.name)

    def describe(self) -> list[Metric]:
        return [HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)]

    def collect(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for values, child in list(self._children.items()):
            running, buckets = 0, []
            for le, count in zip(self._le, list(child.counts), strict=True):
                running += count
                buckets.append((le, running))
            family.add_metric(list(values), buckets, child.sum)
        yield family

"""The Prometheus families of generative models (continuous batching), and one model's children.

A generative model's batcher reports per token (`SchedulerObserver.first_token`, `token_gap`,
`tokens_generated`, `sequences`), so the children are the lock-free ones of the hot path
(fast_counter.py, fast_histogram.py) and the two gauges are plain integers read when scraped. A model
gets its children at its first report: a model that never generates exports none of these series.
"""

from __future__ import annotations

from contextlib import suppress

from prometheus_client import CollectorRegistry, Gauge

from grps_py.metrics.fast_counter import CounterFamily
from grps_py.metrics.fast_histogram import HistogramFamily

# Seconds. Time to first token: a few ms for a short prompt on an idle model, tens of seconds for a
# long prompt behind a full batch. Between tokens: about a millisecond to a second per decode step.
TIME_TO_FIRST_TOKEN_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    25.0,
    60.0,
)
INTER_TOKEN_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)


class GenerationFamilies:
    """The grps_generation_* families, labelled by model and version."""

    def __init__(self, registry: CollectorRegistry) -> None:
        mv = ("model", "version")
        self.first_token = HistogramFamily(
            "grps_generation_time_to_first_token_seconds",
            "Time from a sequence's request reaching the model to its first generated token.",
            mv,
            TIME_TO_FIRST_TOKEN_BUCKETS,
            registry,
        )
        self.inter_token = HistogramFamily(
            "grps_generation_inter_token_seconds",
            "Time between two consecutive tokens of one sequence (inter-token latency).",
            mv,
            INTER_TOKEN_BUCKETS,
            registry,
        )
        self.tokens = CounterFamily(
            "grps_generation_tokens", "Tokens generated (one per sequence per model step).", mv, registry
        )
        self.running = Gauge(
            "grps_generation_running_sequences",
            "Sequences being generated now (in the model's running batch).",
            mv,
            registry=registry,
        )
        self.waiting = Gauge(
            "grps_generation_waiting_sequences",
            "Sequences waiting for a slot in the running batch.",
            mv,
            registry=registry,
        )

    def remove(self, labels: tuple[str, str]) -> None:
        """Stop exporting one model's samples (a model without them is left as it is)."""
        for family in (self.first_token, self.inter_token, self.tokens):
            family.remove(*labels)
        for gauge in (self.running, self.waiting):
            with suppress(KeyError):  # absent: older prometheus_client versions raise
                gauge.remove(*labels)


class GenerationMetrics:
    """One model's children. `running` and `waiting` are the latest counts reported; the gauges read
    them when scraped."""

    __slots__ = ("first_token", "inter_token", "running", "tokens", "waiting")

    def __init__(self, families: GenerationFamilies, labels: tuple[str, str]) -> None:
        self.first_token = families.first_token.labels(*labels)
        self.inter_token = families.inter_token.labels(*labels)
        self.tokens = families.tokens.labels(*labels)
        self.running = 0
        self.waiting = 0
        families.running.labels(*labels).set_function(lambda: max(self.running, 0))
        families.waiting.labels(*labels).set_function(lambda: max(self.waiting, 0))

"""The KEDA baseline: HPA on an External `AverageValue` metric from the Prometheus scaler."""

from __future__ import annotations

import math

from autoscaler.baselines import keda
from autoscaler.core.model import Kind, Reason, Signal

from . import drive
from .drive import at, changes, step

TARGET = 10.0


def test_the_hpa_queries_prometheus_afresh_at_each_sync_by_default() -> None:
    """Without cached metrics a step at 31 s is seen by the 45 s sync."""
    ticks = drive.run(keda.Keda(target=TARGET), step(10.0, 100.0, 31.0), end_s=60, replicas=1)
    assert changes(ticks)[0] == (45.0, 4)


def test_cached_metrics_are_as_old_as_the_last_poll() -> None:
    """With `useCachedMetrics` the 45 s sync reads the 30 s poll, so the step waits for 60 s."""
    policy = keda.Keda(target=TARGET, use_cached_metrics=True)
    ticks = drive.run(policy, step(10.0, 100.0, 31.0), end_s=60, replicas=1)
    assert at(ticks, 45.0).kind is Kind.STEADY
    assert "(cached)" in at(ticks, 45.0).detail
    assert changes(ticks)[0] == (60.0, 4)


def test_the_external_metric_divides_by_every_pod() -> None:
    """36 rps over 4 pods (1 serving) is ratio 0.9, in band; 50 rps asks ceil(50 / 10) = 5."""
    in_band = drive.run(
        keda.Keda(target=TARGET), lambda t: 36.0, end_s=15, replicas=4, serving=lambda r: 1
    )
    assert at(in_band, 15.0).reason is Reason.IN_DEADBAND
    above = drive.run(
        keda.Keda(target=TARGET), lambda t: 50.0, end_s=15, replicas=4, serving=lambda r: 1
    )
    assert (at(above, 15.0).kind, at(above, 15.0).desired) == (Kind.SCALE_UP, 5)


def test_an_empty_query_result_reads_as_zero() -> None:
    """With `ignoreNullValues` (the default) no sample proposes 0; without it the HPA holds."""
    ticks = drive.run(keda.Keda(target=TARGET), lambda t: math.nan, end_s=15, replicas=4)
    assert at(ticks, 15.0).contributions[Signal.LOAD].desired == 0
    assert at(ticks, 15.0).desired == 4  # the initial recommendation stabilises the drop
    strict = keda.Keda(target=TARGET, ignore_null_values=False)
    ticks = drive.run(strict, lambda t: math.nan, end_s=15, replicas=4)
    assert at(ticks, 15.0).reason is Reason.MISSING_DATA


def test_min_replicas_zero_becomes_one() -> None:
    """KEDA gives its HPA `minReplicaCount` or 1: a service with min 0 is floored at 1."""
    ticks = drive.run(
        keda.Keda(target=TARGET), lambda t: 0.0, end_s=330, replicas=3, min_replicas=0
    )
    # The initial recommendation (3, at the 15 s sync) holds the count until it ages out.
    assert changes(ticks) == [(330.0, 1)]

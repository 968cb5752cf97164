"""Builders for the core's values: sensible defaults, any field overridden by keyword.

The defaults describe one ordinary service: 4 replicas, all serving, a load target of 10 requests
per second per replica and a load of exactly 40 (ratio 1.0), bounds [2, 10], no burst path and no
look-ahead. A test states only what it changes.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from autoscaler.core import model
from autoscaler.core.model import Signal, SignalEstimate

NOW_S = 10_000.0


def estimate(
    value: float,
    *,
    level: float | None = None,
    trend_per_s: float = 0.0,
    burst_mean: float | None = None,
    last: float | None = None,
    fresh: bool = True,
    trend_stderr_per_s: float = 0.0,
    mean_age_s: float = 0.0,
) -> SignalEstimate:
    """A smoothed signal that sits at `value`: a fresh flat window unless told otherwise. The
    newest sample is the burst window's mean unless told otherwise."""
    recent = value if burst_mean is None else burst_mean
    return SignalEstimate(
        mean=value,
        level=value if level is None else level,
        trend_per_s=trend_per_s,
        burst_mean=recent,
        last=(recent if last is None else last) if fresh else math.nan,
        fresh=fresh,
        trend_stderr_per_s=trend_stderr_per_s,
        mean_age_s=mean_age_s,
    )


def stale(value: float = 40.0) -> SignalEstimate:
    """A signal whose window still holds samples but none from this tick."""
    return estimate(value, fresh=False)


def config(**overrides: Any) -> model.PolicyConfig:
    """A seed-policy configuration with a load target of 10 per replica."""
    base = model.PolicyConfig(
        max_replicas=10,
        min_replicas=2,
        target_load_per_replica=10.0,
        target_queue_per_replica=None,
        target_gpu_utilization_pct=75.0,
    )
    return dataclasses.replace(base, **overrides)


def observation(
    *,
    load: float | SignalEstimate | None = 40.0,
    queue: float | SignalEstimate | None = None,
    gpu: float | SignalEstimate | None = None,
    **overrides: Any,
) -> model.Observation:
    """An observation at `NOW_S` of 4 serving replicas; a float signal is a fresh flat estimate."""
    signals: dict[Signal, SignalEstimate] = {}
    for signal, value in ((Signal.LOAD, load), (Signal.SATURATION, queue), (Signal.CAPACITY, gpu)):
        if value is not None:
            signals[signal] = value if isinstance(value, SignalEstimate) else estimate(value)
    base = model.Observation(now_s=NOW_S, replicas=4, serving=4, signals=signals)
    return dataclasses.replace(base, **overrides)


def state(**overrides: Any) -> model.PolicyState:
    """A policy state with no history unless told otherwise."""
    return dataclasses.replace(model.PolicyState(), **overrides)

"""The perfect-foresight oracle: capacity asked for exactly one start-up delay ahead."""

from __future__ import annotations

import numpy as np
import pytest

from autoscaler.baselines import oracle
from autoscaler.core.model import Kind, Reason

from . import drive
from .drive import at, changes

# 10 rps, then 50 rps over [100, 200), then 10 again; target 0.5 x 20 = 10 rps per replica.
ARRIVALS = np.array([50.0 if 100 <= t < 200 else 10.0 for t in range(300)])


def make(**overrides: float) -> oracle.Oracle:
    options: dict[str, float] = {"mu": 20.0, "target_utilisation": 0.5, "startup_s": 30.0}
    options.update(overrides)
    return oracle.Oracle(ARRIVALS, **options)


def test_asks_for_capacity_one_lead_before_a_step() -> None:
    """A rise at 100 s is asked for at 70 s (30 s start-up); a fall at 200 s is met at once."""
    ticks = drive.run(make(), lambda t: 0.0, end_s=299, replicas=1)
    assert changes(ticks) == [(70.0, 5), (200.0, 1)]
    assert (at(ticks, 70.0).kind, at(ticks, 70.0).reason) == (Kind.SCALE_UP, Reason.FORECAST)


def test_hold_looks_further_ahead() -> None:
    """Five more seconds of look-ahead move the rise to 65 s."""
    ticks = drive.run(make(hold_s=5.0), lambda t: 0.0, end_s=150, replicas=1)
    assert changes(ticks)[0] == (65.0, 5)


def test_margin_adds_headroom() -> None:
    """A 10 % margin turns 50 rps at 10 per replica into ceil(5.5) = 6."""
    assert make(margin_ratio=0.1).replicas_at(150.0) == 6


def test_past_the_trace_nothing_is_needed() -> None:
    """After the last second the oracle asks for nothing, so the floor applies."""
    policy = make()
    assert policy.replicas_at(400.0) == 0
    ticks = drive.run(policy, lambda t: 0.0, start_s=400.0, end_s=400.0, replicas=3, min_replicas=2)
    assert at(ticks, 400.0).desired == 2


def test_rejects_a_utilisation_above_one() -> None:
    """A target utilisation over 100 % is a configuration error."""
    with pytest.raises(ValueError, match="target_utilisation"):
        make(target_utilisation=1.5)

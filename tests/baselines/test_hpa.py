"""The HPA baseline against hand-computed syncs (`horizontal.go`, `replica_calculator.go`)."""

from __future__ import annotations

import math

import pytest

from autoscaler.baselines import hpa
from autoscaler.core.model import Bound, Kind, Reason, Signal

from . import drive
from .drive import at, changes, step

TARGET = 10.0


def test_first_sync_comes_one_period_after_the_service_appears() -> None:
    """Nothing happens for 15 s, then the HPA decides once every 15 s and holds in between."""
    ticks = drive.run(hpa.Hpa(target=TARGET), lambda t: 200.0, end_s=44, replicas=2)
    assert changes(ticks) == [(15.0, 4), (30.0, 8)]
    between = [k.decision for k in ticks if k.t_s not in (15.0, 30.0)]
    assert all(d.kind is Kind.STEADY and d.desired == d.current for d in between)
    assert at(ticks, 14.0).detail == "no HPA sync until 15 s"


def test_legacy_scale_up_is_at_most_double_or_four_per_sync() -> None:
    """Ten times the load on 2 replicas asks for 20 but gets 4, 8, 16, then 20."""
    ticks = drive.run(hpa.Hpa(target=TARGET), lambda t: 200.0, end_s=90, replicas=2)
    assert changes(ticks) == [(15.0, 4), (30.0, 8), (45.0, 16), (60.0, 20)]
    first = at(ticks, 15.0)
    assert first.contributions[Signal.LOAD].desired == 20
    assert (first.kind, first.reason) == (Kind.SCALE_UP, Reason.ABOVE_TARGET)
    assert "ScaleUpLimit: 4" in first.detail


def test_default_behavior_adds_four_pods_or_doubles_per_period() -> None:
    """With the API server's default `behavior`, 2 replicas go to 6, 12, then 20."""
    policy = hpa.Hpa(target=TARGET, config=hpa.HpaConfig(behavior=hpa.DEFAULT_BEHAVIOR))
    ticks = drive.run(policy, lambda t: 200.0, end_s=60, replicas=2)
    assert changes(ticks) == [(15.0, 6), (30.0, 12), (45.0, 20)]


@pytest.mark.parametrize(
    ("load", "kind", "reason", "desired"),
    [
        (44.0, Kind.STEADY, Reason.IN_DEADBAND, 4),  # 11 per pod: ratio 1.10, inside
        (44.4, Kind.SCALE_UP, Reason.ABOVE_TARGET, 5),  # 11.1 per pod: ratio 1.11, ceil(4.44)
        (36.0, Kind.STEADY, Reason.IN_DEADBAND, 4),  # 9 per pod: ratio 0.90, inside
    ],
)
def test_tolerance_band_is_ten_percent_inclusive(
    load: float, kind: Kind, reason: Reason, desired: int
) -> None:
    """A usage ratio within [0.9, 1.1] keeps the count; just outside it scales."""
    ticks = drive.run(hpa.Hpa(target=TARGET), lambda t: load, end_s=15, replicas=4)
    decision = at(ticks, 15.0)
    assert (decision.kind, decision.reason, decision.desired) == (kind, reason, desired)


def test_scale_down_waits_for_the_highest_recommendation_of_300_s() -> None:
    """Recommendations 10, then 6, then 3 are followed only as each ages out of the window."""

    def load(t: float) -> float:
        return 100.0 if t < 100 else 60.0 if t < 160 else 30.0

    ticks = drive.run(hpa.Hpa(target=TARGET), load, end_s=480, replicas=10)
    # The last 10 was recorded at 90 s: it counts until 390 s; the last 6 (150 s) until 450 s.
    assert changes(ticks) == [(405.0, 6), (465.0, 3)]
    held = at(ticks, 390.0)
    assert (held.kind, held.reason, held.desired) == (Kind.HOLD, Reason.COOLDOWN, 10)
    assert held.contributions[Signal.LOAD].desired == 3


def test_pods_not_serving_count_with_a_zero_sample() -> None:
    """Two warming pods dilute the per-pod average: 36 rps over 4 pods is in band, not 1.8x."""
    ticks = drive.run(
        hpa.Hpa(target=TARGET), lambda t: 36.0, end_s=15, replicas=4, serving=lambda r: 2
    )
    decision = at(ticks, 15.0)
    assert (decision.kind, decision.reason) == (Kind.STEADY, Reason.IN_DEADBAND)
    assert decision.contributions[Signal.LOAD].ratio == pytest.approx(0.9)


@pytest.mark.parametrize(
    ("mode", "load", "proposal"),
    [
        (hpa.NotServingPods.REPORT_ZERO, 10.0, 1),  # 10 over 4 pods: ratio 0.25, ceil(1.0)
        (hpa.NotServingPods.MISSING, 10.0, 3),  # the 2 missing count at target: ceil(0.75 x 4)
        (hpa.NotServingPods.PENDING, 10.0, 1),  # pending pods are ignored on a scale-down
        (hpa.NotServingPods.REPORT_ZERO, 60.0, 6),  # every mode scales up to ceil(60 / 10)
        (hpa.NotServingPods.MISSING, 60.0, 6),
        (hpa.NotServingPods.PENDING, 60.0, 6),
    ],
)
def test_pods_not_serving_follow_replica_calculator(
    mode: hpa.NotServingPods, load: float, proposal: int
) -> None:
    """4 replicas with 2 serving propose what `calcPlainMetricReplicas` computes for each mode."""
    policy = hpa.Hpa(target=TARGET, not_serving=mode)
    ticks = drive.run(policy, lambda t: load, end_s=15, replicas=4, serving=lambda r: 2)
    assert at(ticks, 15.0).contributions[Signal.LOAD].desired == proposal


def test_a_missing_sample_holds() -> None:
    """A sync without a metric sample does not scale and says why."""
    ticks = drive.run(hpa.Hpa(target=TARGET), lambda t: math.nan, end_s=15, replicas=4)
    decision = at(ticks, 15.0)
    assert (decision.kind, decision.reason, decision.desired) == (
        Kind.HOLD,
        Reason.MISSING_DATA,
        4,
    )


def test_a_count_above_max_is_brought_back_before_any_metric() -> None:
    """12 replicas under a max of 10 go to 10 at the first sync, whatever the load."""
    ticks = drive.run(
        hpa.Hpa(target=TARGET), lambda t: 500.0, end_s=15, replicas=12, max_replicas=10
    )
    decision = at(ticks, 15.0)
    assert (decision.kind, decision.reason, decision.desired, decision.bound) == (
        Kind.SCALE_DOWN,
        Reason.ABOVE_MAX,
        10,
        Bound.MAX,
    )


def test_at_max_a_higher_proposal_is_steady_at_the_bound() -> None:
    """At max replicas a proposal above it changes nothing and names the bound."""
    ticks = drive.run(
        hpa.Hpa(target=TARGET), lambda t: 500.0, end_s=15, replicas=10, max_replicas=10
    )
    decision = at(ticks, 15.0)
    assert (decision.kind, decision.desired, decision.bound) == (Kind.STEADY, 10, Bound.MAX)


def test_step_load_scales_once_the_sync_sees_it() -> None:
    """A step at 16 s is acted on at the 30 s sync, not before."""
    ticks = drive.run(hpa.Hpa(target=TARGET), step(20.0, 60.0, 16.0), end_s=30, replicas=2)
    assert changes(ticks) == [(30.0, 4)]

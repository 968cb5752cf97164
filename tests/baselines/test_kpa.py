"""The KPA baseline against hand-computed decider ticks (knative `scaling/autoscaler.go`)."""

from __future__ import annotations

import math

import pytest

from autoscaler.baselines import kpa
from autoscaler.core.model import Kind, Reason

from . import drive
from .drive import at, changes

TARGET = 10.0  # TargetValue = 0.7 x 10 = 7 rps per pod


def test_target_value_is_target_times_utilisation() -> None:
    """`ResolveMetricTarget` for rps: 0.7 of the per-pod target."""
    assert kpa.Kpa(target=TARGET).target_value == pytest.approx(7.0)


def test_stable_mode_follows_the_sixty_second_average() -> None:
    """A step from 10 to 20 rps on 2 pods reaches 3 pods when the 60 s mean passes 14 (at 94 s)."""

    def load(t: float) -> float:
        return 10.0 if t < 70 else 20.0

    ticks = drive.run(kpa.Kpa(target=TARGET), load, end_s=100, replicas=2)
    # At 94 s the window holds 35 samples of 10 and 25 of 20: 850 / 60 = 14.17, ceil(2.02) = 3.
    assert changes(ticks) == [(94.0, 3)]
    assert (at(ticks, 94.0).kind, at(ticks, 94.0).reason) == (Kind.SCALE_UP, Reason.ABOVE_TARGET)
    assert "stable mode" in at(ticks, 92.0).detail


def test_panic_mode_enters_on_the_six_second_window_and_never_scales_down() -> None:
    """A jump to 40 rps panics at 72 s (4 / 2 >= 2), climbs to 6 pods and holds them until 134 s."""

    def load(t: float) -> float:
        return 40.0 if 70 <= t < 100 else 10.0

    ticks = drive.run(kpa.Kpa(target=TARGET), load, end_s=136, replicas=2)
    # 72 s: panic window (25 rps) asks ceil(25 / 7) = 4; then 35 -> 5 and 40 -> 6 pods.
    # Panic was last over its threshold at 72 s, so it ends at the first tick after 132 s,
    # when the 60 s mean (1350 / 60 = 22.5) asks for ceil(3.2) = 4.
    assert changes(ticks) == [(72.0, 4), (74.0, 5), (76.0, 6), (134.0, 4)]
    assert at(ticks, 72.0).reason is Reason.BURST
    held = at(ticks, 132.0)
    assert (held.kind, held.reason, held.desired) == (Kind.HOLD, Reason.BURST_HOLD, 6)
    assert "stable mode" in at(ticks, 134.0).detail


def test_a_new_decider_over_several_pods_starts_in_panic() -> None:
    """Created over 10 ready pods with no load, KPA holds 10 for a stable window first."""
    ticks = drive.run(kpa.Kpa(target=TARGET), lambda t: 0.0, end_s=60, replicas=10)
    assert changes(ticks) == []
    assert at(ticks, 60.0).reason is Reason.BURST_HOLD


def test_scale_down_rate_halves_at_most_per_decision() -> None:
    """From 10 pods with no load the count goes 10 -> 5 -> 2 -> 1, one tick apart."""
    ticks = drive.run(kpa.Kpa(target=TARGET), lambda t: 0.0, end_s=70, replicas=10)
    assert changes(ticks) == [(62.0, 5), (64.0, 2), (66.0, 1)]


def test_scale_up_rate_caps_at_a_thousand_times_ready() -> None:
    """One ready pod facing 1500 pods' worth of load is allowed ceil(1000 x 1) = 1000."""
    ticks = drive.run(
        kpa.Kpa(target=TARGET), lambda t: 7.0 * 1500, end_s=2, replicas=1, max_replicas=5000
    )
    assert changes(ticks) == [(2.0, 1000)]


def test_decides_only_every_two_seconds() -> None:
    """The decider ticks at 2, 4, 6 s after creation; other seconds keep the count."""
    ticks = drive.run(kpa.Kpa(target=TARGET), lambda t: 7.0, end_s=6, replicas=1)
    details = [k.decision.detail.startswith("no KPA tick") for k in ticks]
    assert details == [True, True, False, True, False, True, False]


def test_no_data_in_the_stable_window_holds() -> None:
    """With no sample at all there is nothing to scale on."""
    ticks = drive.run(kpa.Kpa(target=TARGET), lambda t: math.nan, end_s=2, replicas=3)
    assert (at(ticks, 2.0).kind, at(ticks, 2.0).reason) == (Kind.HOLD, Reason.MISSING_DATA)


def test_window_average_covers_only_the_seconds_since_the_first_sample() -> None:
    """Three samples average over 3 buckets, a gap inside counts as 0, a gap at the end shrinks."""
    buckets = kpa.WindowBuckets(60)
    for t in range(3):
        buckets.record(t, 10.0)
    assert buckets.average(2) == 10.0
    buckets.record(5, 10.0)  # 3 and 4 missing: 40 over 6 buckets
    assert buckets.average(5) == pytest.approx(6.666666, abs=1e-6)
    assert buckets.average(8) == pytest.approx(6.666666, abs=1e-6)  # 3 s later, same 6 buckets
    assert buckets.is_empty(66)


def test_scale_to_zero_is_off() -> None:
    """With min 0 and no load the count stops at 1, never 0."""
    ticks = drive.run(kpa.Kpa(target=TARGET), lambda t: 0.0, end_s=10, replicas=1, min_replicas=0)
    assert changes(ticks) == []
    assert at(ticks, 2.0).desired == 1

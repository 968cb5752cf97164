"""The standby pool's size: the shortfall of the reactive estimate within one start-up."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autoscaler.core import standby

TICK_S = 15.0


def feed(
    tracker: standby.ShortfallTracker,
    loads: list[float],
    *,
    estimates: list[float] | None = None,
    start_s: float = 0.0,
) -> float:
    """Records one tick per load, `TICK_S` apart, and returns the time of the last."""
    now_s = start_s
    for i, load in enumerate(loads):
        now_s = start_s + i * TICK_S
        estimate = load if estimates is None else estimates[i]
        tracker.record(now_s, estimate=estimate, load=load)
    return now_s


def test_a_rise_within_one_startup_is_the_shortfall_of_the_tick_before_it() -> None:
    """Load that rises from 10 to 30 a tick later is a shortfall of 20 for the tick before."""
    tracker = standby.ShortfallTracker(startup_s=60.0, horizon_s=3600.0, bucket_s=60.0)
    now_s = feed(tracker, [10.0] * 8 + [30.0] * 8, estimates=[10.0] * 16)
    assert tracker.quantile(1.0, now_s) == 20.0


def test_a_rise_later_than_one_startup_is_no_shortfall() -> None:
    """The estimate is short only of what the load does within one start-up of it."""
    tracker = standby.ShortfallTracker(startup_s=30.0, bucket_s=15.0)
    # Estimates track the load exactly: ticks before the rise see it only 15 s and 30 s ahead.
    now_s = feed(tracker, [10.0] * 20 + [50.0] * 20)
    worst = tracker.shortfalls(now_s)
    assert max(worst) == 40.0
    assert sum(1 for value in worst if value > 0) == 2


def test_load_below_the_estimate_is_no_shortfall() -> None:
    """The shortfall is never negative: an estimate above the load records 0."""
    tracker = standby.ShortfallTracker(startup_s=60.0)
    now_s = feed(tracker, [5.0] * 100, estimates=[20.0] * 100)
    assert tracker.quantile(1.0, now_s) == 0.0


def test_a_window_is_recorded_only_once_it_has_passed() -> None:
    """Nothing is recorded until the first window of one start-up has closed."""
    tracker = standby.ShortfallTracker(startup_s=120.0, bucket_s=15.0)
    feed(tracker, [10.0] * 8)
    assert tracker.history_s(105.0) == 0.0
    assert math.isnan(tracker.quantile(0.5, 105.0))
    tracker.record(120.0, estimate=10.0, load=10.0)
    assert tracker.history_s(120.0) == 15.0


def test_an_unknown_load_is_never_read_as_zero() -> None:
    """A NaN load extends no window and a NaN estimate starts none."""
    tracker = standby.ShortfallTracker(startup_s=30.0, bucket_s=15.0)
    tracker.record(0.0, estimate=10.0, load=10.0)
    tracker.record(15.0, estimate=math.nan, load=math.nan)
    tracker.record(30.0, estimate=10.0, load=10.0)
    assert list(tracker.shortfalls(30.0)) == [0.0]
    tracker.record(45.0, estimate=10.0, load=10.0)
    tracker.record(60.0, estimate=10.0, load=10.0)
    # The tick at 15 s started no window: buckets 0, 30 s only (and 45 s is still open).
    assert list(tracker.shortfalls(60.0)) == [0.0, 0.0]


def test_a_gap_in_the_ticks_does_not_stretch_a_window() -> None:
    """Load seen after a window's end, when ticks resume after a gap, is not its shortfall."""
    tracker = standby.ShortfallTracker(startup_s=30.0, bucket_s=15.0)
    tracker.record(0.0, estimate=10.0, load=10.0)
    tracker.record(600.0, estimate=90.0, load=90.0)
    assert list(tracker.shortfalls(600.0)) == [0.0]


def test_history_older_than_the_horizon_is_forgotten() -> None:
    """A surge an hour and more ago no longer counts; memory stays one ring of buckets."""
    tracker = standby.ShortfallTracker(startup_s=60.0, horizon_s=3600.0, bucket_s=60.0)
    surge = [10.0] * 8 + [100.0] * 4 + [10.0] * 8
    now_s = feed(tracker, surge, estimates=[10.0] * len(surge))
    assert tracker.quantile(1.0, now_s) == 90.0
    calm = [10.0] * int(3 * 3600 / TICK_S)
    now_s = feed(tracker, calm, start_s=now_s + TICK_S)
    assert tracker.quantile(1.0, now_s) == 0.0
    assert len(tracker.shortfalls(now_s)) <= 60
    assert tracker.history_s(now_s) <= 3600.0


def test_ticks_must_go_forward() -> None:
    """A tick before the last one is a programming error."""
    tracker = standby.ShortfallTracker(startup_s=60.0)
    tracker.record(100.0, estimate=1.0, load=1.0)
    with pytest.raises(ValueError, match="forward"):
        tracker.record(99.0, estimate=1.0, load=1.0)


def test_pool_is_zero_with_too_little_history() -> None:
    """Ten minutes of shortfalls are not enough for a pool that needs fifteen."""
    tracker = standby.ShortfallTracker(startup_s=60.0)
    now_s = feed(tracker, [10.0, 50.0] * 24, estimates=[10.0] * 48)
    size = standby.pool_size(
        standby.PoolConfig(min_history_s=900.0), tracker, now_s=now_s, capacity_per_replica=10.0
    )
    assert size.replicas == 0
    assert "needs 900 s" in size.why


def test_pool_covers_the_shortfall_quantile_in_replicas() -> None:
    """A shortfall of 25 with 10 per replica at target asks for 3 standby replicas."""
    tracker = standby.ShortfallTracker(startup_s=60.0)
    n = int(3600 / TICK_S)
    loads = [35.0 if i % 8 == 4 else 10.0 for i in range(n)]
    now_s = feed(tracker, loads, estimates=[10.0] * n)
    size = standby.pool_size(
        standby.PoolConfig(cap=8), tracker, now_s=now_s, capacity_per_replica=10.0
    )
    assert size.shortfall == 25.0
    assert size.replicas == 3
    assert "= 3" in size.why


def test_pool_never_exceeds_its_cap() -> None:
    """A shortfall worth 9 replicas is clipped to a cap of 2, and says so."""
    tracker = standby.ShortfallTracker(startup_s=60.0)
    n = int(3600 / TICK_S)
    now_s = feed(tracker, [10.0, 100.0] * (n // 2), estimates=[10.0] * n)
    size = standby.pool_size(
        standby.PoolConfig(cap=2), tracker, now_s=now_s, capacity_per_replica=10.0
    )
    assert size.replicas == 2
    assert "capped at 2" in size.why


def test_a_fixed_count_overrides_the_automatic_size() -> None:
    """A fixed count is the pool whatever the history holds."""
    tracker = standby.ShortfallTracker(startup_s=60.0)
    size = standby.pool_size(
        standby.PoolConfig(fixed=3), tracker, now_s=0.0, capacity_per_replica=10.0
    )
    assert size.replicas == 3
    assert size.why == "fixed at 3"


def test_no_capacity_gives_no_pool() -> None:
    """Without a known per-replica capacity the automatic pool is 0."""
    tracker = standby.ShortfallTracker(startup_s=60.0)
    n = int(3600 / TICK_S)
    now_s = feed(tracker, [10.0, 40.0] * (n // 2), estimates=[10.0] * n)
    size = standby.pool_size(
        standby.PoolConfig(), tracker, now_s=now_s, capacity_per_replica=math.nan
    )
    assert size.replicas == 0


def test_a_cap_of_zero_turns_the_automatic_pool_off() -> None:
    """Cap 0 and no fixed count keep no standby replica."""
    tracker = standby.ShortfallTracker(startup_s=60.0)
    size = standby.pool_size(
        standby.PoolConfig(cap=0), tracker, now_s=0.0, capacity_per_replica=10.0
    )
    assert size.replicas == 0


def test_bad_configuration_raises() -> None:
    """A negative cap, a quantile outside (0, 1] and a bad horizon are programming errors."""
    with pytest.raises(ValueError, match="cap"):
        standby.PoolConfig(cap=-1)
    with pytest.raises(ValueError, match="quantile"):
        standby.PoolConfig(quantile=0.0)
    with pytest.raises(ValueError, match="horizon_s"):
        standby.ShortfallTracker(startup_s=60.0, horizon_s=10.0, bucket_s=60.0)
    with pytest.raises(ValueError, match="startup_s"):
        standby.ShortfallTracker(startup_s=math.nan)


@settings(max_examples=60, deadline=None)
@given(
    loads=st.lists(st.floats(0.0, 1e4, allow_nan=False), min_size=1, max_size=400),
    cap=st.integers(0, 6),
    capacity=st.floats(0.1, 100.0),
    startup_s=st.sampled_from([0.0, 15.0, 60.0, 240.0]),
)
def test_automatic_pool_stays_within_zero_and_its_cap(
    loads: list[float], cap: int, capacity: float, startup_s: float
) -> None:
    """Whatever the load, the automatic pool is within [0, cap] and shortfalls are >= 0."""
    tracker = standby.ShortfallTracker(startup_s=startup_s, horizon_s=900.0, bucket_s=60.0)
    now_s = feed(tracker, loads, estimates=[loads[0]] * len(loads))
    assert all(value >= 0 for value in tracker.shortfalls(now_s))
    assert len(tracker.shortfalls(now_s)) <= 15
    size = standby.pool_size(
        standby.PoolConfig(cap=cap, min_history_s=0.0),
        tracker,
        now_s=now_s,
        capacity_per_replica=capacity,
    )
    assert 0 <= size.replicas <= cap

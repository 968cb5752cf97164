"""The synthetic shapes added for the fair bench: seeded, bounded, and shaped as described."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from autoscaler.experiment import sweep
from bench import scenarios

NEW = ("diurnal-noise", "pareto-bursts", "code-assist", "workday")
PER_REPLICA = sweep.BASE.target_load_per_replica
LOWEST_TARGET = sweep.GRID[0] * sweep.BASE.replica_capacity_rps


def minute_means(arrivals: np.ndarray) -> np.ndarray:
    whole = len(arrivals) // 60 * 60
    means: np.ndarray = arrivals[:whole].reshape(-1, 60).mean(axis=1)
    return means


@pytest.mark.parametrize("name", NEW)
def test_new_shapes_are_seeded_and_fit_the_replica_bound(name: str) -> None:
    """Two builds are identical, and the busiest minute fits 100 replicas at the leanest target."""
    first = scenarios.build(name, sweep.BASE)
    again = scenarios.build(name, sweep.BASE)

    assert name in scenarios.NAMES
    assert np.array_equal(first.arrivals, again.arrivals)
    assert first.arrivals.min() >= 0
    assert minute_means(first.arrivals).max() / LOWEST_TARGET <= sweep.BASE.max_replicas
    assert first.opening_rps < np.max(minute_means(first.arrivals))


def test_diurnal_noise_swings_slowly_with_minute_noise_on_top() -> None:
    """Night at both ends, the peak mid-trace; minutes stray from the day's curve by about 15 %."""
    arrivals = scenarios.build("diurnal-noise", sweep.BASE).arrivals
    minutes = minute_means(arrivals) / PER_REPLICA
    t = (np.arange(len(minutes)) + 0.5) * 60.0
    day = 18.0 - 12.0 * np.cos(2 * np.pi * t / scenarios.DIURNAL_NOISE_S)

    assert len(arrivals) == scenarios.DIURNAL_NOISE_S
    assert np.corrcoef(minutes, day)[0, 1] > 0.9
    assert minutes[:5].mean() < 10 < 25 < minutes[40:50].mean()
    deviation = float(np.std(np.log(minutes / day)))
    poisson_alone = float(np.sqrt(1.0 / (60 * PER_REPLICA * day.min())))
    assert 0.08 < deviation < 0.25
    assert deviation > 1.5 * poisson_alone


def test_pareto_bursts_are_heavy_tailed_unannounced_and_capped() -> None:
    """Sizes from the Pareto floor to the cap, the largest several times the median; between
    bursts the load is the base."""
    bursts = scenarios.burst_schedule(3600, seed=48)
    sizes = np.array([extra for _, _, extra in bursts])
    arrivals = scenarios.build("pareto-bursts", sweep.BASE).arrivals

    assert len(bursts) >= 5
    assert sizes.min() >= scenarios.BURST_MIN_EXTRA
    assert sizes.max() <= scenarios.BURST_MAX_EXTRA
    assert sizes.max() >= 3 * np.median(sizes)
    assert all(30 <= length <= 180 for _, length, _ in bursts)
    assert all(b[0] > a[0] + a[1] for a, b in itertools.pairwise(bursts))
    calm = np.ones(len(arrivals), dtype=bool)
    for start, length, _ in bursts:
        calm[start : start + length] = False
    assert arrivals[calm].mean() / PER_REPLICA == pytest.approx(scenarios.BURSTS_BASE, rel=0.05)
    start, length, extra = max(bursts, key=lambda b: b[2])
    peak = arrivals[start : start + length].mean() / PER_REPLICA
    assert peak == pytest.approx(scenarios.BURSTS_BASE + extra, rel=0.05)
    assert scenarios.build("pareto-bursts", sweep.BASE).opening_rps / PER_REPLICA < 12


def test_code_assist_alternates_quiet_and_busy_minutes_with_short_spikes() -> None:
    """Outside spikes each minute sits at the quiet or the busy level, the two alternate several
    times, and each spike lasts at most 20 s at 2 to 3 times its minute's level."""
    curve, spikes = scenarios.code_assist_curve(3600, seed=31)
    spiking = np.zeros(3600, dtype=bool)
    for start, length in spikes:
        spiking[start : start + length] = True
    levels = np.repeat(np.arange(60), 60)
    minute_level = {int(m): float(np.median(curve[(levels == m) & ~spiking])) for m in range(60)}

    assert set(minute_level.values()) == {scenarios.CODE_QUIET, scenarios.CODE_BUSY}
    states = [minute_level[m] == scenarios.CODE_BUSY for m in range(60)]
    assert sum(a != b for a, b in itertools.pairwise(states)) >= 8
    assert len(spikes) == scenarios.CODE_SPIKES_PER_HOUR
    assert all(1 <= length <= scenarios.CODE_SPIKE_S[1] for _, length in spikes)
    for start, _ in spikes:
        ratio = curve[start] / minute_level[start // 60]
        assert scenarios.CODE_SPIKE_FACTOR[0] - 1e-9 <= ratio <= 9.0  # overlapping spikes stack
    assert spiking.mean() < 0.15


def test_workday_replays_a_morning_with_its_days_before_as_the_past() -> None:
    """The replay starts at 07:00 of the third day; its past is everything before, quiet at
    night and busy by day, and only the replay rises past the night's level."""
    workday = scenarios.build("workday", sweep.BASE)
    start, end = scenarios.WORKDAY_REPLAY_S
    assert workday.past is not None
    assert len(workday.past) == scenarios.WORKDAY_PAST_DAYS * scenarios.DAY_S + start
    assert len(workday.arrivals) == end - start
    past = minute_means(workday.past) / PER_REPLICA
    noon = [day * 1440 + 12 * 60 for day in range(scenarios.WORKDAY_PAST_DAYS)]
    assert all(past[m] > 20 for m in noon)
    assert past[-60:].mean() < 8  # the night before the replay
    replay = minute_means(workday.arrivals) / PER_REPLICA
    assert replay[:30].mean() < 8
    assert replay[-30:].mean() > 20

"""Sliding windows and their smoothed estimates: hand-computed cases, then properties."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from autoscaler.core import model, smoothing
from autoscaler.core.smoothing import Estimates, SmoothingConfig, Windows

INF = math.inf


def windows(*, window_s: float = 300.0, burst_window_s: float = 6.0, n_signals: int = 1) -> Windows:
    config = SmoothingConfig(window_s=window_s, tick_s=1.0, burst_window_s=burst_window_s)
    return Windows(config, n_signals=n_signals)


def ids(*names: str) -> list[model.ServiceId]:
    return [model.ServiceId(name) for name in names]


def record_series(w: Windows, series: Sequence[float], *, start_s: float = 0.0) -> float:
    """Record one value per tick for the first service; returns the time of the last tick."""
    rows = w.rows_for(ids("a"))
    now = start_s
    for i, value in enumerate(series):
        now = start_s + i
        w.record(now, rows, np.array([[value]]))
    return now


def estimate_one(w: Windows, now_s: float, half_life_s: float, name: str = "a") -> Estimates:
    return w.estimate(now_s, w.rows_for(ids(name)), np.array([half_life_s]))


def scalar(a: np.ndarray) -> float:
    return float(a[0, 0])


# Hand-computed cases -------------------------------------------------------------------------


def test_mean_weights_each_sample_by_two_to_minus_age_over_half_life() -> None:
    """Samples 10, 20, 40 with a half-life of one tick weigh 1/4, 1/2, 1: the mean is 30."""
    w = windows()
    now = record_series(w, [10.0, 20.0, 40.0])
    assert scalar(estimate_one(w, now, 1.0).mean) == pytest.approx(30.0, rel=1e-12)


@pytest.mark.parametrize("half_life_s", [2.0, 7.5, 60.0])
def test_mean_matches_the_exponential_formula(half_life_s: float) -> None:
    """The mean equals sum(2^(-age/h) x) / sum(2^(-age/h)) over the window."""
    series = [float((7 * i) % 11) for i in range(40)]
    w = windows()
    now = record_series(w, series)
    ages = np.arange(len(series))[::-1]
    weights = 2.0 ** (-ages / half_life_s)
    expected = float(np.sum(weights * series) / np.sum(weights))
    assert scalar(estimate_one(w, now, half_life_s).mean) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("half_life_s", [1.0, 10.0, INF])
def test_trend_of_a_linear_ramp_is_its_slope(half_life_s: float) -> None:
    """A ramp 5 + 2t has trend 2 per second and level equal to its current value."""
    w = windows()
    now = record_series(w, [5.0 + 2.0 * t for t in range(30)])
    est = estimate_one(w, now, half_life_s)
    assert scalar(est.trend_per_s) == pytest.approx(2.0, rel=1e-9)
    assert scalar(est.level) == pytest.approx(5.0 + 2.0 * 29, rel=1e-9)
    assert scalar(est.mean) < scalar(est.level)


def test_trend_and_burst_window_are_in_seconds_not_ticks() -> None:
    """With half-second ticks a ramp of 2 per second has trend 2 and a 2 s burst spans 4 ticks."""
    config = SmoothingConfig(window_s=300.0, tick_s=0.5, burst_window_s=2.0)
    w = Windows(config, n_signals=1)
    rows = w.rows_for(ids("a"))
    times = [0.5 * i for i in range(40)]
    for t in times:
        w.record(t, rows, np.array([[3.0 + 2.0 * t]]))
    est = w.estimate(times[-1], rows, np.array([10.0]))
    assert scalar(est.trend_per_s) == pytest.approx(2.0)
    assert scalar(est.level) == pytest.approx(3.0 + 2.0 * times[-1])
    assert scalar(est.burst_mean) == pytest.approx(3.0 + 2.0 * (times[-1] - 0.75))


def test_float_times_land_on_whole_ticks() -> None:
    """Times built by adding 0.1 s ticks map to successive ticks, each fresh when recorded."""
    w = Windows(SmoothingConfig(window_s=30.0, tick_s=0.1), n_signals=1)
    rows = w.rows_for(ids("a"))
    now = 0.0
    for i in range(100):
        w.record(now, rows, np.array([[float(i)]]))
        est = w.estimate(now, rows, np.array([INF]))
        assert est.fresh[0, 0]
        assert scalar(est.last) == i
        now += 0.1
    assert scalar(est.mean) == pytest.approx(49.5)


def test_infinite_half_life_is_the_plain_mean() -> None:
    """With an infinite half-life every sample in the window weighs the same."""
    w = windows()
    now = record_series(w, [1.0, 2.0, 3.0, 10.0])
    assert scalar(estimate_one(w, now, INF).mean) == pytest.approx(4.0)


def test_burst_mean_is_the_plain_mean_of_the_last_burst_window() -> None:
    """With a 3 s burst window over 1..10 the burst mean is the mean of 8, 9, 10."""
    w = windows(burst_window_s=3.0)
    now = record_series(w, [float(v) for v in range(1, 11)])
    est = estimate_one(w, now, 5.0)
    assert scalar(est.burst_mean) == pytest.approx(9.0)


def test_nan_samples_are_excluded() -> None:
    """A NaN sample is missing, not zero: 10, NaN, 30 average to 20."""
    w = windows()
    now = record_series(w, [10.0, math.nan, 30.0])
    est = estimate_one(w, now, INF)
    assert scalar(est.mean) == pytest.approx(20.0)
    assert scalar(est.burst_mean) == pytest.approx(20.0)


def test_skipped_ticks_read_as_missing() -> None:
    """Ticks never recorded between two samples are missing, not a repeat of the last value."""
    w = windows()
    rows = w.rows_for(ids("a"))
    w.record(0.0, rows, np.array([[10.0]]))
    w.record(5.0, rows, np.array([[30.0]]))
    est = estimate_one(w, 5.0, INF)
    assert scalar(est.mean) == pytest.approx(20.0)
    assert scalar(est.trend_per_s) == pytest.approx(4.0)


def test_unlisted_rows_get_a_missing_sample() -> None:
    """A row left out of a tick's record has no sample at that tick."""
    w = windows()
    rows = w.rows_for(ids("a", "b"))
    w.record(0.0, rows, np.array([[10.0], [100.0]]))
    w.record(1.0, rows[:1], np.array([[20.0]]))
    est = w.estimate(1.0, rows, np.array([INF, INF]))
    np.testing.assert_allclose(est.mean[:, 0], [15.0, 100.0])
    assert est.fresh[:, 0].tolist() == [True, False]


def test_samples_older_than_the_window_are_dropped() -> None:
    """With a 5 s window over samples 0..9, only 5..9 count."""
    w = windows(window_s=5.0)
    now = record_series(w, [float(v) for v in range(10)])
    assert scalar(estimate_one(w, now, INF).mean) == pytest.approx(7.0)


def test_a_window_with_no_sample_left_is_empty() -> None:
    """Once the last sample has aged out, every estimate is NaN and nothing is fresh."""
    w = windows(window_s=5.0)
    record_series(w, [3.0])
    for now, present in ((4.0, True), (5.0, False)):
        est = estimate_one(w, now, INF)
        assert math.isnan(scalar(est.mean)) is not present
        assert not est.fresh[0, 0]
    est = estimate_one(w, 5.0, INF)
    assert all(math.isnan(scalar(a)) for a in (est.level, est.trend_per_s, est.burst_mean))


def test_fresh_only_when_the_current_tick_has_a_value() -> None:
    """The estimate is fresh at a recorded tick, and not at a NaN or an unrecorded one."""
    w = windows()
    rows = w.rows_for(ids("a"))
    w.record(0.0, rows, np.array([[10.0]]))
    est = estimate_one(w, 0.0, INF)
    assert est.fresh[0, 0]
    assert scalar(est.last) == 10.0

    w.record(1.0, rows, np.array([[math.nan]]))
    est = estimate_one(w, 1.0, INF)
    assert not est.fresh[0, 0]
    assert math.isnan(scalar(est.last))
    assert scalar(est.mean) == pytest.approx(10.0)

    est = estimate_one(w, 2.0, INF)
    assert not est.fresh[0, 0]
    assert scalar(est.mean) == pytest.approx(10.0)


def test_recording_a_tick_twice_overwrites_it() -> None:
    """A second record at the same tick replaces the first."""
    w = windows()
    rows = w.rows_for(ids("a"))
    w.record(3.0, rows, np.array([[10.0]]))
    w.record(3.4, rows, np.array([[50.0]]))
    assert scalar(estimate_one(w, 3.0, INF).mean) == pytest.approx(50.0)


def test_going_back_in_time_raises() -> None:
    """Recording a tick earlier than the last one is a programming error."""
    w = windows()
    rows = w.rows_for(ids("a"))
    w.record(10.0, rows, np.array([[1.0]]))
    with pytest.raises(ValueError, match="forward in time"):
        w.record(9.0, rows, np.array([[1.0]]))


def test_rows_are_stable_and_recycled_by_forget() -> None:
    """A service keeps its row; a forgotten row goes to the next new service, empty."""
    w = windows()
    first = w.rows_for(ids("a", "b"))
    assert w.rows_for(ids("b", "a")).tolist() == first[::-1].tolist()
    w.record(0.0, first, np.array([[10.0], [20.0]]))

    w.forget(ids("a", "unknown"))
    assert w.known() == set(ids("b"))
    assert len(w) == 1
    (row,) = w.rows_for(ids("c"))
    assert row == first[0]
    est = estimate_one(w, 0.0, INF, name="c")
    assert math.isnan(scalar(est.mean))
    assert not est.fresh[0, 0]

    w.record(1.0, w.rows_for(ids("c")), np.array([[7.0]]))
    assert scalar(estimate_one(w, 1.0, INF, name="c").mean) == pytest.approx(7.0)
    assert scalar(estimate_one(w, 1.0, INF, name="b").mean) == pytest.approx(20.0)


def test_rows_grow_past_the_initial_allocation() -> None:
    """Many services each keep their own history as the buffer grows."""
    w = windows()
    names = ids(*(f"s{i}" for i in range(50)))
    rows = w.rows_for(names)
    assert sorted(rows.tolist()) == list(range(50))
    w.record(0.0, rows, np.arange(50.0).reshape(50, 1))
    more = w.rows_for(ids(*(f"t{i}" for i in range(50))))
    w.record(1.0, more, np.full((50, 1), -1.0))
    est = w.estimate(1.0, rows, np.full(50, INF))
    np.testing.assert_allclose(est.mean[:, 0], np.arange(50.0))


def test_each_row_gets_its_own_half_life() -> None:
    """Two rows with one history and different half-lives match their separate estimates."""
    series = [0.0, 0.0, 0.0, 12.0]
    w = Windows(SmoothingConfig(), n_signals=1)
    rows = w.rows_for(ids("fast", "slow", "plain"))
    for t, value in enumerate(series):
        w.record(float(t), rows, np.full((3, 1), value))
    now = float(len(series) - 1)
    half_lives = np.array([1.0, 10.0, INF])
    batch = w.estimate(now, rows, half_lives)
    for i in range(3):
        alone = w.estimate(now, rows[i : i + 1], half_lives[i : i + 1])
        assert batch.mean[i, 0] == pytest.approx(alone.mean[0, 0], rel=1e-12)
    # 12 weighted 1 against zeros weighted 1/2, 1/4, 1/8 (h = 1), and plain: 12/4.
    assert batch.mean[0, 0] == pytest.approx(12.0 / 1.875)
    assert batch.mean[2, 0] == pytest.approx(3.0)
    assert batch.mean[0, 0] > batch.mean[1, 0] > batch.mean[2, 0]


def test_each_row_gets_its_own_window() -> None:
    """Two services with one history and windows of 10 s and 60 s, estimated in one call,
    match a plain per-service computation over their own windows."""
    series = [float((7 * t) % 11) + 0.5 * t for t in range(90)]
    w = windows(window_s=300.0)
    rows = w.rows_for(ids("short", "long"))
    for t, value in enumerate(series):
        w.record(float(t), rows, np.full((2, 1), value))
    now = float(len(series) - 1)

    batch = w.estimate(now, rows, np.array([INF, 20.0]), np.array([10.0, 60.0]))

    for i, (window, half_life) in enumerate(((10, INF), (60, 20.0))):
        values = np.array(series[-window:])
        ages = np.arange(window)[::-1]
        weights = np.ones(window) if math.isinf(half_life) else 2.0 ** (-ages / half_life)
        tau = -ages.astype(float)
        mean = float(np.sum(weights * values) / np.sum(weights))
        tbar = float(np.sum(weights * tau) / np.sum(weights))
        slope = float(np.sum(weights * (tau - tbar) * values) / np.sum(weights * (tau - tbar) ** 2))
        assert batch.mean[i, 0] == pytest.approx(mean, rel=1e-12)
        assert batch.trend_per_s[i, 0] == pytest.approx(slope, rel=1e-9)
        alone = windows(window_s=float(window))
        alone_rows = alone.rows_for(ids("alone"))
        for t, value in enumerate(series):
            alone.record(float(t), alone_rows, np.array([[value]]))
        plain = alone.estimate(now, alone_rows, np.array([half_life]))
        for got, want in zip(fields(batch), fields(plain), strict=True):
            np.testing.assert_allclose(got[i], want[0], rtol=1e-12)
    assert batch.mean[0, 0] != pytest.approx(batch.mean[1, 0], rel=1e-3)


def test_a_window_longer_than_the_ring_grows_it_and_keeps_what_it_held() -> None:
    """Asking for 20 s of a 10 s ring keeps the 10 samples held and holds 20 from then on."""
    w = windows(window_s=10.0)
    rows = w.rows_for(ids("a"))
    for t in range(15):
        w.record(float(t), rows, np.array([[float(t)]]))

    grown = w.estimate(14.0, rows, np.array([INF]), np.array([20.0]))

    assert w.slots == 20
    assert scalar(grown.mean) == pytest.approx(np.mean(np.arange(5.0, 15.0)))
    for t in range(15, 40):
        w.record(float(t), rows, np.array([[float(t)]]))
    later = w.estimate(39.0, rows, np.array([INF]), np.array([20.0]))
    assert scalar(later.mean) == pytest.approx(np.mean(np.arange(20.0, 40.0)))
    default = w.estimate(39.0, rows, np.array([INF]))
    assert scalar(default.mean) == pytest.approx(np.mean(np.arange(30.0, 40.0)))


def test_rows_are_allocated_exactly_for_a_fleet_that_arrives_at_once() -> None:
    """A thousand services at once take a thousand rows of 9 bytes per slot and signal, not
    a power of two."""
    w = windows(window_s=300.0, n_signals=4)
    w.rows_for(ids(*(f"s{i}" for i in range(1_000))))
    assert w.nbytes == 1_000 * 4 * 300 * 9 + 300 * 8


def test_signals_are_smoothed_independently() -> None:
    """Each signal column has its own samples, missing values and estimates."""
    w = Windows(SmoothingConfig())
    rows = w.rows_for(ids("a"))
    w.record(0.0, rows, np.array([[10.0, 1.0, math.nan]]))
    w.record(1.0, rows, np.array([[30.0, math.nan, 50.0]]))
    est = w.estimate(1.0, rows, np.array([INF]))
    np.testing.assert_allclose(est.mean[0], [20.0, 1.0, 50.0])
    assert est.fresh[0].tolist() == [True, False, True]

    (per_row,) = est.rows()
    assert per_row[model.Signal.LOAD].mean == pytest.approx(20.0)
    assert per_row[model.Signal.LOAD].fresh
    assert per_row[model.Signal.SATURATION].fresh is False
    assert per_row[model.Signal.CAPACITY].last == 50.0


def test_estimates_before_any_sample_are_empty() -> None:
    """Before the first record every estimate is NaN and nothing is fresh."""
    w = Windows(SmoothingConfig())
    est = w.estimate(0.0, w.rows_for(ids("a")), np.array([10.0]))
    assert np.isnan(est.mean).all()
    assert not est.fresh.any()
    (per_row,) = est.rows()
    load = per_row[model.Signal.LOAD]
    assert all(math.isnan(v) for v in (load.mean, load.level, load.trend_per_s, load.last))
    assert load.fresh is False


@pytest.mark.parametrize("half_life_s", [0.0, -1.0, math.nan])
def test_a_half_life_that_is_not_positive_raises(half_life_s: float) -> None:
    """A half-life of zero, below zero or NaN is a programming error."""
    w = windows()
    now = record_series(w, [1.0])
    with pytest.raises(ValueError, match="half-life"):
        estimate_one(w, now, half_life_s)


@pytest.mark.parametrize(
    "kwargs", [{"tick_s": 0.0}, {"window_s": 0.5, "tick_s": 1.0}, {"burst_window_s": 0.0}]
)
def test_invalid_smoothing_config_raises(kwargs: dict[str, float]) -> None:
    """A window shorter than a tick, or a non-positive tick or burst window, is rejected."""
    with pytest.raises(ValueError, match=r"must|needs"):
        SmoothingConfig(**kwargs)


# Properties ----------------------------------------------------------------------------------

SLOTS = 20
HALF_LIVES = st.sampled_from([0.5, 1.0, 3.0, 10.0, 100.0, INF])
SAMPLES = st.floats(-1000.0, 1000.0) | st.just(math.nan)
SERIES = st.lists(SAMPLES, min_size=1, max_size=2 * SLOTS)


def small_windows(burst_window_s: float = 6.0) -> Windows:
    return windows(window_s=float(SLOTS), burst_window_s=burst_window_s)


def tolerance(values: Sequence[float]) -> float:
    return 1e-9 * max(1.0, *(abs(v) for v in values))


@settings(max_examples=60, deadline=None)
@given(series=SERIES, half_life_s=HALF_LIVES)
def test_means_lie_within_the_window_samples(series: list[float], half_life_s: float) -> None:
    """The mean, and the burst mean, lie within [min, max] of the valid samples they cover."""
    w = small_windows()
    now = record_series(w, series)
    est = estimate_one(w, now, half_life_s)
    in_window = [v for v in series[-SLOTS:] if not math.isnan(v)]
    in_burst = [v for v in series[-6:] if not math.isnan(v)]
    for values, got in ((in_window, scalar(est.mean)), (in_burst, scalar(est.burst_mean))):
        if not values:
            assert math.isnan(got)
        else:
            slack = tolerance(values)
            assert min(values) - slack <= got <= max(values) + slack


@settings(max_examples=60, deadline=None)
@given(
    value=st.floats(-1000.0, 1000.0),
    present=st.lists(st.booleans(), min_size=1, max_size=2 * SLOTS),
    half_life_s=HALF_LIVES,
)
def test_constant_input_has_that_mean_and_level_and_no_trend(
    value: float, present: list[bool], half_life_s: float
) -> None:
    """A constant signal, with gaps, smooths to that constant with a zero trend."""
    assume(any(present[-SLOTS:]))
    w = small_windows()
    now = record_series(w, [value if p else math.nan for p in present])
    est = estimate_one(w, now, half_life_s)
    slack = tolerance([value])
    assert abs(scalar(est.mean) - value) <= slack
    assert abs(scalar(est.level) - value) <= 1e3 * slack
    assert abs(scalar(est.trend_per_s)) <= 1e3 * slack


@settings(max_examples=40, deadline=None)
@given(
    before=st.floats(-1000.0, 1000.0),
    after=st.floats(-1000.0, 1000.0),
    half_life_s=HALF_LIVES,
)
def test_mean_converges_monotonically_to_a_new_level(
    before: float, after: float, half_life_s: float
) -> None:
    """After a step the mean moves towards the new value at every tick and reaches it."""
    w = small_windows()
    rows = w.rows_for(ids("a"))
    for t in range(SLOTS):
        w.record(float(t), rows, np.array([[before]]))
    means = []
    for t in range(SLOTS, 2 * SLOTS + 5):
        w.record(float(t), rows, np.array([[after]]))
        means.append(scalar(w.estimate(float(t), rows, np.array([half_life_s])).mean))
    slack = tolerance([before, after])
    gaps = [abs(m - after) for m in means]
    assert all(g2 <= g1 + slack for g1, g2 in itertools.pairwise(gaps)), means
    lo, hi = min(before, after), max(before, after)
    assert all(lo - slack <= m <= hi + slack for m in means)
    assert gaps[-1] <= slack


@st.composite
def batches(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray]:
    """Samples of shape (ticks, rows, signals) and one half-life per row."""
    shape = (draw(st.integers(1, SLOTS + 5)), draw(st.integers(1, 6)), 2)
    samples = draw(arrays(np.float64, shape, elements=SAMPLES))
    half_lives = draw(arrays(np.float64, shape[1], elements=HALF_LIVES))
    return samples, half_lives


def fill(samples: np.ndarray, names: Sequence[str]) -> tuple[Windows, np.ndarray]:
    w = windows(window_s=float(SLOTS), n_signals=samples.shape[2])
    rows = w.rows_for(ids(*names))
    for t, tick in enumerate(samples):
        w.record(float(t), rows, tick)
    return w, rows


def fields(est: Estimates) -> list[np.ndarray]:
    return [est.mean, est.level, est.trend_per_s, est.burst_mean, est.last, est.fresh]


@settings(max_examples=40, deadline=None)
@given(batch=batches(), data=st.data())
def test_a_row_does_not_depend_on_the_other_rows(
    batch: tuple[np.ndarray, np.ndarray], data: st.DataObject
) -> None:
    """Each row's estimates are the same alone, in any subset of the batch, or in all of it."""
    samples, half_lives = batch
    n_rows = samples.shape[1]
    w, rows = fill(samples, [f"s{i}" for i in range(n_rows)])
    now = float(samples.shape[0] - 1)
    whole = w.estimate(now, rows, half_lives)
    subset = data.draw(st.lists(st.integers(0, n_rows - 1), min_size=1, unique=True))
    part = w.estimate(now, rows[subset], half_lives[subset])
    for i in range(n_rows):
        alone_w, alone_rows = fill(samples[:, i : i + 1], [f"s{i}"])
        alone = alone_w.estimate(now, alone_rows, half_lives[i : i + 1])
        for got, want in zip(fields(whole), fields(alone), strict=True):
            np.testing.assert_allclose(got[i], want[0], rtol=1e-9, atol=1e-9)
    for got, want in zip(fields(part), fields(whole), strict=True):
        np.testing.assert_allclose(got, want[subset], rtol=1e-9, atol=1e-9)


@settings(max_examples=40, deadline=None)
@given(batch=batches(), data=st.data())
def test_permuting_rows_permutes_results(
    batch: tuple[np.ndarray, np.ndarray], data: st.DataObject
) -> None:
    """Asking for the rows in another order returns the same estimates in that order."""
    samples, half_lives = batch
    n_rows = samples.shape[1]
    w, rows = fill(samples, [f"s{i}" for i in range(n_rows)])
    now = float(samples.shape[0] - 1)
    order = np.array(data.draw(st.permutations(range(n_rows))), dtype=np.intp)
    straight = w.estimate(now, rows, half_lives)
    permuted = w.estimate(now, rows[order], half_lives[order])
    for got, want in zip(fields(permuted), fields(straight), strict=True):
        np.testing.assert_allclose(got, want[order], rtol=1e-9, atol=1e-9)


# The reduction against its plain form ---------------------------------------------------------


class PlainWindows(Windows):
    """`Windows` with the mask multiplied out for every row, as the reduction was first written."""

    def _reduce(self, picked: np.ndarray | slice, basis: np.ndarray) -> dict[str, np.ndarray]:
        k, slots = self._n_signals, self._slots
        val = self._val[picked].reshape(-1, slots)
        ok = self._ok[picked].reshape(-1, slots).astype(np.float64)
        m = (ok @ basis).reshape(-1, k, 7)
        s = (val @ basis[:, :4]).reshape(-1, k, 4)
        sxx = (np.square(val) @ basis[:, 0]).reshape(-1, k)
        return smoothing._fit(m, s, sxx)


def all_fields(est: Estimates) -> list[np.ndarray]:
    return [
        est.mean,
        est.level,
        est.trend_per_s,
        est.trend_stderr_per_s,
        est.mean_age_s,
        est.burst_mean,
        est.last,
        est.fresh,
    ]


@pytest.mark.parametrize(
    ("seed", "missing_ratio", "skipped_ticks"),
    [(1, 0.0, ()), (2, 0.0005, ()), (3, 0.01, (50, 51)), (4, 0.3, ()), (5, 1.0, ())],
)
def test_sharing_the_mask_sums_computes_what_the_plain_reduction_does(
    seed: int, missing_ratio: float, skipped_ticks: tuple[int, ...]
) -> None:
    """Estimates with the shared mask sums equal those of the mask multiplied out row by row."""
    rng = np.random.default_rng(seed)
    config = SmoothingConfig(window_s=120.0, tick_s=1.0, burst_window_s=6.0)
    shared, plain = Windows(config), PlainWindows(config)
    names = ids(*(f"s{i}" for i in range(3000)))
    rows = shared.rows_for(names)
    assert np.array_equal(rows, plain.rows_for(names))
    half_lives = rng.choice([30.0, 60.0, INF], size=len(names))
    window_s = rng.choice([60.0, 120.0, np.nan], size=len(names))
    for tick in range(200):
        if tick in skipped_ticks:
            continue
        values = rng.uniform(0.0, 50.0, size=(len(names), len(model.BASE_SIGNALS)))
        values[rng.random(values.shape) < missing_ratio] = np.nan
        listed = rows[rng.random(len(rows)) >= missing_ratio / 10]  # some rows miss a tick
        shared.record(float(tick), listed, values[: len(listed)])
        plain.record(float(tick), listed, values[: len(listed)])
        if tick % 40 == 39:
            for asked in (rows, rows[::-7]):
                got = shared.estimate(float(tick), asked, half_lives[asked], window_s[asked])
                want = plain.estimate(float(tick), asked, half_lives[asked], window_s[asked])
                for a, b in zip(all_fields(got), all_fields(want), strict=True):
                    np.testing.assert_allclose(a, b, rtol=1e-12, atol=0.0)

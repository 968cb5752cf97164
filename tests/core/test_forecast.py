"""The seasonal forecast: its backtest, its vote, and how the policy takes it."""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autoscaler.core import forecast, model, policy
from autoscaler.core.model import Kind, Reason, Signal

from . import builders
from .builders import estimate

DAY_S = 86_400.0
STEP_S = 60.0
CONFIG = model.ForecastConfig()


def daily(days: float, *, noise: float = 0.05, seed: int = 3) -> forecast.History:
    """Per-minute load of a service busy by day and quiet by night, from time 0."""
    t = np.arange(int(days * DAY_S / STEP_S)) * STEP_S
    shape = 100.0 - 80.0 * np.cos(2 * np.pi * t / DAY_S)
    rng = np.random.default_rng(seed)
    values = shape * np.exp(rng.normal(0.0, noise, len(t)))
    return forecast.History(0.0, STEP_S, values)


def flat(days: float, *, noise: float = 0.1, seed: int = 5) -> forecast.History:
    """Per-minute load that only wanders around one level."""
    n = int(days * DAY_S / STEP_S)
    rng = np.random.default_rng(seed)
    return forecast.History(0.0, STEP_S, 100.0 * np.exp(rng.normal(0.0, noise, n)))


def test_daily_load_passes_the_backtest_with_a_day_period() -> None:
    """Two days of a daily pattern turn the forecast on, reading the day before."""
    history = daily(2)
    scored = forecast.backtest(CONFIG, history, now_s=history.end_s, horizon_s=600.0)
    assert scored.on, scored.why
    assert scored.period_s == DAY_S
    assert scored.forecast_error_ratio < scored.reactive_error_ratio
    assert "day forecast beats the reactive estimate" in scored.why


def test_a_week_of_history_reads_the_week_before() -> None:
    """With more than a week of history the forecast reads the same time a week earlier."""
    history = daily(8)
    scored = forecast.backtest(CONFIG, history, now_s=history.end_s, horizon_s=600.0)
    assert scored.on, scored.why
    assert scored.period_s == 7 * DAY_S


def test_flat_noisy_load_keeps_the_forecast_off() -> None:
    """On load with no pattern the forecast does not beat the reactive estimate and stays off."""
    history = flat(3)
    scored = forecast.backtest(CONFIG, history, now_s=history.end_s, horizon_s=120.0)
    assert not scored.on
    assert "does not beat" in scored.why
    vote = forecast.vote(CONFIG, history, scored, now_s=history.end_s, horizon_s=120.0)
    assert not vote.on
    assert math.isnan(vote.load_per_s)
    assert vote.why == scored.why


def test_short_history_is_off_and_says_how_much_is_needed() -> None:
    """An hour of history is not enough: the vote is off and names what a day forecast needs."""
    history = daily(1 / 24)
    scored = forecast.backtest(CONFIG, history, now_s=history.end_s, horizon_s=120.0)
    assert not scored.on
    assert scored.why.startswith("1.0 h of load history; a day forecast needs")


def test_missing_history_is_never_read_as_zero() -> None:
    """A history of NaN is no history, and a gap where the forecast reads gives no vote."""
    empty = forecast.History(0.0, STEP_S, np.full(3000, np.nan))
    scored = forecast.backtest(CONFIG, empty, now_s=empty.end_s, horizon_s=120.0)
    assert not scored.on
    assert scored.why == "no load history"

    history = daily(3)
    now = history.end_s
    scored = forecast.backtest(CONFIG, history, now_s=now, horizon_s=600.0)
    assert scored.on
    holed = history.load_per_s.copy()
    holed[-60:] = np.nan  # the last hour is missing: no recent level
    gap = dataclasses.replace(history, load_per_s=holed)
    vote = forecast.vote(CONFIG, gap, scored, now_s=now, horizon_s=600.0)
    assert not vote.on
    assert "no load history" in vote.why


def test_the_vote_cannot_see_past_now() -> None:
    """Two histories equal up to now and different after it give the same vote."""
    history = daily(3)
    now = 2.5 * DAY_S
    cut = int(now / STEP_S)
    changed = history.load_per_s.copy()
    changed[cut:] *= 5.0
    other = dataclasses.replace(history, load_per_s=changed)
    scored = forecast.backtest(CONFIG, history, now_s=now, horizon_s=600.0)
    scored_other = forecast.backtest(CONFIG, other, now_s=now, horizon_s=600.0)
    assert scored == scored_other
    one = forecast.vote(CONFIG, history, scored, now_s=now, horizon_s=600.0)
    two = forecast.vote(CONFIG, other, scored, now_s=now, horizon_s=600.0)
    assert one == two


def test_the_vote_sees_the_morning_rise_coming() -> None:
    """Before the daily rise the vote is above the load now, by about the rise over the
    horizon."""
    history = daily(3, noise=0.0)
    now = 2 * DAY_S + 0.25 * DAY_S  # mid-morning: the load rises fastest
    horizon = 1_200.0
    scored = forecast.backtest(CONFIG, history, now_s=now, horizon_s=horizon)
    vote = forecast.vote(CONFIG, history, scored, now_s=now, horizon_s=horizon)
    assert vote.on
    load_now = 100.0 - 80.0 * math.cos(2 * math.pi * now / DAY_S)
    load_then = 100.0 - 80.0 * math.cos(2 * math.pi * (now + horizon) / DAY_S)
    assert vote.load_per_s > load_now
    assert abs(vote.load_per_s - load_then) < 0.02 * load_then
    assert vote.horizon_s == horizon


def test_the_horizon_is_the_start_up_time_within_bounds() -> None:
    """The horizon follows the observed start-up time, the default before one is seen, and
    stops at the cap."""
    assert forecast.horizon_s(CONFIG, None) == CONFIG.default_startup_s
    assert forecast.horizon_s(CONFIG, 120.0) == 120.0
    assert forecast.horizon_s(CONFIG, 10 * 3600.0) == CONFIG.max_horizon_s


def with_forecast(vote: model.ForecastVote | None, load: float = 40.0) -> model.Observation:
    return builders.observation(signals={Signal.LOAD: estimate(load)}, forecast=vote)


def test_the_policy_scales_up_on_the_forecast_with_its_own_reason() -> None:
    """A forecast that votes above the live load raises the load vote, and the decision says
    the seasonal forecast drove it."""
    config = builders.config(forecast=CONFIG)
    vote = model.ForecastVote(on=True, load_per_s=80.0, why="80/s expected", horizon_s=120.0)
    decision, _ = policy.decide(config, with_forecast(vote), builders.state())
    assert decision.kind is Kind.SCALE_UP
    assert decision.desired == 8
    assert decision.reason is Reason.SEASONAL
    assert decision.contributions[Signal.LOAD].estimator == "seasonal"
    assert decision.forecast == vote


def test_an_off_forecast_leaves_the_reactive_vote_and_is_reported() -> None:
    """An off forecast changes nothing, and the decision carries why it is off."""
    config = builders.config(forecast=CONFIG)
    off = model.ForecastVote.off("1.0 h of load history; a day forecast needs 1.5 d")
    decision, _ = policy.decide(config, with_forecast(off), builders.state())
    plain, _ = policy.decide(config, with_forecast(None), builders.state())
    assert (decision.kind, decision.desired) == (plain.kind, plain.desired)
    assert decision.forecast == off


def test_the_forecast_annotation_off_ignores_a_vote() -> None:
    """A service whose forecast is switched off does not scale on a vote."""
    vote = model.ForecastVote(on=True, load_per_s=80.0, why="80/s expected")
    decision, _ = policy.decide(builders.config(), with_forecast(vote), builders.state())
    assert decision.desired == 4


@settings(max_examples=200, deadline=None)
@given(
    load=st.floats(min_value=0.0, max_value=200.0),
    predicted=st.floats(min_value=0.0, max_value=200.0),
)
def test_the_forecast_only_ever_raises_the_count(load: float, predicted: float) -> None:
    """With the forecast on, the desired count is never below the reactive one."""
    config = builders.config(forecast=CONFIG, max_replicas=100)
    vote = model.ForecastVote(on=True, load_per_s=predicted, why="x")
    with_vote, _ = policy.decide(config, with_forecast(vote, load), builders.state())
    without, _ = policy.decide(config, with_forecast(None, load), builders.state())
    assert with_vote.desired >= without.desired


def test_default_has_the_forecast_and_seed_does_not() -> None:
    """The default policy carries the forecast's configuration; the seed policy has none."""
    assert policy.default(max_replicas=10, target_load_per_replica=1.0).forecast is not None
    assert policy.seed(max_replicas=10, target_load_per_replica=1.0).forecast is None


@settings(max_examples=100, deadline=None)
@given(
    values=st.lists(
        st.one_of(st.floats(min_value=0.0, max_value=1e6), st.just(math.nan)), max_size=300
    ),
    every=st.integers(min_value=1, max_value=70),
)
def test_prefix_sums_kept_at_marks_are_the_whole_arrays_to_the_bit(
    values: list[float], every: int
) -> None:
    """Prefix sums looked up between the kept marks equal the whole prefix arrays bit for bit."""
    array = np.asarray(values, dtype=np.float64)
    whole = forecast.Sums.of(array, every=1)
    steps = np.arange(len(array) + 1, dtype=np.int64)
    assert np.array_equal(forecast.Sums.of(array, every=every).at(steps), whole.at(steps))


@settings(max_examples=100, deadline=None)
@given(
    values=st.lists(st.floats(min_value=0.0, max_value=1e6), min_size=1, max_size=300),
    cuts=st.lists(st.integers(min_value=0, max_value=300), max_size=8),
    every=st.integers(min_value=1, max_value=70),
)
def test_prefix_sums_of_pieces_are_those_of_the_whole_history_with_nan_between(
    values: list[float], cuts: list[int], every: int
) -> None:
    """Prefix sums of a history held in pieces equal, bit for bit, those of the whole history
    with NaN at every step no piece holds."""
    array = np.asarray(values, dtype=np.float64)
    bounds = sorted({0, len(array), *(c for c in cuts if c < len(array))})
    pieces = tuple(
        (lo, array[lo:hi]) for n, (lo, hi) in enumerate(itertools.pairwise(bounds)) if n % 2 == 0
    )
    dense = np.full(len(array), np.nan)
    for lo, piece in pieces:
        dense[lo : lo + len(piece)] = piece
    held = forecast.History(0.0, STEP_S, np.empty(0), pieces=pieces, length=len(array)).held
    steps = np.arange(len(array) + 1, dtype=np.int64)
    whole = forecast.Sums.of(dense, every=1).at(steps)
    assert np.array_equal(forecast.Sums.of(held, every=every).at(steps), whole)


def test_a_week_of_history_keeps_a_few_kib_of_prefix_sums_and_votes_the_same() -> None:
    """A week and a day of minutes keep under 10 KiB of prefix sums, and vote as the whole
    arrays do."""
    history = daily(8)
    scored = forecast.backtest(CONFIG, history, now_s=history.end_s, horizon_s=600.0)
    assert scored.on, scored.why
    for ahead_s in (0.0, 3_600.0, 86_400.0):
        now_s = history.end_s + ahead_s
        kept = forecast.vote(CONFIG, history, scored, now_s=now_s, horizon_s=600.0)
        whole = dataclasses.replace(history)
        vars(whole)["sums"] = forecast.Sums.of(whole.load_per_s, every=1)  # the cache, filled
        assert forecast.vote(CONFIG, whole, scored, now_s=now_s, horizon_s=600.0) == kept
    assert history.sums.marks.nbytes < 10 * 1024


def stretched(history: forecast.History, config: model.ForecastConfig) -> forecast.History:
    """The history as the Prometheus adapter keeps it: only the stretches the forecast reads,
    for votes up to a refresh after its end, in float32."""
    size = history.size
    pieces = []
    for lo, hi in forecast.reads(config, lead_s=config.refresh_s):
        first, end = max(0, size + lo), size + hi
        if first < end:
            pieces.append((first, history.load_per_s[first:end].astype(np.float32)))
    empty = np.empty(0, dtype=np.float32)
    return forecast.History(
        history.start_s, history.step_s, empty, pieces=tuple(pieces), length=size
    )


def holed(history: forecast.History, seed: int) -> forecast.History:
    """The history with a few hours of scattered minutes missing."""
    values = history.load_per_s.copy()
    rng = np.random.default_rng(seed)
    for start in rng.integers(0, len(values), 12):
        values[start : start + rng.integers(1, 40)] = np.nan
    return dataclasses.replace(history, load_per_s=values)


@pytest.mark.parametrize(
    "history",
    [
        daily(8),
        daily(8, noise=0.3, seed=11),
        holed(daily(8, seed=12), seed=1),
        daily(3, seed=13),
        holed(daily(2.2, noise=0.2, seed=14), seed=2),
        flat(8),
        daily(7 + 7 / 24, seed=15),  # the adapter's span: a week and seven hours
    ],
    ids=["week", "week-noisy", "week-holed", "days", "days-holed", "flat", "span"],
)
def test_the_stretches_kept_in_float32_backtest_and_vote_as_the_whole_history(
    history: forecast.History,
) -> None:
    """Only the stretches `reads` names, held in float32, give every backtest the same verdict,
    period and points, its error ratios within 1e-6, and every vote of the next refresh within
    1e-6 of its value, against the whole float64 history."""
    compact = stretched(history, CONFIG)
    held = sum(len(values) for _, values in compact.held.pieces)
    assert held * 4 < 0.2 * history.load_per_s.nbytes or history.size < 5 * 1_440
    end = history.end_s
    for horizon in (60.0, 600.0, CONFIG.max_horizon_s):
        whole = forecast.backtest(CONFIG, history, now_s=end, horizon_s=horizon)
        kept = forecast.backtest(CONFIG, compact, now_s=end, horizon_s=horizon)
        assert (kept.on, kept.period_s, kept.points) == (whole.on, whole.period_s, whole.points)
        for ratio in ("forecast_error_ratio", "reactive_error_ratio"):
            assert getattr(kept, ratio) == pytest.approx(getattr(whole, ratio), abs=1e-6)
        for now in np.arange(end, end + CONFIG.refresh_s + 1, STEP_S / 2):
            one = forecast.vote(CONFIG, history, whole, now_s=now, horizon_s=horizon)
            two = forecast.vote(CONFIG, compact, whole, now_s=now, horizon_s=horizon)
            assert two.on == one.on
            assert two.load_per_s == pytest.approx(one.load_per_s, rel=1e-6, nan_ok=True)


def test_a_vote_past_the_stretches_kept_is_off_rather_than_read_from_nothing() -> None:
    """Votes made long after the stretches were kept find no load one period ago and are off,
    never a forecast of zero."""
    history = daily(8)
    compact = stretched(history, CONFIG)
    scored = forecast.backtest(CONFIG, compact, now_s=compact.end_s, horizon_s=600.0)
    assert scored.on, scored.why
    late = forecast.vote(CONFIG, compact, scored, now_s=compact.end_s + 86_400.0, horizon_s=600.0)
    assert not late.on
    assert "no load history around this time one week ago" in late.why


def test_a_history_refuses_pieces_out_of_order_or_past_its_end() -> None:
    """Pieces that overlap, are empty or reach past the length are refused when made."""
    values = np.ones(10, dtype=np.float32)
    empty = np.empty(0, dtype=np.float32)
    for pieces, length in (
        (((0, values), (5, values)), 30),
        (((0, values), (20, empty)), 30),
        (((25, values),), 30),
    ):
        with pytest.raises(ValueError, match="pieces"):
            forecast.History(0.0, STEP_S, empty, pieces=pieces, length=length)


SMALL = model.ForecastConfig(
    periods_s=(7_200.0, 3_600.0),
    level_window_s=600.0,
    seasonal_window_s=300.0,
    backtest_s=1_800.0,
    max_horizon_s=900.0,
)
"""Periods of hours and windows of minutes: a few hundred steps backtest as days do."""
CONFIGS = (
    SMALL,
    dataclasses.replace(SMALL, periods_s=(3_600.0,), trend_weight=0.0, min_backtest_ratio=0.2),
    dataclasses.replace(SMALL, step_s=30.0, seasonal_window_s=0.0, margin_ratio=0.0),
)


@st.composite
def fleets(draw: st.DrawFn) -> tuple[list[forecast.Job], float]:
    """Backtests of several services at one time: histories of a few shapes (some sharing a
    length and a start, some not), whole or in pieces, float64 or float32, with NaN gaps,
    zero loads and too short ones, several configs and horizons."""
    jobs: list[forecast.Job] = []
    end_s = 30_000.0
    for _ in range(draw(st.integers(1, 4))):
        config = draw(st.sampled_from(CONFIGS))
        step_s = draw(st.sampled_from((config.step_s, config.step_s, 2 * config.step_s)))
        size = draw(st.integers(0, 450))
        start_s = end_s - size * step_s - draw(st.sampled_from((0.0, 0.5, 1.0))) * step_s
        in_pieces = draw(st.booleans())
        dtype = draw(st.sampled_from((np.float64, np.float32)))
        cuts = sorted({0, size, *draw(st.lists(st.integers(0, size), max_size=6))})
        seed = draw(st.integers(0, 2**32 - 1))
        rng = np.random.default_rng(seed)
        for _ in range(draw(st.integers(1, 6))):
            t = np.arange(size) * step_s + start_s
            level = draw(st.sampled_from((0.0, 1e-3, 1.0, 50.0, 1e5)))
            values = level * (1.5 - np.cos(2 * np.pi * t / config.periods_s[-1]))
            values *= np.exp(rng.normal(0.0, draw(st.sampled_from((0.0, 0.1, 0.5))), size))
            for at in rng.integers(0, max(1, size), draw(st.integers(0, 8))):
                values[at : at + rng.integers(1, 60)] = draw(st.sampled_from((np.nan, 0.0)))
            values = values.astype(dtype)
            if in_pieces and size:
                pieces = tuple(
                    (lo, values[lo:hi])
                    for k, (lo, hi) in enumerate(itertools.pairwise(cuts))
                    if k % 2 == draw(st.integers(0, 1)) and hi > lo
                ) or ((0, values),)
                history = forecast.History(
                    start_s, step_s, np.empty(0, dtype), pieces=pieces, length=size
                )
            else:
                history = forecast.History(start_s, step_s, values)
            horizon = draw(st.sampled_from((0.0, 60.0, 61.0, 600.0, 900.0)))
            jobs.append((config, history, horizon))
    order = draw(st.permutations(range(len(jobs))))
    return [jobs[k] for k in order], end_s


def anew(history: forecast.History) -> forecast.History:
    """The same history without its cached sums."""
    return dataclasses.replace(history)


@settings(max_examples=300, deadline=None)
@given(fleet=fleets())
def test_backtests_made_together_are_those_made_one_by_one(
    fleet: tuple[list[forecast.Job], float],
) -> None:
    """`backtests` gives each service the backtest `backtest` gives it alone, to the bit
    (verdict, period, points, error ratios, reason), and the votes after it read the same
    sums."""
    jobs, now_s = fleet
    together = forecast.backtests(jobs, now_s=now_s)
    assert len(together) == len(jobs)
    for (config, history, horizon), scored in zip(jobs, together, strict=True):
        alone = forecast.backtest(config, anew(history), now_s=now_s, horizon_s=horizon)
        assert (scored.on, scored.period_s, scored.points) == (
            alone.on,
            alone.period_s,
            alone.points,
        )
        for ratio in ("forecast_error_ratio", "reactive_error_ratio"):
            assert getattr(scored, ratio) == pytest.approx(
                getattr(alone, ratio), rel=1e-9, nan_ok=True
            )
        assert scored == alone
        for ahead_s in (0.0, config.step_s, 1_000.0):
            at_s = now_s + ahead_s
            kept = forecast.vote(config, history, scored, now_s=at_s, horizon_s=horizon)
            made = forecast.vote(config, anew(history), alone, now_s=at_s, horizon_s=horizon)
            assert kept == made


def test_backtests_together_keep_the_sums_of_the_histories_that_vote() -> None:
    """The histories whose backtest is on keep the sums their votes read, the same floats
    their own sums would be; the others keep none."""
    config = SMALL
    histories = [daily_small(seed) for seed in range(4)] + [flat_small(9)]
    jobs = [(config, h, 600.0) for h in histories]
    together = forecast.backtests(jobs, now_s=histories[0].end_s)
    assert [s.on for s in together] == [True, True, True, True, False]
    for history, scored in zip(histories, together, strict=True):
        if not scored.on:
            assert "sums" not in vars(history)
            continue
        kept = vars(history)["sums"]
        made = forecast.Sums.of(history.held, every=64)
        for field in ("marks", "marked", "until"):
            assert np.array_equal(getattr(kept, field), getattr(made, field))


def daily_small(seed: int) -> forecast.History:
    """Five of `SMALL`'s longest periods of a pattern that repeats each one, held in pieces."""
    size = round(5 * SMALL.periods_s[0] / STEP_S)
    t = np.arange(size) * STEP_S
    rng = np.random.default_rng(seed)
    values = (10.0 - 8.0 * np.cos(2 * np.pi * t / SMALL.periods_s[0])) * np.exp(
        rng.normal(0.0, 0.02, size)
    )
    pieces = ((0, values[: size // 3]), (size // 2, values[size // 2 :].astype(np.float32)))
    return forecast.History(0.0, STEP_S, np.empty(0), pieces=pieces, length=size)


def flat_small(seed: int) -> forecast.History:
    """As `daily_small`, with no pattern: only noise."""
    size = round(5 * SMALL.periods_s[0] / STEP_S)
    rng = np.random.default_rng(seed)
    values = 10.0 * np.exp(rng.normal(0.0, 0.3, size))
    pieces = ((0, values[: size // 3]), (size // 2, values[size // 2 :]))
    return forecast.History(0.0, STEP_S, np.empty(0), pieces=pieces, length=size)


@settings(max_examples=300, deadline=None)
@given(fleet=fleets(), data=st.data())
def test_votes_made_together_are_those_made_one_by_one(
    fleet: tuple[list[forecast.Job], float], data: st.DataObject
) -> None:
    """`votes` gives each service the vote `vote` gives it alone, to the bit (on or off, load,
    reason, horizon), whether its backtest was on or off, its sums kept by the backtests or
    made by the vote, at the backtest's time or steps after it."""
    jobs, now_s = fleet
    together = forecast.backtests(jobs, now_s=now_s)
    scored: list[forecast.Backtest] = []
    for (config, _, horizon), made in zip(jobs, together, strict=True):
        # Also every history as if its backtest were on for a period: most votes then read
        # what the history holds, some the gaps and the steps before its start.
        if data.draw(st.booleans()):
            period_s = data.draw(st.sampled_from(config.periods_s))
            made = forecast.Backtest(True, "on", period_s, horizon_s=horizon)
        scored.append(made)
    for ahead_s in (0.0, 60.0, 1_000.0):
        at_s = now_s + ahead_s
        vote_jobs = [
            (config, history, one, horizon)
            for (config, history, horizon), one in zip(jobs, scored, strict=True)
        ]
        voted = forecast.votes(vote_jobs, now_s=at_s)
        assert len(voted) == len(jobs)
        for (config, history, one, horizon), made in zip(vote_jobs, voted, strict=True):
            alone = forecast.vote(config, anew(history), one, now_s=at_s, horizon_s=horizon)
            assert made.on == alone.on
            assert made.why == alone.why
            assert made.horizon_s == alone.horizon_s
            assert np.array_equal(
                np.float64(made.load_per_s), np.float64(alone.load_per_s), equal_nan=True
            )
            assert math.copysign(1.0, made.load_per_s) == math.copysign(1.0, alone.load_per_s)


def test_votes_of_one_layout_are_made_together_in_chunks() -> None:
    """Votes that share a config, a period, a history layout and their steps are made in
    passes of `_VOTE_ROWS`, not one by one (the same votes, each history read once)."""
    config = SMALL
    histories = [daily_small(seed) for seed in range(5)]
    now_s = histories[0].end_s
    scored = forecast.backtests([(config, h, 600.0) for h in histories], now_s=now_s)
    assert all(s.on for s in scored)
    jobs = [(config, h, s, 600.0) for h, s in zip(histories, scored, strict=True)]
    calls: list[int] = []
    original = forecast._predict_rows

    def counted(*args: object, **kwargs: object) -> object:
        calls.append(len(args[1]))  # type: ignore[arg-type]
        return original(*args, **kwargs)  # type: ignore[arg-type]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(forecast, "_predict_rows", counted)
        voted = forecast.votes(jobs, now_s=now_s)
        assert calls == [5]
        patch.setattr(forecast, "_VOTE_ROWS", 2)
        assert forecast.votes(jobs, now_s=now_s) == voted
        assert calls == [5, 2, 2, 1]
    for (_, history, one, horizon), made in zip(jobs, voted, strict=True):
        assert made == forecast.vote(config, anew(history), one, now_s=now_s, horizon_s=horizon)
        assert made.on

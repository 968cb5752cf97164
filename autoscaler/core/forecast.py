"""The seasonal forecast (docs/benchmark.md, "The seasonal forecast"): one service's load
history in, a vote for the load one start-up ahead out, or no vote and why.

Many inference services follow the clock: the morning's rise comes at the same hour every day.
A reactive policy sees it only once it has happened, and new replicas serve one start-up later.
`vote` predicts the load at `now + horizon` (the horizon is the observed start-up time):

- **seasonal**: the mean load around the same time one period earlier (a week when the history
  holds that much, else a day), times the ratio of the recent level (the last
  `level_window_s`) to the level one period earlier;
- **trend**: the recent level's least-squares line, extended to the forecast time;
- blended as `(1 - trend_weight) x seasonal + trend_weight x trend`.

It votes only while `backtest` says it beats the reactive estimate for this service: over the
last `backtest_s`, and over the `backtest_s` after the same time one period ago (the hours to
come, as they went then), every past point is forecast from what was known one horizon before
it, and its mean absolute error is compared with that of the reactive estimate (the load as it
was then, which is what a reactive policy sizes for). A forecast that does not cut that error by
`margin_ratio`, or that does no better than its own recent level or trend without the season,
is off; so is one without enough history. Missing history is NaN, never zero.

Pure: arrays in, values out; no I/O, no clock (every time is an argument).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from autoscaler.core import model

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

_EPS = 1e-9


# Not slotted: `sums` is cached on the instance, so that the loop's vote every minute, for every
# service, costs a few lookups rather than a pass over days of history.
@dataclass(frozen=True)
class History:
    """A service's load, one mean per `step_s`: value `i` covers
    `[start_s + i x step_s, start_s + (i + 1) x step_s)`; NaN where nothing is known. Its
    values are not to be changed once made."""

    start_s: float
    step_s: float
    load_per_s: FloatArray

    @functools.cached_property
    def sums(self) -> dict[str, FloatArray]:
        """Prefix sums for windowed means and line fits: count, y, x, x², xy over known steps."""
        values = self.load_per_s
        known = np.isfinite(values)
        index = np.arange(len(values), dtype=np.float64)
        y = np.where(known, values, 0.0)
        x = np.where(known, index, 0.0)
        return {
            "n": _prefix(known.astype(np.float64)),
            "y": _prefix(y),
            "x": _prefix(x),
            "xx": _prefix(x * x),
            "xy": _prefix(x * y),
        }

    def __post_init__(self) -> None:
        if not self.step_s > 0:
            raise ValueError("history step_s must be > 0")

    @property
    def end_s(self) -> float:
        return self.start_s + len(self.load_per_s) * self.step_s

    def known_s(self) -> float:
        """Seconds of history with a value."""
        return float(np.count_nonzero(np.isfinite(self.load_per_s))) * self.step_s

    def completed(self, at_s: float) -> int:
        """How many steps lie wholly before `at_s` (at most the history's length)."""
        done = math.floor((at_s - self.start_s) / self.step_s + _EPS)
        return max(0, min(len(self.load_per_s), done))


@dataclass(frozen=True, slots=True)
class Backtest:
    """How the forecast did over the recent past, for one horizon."""

    on: bool
    why: str
    period_s: float | None = None
    """The period the forecast reads; None when no period has enough history."""
    forecast_error_ratio: float = math.nan
    """Mean absolute error of the forecast over the mean load."""
    reactive_error_ratio: float = math.nan
    """The same for the reactive estimate."""
    points: int = 0
    horizon_s: float = 0.0


def horizon_s(config: model.ForecastConfig, startup_s: float | None) -> float:
    """How far ahead to forecast: the observed start-up time, within the configured bounds."""
    startup = config.default_startup_s if startup_s is None else startup_s
    return min(config.max_horizon_s, max(0.0, startup))


def backtest(
    config: model.ForecastConfig, history: History, *, now_s: float, horizon_s: float
) -> Backtest:
    """Score the forecast against the reactive estimate over the last `config.backtest_s`,
    trying the periods in order and keeping the first with enough history."""
    if history.step_s != config.step_s:
        return Backtest(
            False,
            f"history in {history.step_s:g} s steps, the forecast reads {config.step_s:g} s",
        )
    if history.known_s() == 0:
        return Backtest(False, "no load history")
    wanted = 2 * max(1, round(config.backtest_s / config.step_s))
    shortest = min(config.periods_s)
    for period_s in config.periods_s:
        scored = _score(config, history, now_s=now_s, horizon_s=horizon_s, period_s=period_s)
        if scored is None:
            continue
        points, forecast_error, reactive_error, trend_error = scored
        if points < config.min_backtest_ratio * wanted:
            continue
        # Beating the reactive estimate is not enough: a mean over the recent level beats the
        # load of one step on noise alone. The seasonal part must also do better than the
        # recent level, or its line, without it.
        bar = (1.0 - config.margin_ratio) * reactive_error
        on = forecast_error <= bar and forecast_error <= trend_error
        verdict = "beats" if on else "does not beat"
        why = (
            f"{_period_name(period_s)} forecast {verdict} the reactive estimate over "
            f"{_hours(points * config.step_s)} (the last {_hours(config.backtest_s)}, and the "
            f"next a {_period_name(period_s)} ago): error {forecast_error:.1%} against "
            f"{reactive_error:.1%} (without the season {trend_error:.1%})"
        )
        return Backtest(
            on, why, period_s, forecast_error, reactive_error, points, horizon_s=horizon_s
        )
    need = shortest + config.level_window_s + horizon_s
    need += config.min_backtest_ratio * wanted * config.step_s
    return Backtest(
        False,
        f"{_hours(history.known_s())} of load history; a {_period_name(shortest)} forecast "
        f"needs {_hours(need)}",
    )


def vote(
    config: model.ForecastConfig,
    history: History,
    scored: Backtest,
    *,
    now_s: float,
    horizon_s: float,
) -> model.ForecastVote:
    """The forecast's vote at `now_s`: the load predicted at `now_s + horizon_s` while
    `scored` says the forecast beats the reactive estimate; otherwise off, saying why."""
    if not scored.on or scored.period_s is None:
        return model.ForecastVote.off(scored.why)
    made = np.array([history.completed(now_s)], dtype=np.int64)
    step = config.step_s
    # The forecast time's step, counted from the history's start.
    target = np.array([math.floor((now_s + horizon_s - history.start_s) / step)], dtype=np.int64)
    predicted = float(_predict(config, history, made, target, scored.period_s).forecast[0])
    if not math.isfinite(predicted):
        return model.ForecastVote.off(
            f"no load history around this time one {_period_name(scored.period_s)} ago"
        )
    why = f"{predicted:.3g}/s expected in {horizon_s:.0f} s; {scored.why}"
    return model.ForecastVote(on=True, load_per_s=predicted, why=why, horizon_s=horizon_s)


def _score(
    config: model.ForecastConfig,
    history: History,
    *,
    now_s: float,
    horizon_s: float,
    period_s: float,
) -> tuple[int, float, float, float] | None:
    """(points, and the error ratios of the forecast, of the reactive estimate and of the
    better of its non-seasonal parts) over the backtest window; None when no point has them
    all."""
    step = config.step_s
    ahead = max(1, math.ceil(horizon_s / step - _EPS))
    last = history.completed(now_s)
    span = max(1, round(config.backtest_s / step))
    # The recent past, and the hours to come as they went one period ago: a forecast judged on
    # a quiet night alone would be off when the morning rise comes.
    earlier = last - round(period_s / step)
    target = np.union1d(
        np.arange(max(0, last - span), last, dtype=np.int64),
        np.arange(max(0, earlier), max(0, min(last, earlier + span)), dtype=np.int64),
    )
    made = target - ahead
    keep = made >= 1
    target, made = target[keep], made[keep]
    if len(target) == 0:
        return None
    values = history.load_per_s
    actual = values[target]
    forecast, trend, level = _predict(config, history, made, target, period_s)
    reactive = values[made - 1]
    valid = np.isfinite(actual) & np.isfinite(forecast) & np.isfinite(reactive)
    valid &= np.isfinite(trend) & np.isfinite(level)
    points = int(np.count_nonzero(valid))
    if points == 0:
        return None
    scale = float(np.mean(actual[valid]))
    if not scale > 0:
        return None

    def error(estimate: FloatArray) -> float:
        return float(np.mean(np.abs(estimate[valid] - actual[valid]))) / scale

    return points, error(forecast), error(reactive), min(error(trend), error(level))


def _predict(
    config: model.ForecastConfig,
    history: History,
    made: IntArray,
    target: IntArray,
    period_s: float,
) -> _Parts:
    """The forecast for step `target[i]`, from the steps before `made[i]` only, and its
    non-seasonal parts; NaN where the history does not hold what they need."""
    step = config.step_s
    values = history.load_per_s
    sums = history.sums
    period = round(period_s / step)
    window = max(1, round(config.level_window_s / step))
    half = round(config.seasonal_window_s / step / 2)

    def between(name: str, lo: IntArray, hi: IntArray) -> FloatArray:
        lo = np.clip(lo, 0, len(values))
        hi = np.clip(np.maximum(hi, lo), 0, len(values))
        total: FloatArray = sums[name][hi] - sums[name][lo]
        return total

    def mean(lo: IntArray, hi: IntArray, width: int) -> FloatArray:
        n = between("n", lo, hi)
        # Fewer than half the steps known: no value rather than one read from a few minutes.
        enough = (n >= max(1.0, width / 2)) & (lo >= 0)
        out: FloatArray = np.where(enough, between("y", lo, hi) / np.maximum(n, 1.0), np.nan)
        return out

    recent = mean(made - window, made, window)
    before = mean(made - period - window, made - period, window)
    # The seasonal window never reaches past what was known when the forecast was made.
    centre = target - period
    same_time = mean(centre - half, np.minimum(centre + half + 1, made), 2 * half + 1)
    ratio = np.divide(recent, before, out=np.full(len(made), np.nan), where=before > 0)
    ratio = np.where((before == 0) & (recent == 0), 1.0, ratio)
    ratio = np.where((before == 0) & (recent > 0), config.max_level_ratio, ratio)
    ratio = np.clip(ratio, 1.0 / config.max_level_ratio, config.max_level_ratio)
    seasonal = same_time * ratio

    lo, hi = made - window, made
    n = between("n", lo, hi)
    sx, sy = between("x", lo, hi), between("y", lo, hi)
    sxx, sxy = between("xx", lo, hi), between("xy", lo, hi)
    spread = n * sxx - sx * sx
    slope = np.divide(n * sxy - sx * sy, spread, out=np.zeros(len(made)), where=spread > _EPS)
    mean_x = sx / np.maximum(n, 1.0)
    trend = np.maximum(0.0, recent + slope * (target.astype(np.float64) - mean_x))
    blended = (1.0 - config.trend_weight) * seasonal + config.trend_weight * trend
    return _Parts(np.maximum(0.0, blended), trend, recent)


class _Parts(NamedTuple):
    forecast: FloatArray
    trend: FloatArray
    """The recent level's line extended to the forecast time."""
    level: FloatArray
    """The recent level alone."""


def _prefix(values: FloatArray) -> FloatArray:
    out: FloatArray = np.concatenate(([0.0], np.cumsum(values)))
    return out


def _period_name(period_s: float) -> str:
    if period_s == 7 * 86_400:
        return "week"
    if period_s == 86_400:
        return "day"
    return f"{_hours(period_s)}"


def _hours(seconds: float) -> str:
    if seconds >= 3_600:
        return f"{seconds / 3_600:.1f} h"
    return f"{seconds / 60:.0f} min"

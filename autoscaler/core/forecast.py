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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from autoscaler.core import model

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

_EPS = 1e-9


_MARK_EVERY = 64
"""Steps between the prefix sums a history keeps for its votes (`History.sums`)."""


Values = npt.NDArray[np.float64] | npt.NDArray[np.float32]
"""A history's values as held: float64, or float32 (a load keeps 7 significant digits)."""


# Not slotted: `held` and `sums` are cached on the instance, so that the loop's vote every
# minute, for every service, costs a few lookups rather than a pass over days of history.
@dataclass(frozen=True)
class History:
    """A service's load, one mean per `step_s`: step `i` covers
    `[start_s + i x step_s, start_s + (i + 1) x step_s)`; NaN where nothing is known. Its
    values are not to be changed once made.

    Every step is held in `load_per_s` (float64 or float32), or only the stretches the forecast
    reads (`reads`): then `load_per_s` is empty, `pieces` holds each stretch as its first step
    and its values, in order and apart, and `length` is the history's length in steps. A step
    that is not held reads as unknown, as NaN does.
    """

    start_s: float
    step_s: float
    load_per_s: Values
    pieces: tuple[tuple[int, Values], ...] | None = None
    length: int | None = None

    @functools.cached_property
    def held(self) -> Held:
        """Its values by step, read as float64."""
        if self.pieces is None:
            return Held(((0, self.load_per_s),), len(self.load_per_s))
        assert self.length is not None
        return Held(self.pieces, self.length)

    @functools.cached_property
    def layout(self) -> tuple[tuple[int, int], ...]:
        """Each held piece's first step and length: histories of one layout and length hold
        the same steps, and their sums are marked at the same steps."""
        return tuple((first, len(values)) for first, values in self.held.pieces)

    @functools.cached_property
    def sums(self) -> Sums:
        """Prefix sums for the votes' windowed means and line fits, kept at every 64th step:
        a week of one-minute steps holds 6 KiB of them rather than the 400 KiB of the whole
        prefix arrays, and every sum looked up is the same float the whole arrays hold."""
        return Sums.of(self.held, every=_MARK_EVERY)

    def keep_sums(self, sums: Sums) -> None:
        """Keep `sums` as the history's `sums`, unless they are made already: they must be
        what `sums` would make, as `backtests` makes them from its own pass."""
        vars(self).setdefault("sums", sums)

    def __post_init__(self) -> None:
        if not self.step_s > 0:
            raise ValueError("history step_s must be > 0")
        if self.pieces is None:
            if self.length is not None:
                raise ValueError("a history's length comes with its pieces")
            return
        if self.length is None or len(self.load_per_s):
            raise ValueError("a history held in pieces has a length and no load_per_s")
        end = 0
        for first, values in self.pieces:
            if first < end or not len(values):
                raise ValueError("a history's pieces must be in order, apart and not empty")
            end = first + len(values)
        if end > self.length:
            raise ValueError("a history's pieces must lie within its length")

    @property
    def size(self) -> int:
        """The history's length in steps, held or not."""
        return len(self.load_per_s) if self.length is None else self.length

    @property
    def end_s(self) -> float:
        return self.start_s + self.size * self.step_s

    def known_s(self) -> float:
        """Seconds of held history with a value."""
        known = sum(int(np.count_nonzero(np.isfinite(v))) for _, v in self.held.pieces)
        return float(known) * self.step_s

    def completed(self, at_s: float) -> int:
        """How many steps lie wholly before `at_s` (at most the history's length)."""
        done = math.floor((at_s - self.start_s) / self.step_s + _EPS)
        return max(0, min(self.size, done))


@dataclass(frozen=True, slots=True)
class Held:
    """A history's values by step, read as float64 whatever they are held in: each piece is
    its first step and the values from it; NaN at the steps no piece holds."""

    pieces: tuple[tuple[int, Values], ...]
    size: int

    def take(self, steps: IntArray) -> FloatArray:
        """The values at `steps` (each in `[0, size)`), NaN where none is held."""
        if len(self.pieces) == 1 and self.pieces[0][0] == 0:
            values = self.pieces[0][1]
            if len(values) == self.size:
                whole: FloatArray = values[steps].astype(np.float64, copy=False)
                return whole
        out = np.full(len(steps), np.nan)
        for first, values in self.pieces:
            inside = (steps >= first) & (steps < first + len(values))
            out[inside] = values[steps[inside] - first]
        return out

    def dense(self) -> FloatArray:
        """Every step's value, NaN where none is held."""
        return self.take(np.arange(self.size, dtype=np.int64))


def reads(config: model.ForecastConfig, *, lead_s: float) -> tuple[tuple[int, int], ...]:
    """The stretches of a history that `backtest` and `vote` read, with the history ending at
    step `L` and votes made up to `lead_s` after its end: `[L + lo, L + hi)` for each
    `(lo, hi)`, in order and apart, `hi <= 0`. The rest of a history is never read.

    For a period of `p` steps, a backtest span of `S`, a look-ahead of at most `a` steps, a level
    window of `W` and a seasonal half-window of `h`, the backtest forecasts the steps of
    `[L - S, L)` and `[L - p, L - p + S)`, each from the level window before it was made (at
    most `a` steps before), the level window one period earlier, and the seasonal window one
    period earlier; the vote forecasts `L` to `L + lead + a` from the level windows before `L`
    and `L - p`, and the seasonal window around its target one period earlier. So it reads
    around `L`, `L - p` and `L - 2p` for every period, and nothing in between.
    """
    step = config.step_s
    ahead = max(1, math.ceil(config.max_horizon_s / step - _EPS))
    window = max(1, round(config.level_window_s / step))
    span = max(1, round(config.backtest_s / step))
    half = round(config.seasonal_window_s / step / 2)
    lead = math.ceil(lead_s / step - _EPS) + ahead + 1
    # One step of slack at each edge: a stretch a step too long costs a few bytes, one a step
    # too short a vote.
    wanted = [(-(span + ahead + window + 2), 0)]
    for period_s in config.periods_s:
        p = round(period_s / step)
        wanted.append((-(p + span + ahead + window + half + 2), -p + max(span, lead + half) + 2))
        wanted.append((-(2 * p + ahead + window + half + 2), -2 * p + span + half + 2))
    merged: list[tuple[int, int]] = []
    for lo, hi in sorted((lo, min(hi, 0)) for lo, hi in wanted):
        if hi <= lo:
            continue
        if merged and lo <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    return tuple(merged)


_SERIES = ("n", "y", "x", "xx", "xy")
"""The summed series, in the rows of `Sums.marks`: count, y, x, x², xy over known steps."""
_N, _Y, _X, _XX, _XY = range(len(_SERIES))


@dataclass(frozen=True, slots=True)
class Sums:
    """The prefix sums of a history's five series (`_SERIES`): the sum over steps `[0, k)` of
    each, for any `k` from 0 to the history's length.

    Only some prefixes are kept: `marks[:, j]` is the prefix at step `marked[j]`, for every
    `every`-th step of each held piece and at its end (nothing is added over the steps no piece
    holds, so a mark at a piece's end serves the gap after it). One in between is accumulated
    from the mark before it, adding the held steps up to `until[j]` in the order `np.cumsum`
    adds them, so it is the same float the whole prefix array holds and a forecast reads the
    same numbers whatever `every` is, and whether the steps between the pieces are held as NaN
    or not at all. The backtest, which reads thousands of them, uses every held step's
    (`every` 1) for the time it runs.
    """

    values: Held
    marks: FloatArray
    marked: IntArray
    until: IntArray
    every: int

    @classmethod
    def of(cls, values: FloatArray | Held, *, every: int) -> Sums:
        """The sums of `values`: a whole float64 array, or a history's `held` values (float32
        ones are summed in float64)."""
        if every < 1:
            raise ValueError("every must be >= 1")
        held = values if isinstance(values, Held) else Held(((0, values),), len(values))
        total = np.zeros((len(_SERIES), 1))
        marks, marked = [total], [np.zeros(1, dtype=np.int64)]
        until = [np.zeros(1, dtype=np.int64)]
        for first, piece in held.pieces:
            steps = np.arange(first, first + len(piece), dtype=np.int64)
            series = _series_of(piece.astype(np.float64, copy=False), steps)
            # Carried on from the last piece's total, as one cumsum over every step adds.
            running = np.cumsum(np.concatenate((total, series), axis=1), axis=1)
            picks = np.arange(0, len(piece) + 1, every, dtype=np.int64)
            if picks[-1] != len(piece):
                picks = np.append(picks, len(piece))
            marks.append(running[:, picks])
            marked.append(first + picks)
            until.append(np.full(len(picks), first + len(piece), dtype=np.int64))
            total = running[:, -1:]
        return cls(
            held,
            np.concatenate(marks, axis=1),
            np.concatenate(marked),
            np.concatenate(until),
            every,
        )

    def at(self, k: IntArray) -> FloatArray:
        """The prefix sums at steps `k` (each in `[0, values.size]`): one column per step, one
        row per series."""
        mark = np.searchsorted(self.marked, k, side="right") - 1
        base = self.marked[mark]
        ahead = np.minimum(k, self.until[mark]) - base
        width = int(ahead.max(initial=0))
        start = self.marks[:, mark]
        if width == 0:
            return start
        steps = base[:, None] + np.arange(width, dtype=np.int64)
        inside = np.arange(width) < ahead[:, None]
        added = _series(self.values, np.minimum(steps, self.values.size - 1).ravel())
        added = np.where(inside.ravel(), added, 0.0).reshape(len(_SERIES), len(k), width)
        # Each row adds its steps after its mark, left to right, as np.cumsum does; the zeros
        # past a row's own step are never read.
        running = np.cumsum(np.concatenate((start[:, :, None], added), axis=2), axis=2)
        picked: FloatArray = np.take_along_axis(running, ahead[None, :, None], axis=2)[:, :, 0]
        return picked


def _series(values: Held, steps: IntArray) -> FloatArray:
    """The five series of `_SERIES` at `steps`, one row each: what is summed for the means and
    the line fits (x is the step's index, 0 where the value is unknown)."""
    return _series_of(values.take(steps), steps)


def _series_of(part: FloatArray, steps: IntArray) -> FloatArray:
    """`_series` of the values `part` at `steps`."""
    known = np.isfinite(part)
    y = np.where(known, part, 0.0)
    x = np.where(known, steps.astype(np.float64), 0.0)
    out: FloatArray = np.stack((known.astype(np.float64), y, x, x * x, x * y))
    return out


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
        return _other_step(config, history)
    if history.known_s() == 0:
        return Backtest(False, "no load history")
    # Whole for the backtest's thousands of lookups, and dropped with it: the history keeps
    # only the marks its votes read.
    whole = Sums.of(history.held, every=1)
    for period_s in config.periods_s:
        scored = _score(
            config, history, now_s=now_s, horizon_s=horizon_s, period_s=period_s, sums=whole
        )
        if scored is None or scored[0] < _least_points(config):
            continue
        return _verdict(config, period_s, scored, horizon_s)
    return _too_short(config, history.known_s(), horizon_s)


Job = tuple[model.ForecastConfig, History, float]
"""One service's backtest: its forecast config, its history and its horizon in seconds."""

_BATCH_CELLS = 1 << 19
"""About the most histories x steps (held, or looked up) that `backtests` sums at once: a few
MiB a series, and enough histories that each numpy call is spread over hundreds of them."""


def backtests(jobs: Sequence[Job], *, now_s: float) -> list[Backtest]:
    """`backtest` of each job at `now_s`, in order, with the same results, made together.

    Backtested one by one, a service's few thousand held steps cost far less than the hundred
    numpy calls made on them. So the histories that share a config, a step grid (start and
    length), a horizon in steps and a form (whole, or held in pieces) are backtested as the rows
    of one array: their held steps (those any of them holds, NaN in a row that does not) summed
    in one pass, each prefix sum the forecast reads looked up for all of them at once, and the
    errors taken row by row, each from its row's valid points in order, as `_score` takes them
    (the same floats: a prefix over steps a row does not hold adds zeros). A history that
    shares them with no other is backtested alone.

    The sums a vote reads (`History.sums`) are kept on each history whose backtest is on,
    taken from the same pass: its first vote would otherwise sum it again.
    """
    out: list[Backtest | None] = [None] * len(jobs)
    groups: dict[tuple[object, ...], list[int]] = {}
    for i, (config, history, horizon) in enumerate(jobs):
        if history.step_s != config.step_s:
            out[i] = _other_step(config, history)
            continue
        key = (
            config,
            history.start_s,
            history.size,
            _ahead(config, horizon),
            history.pieces is None,
        )
        groups.setdefault(key, []).append(i)
    for members in groups.values():
        config = jobs[members[0]][0]
        if len(members) == 1:
            _, history, horizon = jobs[members[0]]
            out[members[0]] = backtest(config, history, now_s=now_s, horizon_s=horizon)
            continue
        widest = max(sum(len(v) for _, v in jobs[i][1].held.pieces) for i in members)
        looked_up = 12 * max(1, round(config.backtest_s / config.step_s))
        rows = max(2, _BATCH_CELLS // max(widest + 1, looked_up))
        for at in range(0, len(members), rows):
            chunk = members[at : at + rows]
            made = _Rows.of([jobs[i][1] for i in chunk]).backtests(
                config, [jobs[i][2] for i in chunk], now_s=now_s
            )
            for i, scored in zip(chunk, made, strict=True):
                out[i] = scored
    done = [scored for scored in out if scored is not None]
    assert len(done) == len(jobs)
    return done


@dataclass(frozen=True, slots=True)
class _Rows:
    """Histories of one step grid and form, as rows: `values[r, j]` is history `r`'s value at
    step `steps[j]` (NaN where it holds none), `sums[:, r, j]` the prefix sums of its five
    series (`_SERIES`) over the steps before `steps[j]` (and `[:, r, -1]` over all of them)."""

    histories: Sequence[History]
    steps: IntArray
    values: FloatArray
    sums: FloatArray
    known: IntArray
    """How many steps of each history have a value."""

    @classmethod
    def of(cls, histories: Sequence[History]) -> _Rows:
        spans = sorted({(first, first + len(v)) for h in histories for first, v in h.held.pieces})
        merged: list[tuple[int, int]] = []
        for lo, hi in spans:
            if merged and lo <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
            else:
                merged.append((lo, hi))
        steps = np.concatenate([np.arange(lo, hi, dtype=np.int64) for lo, hi in merged])
        column = {first: int(np.searchsorted(steps, first)) for first, _ in spans}
        values = np.full((len(histories), len(steps)), np.nan)
        for row, history in enumerate(histories):
            for first, piece in history.held.pieces:
                at = column[first]
                values[row, at : at + len(piece)] = piece
        known = np.isfinite(values)
        y = np.where(known, values, 0.0)
        x = np.where(known, steps.astype(np.float64), 0.0)
        # As `_series_of` makes them, after a column of zeros; then summed along each row, as
        # `np.cumsum` adds them in `Sums.of`.
        sums = np.zeros((len(_SERIES), len(histories), len(steps) + 1))
        sums[0, :, 1:] = known
        sums[1, :, 1:] = y
        sums[2, :, 1:] = x
        sums[3, :, 1:] = x * x
        sums[4, :, 1:] = x * y
        np.cumsum(sums, axis=2, out=sums)
        return cls(histories, steps, values, sums, np.count_nonzero(known, axis=1))

    def take(self, at: IntArray) -> FloatArray:
        """Every row's values at steps `at`, NaN where it holds none: (row, step)."""
        column = np.minimum(np.searchsorted(self.steps, at), len(self.steps) - 1)
        out: FloatArray = self.values[:, column]
        out[:, self.steps[column] != at] = np.nan
        return out

    def backtests(
        self, config: model.ForecastConfig, horizons_s: Sequence[float], *, now_s: float
    ) -> list[Backtest]:
        """`backtest` of each row (all of one start, length and horizon in steps)."""
        first = self.histories[0]
        size, last = first.size, first.completed(now_s)
        ahead = _ahead(config, horizons_s[0])
        least = _least_points(config)
        out: list[Backtest | None] = [
            None if known else Backtest(False, "no load history") for known in self.known
        ]
        pending = np.flatnonzero(self.known > 0)
        for period_s in config.periods_s:
            made, target = _points(config, last, ahead, period_s)
            if not len(pending) or not len(target):
                continue
            lows, clipped = _bounds(config, size, made, target, period_s)
            columns = [np.searchsorted(self.steps, bound) for bound in clipped]
            every = len(pending) == len(self.histories)
            sums = self.sums if every else self.sums[:, pending]
            between = _gathered(sums, columns)
            forecast, trend, level = _parts(config, between, lows, target)
            actual = self.take(target)
            reactive = self.take(made - 1)
            if not every:
                actual, reactive = actual[pending], reactive[pending]
            valid = np.isfinite(actual) & np.isfinite(forecast) & np.isfinite(reactive)
            valid &= np.isfinite(trend) & np.isfinite(level)
            points = np.count_nonzero(valid, axis=1)
            # Each row's five series at its valid points, one after the other, so that each is
            # summed as `np.mean` sums it alone: (actual, then each estimate's error).
            parts = np.stack(
                (
                    actual,
                    np.abs(forecast - actual),
                    np.abs(reactive - actual),
                    np.abs(trend - actual),
                    np.abs(level - actual),
                ),
                axis=1,
            )
            packed = parts[np.broadcast_to(valid[:, None, :], parts.shape)]
            ends = np.cumsum(points * len(_SERIES)).tolist()
            still = []
            for k, row in enumerate(pending.tolist()):
                count = int(points[k])
                if count < least:
                    still.append(row)
                    continue
                end = ends[k]
                block = packed[end - len(_SERIES) * count : end].reshape(len(_SERIES), count)
                means = (np.add.reduce(block, axis=1) / count).tolist()
                scale = means[0]
                if not scale > 0:
                    still.append(row)
                    continue
                trend_error = min(means[3] / scale, means[4] / scale)
                errors = (count, means[1] / scale, means[2] / scale, trend_error)
                out[row] = _verdict(config, period_s, errors, horizons_s[row])
            pending = np.asarray(still, dtype=np.int64)
        for row in pending.tolist():
            known_s = float(self.known[row]) * config.step_s
            out[row] = _too_short(config, known_s, horizons_s[row])
        done = [scored for scored in out if scored is not None]
        assert len(done) == len(out)
        for row, scored in enumerate(done):
            if scored.on:
                self.histories[row].keep_sums(self.marks(row))
        return done

    def marks(self, row: int) -> Sums:
        """`Sums.of(history.held, every=_MARK_EVERY)` of row `row`'s history, read from the
        rows' sums: the same marks at the same steps, the same floats."""
        held = self.histories[row].held
        marked, until = [np.zeros(1, dtype=np.int64)], [np.zeros(1, dtype=np.int64)]
        for first, piece in held.pieces:
            picks = np.arange(0, len(piece) + 1, _MARK_EVERY, dtype=np.int64)
            if picks[-1] != len(piece):
                picks = np.append(picks, len(piece))
            marked.append(first + picks)
            until.append(np.full(len(picks), first + len(piece), dtype=np.int64))
        steps = np.concatenate(marked)
        marks = self.sums[:, row, np.searchsorted(self.steps, steps)]
        return Sums(held, marks, steps, np.concatenate(until), _MARK_EVERY)


def _other_step(config: model.ForecastConfig, history: History) -> Backtest:
    return Backtest(
        False, f"history in {history.step_s:g} s steps, the forecast reads {config.step_s:g} s"
    )


def _least_points(config: model.ForecastConfig) -> float:
    """The fewest points a period's backtest must score to stand."""
    wanted = 2 * max(1, round(config.backtest_s / config.step_s))
    return config.min_backtest_ratio * wanted


def _verdict(
    config: model.ForecastConfig,
    period_s: float,
    scored: tuple[int, float, float, float],
    horizon_s: float,
) -> Backtest:
    """The backtest of a period with enough points: on while it beats the reactive estimate."""
    points, forecast_error, reactive_error, trend_error = scored
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
    return Backtest(on, why, period_s, forecast_error, reactive_error, points, horizon_s=horizon_s)


def _too_short(config: model.ForecastConfig, known_s: float, horizon_s: float) -> Backtest:
    """The backtest of a history no period has enough points of."""
    shortest = min(config.periods_s)
    need = shortest + config.level_window_s + horizon_s
    need += _least_points(config) * config.step_s
    return Backtest(
        False,
        f"{_hours(known_s)} of load history; a {_period_name(shortest)} forecast "
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
    return _voted(predicted, scored, horizon_s)


VoteJob = tuple[model.ForecastConfig, History, Backtest, float]
"""One service's vote: its forecast config, its history, its backtest and its horizon in
seconds."""


_VoteGroup = tuple[int, float, int, tuple[tuple[int, int], ...], int, int]
"""What the votes made together share: config (the id of the first equal one), period,
history length and layout, the step the forecast is made at and the step it forecasts."""


_VOTE_ROWS = 256
"""The most votes `votes` makes in one pass: the steps each adds after its marks, 5 series x
6 sums x up to 64 steps, are about 4 MiB for 256 of them (not 130 MiB for 8,000)."""


def votes(jobs: Sequence[VoteJob], *, now_s: float) -> list[model.ForecastVote]:
    """`vote` of each job at `now_s`, in order, with the same results, made together.

    Made one by one, a vote is a hundred numpy calls on a few numbers. The votes whose
    backtest is on and that share a config, a period, a history length and layout (the steps
    its pieces hold), a forecast step and a target step read the same prefix sums of their
    histories' marks at the same steps: those are looked up for all of them at once, each
    accumulated from its mark as `Sums.at` accumulates it (the same floats), and the forecast
    made for all of them in one pass. A vote that shares them with no other is made alone.
    """
    out: list[model.ForecastVote | None] = [None] * len(jobs)
    groups: dict[_VoteGroup, list[int]] = {}
    # Each config object's equal one first seen: a config hashes all its fields, and the
    # services share a few config objects, not thousands.
    configs: dict[int, model.ForecastConfig] = {}
    equal: dict[model.ForecastConfig, model.ForecastConfig] = {}
    for i, (config, history, scored, horizon) in enumerate(jobs):
        if not scored.on or scored.period_s is None:
            out[i] = model.ForecastVote.off(scored.why)
            continue
        same = configs.get(id(config))
        if same is None:
            same = configs[id(config)] = equal.setdefault(config, config)
        made = history.completed(now_s)
        target = math.floor((now_s + horizon - history.start_s) / config.step_s)
        key = (id(same), scored.period_s, history.size, history.layout, made, target)
        groups.setdefault(key, []).append(i)
    for (_, period_s, _, _, made, target), members in groups.items():
        config = jobs[members[0]][0]
        if len(members) == 1:
            _, history, scored, horizon = jobs[members[0]]
            out[members[0]] = vote(config, history, scored, now_s=now_s, horizon_s=horizon)
            continue
        for at in range(0, len(members), _VOTE_ROWS):
            chunk = members[at : at + _VOTE_ROWS]
            histories = [jobs[i][1] for i in chunk]
            predicted = _predict_rows(config, histories, made, target, period_s).tolist()
            for i, value in zip(chunk, predicted, strict=True):
                out[i] = _voted(value, jobs[i][2], jobs[i][3])
    done = [voted for voted in out if voted is not None]
    assert len(done) == len(jobs)
    return done


def _voted(predicted: float, scored: Backtest, horizon_s: float) -> model.ForecastVote:
    """The vote of an on backtest, predicting `predicted`."""
    assert scored.period_s is not None
    if not math.isfinite(predicted):
        return model.ForecastVote.off(
            f"no load history around this time one {_period_name(scored.period_s)} ago"
        )
    why = f"{predicted:.3g}/s expected in {horizon_s:.0f} s; {scored.why}"
    return model.ForecastVote(on=True, load_per_s=predicted, why=why, horizon_s=horizon_s)


def _predict_rows(
    config: model.ForecastConfig,
    histories: Sequence[History],
    made: int,
    target: int,
    period_s: float,
) -> FloatArray:
    """`_predict(...).forecast[0]` of each history (all of one length and layout) for one
    point, from each one's `sums`: the same floats, as `_Rows` makes the backtests'."""
    first = histories[0]
    lows, clipped = _bounds(
        config,
        first.size,
        np.array([made], dtype=np.int64),
        np.array([target], dtype=np.int64),
        period_s,
    )
    k = np.concatenate(clipped)
    # Every history of one layout has its marks at the same steps (`Sums.of`, or `_Rows.marks`).
    shape = first.sums
    mark = np.searchsorted(shape.marked, k, side="right") - 1
    base = shape.marked[mark]
    ahead = np.minimum(k, shape.until[mark]) - base
    width = int(ahead.max(initial=0))
    # (series, history, bound), as `Sums.at` has (series, bound) for one.
    start = np.stack([h.sums.marks for h in histories], axis=1)[:, :, mark]
    if width == 0:
        table = start
    else:
        steps = np.minimum(base[:, None] + np.arange(width, dtype=np.int64), first.size - 1)
        flat = steps.ravel()
        values = _taken(histories, flat)
        known = np.isfinite(values)
        y = np.where(known, values, 0.0)
        x = np.where(known, flat.astype(np.float64), 0.0)
        added = np.stack((known.astype(np.float64), y, x, x * x, x * y))
        inside = (np.arange(width) < ahead[:, None]).ravel()
        added = np.where(inside, added, 0.0).reshape(len(_SERIES), len(histories), len(k), width)
        # Each sum adds its steps after its mark, left to right, as `Sums.at` does: summed
        # along the first axis, one step of every sum at a time.
        running = np.concatenate((start[None], np.moveaxis(added, 3, 0)))
        np.cumsum(running, axis=0, out=running)
        table = np.take_along_axis(running, ahead[None, None, None, :], axis=0)[0]

    def between(row: int, part: int) -> FloatArray:
        total: FloatArray = table[row, :, 2 * part + 1] - table[row, :, 2 * part]
        return total

    target_at = np.array([target], dtype=np.int64)
    return _parts(config, between, lows, target_at).forecast


def _taken(histories: Sequence[History], steps: IntArray) -> FloatArray:
    """`history.held.take(steps)` of each history (all of one layout): (history, step)."""
    pieces = histories[0].held.pieces
    firsts = np.array([first for first, _ in pieces], dtype=np.int64)
    ends = firsts + np.array([len(v) for _, v in pieces], dtype=np.int64)
    piece = np.searchsorted(firsts, steps, side="right") - 1
    held = (piece >= 0) & (steps < ends[np.maximum(piece, 0)])
    out = np.full((len(histories), len(steps)), np.nan)
    for p in np.unique(piece[held]).tolist():
        at = held & (piece == p)
        offsets = steps[at] - firsts[p]
        out[:, at] = np.stack([h.held.pieces[p][1][offsets] for h in histories])
    return out


def _score(
    config: model.ForecastConfig,
    history: History,
    *,
    now_s: float,
    horizon_s: float,
    period_s: float,
    sums: Sums,
) -> tuple[int, float, float, float] | None:
    """(points, and the error ratios of the forecast, of the reactive estimate and of the
    better of its non-seasonal parts) over the backtest window; None when no point has them
    all."""
    made, target = _points(config, history.completed(now_s), _ahead(config, horizon_s), period_s)
    if len(target) == 0:
        return None
    actual = sums.values.take(target)
    forecast, trend, level = _predict(config, history, made, target, period_s, sums)
    reactive = sums.values.take(made - 1)
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


def _ahead(config: model.ForecastConfig, horizon_s: float) -> int:
    """The backtest's horizon in steps."""
    return max(1, math.ceil(horizon_s / config.step_s - _EPS))


def _points(
    config: model.ForecastConfig, last: int, ahead: int, period_s: float
) -> tuple[IntArray, IntArray]:
    """The backtest's points in a history of `last` completed steps, `ahead` steps ahead: the
    step each forecast is made at (`made`, from the steps before it) and the step it forecasts
    (`target`)."""
    step = config.step_s
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
    return made[keep], target[keep]


def _gathered(sums: FloatArray, columns: list[IntArray]) -> Callable[[int, int], FloatArray]:
    """`_parts`' sums over its windows from rows of prefix sums, `sums[series, row, column]`,
    with each window's bounds at `columns[2 x window]` and `columns[2 x window + 1]`: only the
    series read are looked up (the level one period ago and the seasonal window read no line),
    each once, and each sum is (row, point)."""
    made: dict[tuple[int, int], FloatArray] = {}

    def between(row: int, part: int) -> FloatArray:
        total = made.get((row, part))
        if total is None:
            series = sums[row]
            total = made[row, part] = (
                series[:, columns[2 * part + 1]] - series[:, columns[2 * part]]
            )
        return total

    return between


def _predict(
    config: model.ForecastConfig,
    history: History,
    made: IntArray,
    target: IntArray,
    period_s: float,
    sums: Sums | None = None,
) -> _Parts:
    """The forecast for step `target[i]`, from the steps before `made[i]` only, and its
    non-seasonal parts; NaN where the history does not hold what they need. `sums` are the
    history's prefix sums when the caller has them whole (`History.sums` otherwise)."""
    lows, clipped = _bounds(config, history.size, made, target, period_s)
    # Every prefix sum the forecast reads, looked up at once: (series, bound, point).
    table = (sums or history.sums).at(np.concatenate(clipped)).reshape(len(_SERIES), 6, -1)

    def between(row: int, part: int) -> FloatArray:
        total: FloatArray = table[row, 2 * part + 1] - table[row, 2 * part]
        return total

    return _parts(config, between, lows, target)


def _bounds(
    config: model.ForecastConfig, length: int, made: IntArray, target: IntArray, period_s: float
) -> tuple[tuple[IntArray, ...], list[IntArray]]:
    """The windows `_parts` reads for each point: their first steps as they are (one before
    the history's start means too little history), and the six steps, within the history,
    whose prefix sums bound them (the recent level's, the level's one period ago and the
    seasonal window's, each low then high)."""
    step = config.step_s
    period = round(period_s / step)
    window = max(1, round(config.level_window_s / step))
    half = round(config.seasonal_window_s / step / 2)
    # The seasonal window never reaches past what was known when the forecast was made.
    centre = target - period
    bounds = (
        (made - window, made),  # the recent level and its line
        (made - period - window, made - period),  # the level one period ago
        (centre - half, np.minimum(centre + half + 1, made)),  # around the same time then
    )
    clipped = []
    for lo, hi in bounds:
        low = np.clip(lo, 0, length)
        clipped += [low, np.clip(np.maximum(hi, low), 0, length)]
    return tuple(lo for lo, _ in bounds), clipped


def _parts(
    config: model.ForecastConfig,
    between: Callable[[int, int], FloatArray],
    lows: tuple[IntArray, ...],
    target: IntArray,
) -> _Parts:
    """`_predict` from the sums of each series over each window: `between(series, window)`,
    the series by its row in `_SERIES` and the windows in `_bounds`' order (each sum a row of
    points, or rows of them: one per history); `lows` are the windows' first steps."""
    step = config.step_s
    window = max(1, round(config.level_window_s / step))
    half = round(config.seasonal_window_s / step / 2)

    def mean(part: int, width: int) -> FloatArray:
        n = between(_N, part)
        # Fewer than half the steps known: no value rather than one read from a few minutes.
        enough = (n >= max(1.0, width / 2)) & (lows[part] >= 0)
        out: FloatArray = np.where(enough, between(_Y, part) / np.maximum(n, 1.0), np.nan)
        return out

    recent = mean(0, window)
    before = mean(1, window)
    same_time = mean(2, 2 * half + 1)
    ratio = np.divide(recent, before, out=np.full(recent.shape, np.nan), where=before > 0)
    ratio = np.where((before == 0) & (recent == 0), 1.0, ratio)
    ratio = np.where((before == 0) & (recent > 0), config.max_level_ratio, ratio)
    ratio = np.clip(ratio, 1.0 / config.max_level_ratio, config.max_level_ratio)
    seasonal = same_time * ratio

    n = between(_N, 0)
    sx, sy = between(_X, 0), between(_Y, 0)
    sxx, sxy = between(_XX, 0), between(_XY, 0)
    spread = n * sxx - sx * sx
    slope = np.divide(n * sxy - sx * sy, spread, out=np.zeros(n.shape), where=spread > _EPS)
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

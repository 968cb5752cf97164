"""Sliding windows of samples per service and signal, and their smoothed estimates
(docs/architecture.md, "Smoothing").

One `Windows` holds, for every service row and every signal, the last `window_s` seconds of
samples in a ring buffer (one slot per tick; NaN where a sample is missing). `estimate` reduces
each window to an exponentially weighted mean, the weighted linear trend through it, and a short
plain mean for the burst path, for all rows at once: the work is a handful of matrix products over
the buffer, never a Python loop per sample, so a tick over 10,000 services stays cheap.

The deadband (docs/architecture.md, "The replica count") is applied by the policy, which knows the
targets.

It does no I/O and reads no clock: the caller passes the tick's `now_s`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

from autoscaler.core import model

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.intp]

_EMPTY_TICK = np.iinfo(np.int64).min // 2
# Distinct half-lives whose weight matrices are kept (services rarely use more than a few).
_MAX_BASES = 64


@dataclass(frozen=True, slots=True)
class SmoothingConfig:
    window_s: float = 300.0
    """How much history each estimate sees."""
    tick_s: float = 1.0
    """Sampling period: one slot of the window per tick."""
    burst_window_s: float = 6.0
    """The short plain mean used by the burst fast path."""

    def __post_init__(self) -> None:
        if not (self.tick_s > 0 and self.window_s >= self.tick_s):
            raise ValueError("smoothing needs tick_s > 0 and window_s >= tick_s")
        if self.burst_window_s <= 0:
            raise ValueError("burst_window_s must be > 0")

    @property
    def slots(self) -> int:
        return max(1, round(self.window_s / self.tick_s))


@dataclass(frozen=True, slots=True)
class Estimates:
    """Smoothed values for a batch of rows: arrays of shape (rows, signals).

    Each field has the meaning of the `model.SignalEstimate` field of the same name.
    """

    mean: FloatArray
    level: FloatArray
    trend_per_s: FloatArray
    trend_stderr_per_s: FloatArray
    mean_age_s: FloatArray
    burst_mean: FloatArray
    last: FloatArray
    fresh: npt.NDArray[np.bool_]

    def per_row(self) -> list[dict[model.Signal, model.SignalEstimate]]:
        """The same values as one mapping per row (every row at once: for a few rows)."""
        rows = self.rows()
        return [rows[i] for i in range(len(rows))]

    def rows(self) -> Rows:
        """The same values row by row, each row's mapping made when it is asked for."""
        return Rows(self)


class Rows:
    """`Estimates` one row at a time, for the per-service policy.

    The eight arrays are stacked once into one (rows, signals, fields) table; a row's mapping
    and its `SignalEstimate`s are made when that row is read and dropped with it. Made for every
    row at once they were tens of thousands of objects alive through the tick at 10,000
    services, and the garbage collector walked them all again and again.
    """

    __slots__ = ("_table",)

    def __init__(self, estimates: Estimates) -> None:
        # Columns in the field order of SignalEstimate (`fresh` as 0/1 until it is read).
        self._table = np.stack(
            [
                estimates.mean,
                estimates.level,
                estimates.trend_per_s,
                estimates.burst_mean,
                estimates.last,
                estimates.fresh,
                estimates.trend_stderr_per_s,
                estimates.mean_age_s,
            ],
            axis=-1,
        )

    def __len__(self) -> int:
        return len(self._table)

    def __getitem__(self, row: int) -> dict[model.Signal, model.SignalEstimate]:
        make = model.SignalEstimate
        return {
            signal: make(mean, level, trend, burst, last, fresh > 0, se, age)
            for signal, (mean, level, trend, burst, last, fresh, se, age) in zip(
                _SIGNALS, self._table[row].tolist(), strict=False
            )
        }


_SIGNALS: Final = tuple(model.Signal)


class Windows:
    """Ring buffers of samples, one row per service, one column per signal.

    Rows are handed out by `rows_for` and recycled by `forget`. `record` writes one tick;
    ticks that were never recorded (a slow loop skipped them) read as missing samples.
    """

    def __init__(self, config: SmoothingConfig, *, n_signals: int = len(model.Signal)) -> None:
        self.config = config
        self._n_signals = n_signals
        self._slots = config.slots
        # Values with 0 where missing, and a 0/1 mask: the estimates are then plain matrix
        # products over contiguous memory, with no NaN handling per tick.
        self._val: FloatArray = np.zeros((0, n_signals, self._slots))
        self._ok: FloatArray = np.zeros((0, n_signals, self._slots))
        # Squares of the values, kept at record time for the residual variance of the trend.
        self._sq: FloatArray = np.zeros((0, n_signals, self._slots))
        self._slot_tick = np.full(self._slots, _EMPTY_TICK, dtype=np.int64)
        self._last_tick: int | None = None
        self._row_of: dict[model.ServiceId, int] = {}
        self._free: list[int] = []
        self._bases: dict[float, FloatArray] = {}

    def __len__(self) -> int:
        return len(self._row_of)

    def rows_for(self, ids: Sequence[model.ServiceId]) -> IntArray:
        """The buffer rows of these services, allocating rows for new ones."""
        rows = np.empty(len(ids), dtype=np.intp)
        for i, sid in enumerate(ids):
            row = self._row_of.get(sid)
            if row is None:
                row = self._allocate()
                self._row_of[sid] = row
            rows[i] = row
        return rows

    def forget(self, ids: Iterable[model.ServiceId]) -> None:
        """Drop the history of services that are gone; their rows are reused."""
        for sid in ids:
            row = self._row_of.pop(sid, None)
            if row is not None:
                self._val[row] = 0.0
                self._ok[row] = 0.0
                self._sq[row] = 0.0
                self._free.append(row)

    def known(self) -> set[model.ServiceId]:
        return set(self._row_of)

    def record(self, now_s: float, rows: IntArray, values: FloatArray) -> None:
        """Store one tick of samples: `values[i, signal]` for `rows[i]`; NaN means missing.

        Rows not listed get a missing sample for this tick. Recording the same tick twice
        overwrites it; going back in time is a programming error.
        """
        tick = self._tick(now_s)
        if self._last_tick is not None and tick < self._last_tick:
            raise ValueError(f"samples must move forward in time: tick {tick} < {self._last_tick}")
        if self._last_tick is None or tick > self._last_tick:
            first = tick - self._slots + 1
            start = first if self._last_tick is None else max(self._last_tick + 1, first)
            for t in range(start, tick + 1):
                slot = t % self._slots
                self._val[:, :, slot] = 0.0
                self._ok[:, :, slot] = 0.0
                self._slot_tick[slot] = t
            self._last_tick = tick
        if len(rows):
            slot = tick % self._slots
            ok = ~np.isnan(values)
            clean = np.where(ok, values, 0.0)
            self._val[rows, :, slot] = clean
            self._ok[rows, :, slot] = ok
            self._sq[rows, :, slot] = clean * clean

    def estimate(self, now_s: float, rows: IntArray, half_life_s: FloatArray) -> Estimates:
        """Smoothed estimates at `now_s` for `rows`, each with its own half-life (seconds).

        A half-life of `inf` gives the plain mean over the window.
        """
        n = len(rows)
        shape = (n, self._n_signals)
        out = {k: np.full(shape, np.nan) for k in _OUTPUTS}
        fresh = np.zeros(shape, dtype=bool)
        last = np.full(shape, np.nan)
        if n == 0 or self._last_tick is None:
            return Estimates(**out, last=last, fresh=fresh)

        tick = self._tick(now_s)
        age_ticks = tick - self._slot_tick
        in_window = (age_ticks >= 0) & (age_ticks < self._slots)
        # Each slot's row in the per-half-life basis; row `slots` (all zeros) is out of window.
        age_index = np.where(in_window, age_ticks, self._slots)

        if _is_prefix(rows):  # the usual case: a view, no copy
            val, ok, sq = self._val[:n], self._ok[:n], self._sq[:n]
        else:
            val, ok, sq = self._val[rows], self._ok[rows], self._sq[rows]
        current_slot = tick % self._slots
        if self._slot_tick[current_slot] == tick:
            fresh = ok[:, :, current_slot] > 0
            last = np.where(fresh, val[:, :, current_slot], np.nan)

        # One weight matrix per distinct half-life; services rarely have more than a few.
        if n == 1 or bool(np.all(half_life_s == half_life_s[0])):
            groups, inverse = half_life_s[:1], None
        else:
            groups, inverse = np.unique(half_life_s, return_inverse=True)
        k = self._n_signals
        for g, half_life in enumerate(groups):
            members = slice(None) if inverse is None else np.flatnonzero(inverse == g)
            basis = self._basis(float(half_life))[age_index]  # (slots, 7)
            # Weighted sums as matrix products over the buffer, (rows, signals, columns):
            # of the weights and their moments (mask), of the values, of the squared values.
            m = (ok[members].reshape(-1, self._slots) @ basis).reshape(-1, k, _BASIS_COLUMNS)
            s = (val[members].reshape(-1, self._slots) @ basis[:, :4]).reshape(-1, k, 4)
            sxx = (sq[members].reshape(-1, self._slots) @ basis[:, 0]).reshape(-1, k)
            for name, column in _fit(m, s, sxx).items():
                out[name][members] = column
        return Estimates(**out, last=last, fresh=fresh)

    def _basis(self, half_life_s: float) -> FloatArray:
        """Per age in ticks (0..slots-1, then a zero row for "out of the window"): the weight
        w, w x tau, w x tau^2 (tau = -age in seconds), the burst-window indicator, and
        w^2, w^2 x tau, w^2 x tau^2 for the variance of the trend.

        Built once per half-life: the ages of the slots change every tick, their weights do not.
        """
        basis = self._bases.get(half_life_s)
        if basis is None:
            age_s = np.append(np.arange(self._slots) * self.config.tick_s, np.inf)
            tau = -np.where(np.isfinite(age_s), age_s, 0.0)  # seconds relative to now, <= 0
            burst = (age_s < self.config.burst_window_s).astype(np.float64)
            w = _decay(age_s, half_life_s)
            w2 = w * w
            basis = np.stack([w, w * tau, w * tau * tau, burst, w2, w2 * tau, w2 * tau * tau], 1)
            if len(self._bases) >= _MAX_BASES:
                self._bases.clear()
            self._bases[half_life_s] = basis
        return basis

    def _tick(self, now_s: float) -> int:
        return math.floor(now_s / self.config.tick_s + 1e-9)

    def _allocate(self) -> int:
        if self._free:
            return self._free.pop()
        row = len(self._row_of)
        size = self._val.shape[0]
        if row >= size:
            shape = (max(8, 2 * size), *self._val.shape[1:])
            self._val = _grown(self._val, shape)
            self._ok = _grown(self._ok, shape)
            self._sq = _grown(self._sq, shape)
        return row


_OUTPUTS = ("mean", "level", "trend_per_s", "trend_stderr_per_s", "mean_age_s", "burst_mean")
_BASIS_COLUMNS = 7


def _fit(m: FloatArray, s: FloatArray, sxx: FloatArray) -> dict[str, FloatArray]:
    """Weighted least squares of value on time, per (row, signal), from the weighted sums.

    `m` holds sums over valid samples of w, w tau, w tau^2, burst, w^2, w^2 tau, w^2 tau^2;
    `s` the same first four weights times the value; `sxx` the sum of w x value^2. The trend's
    standard error treats the samples as independent with equal variance, with the weights'
    effective sample size (sum w)^2 / sum w^2 for the degrees of freedom.
    """
    sw, swt, swtt, sb = m[..., 0], m[..., 1], m[..., 2], m[..., 3]
    sw2, sw2t, sw2tt = m[..., 4], m[..., 5], m[..., 6]
    sx, sxt, sbx = s[..., 0], s[..., 1], s[..., 3]
    with np.errstate(invalid="ignore", divide="ignore"):
        has = sw > 0
        mean = np.where(has, sx / sw, np.nan)
        tbar = np.where(has, swt / sw, 0.0)
        stt = swtt - swt * tbar  # centred sum of w tau^2
        # Fewer than two distinct sample times: no trend, the level is the mean.
        flat = ~(stt > 1e-9 * np.maximum(swtt, 1e-300))
        slope = np.where(flat, 0.0, (sxt - sx * tbar) / np.where(flat, 1.0, stt))
        n_eff = np.where(sw2 > 0, sw * sw / sw2, 0.0)
        rss = np.maximum(0.0, sxx - sx * np.where(has, sx / sw, 0.0) - slope * slope * stt)
        variance = np.where(n_eff > 2, rss / sw * n_eff / (n_eff - 2), np.inf)
        spread = np.maximum(0.0, sw2tt - 2 * tbar * sw2t + tbar * tbar * sw2)
        stderr = np.where(flat, np.inf, np.sqrt(variance * spread) / np.where(flat, 1.0, stt))
        return {
            "mean": mean,
            "level": np.where(has, mean - slope * tbar, np.nan),
            "trend_per_s": np.where(has, slope, np.nan),
            "trend_stderr_per_s": np.where(has, stderr, np.nan),
            "mean_age_s": np.where(has, -tbar, np.nan),
            "burst_mean": np.where(sb > 0, sbx / sb, np.nan),
        }


def _grown(a: FloatArray, shape: tuple[int, ...]) -> FloatArray:
    out = np.zeros(shape)
    out[: a.shape[0]] = a
    return out


def _is_prefix(rows: IntArray) -> bool:
    """Whether rows are exactly 0..n-1 in order, so a slice can replace a fancy index."""
    n = len(rows)
    if n <= 1:
        return n == 0 or bool(rows[0] == 0)
    return bool(rows[0] == 0 and rows[-1] == n - 1 and np.all(np.diff(rows) == 1))


def _decay(age_s: FloatArray, half_life_s: float) -> FloatArray:
    """Weights 2^(-age / half-life); zero outside the window (age = inf)."""
    if math.isinf(half_life_s):
        # No decay: a plain mean over the window.
        return np.where(np.isfinite(age_s), 1.0, 0.0)
    if not half_life_s > 0:
        raise ValueError(f"half-life must be > 0 seconds, got {half_life_s}")
    return np.exp2(-age_s / half_life_s)

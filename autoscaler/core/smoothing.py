"""Sliding windows of samples per service and signal, and their smoothed estimates
(docs/architecture.md, "Smoothing").

One `Windows` holds, for every service row and every signal, the recent samples in a ring buffer
(one slot per tick; a missing sample is marked so). `estimate` reduces each row's window (its
own length, or `window_s`) to an exponentially weighted mean, the weighted linear trend through
it, and a short plain mean for the burst path, for all rows at once: the work is a handful of
matrix products over the buffer, never a Python loop per sample, so a tick over 10,000 services
stays cheap.

The deadband (docs/architecture.md, "The replica count") is applied by the policy, which knows the
targets.

It does no I/O and reads no clock: the caller passes the tick's `now_s`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from autoscaler.core import model

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.intp]
BoolArray = npt.NDArray[np.bool_]

_EMPTY_TICK = np.iinfo(np.int64).min // 2
# Distinct half-lives and windows whose weight matrices are kept (services use only a few).
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
    signals: tuple[model.Signal, ...] = model.BASE_SIGNALS
    """The signal of each column."""

    def rows(self) -> Rows:
        """The same values row by row, each row's mapping made when it is asked for."""
        return Rows(self)


class Rows:
    """`Estimates` one row at a time, for the per-service policy.

    The eight arrays are stacked into one (rows, signals, fields) table when the first row is
    read (most ticks read none: the batch decides from the arrays); a row's mapping and its
    `SignalEstimate`s are made when that row is read and dropped with it. Made for every row at
    once they were tens of thousands of objects alive through the tick at 10,000 services, and
    the garbage collector walked them all again and again.
    """

    __slots__ = ("_estimates", "_table")

    def __init__(self, estimates: Estimates) -> None:
        self._estimates = estimates
        self._table: FloatArray | None = None

    def __len__(self) -> int:
        return len(self._estimates.mean)

    def __getitem__(self, row: int) -> dict[model.Signal, model.SignalEstimate]:
        table = self._table
        if table is None:
            e = self._estimates
            # Columns in the field order of SignalEstimate (`fresh` as 0/1 until it is read).
            columns = (e.mean, e.level, e.trend_per_s, e.burst_mean, e.last, e.fresh)
            table = self._table = np.stack(
                [*columns, e.trend_stderr_per_s, e.mean_age_s], axis=-1, dtype=np.float64
            )
        make = model.SignalEstimate
        return {
            signal: make(mean, level, trend, burst, last, fresh > 0, se, age)
            for signal, (mean, level, trend, burst, last, fresh, se, age) in zip(
                self._estimates.signals, table[row].tolist(), strict=False
            )
        }


class Windows:
    """Ring buffers of samples, one row per service, one column per signal of `signals`
    (`model.BASE_SIGNALS` unless told; `n_signals` columns named by the first signals of
    `model.Signal` when given instead).

    Rows are handed out by `rows_for` and recycled by `forget`. `record` writes one tick;
    ticks that were never recorded (a slow loop skipped them) read as missing samples.

    Each row may have its own window (`estimate`'s `window_s`): the ring holds the longest
    window asked for so far, at least `config.window_s`, and a shorter window gives its
    older slots no weight. Memory per row and signal is 9 bytes per slot: the value (float64,
    so that estimates are those of the samples as given) and a one-byte "present" mask; the
    squares the trend's error needs are made at estimate time, a block of rows at a time.
    """

    def __init__(
        self,
        config: SmoothingConfig,
        *,
        signals: Sequence[model.Signal] = model.BASE_SIGNALS,
        n_signals: int | None = None,
    ) -> None:
        self.config = config
        self.signals = tuple(signals) if n_signals is None else tuple(model.Signal)[:n_signals]
        """The signal of each column, in order."""
        n_signals = len(self.signals) if n_signals is None else n_signals
        self._n_signals = n_signals
        self._slots = config.slots
        # Values with 0 where missing, and a presence mask: the estimates are then plain matrix
        # products over contiguous memory, with no NaN handling per tick.
        self._val: FloatArray = np.zeros((0, n_signals, self._slots))
        self._ok: BoolArray = np.zeros((0, n_signals, self._slots), dtype=np.bool_)
        self._slot_tick = np.full(self._slots, _EMPTY_TICK, dtype=np.int64)
        self._last_tick: int | None = None
        self._row_of: dict[model.ServiceId, int] = {}
        self._free: list[int] = []
        self._bases: dict[tuple[float, int], FloatArray] = {}

    def __len__(self) -> int:
        return len(self._row_of)

    @property
    def slots(self) -> int:
        """Ticks the ring holds: the longest window asked for so far."""
        return self._slots

    @property
    def nbytes(self) -> int:
        """Bytes the buffers hold."""
        return int(self._val.nbytes + self._ok.nbytes + self._slot_tick.nbytes)

    def rows_for(self, ids: Sequence[model.ServiceId]) -> IntArray:
        """The buffer rows of these services, allocating rows for new ones."""
        rows = np.empty(len(ids), dtype=np.intp)
        new: list[int] = []
        for i, sid in enumerate(ids):
            row = self._row_of.get(sid)
            if row is None:
                new.append(i)
            else:
                rows[i] = row
        if new:
            self._reserve(len(self._row_of) + len(new) - len(self._free))
            for i in new:
                row = self._allocate()
                self._row_of[ids[i]] = row
                rows[i] = row
        return rows

    def forget(self, ids: Iterable[model.ServiceId]) -> None:
        """Drop the history of services that are gone; their rows are reused."""
        for sid in ids:
            row = self._row_of.pop(sid, None)
            if row is not None:
                self._val[row] = 0.0
                self._ok[row] = False
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
        prefix = bool(len(rows)) and _is_prefix(rows)
        if self._last_tick is None or tick > self._last_tick:
            first = tick - self._slots + 1
            start = first if self._last_tick is None else max(self._last_tick + 1, first)
            for t in range(start, tick + 1):
                slot = t % self._slots
                # The first rows, when they are the ones written below, are written whole:
                # only the others are cleared (a pass across the buffer's slots fewer).
                kept = len(rows) if prefix and t == tick else 0
                self._val[kept:, :, slot] = 0.0
                self._ok[kept:, :, slot] = False
                self._slot_tick[slot] = t
            self._last_tick = tick
        if len(rows):
            slot = tick % self._slots
            ok = ~np.isnan(values)
            at: IntArray | slice = slice(0, len(rows)) if prefix else rows
            self._val[at, :, slot] = np.where(ok, values, 0.0)
            self._ok[at, :, slot] = ok

    def estimate(
        self,
        now_s: float,
        rows: IntArray,
        half_life_s: FloatArray,
        window_s: FloatArray | None = None,
    ) -> Estimates:
        """Smoothed estimates at `now_s` for `rows`, each with its own half-life and window
        (seconds; NaN or None for `config.window_s`).

        A half-life of `inf` gives the plain mean over the window. A window longer than the ring
        grows it: the samples it held are kept, and the older ones were never recorded.
        """
        n = len(rows)
        windows = self._window_slots(n, window_s)
        longest = int(windows.max()) if n else 0
        if longest > self._slots:
            self._resize(longest)
        shape = (n, self._n_signals)
        out = {k: np.full(shape, np.nan) for k in _OUTPUTS}
        fresh = np.zeros(shape, dtype=bool)
        last = np.full(shape, np.nan)
        if n == 0 or self._last_tick is None:
            return Estimates(**out, last=last, fresh=fresh, signals=self.signals)

        tick = self._tick(now_s)
        age_ticks = tick - self._slot_tick
        in_ring = (age_ticks >= 0) & (age_ticks < self._slots)
        # Each slot's row in the per-half-life basis; row `slots` (all zeros) is out of the ring.
        age_index = np.where(in_ring, age_ticks, self._slots)

        current_slot = tick % self._slots
        prefix = _is_prefix(rows)
        if self._slot_tick[current_slot] == tick:
            now_rows = slice(0, n) if prefix else rows  # the usual case: a view, no copy
            fresh = self._ok[now_rows, :, current_slot]
            last = np.where(fresh, self._val[now_rows, :, current_slot], np.nan)

        # One weight matrix per distinct half-life and window; services use only a few.
        if n == 1 or bool(np.all(half_life_s == half_life_s[0]) and np.all(windows == windows[0])):
            groups, inverse = [(float(half_life_s[0]), int(windows[0]))], None
        else:
            keys = np.stack([half_life_s, windows.astype(np.float64)], axis=1)
            unique, inverse = np.unique(keys, axis=0, return_inverse=True)
            inverse = inverse.reshape(-1)
            groups = [(float(h), int(w)) for h, w in unique]
        for g, (half_life, window) in enumerate(groups):
            members = np.arange(n) if inverse is None else np.flatnonzero(inverse == g)
            basis = self._basis(half_life, window)[age_index]  # (slots, 7)
            for start in range(0, len(members), self._block_rows):
                block = members[start : start + self._block_rows]
                picked: IntArray | slice = rows[block]
                if prefix and inverse is None:  # the usual case: a view of the buffer, no copy
                    picked = slice(int(block[0]), int(block[-1]) + 1)
                for name, column in self._reduce(picked, basis).items():
                    out[name][block] = column
        return Estimates(**out, last=last, fresh=fresh, signals=self.signals)

    @property
    def _block_rows(self) -> int:
        """Rows reduced at once: their temporaries stay near 8 MiB whatever the fleet size."""
        return max(1, (1 << 20) // (self._n_signals * self._slots))

    def _reduce(self, picked: IntArray | slice, basis: FloatArray) -> dict[str, FloatArray]:
        """The estimates of a block of rows, from weighted sums that are matrix products over
        the buffer, (rows, signals, columns): of the weights and their moments (mask, shared by
        the rows with every sample: `_mask_sums`), of the values, of the squared values."""
        k, slots = self._n_signals, self._slots
        val = self._val[picked].reshape(-1, slots)
        m = _mask_sums(self._ok[picked].reshape(-1, slots), basis).reshape(-1, k, _BASIS_COLUMNS)
        s = (val @ basis[:, :4]).reshape(-1, k, 4)
        sxx = (np.square(val) @ basis[:, 0]).reshape(-1, k)
        return _fit(m, s, sxx)

    def _window_slots(self, n: int, window_s: FloatArray | None) -> IntArray:
        """Each row's window in ticks: at least one, `config.window_s` where not given."""
        if window_s is None:
            return np.full(n, self.config.slots, dtype=np.intp)
        given = np.where(np.isnan(window_s), self.config.window_s, window_s)
        if not bool(np.all(given > 0)) or not bool(np.all(np.isfinite(given))):
            raise ValueError("every window must be finite and > 0 seconds")
        return np.maximum(1, np.round(given / self.config.tick_s)).astype(np.intp)

    def _resize(self, slots: int) -> None:
        """Grow the ring to `slots` ticks, each recorded tick kept in its new slot."""
        val = np.zeros((self._val.shape[0], self._n_signals, slots))
        ok = np.zeros((self._ok.shape[0], self._n_signals, slots), dtype=np.bool_)
        slot_tick = np.full(slots, _EMPTY_TICK, dtype=np.int64)
        for old, t in enumerate(self._slot_tick.tolist()):
            if t != _EMPTY_TICK:
                new = t % slots
                val[:, :, new] = self._val[:, :, old]
                ok[:, :, new] = self._ok[:, :, old]
                slot_tick[new] = t
        self._val, self._ok, self._slot_tick, self._slots = val, ok, slot_tick, slots
        self._bases.clear()

    def _basis(self, half_life_s: float, window: int) -> FloatArray:
        """Per age in ticks (0..slots-1, then a zero row for "out of the ring"): the weight
        w, w x tau, w x tau^2 (tau = -age in seconds), the burst-window indicator, and
        w^2, w^2 x tau, w^2 x tau^2 for the variance of the trend. Ages of `window` ticks or
        more weigh nothing.

        Built once per half-life and window: the ages of the slots change every tick, their
        weights do not.
        """
        basis = self._bases.get((half_life_s, window))
        if basis is None:
            ages = np.arange(self._slots)
            age_s = np.append(np.where(ages < window, ages * self.config.tick_s, np.inf), np.inf)
            tau = -np.where(np.isfinite(age_s), age_s, 0.0)  # seconds relative to now, <= 0
            burst = (age_s < self.config.burst_window_s).astype(np.float64)
            w = _decay(age_s, half_life_s)
            w2 = w * w
            basis = np.stack([w, w * tau, w * tau * tau, burst, w2, w2 * tau, w2 * tau * tau], 1)
            if len(self._bases) >= _MAX_BASES:
                self._bases.clear()
            self._bases[half_life_s, window] = basis
        return basis

    def _tick(self, now_s: float) -> int:
        return math.floor(now_s / self.config.tick_s + 1e-9)

    def _reserve(self, rows: int) -> None:
        """Room for `rows` rows: exactly that many at first (a fleet arrives at once), then an
        eighth more than asked, so that services arriving one by one copy the buffers rarely."""
        size = self._val.shape[0]
        if rows <= size:
            return
        if size:
            rows = max(rows, size + size // 8)
        self._val = _grown(self._val, rows)
        self._ok = _grown(self._ok, rows)

    def _allocate(self) -> int:
        if self._free:
            return self._free.pop()
        row = len(self._row_of)
        self._reserve(row + 1)
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


def _mask_sums(ok: BoolArray, basis: FloatArray) -> FloatArray:
    """`ok @ basis` with the mask as 0/1, one row per (row, signal) of the block: each row's
    sums of the weights over its present samples.

    Nearly every row has a sample in every slot that any row has one in (their union): those
    rows share one product, worked out once, and only the rows with a sample missing are
    multiplied out. The union goes into the product twice because BLAS takes a one-row product
    down its matrix-vector path, whose sums can round differently in the last bit from the
    matrix product's; with two rows or more, OpenBLAS gives each row the sums it gets in the
    whole product, to the bit (the tests compare with the plain product).
    """
    union = np.any(ok, axis=0, keepdims=True)
    other = np.flatnonzero(~(ok == union).all(axis=1))
    stacked = np.concatenate([np.broadcast_to(union, (2, ok.shape[1])), ok[other]])
    sums = stacked.astype(np.float64) @ basis
    out = np.empty((len(ok), basis.shape[1]))
    out[:] = sums[0]
    out[other] = sums[2:]
    return out


_Buffer = TypeVar("_Buffer", FloatArray, "BoolArray")


def _grown(a: _Buffer, rows: int) -> _Buffer:
    out = np.zeros((rows, *a.shape[1:]), dtype=a.dtype)
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

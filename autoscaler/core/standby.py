"""The size of a service's warm standby pool: how many started, warmed replicas wait with no
traffic so that a scale-up serves at once instead of one start-up later.

A reactive policy sizes for its smoothed estimate of the load. New replicas serve one start-up
later, so what the service lacks after a surge is how far the load rose, within one start-up,
above the estimate the policy sized for. `ShortfallTracker` measures exactly that, per service:
fed every tick with the estimate and the raw load, it records for each past tick `t`

    shortfall(t) = max(0, max(load over [t, t + startup_s]) - estimate(t))

in load units, once the window `[t, t + startup_s]` has passed. It keeps the worst shortfall of
each `bucket_s` over the last `horizon_s` (a fixed ring of buckets: memory does not grow with
time), so its quantiles are of per-bucket worsts, which errs on the side of a larger pool.

`pool_size` turns that into replicas: the `quantile` of the shortfall divided by what one
replica serves at its target, rounded up and clipped to `[0, cap]`. With less than
`min_history_s` of recorded shortfall the automatic size is 0: a pool is paid for every hour,
and a guess from a few minutes of load is not worth it. A fixed count, when set, overrides the
automatic size.

A missing load or estimate (NaN) is never read as zero: a tick without a known estimate starts
no window, and an unknown load does not extend the windows it falls in.

Pure: no I/O, no clock (every time is an argument), no logging.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import numpy as np

__all__ = ["PoolConfig", "PoolSize", "ShortfallTracker", "pool_size"]

# At most this many windows are open at once; ticks closer together than startup_s / this start
# no window of their own (their load still counts in the open ones), which bounds the work per
# tick whatever the tick rate.
_MAX_OPEN_WINDOWS = 256
_EPS = 1e-9


@dataclass(slots=True)
class _Window:
    start_s: float
    estimate: float
    load_max: float


class ShortfallTracker:
    """One service's shortfalls of the reactive estimate within one start-up, over a rolling
    horizon. Fed once per tick by `record`; read by `quantile` and `history_s`.

    `startup_s` may be changed between ticks (the observed start-up moves): windows opened from
    then on use the new length, open ones keep theirs.
    """

    def __init__(
        self, *, startup_s: float, horizon_s: float = 3600.0, bucket_s: float = 60.0
    ) -> None:
        if not (horizon_s > 0 and bucket_s > 0 and horizon_s >= bucket_s):
            raise ValueError("shortfall tracker needs horizon_s >= bucket_s > 0")
        self.startup_s = startup_s
        self.horizon_s = horizon_s
        self.bucket_s = bucket_s
        self._slots = math.ceil(horizon_s / bucket_s - _EPS)
        self._bucket_index = np.full(self._slots, np.iinfo(np.int64).min, dtype=np.int64)
        self._bucket_worst = np.zeros(self._slots, dtype=np.float64)
        self._open: deque[tuple[float, _Window]] = deque()
        self._last_s = -math.inf

    @property
    def startup_s(self) -> float:
        """How long a new replica takes to serve: the length of each window."""
        return self._startup_s

    @startup_s.setter
    def startup_s(self, value: float) -> None:
        if not (math.isfinite(value) and value >= 0):
            raise ValueError(f"startup_s must be finite and >= 0, got {value}")
        self._startup_s = value

    def record(self, now_s: float, *, estimate: float, load: float) -> None:
        """Takes one tick: `estimate` is the load the policy sized for at `now_s` (its smoothed
        estimate), `load` the raw load measured then; either may be NaN (unknown)."""
        if now_s < self._last_s:
            raise ValueError(f"ticks go forward: {now_s} after {self._last_s}")
        self._last_s = now_s
        known_load = math.isfinite(load)
        for end_s, window in self._open:
            # A window that ended before this tick (the ticks had a gap) does not see its load.
            if known_load and end_s >= now_s and load > window.load_max:
                window.load_max = load
        self._close(now_s)
        if not (known_load and math.isfinite(estimate)):
            return
        spacing_s = self._startup_s / _MAX_OPEN_WINDOWS
        if self._open and now_s - self._open[-1][1].start_s < spacing_s:
            return
        window = _Window(start_s=now_s, estimate=estimate, load_max=load)
        if self._startup_s == 0:
            self._keep(window)
        else:
            self._open.append((now_s + self._startup_s, window))

    def shortfalls(self, now_s: float) -> np.ndarray[tuple[int], np.dtype[np.float64]]:
        """The worst shortfall of each bucket within the horizon before `now_s`, oldest first."""
        current = math.floor(now_s / self.bucket_s)
        live = (self._bucket_index > current - self._slots) & (self._bucket_index <= current)
        order = np.argsort(self._bucket_index[live], kind="stable")
        return self._bucket_worst[live][order]

    def history_s(self, now_s: float) -> float:
        """Seconds of the horizon with a recorded shortfall (buckets with one, times their
        length)."""
        return len(self.shortfalls(now_s)) * self.bucket_s

    def quantile(self, q: float, now_s: float) -> float:
        """The `q` quantile of the per-bucket worst shortfalls within the horizon (an observed
        value, never interpolated below it); NaN with nothing recorded."""
        if not 0.0 <= q <= 1.0:
            raise ValueError(f"quantile must be within [0, 1], got {q}")
        values = self.shortfalls(now_s)
        if len(values) == 0:
            return math.nan
        return float(np.quantile(values, q, method="higher"))

    def _close(self, now_s: float) -> None:
        while self._open and self._open[0][0] <= now_s:
            _, window = self._open.popleft()
            self._keep(window)

    def _keep(self, window: _Window) -> None:
        shortfall = max(0.0, window.load_max - window.estimate)
        index = math.floor(window.start_s / self.bucket_s)
        slot = index % self._slots
        if self._bucket_index[slot] == index:
            self._bucket_worst[slot] = max(self._bucket_worst[slot], shortfall)
        else:
            self._bucket_index[slot] = index
            self._bucket_worst[slot] = shortfall


@dataclass(frozen=True, slots=True)
class PoolConfig:
    """How a service's standby pool is sized."""

    cap: int = 4
    """The automatic size never exceeds this many replicas; 0 turns the automatic pool off."""
    fixed: int | None = None
    """A fixed number of standby replicas; when set it overrides the automatic size."""
    quantile: float = 0.95
    """Which quantile of the shortfall the pool covers."""
    min_history_s: float = 900.0
    """Below this much recorded shortfall the automatic size is 0."""

    def __post_init__(self) -> None:
        if self.cap < 0:
            raise ValueError("standby cap must be >= 0")
        if self.fixed is not None and self.fixed < 0:
            raise ValueError("a fixed standby count must be >= 0")
        if not 0.0 < self.quantile <= 1.0:
            raise ValueError("standby quantile must be within (0, 1]")
        if self.min_history_s < 0:
            raise ValueError("standby min_history_s must be >= 0")


@dataclass(frozen=True, slots=True)
class PoolSize:
    """The pool's size and why: `shortfall` is the quantile it covers, in load units (NaN when
    it was not used)."""

    replicas: int
    shortfall: float
    why: str


def pool_size(
    config: PoolConfig,
    tracker: ShortfallTracker,
    *,
    now_s: float,
    capacity_per_replica: float,
) -> PoolSize:
    """The standby replicas one service should keep at `now_s`: the fixed count if set, else
    `ceil(quantile of the shortfall / capacity_per_replica)` clipped to `[0, cap]`, and 0 while
    the tracker holds less than `min_history_s` of shortfalls. `capacity_per_replica` is the
    load one replica serves at its target."""
    if config.fixed is not None:
        return PoolSize(config.fixed, math.nan, f"fixed at {config.fixed}")
    if config.cap == 0:
        return PoolSize(0, math.nan, "automatic pool off (cap 0)")
    history_s = tracker.history_s(now_s)
    if history_s == 0 or history_s < config.min_history_s:
        return PoolSize(
            0,
            math.nan,
            f"{history_s:.0f} s of shortfall history; the automatic size needs "
            f"{config.min_history_s:.0f} s",
        )
    if not (math.isfinite(capacity_per_replica) and capacity_per_replica > 0):
        return PoolSize(0, math.nan, "no per-replica capacity to size against")
    shortfall = tracker.quantile(config.quantile, now_s)
    wanted = max(0, math.ceil(shortfall / capacity_per_replica - _EPS))
    replicas = min(wanted, config.cap)
    why = (
        f"p{config.quantile * 100:g} shortfall {shortfall:.3g} within {tracker.startup_s:.0f} s "
        f"/ {capacity_per_replica:.3g} per replica = {wanted}"
    )
    if replicas < wanted:
        why += f", capped at {config.cap}"
    return PoolSize(replicas, shortfall, why)

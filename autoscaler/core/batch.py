"""The replica policy across services at once: `policy.decide`'s steps as arrays, for the
services whose configuration has the common shape.

At 10,000 services the per-service policy is most of a tick: each call builds its votes,
contributions, details and decision, to find that nearly every service stays where it is. Here
the load and queue votes (look-ahead, queue drain, burst value, the last seconds' value, ratio,
replicas asked for), the bounds, the deadband, the capacity veto, the burst hold, the cooldowns,
the scale-down cap and the quota are computed with numpy, once per tick, for every such service;
what comes out is each service's kind, reason, replicas, bound, cooldown and next state, as
`policy.decide` would give them. The words of a decision (its detail and contributions) stay
with the policy: a caller builds the full `Decision` only for the services someone reads, with
`policy.decide_voted` on the votes `Voter` gives back for the service's row.

This duplicates the rules of `policy.decide` (`_vote`, `_estimate`, `_queue_demand`,
`_burst_value`, `_recent_value`, `_leading`, `_scale_up`, `_scale_down`, `_quota_capped`);
`tests/core/test_batch.py` decides thousands of seeded cases both ways and requires the same
outcome, so a change to one that is not made to the other fails there. A configuration the batch
does not know (`batchable` is false: a pause, a latency SLO, LLM signals, any field it does not
read set away from its default) and a row whose numbers the arrays could not carry exactly
(`Outcomes.exact` is false) go to `policy.decide`.

Pure: no I/O, no clock (`Inputs.now_s`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from autoscaler.core import model, policy
from autoscaler.core.model import Bound, Kind, Reason, Signal

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

KINDS: tuple[Kind, ...] = tuple(Kind)
REASONS: tuple[Reason, ...] = tuple(Reason)
BOUNDS: tuple[Bound | None, ...] = (None, *Bound)
"""`Outcomes.bound` indexes this: 0 is no bound."""
_K = {kind: code for code, kind in enumerate(KINDS)}
_R = {reason: code for code, reason in enumerate(REASONS)}
_B = {bound: code for code, bound in enumerate(BOUNDS)}

# Columns of the estimate arrays: `Windows.estimate`'s base signals, in their order.
_LOAD, _QUEUE, _GPU = (model.BASE_SIGNALS.index(s) for s in model.BASE_SIGNALS)
assert model.BASE_SIGNALS == (Signal.LOAD, Signal.SATURATION, Signal.CAPACITY)

_T = TypeVar("_T")

_EXACT_INT = float(2**52)
"""Replica counts above this are not exact in float64: such a row goes to `policy.decide`."""

_READ = frozenset(
    {
        "max_replicas",
        "min_replicas",
        "target_load_per_replica",
        "target_queue_per_replica",
        "target_gpu_utilization_pct",
        "gpu_veto_projected",
        "burst_backlog_ahead",
        "burst_release",
        "deadband_ratio",
        "scale_up_cooldown_s",
        "scale_down_cooldown_s",
        "scale_down_max_ratio",
        "burst",
        "lookahead",
        "queue_drain",
        "forecast",
        "prompt_token_weight",
    }
)
"""The configuration fields the batch reads (the forecast's vote must be off, see `Inputs`; the
prompt token weight counts only with a token target). Any other field away from its default
sends the service to `policy.decide`: a pause, an SLO, the LLM signals' targets, and whatever
the policy learns to read after this was written."""
_DEFAULTS = {
    f.name: f.default
    for f in dataclasses.fields(model.PolicyConfig)
    if f.name not in _READ and f.default is not dataclasses.MISSING
}


def batchable(config: model.PolicyConfig) -> bool:
    """Whether the batch decides this configuration exactly as `policy.decide` does."""
    return all(getattr(config, name) == value for name, value in _DEFAULTS.items())


def _field(items: Sequence[_T], read: Callable[[_T], float | None]) -> FloatArray:
    return np.fromiter(
        (math.nan if (v := read(item)) is None else v for item in items),
        dtype=np.float64,
        count=len(items),
    )


@dataclass(frozen=True, slots=True)
class Configs:
    """The batchable configurations of a set of services, one entry per service: a field that
    is None is NaN (its `*_on` flag false for the optional steps)."""

    min_replicas: IntArray
    max_replicas: IntArray
    target_load: FloatArray
    target_queue: FloatArray
    target_gpu: FloatArray
    gpu_projected: BoolArray
    deadband: FloatArray
    up_cooldown_s: FloatArray
    down_cooldown_s: FloatArray
    down_max_ratio: FloatArray
    burst_on: BoolArray
    burst_window_s: FloatArray
    burst_threshold: FloatArray
    burst_hold_s: FloatArray
    backlog_ahead: BoolArray
    release: BoolArray
    ahead_on: BoolArray
    ahead_startup_s: FloatArray
    ahead_max_horizon_s: FloatArray
    ahead_z: FloatArray
    drain_on: BoolArray
    drain_s: FloatArray
    drain_z: FloatArray

    @classmethod
    def of(cls, configs: Sequence[model.PolicyConfig]) -> Configs:
        """Made when the services' records change, not every tick."""
        n = len(configs)
        bursts = [c.burst for c in configs]
        aheads = [c.lookahead for c in configs]
        drains = [c.queue_drain for c in configs]
        return cls(
            min_replicas=np.fromiter((c.min_replicas for c in configs), np.int64, n),
            max_replicas=np.fromiter((c.max_replicas for c in configs), np.int64, n),
            target_load=_field(configs, lambda c: c.target_load_per_replica),
            target_queue=_field(configs, lambda c: c.target_queue_per_replica),
            target_gpu=_field(configs, lambda c: c.target_gpu_utilization_pct),
            gpu_projected=np.fromiter((c.gpu_veto_projected for c in configs), np.bool_, n),
            deadband=_field(configs, lambda c: c.deadband_ratio),
            up_cooldown_s=_field(configs, lambda c: c.scale_up_cooldown_s),
            down_cooldown_s=_field(configs, lambda c: c.scale_down_cooldown_s),
            down_max_ratio=_field(configs, lambda c: c.scale_down_max_ratio),
            burst_on=np.fromiter((b is not None for b in bursts), np.bool_, n),
            burst_window_s=_field(bursts, lambda b: None if b is None else b.window_s),
            burst_threshold=_field(bursts, lambda b: None if b is None else b.threshold_ratio),
            burst_hold_s=_field(bursts, lambda b: None if b is None else b.hold_s),
            backlog_ahead=np.fromiter((c.burst_backlog_ahead for c in configs), np.bool_, n),
            release=np.fromiter((c.burst_release for c in configs), np.bool_, n),
            ahead_on=np.fromiter((a is not None for a in aheads), np.bool_, n),
            ahead_startup_s=_field(aheads, lambda a: None if a is None else a.default_startup_s),
            ahead_max_horizon_s=_field(aheads, lambda a: None if a is None else a.max_horizon_s),
            ahead_z=_field(aheads, lambda a: None if a is None else a.confidence_z),
            drain_on=np.fromiter((d is not None for d in drains), np.bool_, n),
            drain_s=_field(drains, lambda d: None if d is None else d.drain_s),
            drain_z=_field(drains, lambda d: None if d is None else d.confidence_z),
        )

    def take(self, rows: npt.NDArray[np.intp]) -> Configs:
        """The entries of `rows`, in their order."""
        return Configs(**{f.name: getattr(self, f.name)[rows] for f in dataclasses.fields(Configs)})

    def put(self, at: npt.NDArray[np.intp], configs: Configs) -> Configs:
        """A copy with the entries `at` replaced by those of `configs`, in their order: when a
        few services' configurations change, the others' are not read again."""
        fields = {}
        for f in dataclasses.fields(Configs):
            column = getattr(self, f.name).copy()
            column[at] = getattr(configs, f.name)
            fields[f.name] = column
        return Configs(**fields)


@dataclass(frozen=True, slots=True)
class Inputs:
    """One tick of a set of services, one entry per service (the `Observation` and
    `PolicyState` fields the batch reads). The estimate arrays are (services, 3), the columns
    `model.BASE_SIGNALS`. None is NaN for a time, -1 for `admissible`. The service's forecast vote
    must be None or off, and its state not paused."""

    now_s: float
    replicas: IntArray
    serving: IntArray
    startup_s: FloatArray
    admissible: IntArray
    no_placement: BoolArray
    """`admissible_reason` is `NO_PLACEMENT` (else the quota)."""
    mean: FloatArray
    trend_per_s: FloatArray
    trend_stderr_per_s: FloatArray
    mean_age_s: FloatArray
    burst_mean: FloatArray
    last: FloatArray
    fresh: BoolArray
    last_scale_up_s: FloatArray
    last_scale_change_s: FloatArray
    burst_until_s: FloatArray


@dataclass(frozen=True, slots=True)
class Outcomes:
    """What `policy.decide` gives each service, and its next state (None is NaN): the kind,
    reason and bound are codes into `KINDS`, `REASONS`, `BOUNDS`."""

    kind: npt.NDArray[np.int8]
    reason: npt.NDArray[np.int8]
    desired: IntArray
    bound: npt.NDArray[np.int8]
    cooldown_until_s: FloatArray
    last_scale_up_s: FloatArray
    last_scale_change_s: FloatArray
    burst_until_s: FloatArray
    changed_state: BoolArray
    """`policy.decide` makes a new state (a scale or a burst): elsewhere it returns the one
    given."""
    load_estimate: FloatArray
    """The load vote's value (`Contribution.estimate`); NaN when it does not vote."""
    queue_estimate: FloatArray
    """The queue vote's value: waiting requests, or requests per second with the queue drain."""
    votes: _VoteColumns
    """How each signal voted, for `Voter`."""
    exact: BoolArray
    """False where a number left what float64 arrays carry exactly (a vote past 2**52
    replicas, an infinite estimate): decide those rows with `policy.decide`."""


ESTIMATORS = ("mean", "forecast", "burst", "queue-demand")
"""`Contribution.estimator` of a vote the batch casts, by code."""


@dataclass(frozen=True, slots=True)
class _VoteColumns:
    """The load's and the queue's votes: column 0 the load, 1 the queue."""

    has_target: BoolArray
    voted: BoolArray
    """Has a target, and its data is fresh (else its vote is missing)."""
    ratio: FloatArray
    desired: IntArray
    estimator: npt.NDArray[np.int8]
    recent_ratio: FloatArray
    """The burst window's ratio (with the burst path)."""
    burst_path: BoolArray
    """The burst path is on (one column)."""
    burst: BoolArray
    """A signal fired the burst path (one column)."""


_SIGNALS = (Signal.LOAD, Signal.SATURATION)
_MISSING = model.Contribution(math.nan, None, "missing")


class Voter:
    """The votes of the batch's rows as `policy._vote` casts them, for `policy.decide_voted`:
    the full decision of a batched service, its details and contributions, made by the
    policy's own steps (exactly the same: tests/core/test_batch.py).

    The columns are stacked into one float table once, and a row is read out of it when asked
    for: a tick reads the rows of the few services whose outcome changed, not all of them.
    Every number in it is exact in float64 (the replicas asked for are at most 2**52, the codes
    and flags small)."""

    __slots__ = ("_table",)

    def __init__(self, outcomes: Outcomes) -> None:
        columns = outcomes.votes
        self._table = np.concatenate(
            [
                columns.has_target,
                columns.voted,
                columns.ratio,
                columns.desired,
                columns.estimator,
                columns.recent_ratio,
                outcomes.load_estimate[:, None],
                outcomes.queue_estimate[:, None],
                columns.burst_path[:, None],
                columns.burst[:, None],
            ],
            axis=1,
            dtype=np.float64,
        )

    def votes(self, row: int) -> policy.Votes:
        (
            *has,
            load_voted,
            queue_voted,
            load_ratio,
            queue_ratio,
            load_desired,
            queue_desired,
            load_estimator,
            queue_estimator,
            load_recent,
            queue_recent,
            load_estimate,
            queue_estimate,
            burst_path,
            burst,
        ) = self._table[row].tolist()
        voted = (load_voted, queue_voted)
        ratio = (load_ratio, queue_ratio)
        desired = (int(load_desired), int(queue_desired))
        estimator = (int(load_estimator), int(queue_estimator))
        recent = (load_recent, queue_recent)
        estimate = (load_estimate, queue_estimate)
        contributions: dict[Signal, model.Contribution] = {}
        missing: list[Signal] = []
        recent_ratios: dict[Signal, float] = {}
        wanted: int | None = None
        driver: Signal | None = None
        for j, signal in enumerate(_SIGNALS):
            if not has[j]:
                continue
            if not voted[j]:
                missing.append(signal)
                contributions[signal] = _MISSING
                continue
            contributions[signal] = model.Contribution(
                ratio[j], desired[j], ESTIMATORS[estimator[j]], estimate[j]
            )
            if burst_path:
                recent_ratios[signal] = recent[j]
            # `policy._leading`
            tie_won = desired[j] == wanted and driver is not None and ratio[j] > ratio[0]
            if wanted is None or desired[j] > wanted or tie_won:
                wanted, driver = desired[j], signal
        return policy.Votes(
            contributions, wanted, driver, tuple(missing), bool(burst), recent_ratios
        )


def _above_zero(x: FloatArray) -> FloatArray:
    """`max(0.0, x)` as Python computes it: NaN gives 0."""
    return np.where(x > 0.0, x, 0.0)


def _ratio(value: FloatArray, target: FloatArray, serving: IntArray) -> FloatArray:
    """`policy._ratio`."""
    with_serving = value / (target * serving)
    idle = np.where(value > 0, math.inf, math.nan)
    return np.where(serving > 0, with_serving, idle)


def _estimate(c: Configs, x: Inputs, column: int) -> tuple[FloatArray, BoolArray]:
    """`policy._estimate`: the value, and whether the look-ahead raised it."""
    mean, trend = x.mean[:, column], x.trend_per_s[:, column]
    startup = np.where(np.isnan(x.startup_s), c.ahead_startup_s, x.startup_s)
    horizon = np.where(startup < c.ahead_max_horizon_s, startup, c.ahead_max_horizon_s)
    horizon = horizon + x.mean_age_s[:, column]
    growth = trend - c.ahead_z * x.trend_stderr_per_s[:, column]
    ahead = c.ahead_on & np.isfinite(trend) & (growth > 0)
    now = mean + growth * x.mean_age_s[:, column]
    doubt = c.ahead_z * x.trend_stderr_per_s[:, column] * x.mean_age_s[:, column]
    newest = x.burst_mean[:, column]
    stopped = np.isfinite(newest) & (now - doubt > newest)
    forecast = np.where(stopped, now, mean + growth * horizon)
    return np.where(ahead, forecast, mean), ahead


def _queue_demand(c: Configs, x: Inputs, load_rps: FloatArray, waiting: FloatArray) -> FloatArray:
    """`policy._queue_demand` with `policy._backlog`, for rows with a load target."""
    column = _QUEUE
    growth = x.trend_per_s[:, column] - c.drain_z * x.trend_stderr_per_s[:, column]
    load_target, queue_target = c.target_load, c.target_queue
    most = load_target * c.drain_s
    per_replica = np.where(most < queue_target, most, queue_target)
    backlog = _above_zero(waiting - per_replica * load_rps / load_target)
    return load_rps + _above_zero(growth) + backlog / c.drain_s


def _estimator(by_burst: BoolArray, ahead: BoolArray, drains: BoolArray) -> npt.NDArray[np.int8]:
    code = np.where(drains, 3, np.where(ahead, 1, 0))
    return np.where(by_burst, 2, code).astype(np.int8)


def decide(c: Configs, x: Inputs) -> Outcomes:
    """`policy.decide` for every row of batchable configurations; see the module docstring."""
    with np.errstate(all="ignore"):  # NaN stands for None; rows that do not vote are masked
        return _decide(c, x)


def _decide(c: Configs, x: Inputs) -> Outcomes:
    now, current, serving = x.now_s, x.replicas, x.serving
    asked_replicas = np.maximum(serving, current)
    newest_ok = x.fresh & np.isfinite(x.last)

    # -- Votes (`policy._vote`): the load, then the queue, which may read the load's value.
    has_load = ~np.isnan(c.target_load)
    mean = x.mean[:, _LOAD]
    load = has_load & x.fresh[:, _LOAD] & np.isfinite(mean)
    load_value, load_ahead = _estimate(c, x, _LOAD)
    burst_mean = x.burst_mean[:, _LOAD]
    newest = np.where(newest_ok[:, _LOAD], x.last[:, _LOAD], burst_mean)
    load_burst = np.where(np.isfinite(newest), newest, 0.0)
    load_recent = np.where(np.isfinite(burst_mean), burst_mean, 0.0)
    threshold = c.burst_threshold
    load_fired = (
        load
        & c.burst_on
        & (load_burst > 0)
        & (load_burst >= threshold * (c.target_load * asked_replicas))
    )
    load_by_burst = load_fired & (load_burst > load_value)
    load_value = _above_zero(np.where(load_by_burst, load_burst, load_value))
    load_desired = np.ceil(load_value / c.target_load - policy.CEIL_SLACK)
    load_ratio = _ratio(load_value, c.target_load, serving)
    load_forecast = load_ahead & ~load_by_burst

    has_queue = ~np.isnan(c.target_queue)
    drains = c.drain_on & has_load
    mean = x.mean[:, _QUEUE]
    queue = has_queue & x.fresh[:, _QUEUE] & np.isfinite(mean) & ~(drains & ~load)
    queue_target = np.where(drains, c.target_load, c.target_queue)
    burst_mean = x.burst_mean[:, _QUEUE]
    waiting = np.where(np.isfinite(burst_mean), burst_mean, mean)
    demand = _queue_demand(c, x, load_value, waiting)
    plain, queue_ahead = _estimate(c, x, _QUEUE)
    queue_value = np.where(drains, demand, plain)
    queue_ahead &= ~drains
    newest = np.where(newest_ok[:, _QUEUE], x.last[:, _QUEUE], burst_mean)
    rise = np.where(np.isfinite(burst_mean), newest - burst_mean, 0.0)
    surge = _above_zero(rise) / (c.burst_window_s / 2.0)
    newest_demand = _queue_demand(c, x, load_value, newest) + surge
    queue_burst = np.where(np.isfinite(newest), np.where(drains, newest_demand, newest), 0.0)
    queue_recent = np.where(np.isfinite(burst_mean), np.where(drains, demand, burst_mean), 0.0)
    queue_fired = (
        queue
        & c.burst_on
        & (queue_burst > 0)
        & (queue_burst >= threshold * (queue_target * asked_replicas))
    )
    # `policy._backlog_ahead`: a fired burst also asks for the backlog grown until new pods serve.
    startup = np.where(
        np.isnan(x.startup_s), np.where(c.ahead_on, c.ahead_startup_s, 0.0), x.startup_s
    )
    horizon = np.where(startup < c.drain_s, startup, c.drain_s)
    grown = c.backlog_ahead & drains & newest_ok[:, _QUEUE] & np.isfinite(burst_mean)
    queue_burst = np.where(
        queue_fired & grown, queue_burst + surge * horizon / c.drain_s, queue_burst
    )
    queue_by_burst = queue_fired & (queue_burst > queue_value)
    queue_value = _above_zero(np.where(queue_by_burst, queue_burst, queue_value))
    queue_desired = np.ceil(queue_value / queue_target - policy.CEIL_SLACK)
    queue_ratio = _ratio(queue_value, queue_target, serving)
    queue_forecast = queue_ahead & ~queue_by_burst

    burst = load_fired | queue_fired
    missing = (has_load & ~load) | (has_queue & ~queue)
    exact = ~(load & ~(np.abs(load_desired) <= _EXACT_INT)) & ~(
        queue & ~(np.abs(queue_desired) <= _EXACT_INT)
    )
    load_wants = np.where(load & exact, load_desired, 0).astype(np.int64)
    queue_wants = np.where(queue & exact, queue_desired, 0).astype(np.int64)

    # `policy._leading`: the larger vote; on a tie, the higher ratio drives.
    queue_drives = queue & (
        ~load
        | (queue_wants > load_wants)
        | ((queue_wants == load_wants) & (queue_ratio > load_ratio))
    )
    voted = load | queue
    wanted = np.where(queue_drives, queue_wants, load_wants)
    driver_ratio = np.where(queue_drives, queue_ratio, load_ratio)
    driver_forecast = np.where(queue_drives, queue_forecast, load_forecast)

    # -- The steps of `policy.decide`, each on the rows no earlier step settled.
    n = len(current)
    kind = np.full(n, _K[Kind.STEADY], np.int8)
    reason = np.full(n, _R[Reason.AT_DESIRED], np.int8)
    desired = current.copy()
    bound = np.zeros(n, np.int8)
    cooldown = np.full(n, math.nan)
    todo = np.ones(n, np.bool_)
    burst_until = np.where(burst & c.burst_on, now + c.burst_hold_s, x.burst_until_s)

    def settle(
        rows: BoolArray,
        verdict: Kind,
        why: Reason | npt.NDArray[np.int8],
        *,
        to: IntArray | None = None,
        at: Bound | npt.NDArray[np.int8] | None = None,
        until: FloatArray | None = None,
    ) -> None:
        rows = rows & todo
        kind[rows] = _K[verdict]
        reason[rows] = why[rows] if isinstance(why, np.ndarray) else _R[why]
        if to is not None:
            desired[rows] = to[rows]
        bound[rows] = at[rows] if isinstance(at, np.ndarray) else _B[at]
        if until is not None:
            cooldown[rows] = until[rows]
        todo[rows] = False

    admissible = x.admissible
    quota_reason = np.where(x.no_placement, _R[Reason.NO_PLACEMENT], _R[Reason.QUOTA]).astype(
        np.int8
    )

    def quota(rows: BoolArray, wanted_replicas: IntArray) -> None:
        """`policy._quota_capped`."""
        refused = rows & (admissible >= 0) & (wanted_replicas > admissible)
        capped = np.maximum(current, admissible)
        settle(refused & (capped <= current), Kind.HOLD, quota_reason)
        settle(refused, Kind.SCALE_UP, quota_reason, to=capped, at=Bound.QUOTA)

    lo, hi = c.min_replicas, c.max_replicas
    clamped = np.minimum(hi, np.maximum(lo, wanted))
    below = current < lo
    below_to = np.where(voted, clamped, lo)
    quota(below, below_to)
    settle(below, Kind.SCALE_UP, Reason.BELOW_MIN, to=below_to)
    settle(current > hi, Kind.SCALE_DOWN, Reason.ABOVE_MAX, to=hi)
    settle(~voted, Kind.HOLD, Reason.MISSING_DATA)

    at = np.where(wanted > hi, _B[Bound.MAX], np.where(wanted < lo, _B[Bound.MIN], 0))
    at = at.astype(np.int8)
    up = todo & (clamped > current)
    down = todo & (clamped < current)

    # `policy._scale_up`
    settle(up & ~burst & ~(driver_ratio > 1.0 + c.deadband), Kind.STEADY, Reason.IN_DEADBAND)
    up_until = x.last_scale_up_s + c.up_cooldown_s
    settle(up & ~burst & (now < up_until), Kind.HOLD, Reason.COOLDOWN, until=up_until)
    quota(up & todo, clamped)
    up_reason = np.where(
        burst,
        _R[Reason.BURST],
        np.where(driver_forecast, _R[Reason.FORECAST], _R[Reason.ABOVE_TARGET]),
    ).astype(np.int8)
    settle(up, Kind.SCALE_UP, up_reason, to=clamped, at=at)

    # `policy._scale_down`
    settle(down & missing, Kind.HOLD, Reason.MISSING_DATA)
    floor = 1.0 - c.deadband
    inside = (load & ~(load_ratio < floor)) | (queue & ~(queue_ratio < floor))
    settle(down & inside, Kind.STEADY, Reason.IN_DEADBAND)
    load_recent_ratio = _ratio(load_recent, c.target_load, serving)
    queue_recent_ratio = _ratio(queue_recent, queue_target, serving)
    recent = (load & ~(load_recent_ratio < floor)) | (queue & ~(queue_recent_ratio < floor))
    settle(down & c.burst_on & recent, Kind.HOLD, Reason.RECENT_LOAD)
    gpu = x.mean[:, _GPU]
    veto = ~np.isnan(c.target_gpu) & x.fresh[:, _GPU] & (gpu > c.target_gpu)
    with np.errstate(divide="ignore", invalid="ignore"):
        carried = np.where(clamped <= 0, math.inf, gpu * serving / clamped)
    veto &= ~c.gpu_projected | (carried > 100.0)
    settle(down & veto, Kind.HOLD, Reason.CAPACITY_VETO)
    settle(down & (now < burst_until), Kind.HOLD, Reason.BURST_HOLD, until=burst_until)
    down_until = x.last_scale_change_s + c.down_cooldown_s
    # `policy._burst_released`: after a burst's scale-up, serving in full, the burst hold only.
    released = (
        c.release
        & c.burst_on
        & (x.last_scale_up_s == x.last_scale_change_s)
        & (burst_until - c.burst_hold_s >= x.last_scale_change_s)
        & (serving >= current)
    )
    down_until = np.where(released, np.minimum(down_until, burst_until), down_until)
    settle(down & (now < down_until), Kind.HOLD, Reason.COOLDOWN, until=down_until)
    step = np.maximum(1, np.floor(c.down_max_ratio * current + policy.CEIL_SLACK)).astype(np.int64)
    settle(
        down, Kind.SCALE_DOWN, Reason.BELOW_TARGET, to=np.maximum(clamped, current - step), at=at
    )

    settle(todo, Kind.STEADY, Reason.AT_DESIRED, at=at)

    # `_Tick.verdict`: the state a change leaves.
    scaled_up = kind == _K[Kind.SCALE_UP]
    scaled = scaled_up | (kind == _K[Kind.SCALE_DOWN])
    changed = scaled | (burst & c.burst_on)
    return Outcomes(
        kind=kind,
        reason=reason,
        desired=desired,
        bound=bound,
        cooldown_until_s=cooldown,
        last_scale_up_s=np.where(scaled_up, now, x.last_scale_up_s),
        last_scale_change_s=np.where(scaled, now, x.last_scale_change_s),
        burst_until_s=burst_until,
        changed_state=changed,
        load_estimate=np.where(load, load_value, math.nan),
        queue_estimate=np.where(queue, queue_value, math.nan),
        votes=_VoteColumns(
            has_target=np.stack([has_load, has_queue], axis=1),
            voted=np.stack([load, queue], axis=1),
            ratio=np.stack([load_ratio, queue_ratio], axis=1),
            desired=np.stack([load_wants, queue_wants], axis=1),
            estimator=np.stack(
                [
                    _estimator(load_by_burst, load_forecast, np.zeros(n, np.bool_)),
                    _estimator(queue_by_burst, queue_forecast, drains),
                ],
                axis=1,
            ),
            recent_ratio=np.stack([load_recent_ratio, queue_recent_ratio], axis=1),
            burst_path=c.burst_on,
            burst=burst,
        ),
        exact=exact,
    )

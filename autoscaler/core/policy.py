"""The replica policy (docs/architecture.md, "The replica count"): one service's observation in, a
`Decision` out.

`decide` is a function of the configuration, the observation and the previous `PolicyState`; it
returns the decision and the next state. The steps, in order:

1. **Votes.** Each primary signal (load, saturation) with a target asks for
   `ceil(estimate / target)` replicas: the same as `ceil(serving x per-replica mean / target)`.
   The estimate is the smoothed mean. Three optional steps, each switched on in `default` and
   off in `seed`, so the benchmark can weigh them:
   - the look-ahead raises a rising estimate by the part of its trend that stands out of the
     noise, over the mean's lag plus the pod start-up time; over the lag only once the last
     seconds fall below the trend's line (a step the window's trend is still catching up with,
     not a rise that goes on) (`model.LookaheadConfig`);
   - the queue drain reads the saturation signal as demand in requests per second (the load,
     plus the queue's growth, plus the waiting requests drained over a horizon) and votes with
     the load target (`model.QueueDrainConfig`);
   - the burst path raises a vote to what the newest fresh sample asks for (the queue's rise
     over its short mean counted as arrivals) when that is `threshold` times the capacity asked
     for, skipping the scale-up cooldown (`model.BurstConfig`); a burst the queue fires also
     asks for the backlog's growth until its new pods serve (`burst_backlog_ahead`).
   An LLM server's token signals vote beside them, each only with its target: the KV-cache
   usage and the token rate as utilisations (`ceil(serving x usage / target)`,
   `ceil((generated + weight x prompt tokens per second) / target)`, a prompt token weighed as
   the share of a generated one it costs), and the P95 time to first token and per output
   token for more replicas while above their targets (at most doubling per decision).
   With a latency SLO (`model.SloConfig`, set per service), every vote in requests per second
   is then raised to the fewest replicas that keep the SLO at that rate (`core.queueing`), with
   the burstiness fitted on the queue sampled at the serving count and held between fits
   (`PolicyState.slo_fit`); the decision's detail says what the SLO asked for, and a scale-up it
   drives has the reason `slo`.
2. **Data.** A missing or stale signal does not vote. Nothing fresh: hold. Something missing:
   never scale down; scale up only on what is fresh.
3. **Bounds.** Clamp to [min, max]; a count outside the bounds is brought back at once.
4. **Deadband.** Scale up only when a signal's ratio is above 1 + deadband; scale down only when
   every ratio is below 1 - deadband.
5. **Capacity veto.** GPU utilisation above its target blocks a scale-down; it never scales up.
   In `default` (`gpu_veto_projected`) it blocks only a scale-down to fewer replicas than could
   carry that GPU work (`utilisation x serving / desired` over 100 %): the load signal then
   undercounts the work (long requests). A scale-down the GPU work fits goes ahead, so a load
   target above the GPU target (a service run at 95 % of its capacity) is not held at the GPU
   target on the way down.
6. **Cooldowns.** No scale-up within `scale_up_cooldown_s` of the last one (a burst skips this);
   no scale-down within `scale_down_cooldown_s` of any change, nor while a burst holds. With
   `burst_release`, after a scale-up a burst drove, once all its pods serve, the burst hold
   alone applies.
7. **Cap.** Remove at most `max(1, floor(scale_down_max_ratio x current))` per step.
8. **Quota.** A scale-up never asks for more than the namespace's GPU quota admits
   (`observation.admissible`; docs/architecture.md, "The placement ladder"): it is clamped to
   `max(current, admissible)`, and a scale-up the quota refuses entirely is a hold. The quota never
   scales anything down. When the cap comes from a model no node can place (`admissible_reason` is
   `NO_PLACEMENT`), the decision says so instead of blaming the quota.

Before all of these, a pause (`config.pause`, the service owner's) holds the service where it
is with the reason `paused`; with `Pause.replicas` it first sets that count, once, whatever the
bounds. The end of a pause counts as a manual change of the count: the scale-down cooldown
restarts from it (a scale-up may follow at once, its own cooldown permitting), and a burst hold
from before the pause is dropped.

Pure: no I/O, no clock (time is `observation.now_s`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass

from autoscaler.core import model, queueing
from autoscaler.core.model import Bound, Contribution, Decision, Kind, Reason, Signal

# Ratios computed from floats can land a hair above an integer: 2.0000000001 must ask for 2.
CEIL_SLACK = 1e-9
_CEIL_SLACK = CEIL_SLACK


def seed(*, max_replicas: int, **overrides: object) -> model.PolicyConfig:
    """The plain policy (docs/architecture.md, "The replica count"): no burst path, no
    look-ahead."""
    return model.PolicyConfig(max_replicas=max_replicas, **overrides)  # type: ignore[arg-type]


def default(*, max_replicas: int, **overrides: object) -> model.PolicyConfig:
    """Ours: the seed policy plus the burst fast path (sized for the backlog its new pods will
    find, and released once they serve), the trend look-ahead, the queue read as demand, the
    seasonal forecast (which votes only where its backtest says so) and the capacity veto on the
    GPU work the remaining replicas would carry."""
    fields: dict[str, object] = {
        "burst": model.BurstConfig(threshold_ratio=1.5),
        "lookahead": model.LookaheadConfig(),
        "queue_drain": model.QueueDrainConfig(),
        "forecast": model.ForecastConfig(),
        "gpu_veto_projected": True,
        "burst_backlog_ahead": True,
        "burst_release": True,
    }
    fields.update(overrides)
    return model.PolicyConfig(max_replicas=max_replicas, **fields)  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class _Votes:
    contributions: dict[Signal, Contribution]
    wanted: int | None
    """The largest vote among fresh signals; None when none is fresh."""
    driver: Signal | None
    missing: tuple[Signal, ...]
    burst: bool
    recent_ratios: dict[Signal, float]
    """Each vote's ratio on the burst window alone (only with the burst path on)."""
    slo: _SloVote | None = None
    """The latency SLO's sizing (only with `config.slo`)."""


Votes = _Votes
"""How the signals voted (`decide_voted`)."""


@dataclass(frozen=True, slots=True)
class _SloVote:
    desired: int | None
    """Replicas the SLO needs; None when the vote abstains (see `detail`)."""
    detail: str
    fit: model.SloFit | None = None
    """The burstiness fit to remember (None with `SloConfig.fit_settle_s` None)."""


@dataclass(frozen=True, slots=True)
class _Tick:
    """One call of `decide`: what every step reads, and how a step states its verdict."""

    config: model.PolicyConfig
    observation: model.Observation
    state: model.PolicyState
    votes: _Votes

    @property
    def now(self) -> float:
        return self.observation.now_s

    @property
    def current(self) -> int:
        return self.observation.replicas

    def verdict(
        self,
        desired: int,
        kind: Kind,
        reason: Reason,
        detail: str,
        *,
        bound: Bound | None = None,
        cooldown_until_s: float | None = None,
    ) -> tuple[Decision, model.PolicyState]:
        if self.votes.slo is not None and reason is not Reason.PAUSED:
            detail = f"{detail}; {self.votes.slo.detail}"
        decision = Decision(
            current=self.current,
            desired=desired,
            kind=kind,
            reason=reason,
            detail=detail,
            contributions=self.votes.contributions,
            bound=bound,
            cooldown_until_s=cooldown_until_s,
            forecast=self.observation.forecast,
        )
        state = self.state
        if kind is Kind.SCALE_UP:
            now = self.now
            state = dataclasses.replace(state, last_scale_up_s=now, last_scale_change_s=now)
        elif kind is Kind.SCALE_DOWN:
            state = dataclasses.replace(state, last_scale_change_s=self.now)
        return decision, state

    def hold(
        self, reason: Reason, detail: str, *, cooldown_until_s: float | None = None
    ) -> tuple[Decision, model.PolicyState]:
        return self.verdict(
            self.current, Kind.HOLD, reason, detail, cooldown_until_s=cooldown_until_s
        )

    def steady(self, reason: Reason, detail: str) -> tuple[Decision, model.PolicyState]:
        return self.verdict(self.current, Kind.STEADY, reason, detail)


def decide(
    config: model.PolicyConfig, observation: model.Observation, state: model.PolicyState
) -> tuple[Decision, model.PolicyState]:
    """Decide the replica count for one service; see the module docstring for the steps.

    The returned state assumes the decision is carried out; a caller whose scale request failed
    keeps the previous state.
    """
    return decide_voted(config, observation, state, _vote(config, observation, state.slo_fit))


def decide_voted(
    config: model.PolicyConfig,
    observation: model.Observation,
    state: model.PolicyState,
    votes: Votes,
) -> tuple[Decision, model.PolicyState]:
    """`decide` with the votes cast already: `core.batch` casts them for many services at once,
    and the steps and their words stay here."""
    if votes.slo is not None and votes.slo.fit is not None:
        state = dataclasses.replace(state, slo_fit=votes.slo.fit)
    if config.pause is not None:
        return _paused(_Tick(config, observation, state, votes), config.pause)
    if state.paused_s is not None:  # resumed: as after a manual change of the count
        state = dataclasses.replace(
            state,
            paused_s=None,
            paused_replicas=None,
            last_scale_change_s=observation.now_s,
            burst_until_s=None,
        )
    if votes.burst and config.burst is not None:
        state = dataclasses.replace(state, burst_until_s=observation.now_s + config.burst.hold_s)
    tick = _Tick(config, observation, state, votes)
    current = tick.current

    lo, hi = config.min_replicas, config.max_replicas
    if current < lo:
        desired = lo if votes.wanted is None else min(hi, max(lo, votes.wanted))
        capped = _quota_capped(tick, desired)
        if capped is not None:
            return capped
        return tick.verdict(desired, Kind.SCALE_UP, Reason.BELOW_MIN, f"{current} < min {lo}")
    if current > hi:
        return tick.verdict(hi, Kind.SCALE_DOWN, Reason.ABOVE_MAX, f"{current} > max {hi}")

    if votes.wanted is None:
        names = _names(votes.missing)
        return tick.hold(Reason.MISSING_DATA, f"no fresh data for {names}")

    desired = min(hi, max(lo, votes.wanted))
    bound = Bound.MAX if votes.wanted > hi else Bound.MIN if votes.wanted < lo else None
    if desired > current:
        return _scale_up(tick, desired, bound)
    if desired < current:
        return _scale_down(tick, desired, bound)
    return tick.verdict(current, Kind.STEADY, Reason.AT_DESIRED, f"{current} replicas", bound=bound)


def _paused(tick: _Tick, pause: model.Pause) -> tuple[Decision, model.PolicyState]:
    """Hold where the service is; first set `pause.replicas`, once per pause and value."""
    state = tick.state
    if state.paused_s is None:
        state = dataclasses.replace(state, paused_s=tick.now)
    wanted = pause.replicas
    if wanted != state.paused_replicas:
        state = dataclasses.replace(state, paused_replicas=wanted)
        if wanted is not None and wanted != tick.current:
            kind = Kind.SCALE_UP if wanted > tick.current else Kind.SCALE_DOWN
            detail = f"paused-replicas {wanted}: set once, then paused"
            return dataclasses.replace(tick, state=state).verdict(
                wanted, kind, Reason.PAUSED, detail
            )
    at = f"paused at {tick.current} replicas"
    if wanted is not None:
        at += f" (paused-replicas {wanted})"
    return dataclasses.replace(tick, state=state).hold(Reason.PAUSED, at)


def _scale_up(tick: _Tick, desired: int, bound: Bound | None) -> tuple[Decision, model.PolicyState]:
    votes, config = tick.votes, tick.config
    assert votes.driver is not None
    name = votes.driver.name.lower()
    driver = votes.contributions[votes.driver]
    if not votes.burst and not driver.ratio > 1.0 + config.deadband_ratio:
        return tick.steady(Reason.IN_DEADBAND, f"{name} ratio {driver.ratio:.2f} in the deadband")
    if not votes.burst and tick.state.last_scale_up_s is not None:
        until = tick.state.last_scale_up_s + config.scale_up_cooldown_s
        if tick.now < until:
            return tick.hold(
                Reason.COOLDOWN,
                f"scale-up to {desired} waits for the scale-up cooldown",
                cooldown_until_s=until,
            )
    capped = _quota_capped(tick, desired)
    if capped is not None:
        return capped
    detail = f"{name} ratio {driver.ratio:.2f} asks for {driver.desired}"
    load = votes.contributions.get(Signal.LOAD)
    if (
        votes.burst
        and config.burst is not None
        and votes.driver is Signal.SATURATION
        and driver.estimator == "burst"
        and _backlog_counted(config, load_voted=load is not None and load.desired is not None)
    ):
        queue = tick.observation.signal(Signal.SATURATION)
        grown, horizon = _backlog_ahead(config, config.burst, queue, tick.observation)
        if grown > 0:
            detail += f" ({grown:.3g} rps of it the backlog's growth over {horizon:.0f} s)"
    if votes.burst:
        reason = Reason.BURST
    elif driver.estimator == "forecast":
        reason = Reason.FORECAST
    elif driver.estimator == "slo":
        reason = Reason.SLO
    elif driver.estimator == "seasonal":
        reason = Reason.SEASONAL
    else:
        reason = Reason.ABOVE_TARGET
    return tick.verdict(desired, Kind.SCALE_UP, reason, detail, bound=bound)


def _scale_down(
    tick: _Tick, desired: int, bound: Bound | None
) -> tuple[Decision, model.PolicyState]:
    votes, config, state = tick.votes, tick.config, tick.state
    if votes.missing:
        return tick.hold(
            Reason.MISSING_DATA, f"no scale-down without fresh {_names(votes.missing)}"
        )
    for signal, vote in votes.contributions.items():
        if not vote.ratio < 1.0 - config.deadband_ratio:
            detail = f"{signal.name.lower()} ratio {vote.ratio:.2f} in the deadband"
            return tick.steady(Reason.IN_DEADBAND, detail)
    for signal, ratio in votes.recent_ratios.items():
        if not ratio < 1.0 - config.deadband_ratio:
            detail = f"{signal.name.lower()} ratio {ratio:.2f} over the last seconds"
            return tick.hold(Reason.RECENT_LOAD, detail)
    gpu_target = config.target_gpu_utilization_pct
    gpu = tick.observation.signal(Signal.CAPACITY)
    if gpu_target is not None and gpu.fresh and gpu.mean > gpu_target:
        # The GPU work the remaining replicas would share: the utilisation is a mean over the
        # serving pods, and pods still starting carry none of it. A load signal that counts all
        # of it never asks for fewer replicas than can carry it, whatever its target: only an
        # undercount (long requests) can push this past 100 %.
        carried = math.inf if desired <= 0 else gpu.mean * tick.observation.serving / desired
        if not config.gpu_veto_projected or carried > 100.0:
            detail = f"GPU utilisation {gpu.mean:.0f}% above {gpu_target:.0f}% blocks scale-down"
            if config.gpu_veto_projected:
                detail += f": {desired} replicas would carry {carried:.0f}%"
            return tick.hold(Reason.CAPACITY_VETO, detail)
    if state.burst_until_s is not None and tick.now < state.burst_until_s:
        return tick.hold(
            Reason.BURST_HOLD,
            "no scale-down right after a burst",
            cooldown_until_s=state.burst_until_s,
        )
    released = False
    if state.last_scale_change_s is not None:
        until = state.last_scale_change_s + config.scale_down_cooldown_s
        if _burst_released(tick) and tick.now < until:
            assert state.burst_until_s is not None  # the burst hold is over by now
            until, released = min(until, state.burst_until_s), True
        if tick.now < until:
            return tick.hold(
                Reason.COOLDOWN,
                f"scale-down to {desired} waits for the scale-down cooldown",
                cooldown_until_s=until,
            )
    step = max_scale_down_step(tick.current, config.scale_down_max_ratio)
    capped = max(desired, tick.current - step)
    detail = "every signal below target"
    if capped > desired:
        detail += f"; {desired} wanted, at most {step} removed per step"
    if released:
        detail += "; a burst's scale-up, released once its pods serve and its hold ends"
    return tick.verdict(capped, Kind.SCALE_DOWN, Reason.BELOW_TARGET, detail, bound=bound)


def _burst_released(tick: _Tick) -> bool:
    """Whether the last change was a scale-up a burst drove, now serving in full
    (`PolicyConfig.burst_release`): a scale-down then waits for the burst hold only.

    The replicas a burst adds to drain a backlog are needed while it drains, a drain horizon or
    so; the scale-down cooldown (minutes) would keep them all that time. While the burst's pods
    are still starting, the backlog they were added for has not been drained, so the cooldown
    holds as after any scale-up.
    """
    config, state = tick.config, tick.state
    return (
        config.burst_release
        and config.burst is not None
        and state.burst_until_s is not None
        and state.last_scale_change_s is not None
        and state.last_scale_up_s == state.last_scale_change_s
        and state.burst_until_s - config.burst.hold_s >= state.last_scale_change_s
        and tick.observation.serving >= tick.current
    )


def _quota_capped(tick: _Tick, desired: int) -> tuple[Decision, model.PolicyState] | None:
    """The decision when the quota (or the placement) admits fewer than `desired`; None when
    it admits them."""
    admissible = tick.observation.admissible
    if admissible is None or desired <= admissible:
        return None
    capped = max(tick.current, admissible)
    if tick.observation.admissible_reason is Reason.NO_PLACEMENT:
        reason = Reason.NO_PLACEMENT
        detail = f"no node can place more than {admissible} replicas, {desired} wanted"
    else:
        reason = Reason.QUOTA
        detail = f"the GPU quota admits {admissible} replicas, {desired} wanted"
    if capped <= tick.current:
        return tick.hold(reason, detail)
    return tick.verdict(capped, Kind.SCALE_UP, reason, detail, bound=Bound.QUOTA)


def max_scale_down_step(current: int, ratio: float) -> int:
    """How many replicas one scale-down may remove: `max(1, floor(ratio x current))`."""
    return max(1, math.floor(ratio * current + _CEIL_SLACK))


def _vote(
    config: model.PolicyConfig, observation: model.Observation, fit: model.SloFit | None = None
) -> _Votes:
    # `core.batch` computes the load and queue votes, and the steps of `decide`, for many
    # services at once: a rule changed here must change there (tests/core/test_batch.py).
    serving = observation.serving
    contributions: dict[Signal, Contribution] = {}
    missing: list[Signal] = []
    burst = False
    recent: dict[Signal, tuple[float, float]] = {}
    load_value: float | None = None
    for signal in model.PRIMARY_SIGNALS:
        target = config.target(signal)
        if target is None:
            continue
        est = observation.signal(signal)
        if not (est.fresh and math.isfinite(est.mean)):
            missing.append(signal)
            contributions[signal] = Contribution(ratio=math.nan, desired=None, estimator="missing")
            continue
        if signal is Signal.SATURATION and config.queue_drain and config.target_load_per_replica:
            if load_value is None:  # the load is missing: the queue alone cannot give a rate
                missing.append(signal)
                contributions[signal] = Contribution(math.nan, None, "missing")
                continue
            target = config.target_load_per_replica
            value, estimator = _queue_demand(config, config.queue_drain, est, load_value)
        else:
            value, estimator = _estimate(config, est, observation.startup_s)
            if signal is Signal.LOAD:
                value, estimator = _seasonal(config, observation.forecast, value, estimator)
        if config.burst is not None:
            burst_value = _burst_value(config, config.burst, signal, est, load_value)
            recent[signal] = (_recent_value(config, signal, est, load_value), target)
            asked = target * max(serving, observation.replicas)
            if burst_value > 0 and burst_value >= config.burst.threshold_ratio * asked:
                burst = True
                if signal is Signal.SATURATION and _backlog_counted(
                    config, load_voted=load_value is not None
                ):
                    burst_value += _backlog_ahead(config, config.burst, est, observation)[0]
                if burst_value > value:
                    value, estimator = burst_value, "burst"
        value = max(0.0, value)
        if signal is Signal.LOAD:
            load_value = value
        desired = math.ceil(value / target - _CEIL_SLACK)
        ratio = _ratio(value, target, serving)
        contributions[signal] = Contribution(
            ratio=ratio, desired=desired, estimator=estimator, estimate=value
        )
    slo: _SloVote | None = None
    sized: dict[Signal, Callable[[float], int]] = {}
    if config.slo is not None and Signal.LOAD in contributions and Signal.LOAD not in missing:
        slo, sized = _size_for_slo(config, config.slo, observation, contributions, fit)
    recent_ratios = {
        signal: _ratio(value, target, serving) for signal, (value, target) in recent.items()
    }
    for signal, size in sized.items():
        if signal in recent and serving > 0:
            by_slo = size(recent[signal][0]) / serving
            recent_ratios[signal] = max(recent_ratios[signal], by_slo)
    for signal, cast in (
        (Signal.KV_CACHE, _kv_cache_vote),
        (Signal.TOKENS, _token_rate_vote),
        (Signal.TTFT, _latency_vote),
        (Signal.TPOT, _latency_vote),
    ):
        target = config.target(signal)
        if target is None:
            continue
        est = observation.signal(signal)
        if (
            not _usable(est)
            or serving <= 0
            or (signal is Signal.TOKENS and not _usable(observation.signal(Signal.PROMPT_TOKENS)))
        ):
            missing.append(signal)
            contributions[signal] = Contribution(math.nan, None, "missing")
            continue
        contributions[signal] = cast(config, est, target, observation)
    wanted, driver = _leading(contributions)
    return _Votes(contributions, wanted, driver, tuple(missing), burst, recent_ratios, slo)


def _kv_cache_vote(
    config: model.PolicyConfig,
    est: model.SignalEstimate,
    target: float,
    observation: model.Observation,
) -> Contribution:
    """The replicas that bring the mean KV-cache usage to its target, as a utilisation target
    does: `ceil(serving x usage / target)`.

    The cache is what an LLM server runs out of first when prompts grow: requests wait for
    room in it while the request rate stays flat. Usage is a ratio, so the look-ahead (made
    for rates) does not apply.
    """
    serving = observation.serving
    held = max(0.0, est.mean) * serving
    desired = math.ceil(held / target - _CEIL_SLACK)
    return Contribution(_ratio(held, target, serving), desired, "mean", held)


def _usable(est: model.SignalEstimate) -> bool:
    return est.fresh and math.isfinite(est.mean)


def _token_rate_vote(
    config: model.PolicyConfig,
    est: model.SignalEstimate,
    target: float,
    observation: model.Observation,
) -> Contribution:
    """The replicas that carry the tokens per second at the per-replica target: the load vote
    counted in tokens, so that a shift towards longer prompts or answers at a flat request rate
    still asks for capacity. The look-ahead applies to each rate as to the load.

    The target counts generated tokens, and a prompt token as `prompt_token_weight` of one: a
    replica prefills prompts several times faster than it generates (a prefill step runs many
    tokens per read of the weights, a decode step one per request), so a prompt token counted
    as a whole generated one would read a shift to long prompts as several times the load it
    is, and size capacity past what the server needs.
    """
    generated, estimator = _estimate(config, est, observation.startup_s)
    prompt, prompt_estimator = _estimate(
        config, observation.signal(Signal.PROMPT_TOKENS), observation.startup_s
    )
    if prompt_estimator == "forecast":
        estimator = "forecast"
    value = max(0.0, generated) + config.prompt_token_weight * max(0.0, prompt)
    backlog = _backlog_ratio(config, observation)
    if backlog > 1.0:
        value, estimator = value * backlog, "queue-demand"
    desired = math.ceil(value / target - _CEIL_SLACK)
    return Contribution(_ratio(value, target, observation.serving), desired, estimator, value)


def _backlog_ratio(config: model.PolicyConfig, observation: model.Observation) -> float:
    """The queue's demand over the served request rate (`QueueDrainConfig`), or 1 without it.

    Token counters count what the servers processed: while they are saturated the rate stays at
    what the replicas carry, whatever waits, so the token vote alone grows by one utilisation
    step per decision, the start-up time apart, while the queue fills. The requests waiting and
    the queue's growth are the demand it misses; at the tokens per request being served they
    raise the token rate in the same proportion as they raise the request rate.
    """
    drain = config.queue_drain
    if drain is None:
        return 1.0
    load, queue = observation.signal(Signal.LOAD), observation.signal(Signal.SATURATION)
    if not (_usable(load) and _usable(queue)) or not load.mean > 0:
        return 1.0
    demand, _ = _queue_demand(config, drain, queue, load.mean)
    return demand / load.mean


LATENCY_STEP_MAX_RATIO = 2.0
"""The most one latency vote multiplies the serving replicas by."""


def _latency_vote(
    config: model.PolicyConfig,
    est: model.SignalEstimate,
    target: float,
    observation: model.Observation,
) -> Contribution:
    """More replicas while the measured P95 (time to first token, or per output token) is above
    its target: `ceil(serving x p95 / target)`, at most `LATENCY_STEP_MAX_RATIO` times the
    serving replicas per decision, since latency is not proportional to the replicas (it falls
    steeply once the queue drains). Under the target it asks for nothing, and its ratio, the
    P95 over the target, keeps a scale-down back while it is within the deadband of the target.
    The deadband and cooldowns apply as to every vote.
    """
    serving = observation.serving
    ratio = max(0.0, est.mean) / target
    desired = 0
    if ratio > 1.0:
        desired = math.ceil(serving * min(ratio, LATENCY_STEP_MAX_RATIO) - _CEIL_SLACK)
    return Contribution(ratio, desired, "p95", est.mean)


def _leading(contributions: dict[Signal, Contribution]) -> tuple[int | None, Signal | None]:
    """The largest vote and the signal that casts it.

    On a tied vote the higher ratio drives: the deadband reads the driver's ratio, and a signal
    inside the deadband must not mask one above it that asks for as many replicas.
    """
    wanted: int | None = None
    driver: Signal | None = None
    for signal, vote in contributions.items():
        if vote.desired is None:
            continue
        tie_won = (
            vote.desired == wanted
            and driver is not None
            and vote.ratio > contributions[driver].ratio
        )
        if wanted is None or vote.desired > wanted or tie_won:
            wanted, driver = vote.desired, signal
    return wanted, driver


def _size_for_slo(
    config: model.PolicyConfig,
    slo: model.SloConfig,
    observation: model.Observation,
    contributions: dict[Signal, Contribution],
    fit: model.SloFit | None,
) -> tuple[_SloVote, dict[Signal, Callable[[float], int]]]:
    """Raise every vote in requests per second to the replicas that keep the latency SLO at
    that rate (`SloConfig`), in place in `contributions`; the vote it returns is the load's.

    A floor under the targets: a fixed utilisation under-provisions a small service, where the
    queueing model asks for the headroom its randomness needs, and the floor lets a large
    service run at a higher utilisation target safely (square-root staffing: the headroom the
    SLO needs shrinks, relatively, as the service grows). The load's vote (its mean, look-ahead
    or burst value) and the queue read as demand are both rates, so both are sized by it; a
    queue counted per replica is left as it is. Also returns, per signal it sized, how it sizes
    a rate (for the last seconds' check before a scale-down).
    """
    fit = _sample_for_fit(slo, observation, fit)
    fitted = _fit_slo_model(slo, observation, fit)
    if isinstance(fitted, str):
        return _SloVote(None, f"slo: {fitted}", fit), {}
    capacity, slots, burstiness, fit = fitted

    def size(arrival_rps: float) -> int | None:
        return queueing.replicas_for_wait(
            slots=slots,
            arrival_rps=arrival_rps,
            capacity_rps=capacity,
            burstiness=burstiness,
            quantile=slo.quantile,
            budget_s=slo.wait_budget_s,
            most=config.max_replicas,
        )

    def size_or_past_max(arrival_rps: float) -> int:
        needed = size(arrival_rps)
        if needed is None:  # more than the bounds allow: ask past them, and the bound says so
            return max(config.max_replicas + 1, math.ceil(arrival_rps / capacity))
        return needed

    serving = observation.serving
    percentile = f"p{slo.quantile * 100:g}"
    if slo.service_time_s:
        what = f"{percentile} latency {slo.target_latency_s:g} s"
    else:
        what = f"{percentile} queueing delay {slo.target_latency_s:g} s"
    about = f"{capacity:.3g} rps per replica, burstiness {burstiness:.2f}"
    if fit is not None and slo.fit_settle_s is not None:
        span = fit.sampled_s - fit.since_s
        if span < slo.fit_settle_s:
            about += f" held until {slo.fit_settle_s:g} s at {serving} serving ({span:.0f} s)"
    rates = {Signal.LOAD: "slo"}
    if config.queue_drain and config.target_load_per_replica:
        rates[Signal.SATURATION] = "queue-slo"
    vote: _SloVote | None = None
    sizers: dict[Signal, Callable[[float], int]] = {}
    for signal, estimator in rates.items():
        contribution = contributions.get(signal)
        if contribution is None or contribution.desired is None:
            continue
        arrival = contribution.estimate
        needed = size_or_past_max(arrival)
        if needed > config.max_replicas:
            detail = f"slo: {what} at {arrival:.3g} rps is out of reach ({about})"
        else:
            detail = f"slo: {what} at {arrival:.3g} rps needs {needed} ({about})"
        sizers[signal] = size_or_past_max
        if vote is None:
            vote = _SloVote(needed, detail, fit)
        if needed <= contribution.desired:
            continue
        ratio = needed / serving if serving > 0 else math.inf
        if contribution.estimator == "burst":
            estimator = "burst"  # the burst's reason and hold still apply
        contributions[signal] = Contribution(ratio, needed, estimator, arrival)
    return vote or _SloVote(None, "slo: no rate to size for", fit), sizers


def _fit_slo_model(
    slo: model.SloConfig, observation: model.Observation, fit: model.SloFit | None
) -> tuple[float, int, float, model.SloFit | None] | str:
    """A replica's capacity (rps), its concurrent requests and the burstiness, fitted to the
    service's own measurements, with the fit to remember; or why the vote abstains."""
    serving = observation.serving
    queue = observation.signal(Signal.SATURATION)
    queue_known = queue.fresh and math.isfinite(queue.mean)
    served = observation.signal(Signal.LOAD).mean
    capacity = slo.replica_capacity_rps
    if capacity is None:
        # Saturated, every serving replica with requests waiting: the served rate is capacity.
        if not (queue_known and serving > 0 and queue.mean >= serving and served > 0):
            return "replica capacity not measured yet (not saturated)"
        capacity = served / serving
    slots = max(1, round(capacity * slo.service_time_s))
    if fit is not None and slo.fit_settle_s is not None:
        # Only the samples at this serving count, once they span `fit_settle_s`; until then,
        # and while they give nothing to go on, the last fit holds.
        if fit.sampled_s - fit.since_s >= slo.fit_settle_s and math.isfinite(fit.queue):
            found = _burstiness(slo, serving, slots, capacity, fit.queue, fit.load)
            if found is not None:
                fit = dataclasses.replace(fit, burstiness=found)
        if fit.burstiness is not None:
            return capacity, slots, fit.burstiness, fit
    burstiness = slo.min_burstiness
    if queue_known:
        found = _burstiness(slo, serving, slots, capacity, queue.mean, served)
        burstiness = slo.min_burstiness if found is None else found
    return capacity, slots, burstiness, fit


def _burstiness(
    slo: model.SloConfig, serving: int, slots: int, capacity: float, queue: float, served: float
) -> float | None:
    """The burstiness the measured mean `queue` shows against the model's queue at `served`
    rps on `serving` replicas, within the configured bounds; None when the model's queue gives
    nothing to go on (under `fit_min_queue` requests, or none: the served rate at capacity)."""
    if serving <= 0:
        return None
    modelled = queueing.mean_queue(
        replicas=serving, slots=slots, arrival_rps=served, capacity_rps=capacity
    )
    if not slo.fit_min_queue <= modelled < math.inf:
        return None
    return min(slo.max_burstiness, max(slo.min_burstiness, queue / modelled))


def _sample_for_fit(
    slo: model.SloConfig, observation: model.Observation, fit: model.SloFit | None
) -> model.SloFit | None:
    """`fit` with this tick's queue and served rate counted (`SloConfig.fit_settle_s`): their
    means restart when the serving count changes, keeping the last fit made.

    A time-weighted mean since the change, whose weight on the past decays no slower than the
    queue's own smoothed mean does (its samples' mean age): a count held for hours is fitted on
    about as recent a queue as without the rule.
    """
    if slo.fit_settle_s is None:
        return None
    now, serving = observation.now_s, observation.serving
    if fit is None or fit.serving != serving or now < fit.sampled_s:
        kept = None if fit is None else fit.burstiness
        fit = model.SloFit(serving, now, now, math.nan, math.nan, kept)
    queue, load = observation.signal(Signal.SATURATION), observation.signal(Signal.LOAD)
    if not (queue.fresh and load.fresh and math.isfinite(queue.last) and math.isfinite(load.last)):
        return fit
    if not math.isfinite(fit.queue):
        return dataclasses.replace(fit, sampled_s=now, queue=queue.last, load=load.last)
    step = now - fit.sampled_s
    if step <= 0:
        return fit
    weight = step / (now - fit.since_s + step)  # each sample alike, the first included
    if queue.mean_age_s > 0:
        weight = max(weight, -math.expm1(-step / queue.mean_age_s))
    return dataclasses.replace(
        fit,
        sampled_s=now,
        queue=fit.queue + weight * (queue.last - fit.queue),
        load=fit.load + weight * (load.last - fit.load),
    )


def _estimate(
    config: model.PolicyConfig, est: model.SignalEstimate, startup_s: float | None
) -> tuple[float, str]:
    """The smoothed mean, raised to the look-ahead forecast when that is higher.

    The trend is fitted over the whole window, so after a step it stays steep for as long as
    the step is in the window, while the load it comes from is flat: extended over the start-up
    it would ask, tick after tick, for a level the load never reaches (about twice a 5x step's
    level with a 120 s start-up). Once the trend's line, brought to now over the mean's lag,
    stands above what the last seconds (the burst window's mean) measure by more than the
    trend's own doubt over that lag (`confidence_z` standard errors), the load has stopped
    rising where the line says it should still be: the line is then brought to now only, not
    extended over the start-up. Without that margin the last seconds' noise on a flat load
    switches the extension on and off, and the count follows it.
    """
    ahead = config.lookahead
    if ahead is None or not math.isfinite(est.trend_per_s):
        return est.mean, "mean"
    startup = ahead.default_startup_s if startup_s is None else startup_s
    horizon = min(ahead.max_horizon_s, startup) + est.mean_age_s
    growth = est.trend_per_s - ahead.confidence_z * est.trend_stderr_per_s
    if not growth > 0:
        return est.mean, "mean"
    now = est.mean + growth * est.mean_age_s
    doubt = ahead.confidence_z * est.trend_stderr_per_s * est.mean_age_s
    if math.isfinite(est.burst_mean) and now - doubt > est.burst_mean:
        return now, "forecast"
    return est.mean + growth * horizon, "forecast"


def _seasonal(
    config: model.PolicyConfig, vote: model.ForecastVote | None, value: float, estimator: str
) -> tuple[float, str]:
    """The load estimate, raised to the seasonal forecast's when that votes and is higher."""
    if config.forecast is None or vote is None or not vote.on:
        return value, estimator
    if vote.load_per_s > value:
        return vote.load_per_s, "seasonal"
    return value, estimator


def _queue_demand(
    config: model.PolicyConfig,
    drain: model.QueueDrainConfig,
    queue: model.SignalEstimate,
    load_rps: float,
    *,
    waiting: float | None = None,
) -> tuple[float, str]:
    """Requests per second the queue says the service must carry (see `QueueDrainConfig`), with
    `waiting` requests in the queue (default: its short mean)."""
    growth = queue.trend_per_s - drain.confidence_z * queue.trend_stderr_per_s
    if waiting is None:
        waiting = queue.burst_mean if math.isfinite(queue.burst_mean) else queue.mean
    backlog = _backlog(config, waiting, load_rps, drain.drain_s)
    demand = load_rps + max(0.0, growth) + backlog / drain.drain_s
    return demand, "queue-demand"


def _backlog(config: model.PolicyConfig, waiting: float, load_rps: float, drain_s: float) -> float:
    """Waiting requests beyond normal queueing: the queue target for the load's replicas.

    The allowance grows with the load in proportion (no rounding up to whole replicas), and by
    no more than one replica's load target drained over `drain_s` per replica: so more load never
    asks for fewer replicas (the allowance can never shrink the demand faster than the load
    grows it)."""
    load_target = config.target_load_per_replica
    if load_target is None:
        return waiting
    per_replica = min(config.target_queue_per_replica or 0.0, load_target * drain_s)
    return max(0.0, waiting - per_replica * load_rps / load_target)


def _burst_value(
    config: model.PolicyConfig,
    burst: model.BurstConfig,
    signal: Signal,
    est: model.SignalEstimate,
    load_rps: float | None,
) -> float:
    """What the newest fresh sample asks for, in the vote's units.

    The newest sample rather than the short mean: a mean over the burst window takes most of
    the window to show a step, and a 5x step must be answered within seconds. The queue's
    newest growth is the newest sample's rise over the short mean, spread over that mean's lag
    (half its window): the part of the arrivals the served rate cannot show yet. Only a rise
    counts, and the burst still has to ask for `threshold_ratio` times the capacity asked for,
    so the noise of a flat load does not fire it.
    """
    newest = est.last if est.fresh and math.isfinite(est.last) else est.burst_mean
    if not math.isfinite(newest):
        return 0.0
    if signal is Signal.SATURATION and config.queue_drain and load_rps is not None:
        rise = newest - est.burst_mean if math.isfinite(est.burst_mean) else 0.0
        surge_rps = max(0.0, rise) / (burst.window_s / 2.0)
        demand, _ = _queue_demand(config, config.queue_drain, est, load_rps, waiting=newest)
        return demand + surge_rps
    return newest


def _backlog_counted(config: model.PolicyConfig, *, load_voted: bool) -> bool:
    """Whether a burst the queue fires counts the backlog ahead (`burst_backlog_ahead`): only
    where the queue is read as demand, with a drain and a load vote beside it. The vote and the
    scale-up's detail both ask this, so the detail names only what the vote counted."""
    return config.burst_backlog_ahead and config.queue_drain is not None and load_voted


def _backlog_ahead(
    config: model.PolicyConfig,
    burst: model.BurstConfig,
    est: model.SignalEstimate,
    observation: model.Observation,
) -> tuple[float, float]:
    """The queue demand a burst adds for the backlog's growth until new pods serve
    (`PolicyConfig.burst_backlog_ahead`), in requests per second, and the horizon it counts.

    A burst sized on the backlog now leaves the replicas it asks for to find a larger one: the
    queue goes on growing at its newest rate (the rise `_burst_value` reads) until the new pods
    serve, and the scale-up cooldown keeps the next scale-up back until after that. The growth
    over the pod start-up time, at most the drain horizon (past it the drain itself is the
    slower term), drained over that horizon like the rest of the backlog.
    """
    drain = config.queue_drain
    if drain is None or not (
        est.fresh and math.isfinite(est.burst_mean) and math.isfinite(est.last)
    ):
        return 0.0, 0.0
    startup = observation.startup_s
    if startup is None:
        startup = config.lookahead.default_startup_s if config.lookahead is not None else 0.0
    horizon = min(startup, drain.drain_s)
    surge_rps = max(0.0, est.last - est.burst_mean) / (burst.window_s / 2.0)
    return surge_rps * horizon / drain.drain_s, horizon


def _recent_value(
    config: model.PolicyConfig, signal: Signal, est: model.SignalEstimate, load_rps: float | None
) -> float:
    """What the last few seconds (the burst window's mean) ask for, in the vote's units: a
    scale-down waits until these too are below target."""
    if not math.isfinite(est.burst_mean):
        return 0.0
    if signal is Signal.SATURATION and config.queue_drain and load_rps is not None:
        # The queue demand already reads the queue's short mean and its growth.
        return _queue_demand(config, config.queue_drain, est, load_rps)[0]
    return est.burst_mean


def _ratio(value: float, target: float, serving: int) -> float:
    if serving > 0:
        return value / (target * serving)
    return math.inf if value > 0 else math.nan


def _names(signals: tuple[Signal, ...]) -> str:
    return ", ".join(s.name.lower() for s in signals)

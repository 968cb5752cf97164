"""The batch front (`core.batch`) decides what `policy.decide` decides, case by case.

Seeded random cases (hypothesis is not available here) cover the bounds, missing and stale
data, bursts, the look-ahead, the queue drain, the cooldowns, the quota and the deadband's edges:
values are drawn often exactly on a ratio's boundary.
"""

from __future__ import annotations

import dataclasses
import math
import random

import numpy as np
import pytest

from autoscaler.core import batch, model, policy
from autoscaler.core.model import Signal, SignalEstimate

NOW_S = 10_000.0
CASES = 6_000


def _config(rng: random.Random) -> model.PolicyConfig:
    load = rng.random() < 0.85
    queue = not load or rng.random() < 0.6
    lo = rng.choice((0, 1, 2, 3))
    hi = lo + rng.choice((0, 1, 3, 8, 30))
    return model.PolicyConfig(
        max_replicas=max(1, hi),
        min_replicas=lo if hi >= 1 else 0,
        target_load_per_replica=rng.choice((5.0, 10.0, 2.5, 0.7, 0.3)) if load else None,
        target_queue_per_replica=rng.choice((4.0, 1.0, 3.3)) if queue else None,
        target_gpu_utilization_pct=rng.choice((None, 75.0, 50.0)),
        gpu_veto_projected=rng.random() < 0.5,
        burst_backlog_ahead=rng.random() < 0.5,
        burst_release=rng.random() < 0.5,
        deadband_ratio=rng.choice((0.0, 0.1, 0.25)),
        scale_up_cooldown_s=rng.choice((0.0, 60.0, 30.0)),
        scale_down_cooldown_s=rng.choice((0.0, 300.0, 45.0)),
        scale_down_max_ratio=rng.choice((0.2, 0.5, 1.0, 0.33)),
        burst=rng.choice(
            (None, model.BurstConfig(threshold_ratio=1.5), model.BurstConfig(window_s=4.0))
        ),
        lookahead=rng.choice(
            (
                None,
                model.LookaheadConfig(),
                model.LookaheadConfig(confidence_z=0.0, max_horizon_s=30.0),
            )
        ),
        queue_drain=rng.choice(
            (None, model.QueueDrainConfig(), model.QueueDrainConfig(drain_s=7.0, confidence_z=0))
        ),
        forecast=rng.choice((None, model.ForecastConfig())),
    )


def _value(rng: random.Random, scale: float, deadband: float) -> float:
    """Often exactly on a boundary the policy compares against."""
    kind = rng.random()
    if kind < 0.3:
        edge = rng.choice((1.0, 1.0 + deadband, 1.0 - deadband, 1.5, 2.0, 0.5))
        return scale * rng.choice((1, 2, 3, 4, 7)) * edge
    if kind < 0.4:
        return rng.choice((0.0, -1.0, 1e-12))
    return rng.uniform(0.0, 6.0) * scale


def _estimate(
    rng: random.Random, scale: float, deadband: float, *, gpu: bool = False
) -> SignalEstimate:
    roll = rng.random()
    if roll < 0.06:
        return SignalEstimate.missing()
    mean = rng.uniform(10.0, 100.0) if gpu else _value(rng, scale, deadband)
    fresh = roll > 0.12
    burst_mean = rng.choice((mean, _value(rng, scale, deadband), math.nan))
    last = rng.choice((burst_mean, _value(rng, scale, deadband) * 3, math.nan))
    if not fresh:
        last = math.nan
    trend = rng.choice((0.0, rng.uniform(-1.0, 1.0), math.nan, rng.uniform(0.0, 0.2)))
    stderr = rng.choice((0.0, math.inf, rng.uniform(0.0, 0.1)))
    return SignalEstimate(
        mean=rng.choice((mean, mean, mean, math.nan, math.inf)) if roll < 0.2 else mean,
        level=mean,
        trend_per_s=trend,
        burst_mean=burst_mean,
        last=last,
        fresh=fresh,
        trend_stderr_per_s=stderr,
        mean_age_s=rng.choice((0.0, 12.5, 40.0)),
    )


def _case(
    rng: random.Random,
) -> tuple[model.PolicyConfig, model.Observation, model.PolicyState]:
    config = _config(rng)
    replicas = rng.choice((0, 1, 2, 3, 4, 5, 8, 12, 40))
    serving = max(0, replicas - rng.choice((0, 0, 0, 1, 3)))
    per = config.target_load_per_replica or config.target_queue_per_replica or 1.0
    signals = {
        Signal.LOAD: _estimate(rng, per * max(1, serving), config.deadband_ratio),
        Signal.SATURATION: _estimate(
            rng, (config.target_queue_per_replica or 1.0) * max(1, serving), config.deadband_ratio
        ),
        Signal.CAPACITY: _estimate(rng, 1.0, 0.0, gpu=True),
    }
    if replicas > 0 and rng.random() < 0.2:  # on the projected veto's edge: k replicas at 100 %
        gpu = signals[Signal.CAPACITY]
        edge = 100.0 * rng.choice((1, 2, 3, replicas - 1, replicas)) / replicas
        signals[Signal.CAPACITY] = gpu._replace(mean=edge, level=edge)
    forecast = rng.choice((None, model.ForecastVote.off("no history")))
    observation = model.Observation(
        now_s=NOW_S,
        replicas=replicas,
        serving=serving,
        signals=signals,
        startup_s=rng.choice((None, 20.0, 900.0)),
        admissible=rng.choice((None, None, 0, 3, replicas, replicas + 2)),
        admissible_reason=rng.choice((model.Reason.QUOTA, model.Reason.NO_PLACEMENT)),
        forecast=forecast if config.forecast is not None else None,
    )

    def when(cooldown: float) -> float | None:
        return rng.choice((None, NOW_S - cooldown, NOW_S - cooldown - 1.0, NOW_S - 5.0, NOW_S))

    last_up = when(config.scale_up_cooldown_s)
    # Often the last change was that scale-up, and a burst drove it (the burst release).
    last_change = last_up if rng.random() < 0.4 else when(config.scale_down_cooldown_s)
    bursts = [None, NOW_S + 10.0, NOW_S, NOW_S - 1.0]
    if last_up is not None and config.burst is not None:
        bursts += [last_up + config.burst.hold_s, last_up + config.burst.hold_s - 1.0]
    state = model.PolicyState(
        last_scale_up_s=last_up,
        last_scale_change_s=last_change,
        burst_until_s=rng.choice(bursts),
    )
    return config, observation, state


def _nan(value: float | None) -> float:
    return math.nan if value is None else value


def _inputs(observations: list[model.Observation], states: list[model.PolicyState]) -> batch.Inputs:
    def column(name: str) -> np.ndarray:
        return np.array(
            [[getattr(o.signal(s), name) for s in model.BASE_SIGNALS] for o in observations]
        )

    return batch.Inputs(
        now_s=NOW_S,
        replicas=np.array([o.replicas for o in observations], np.int64),
        serving=np.array([o.serving for o in observations], np.int64),
        startup_s=np.array([_nan(o.startup_s) for o in observations]),
        admissible=np.array(
            [-1 if o.admissible is None else o.admissible for o in observations], np.int64
        ),
        no_placement=np.array(
            [o.admissible_reason is model.Reason.NO_PLACEMENT for o in observations]
        ),
        mean=column("mean"),
        trend_per_s=column("trend_per_s"),
        trend_stderr_per_s=column("trend_stderr_per_s"),
        mean_age_s=column("mean_age_s"),
        burst_mean=column("burst_mean"),
        last=column("last"),
        fresh=column("fresh").astype(bool),
        last_scale_up_s=np.array([_nan(s.last_scale_up_s) for s in states]),
        last_scale_change_s=np.array([_nan(s.last_scale_change_s) for s in states]),
        burst_until_s=np.array([_nan(s.burst_until_s) for s in states]),
    )


def _same(a: float | None, b: float) -> bool:
    return (a is None and math.isnan(b)) or a == b


@pytest.mark.parametrize("seed", [14, 15, 16])
def test_batch_decides_as_the_policy_does(seed: int) -> None:
    """Every batchable case gets the kind, reason, replicas, bound, cooldown, next state and
    vote estimates that `policy.decide` gives it, and its votes make the same full decision."""
    rng = random.Random(seed)
    cases = [_case(rng) for _ in range(CASES)]
    assert all(batch.batchable(config) for config, _, _ in cases)
    configs = batch.Configs.of([config for config, _, _ in cases])
    out = batch.decide(configs, _inputs([o for _, o, _ in cases], [s for _, _, s in cases]))
    seen: set[tuple[model.Kind, model.Reason]] = set()
    voter = batch.Voter(out)
    for i, (config, observation, state) in enumerate(cases):
        decision, after = policy.decide(config, observation, state)
        assert out.exact[i]
        got = (
            batch.KINDS[out.kind[i]],
            batch.REASONS[out.reason[i]],
            int(out.desired[i]),
            batch.BOUNDS[out.bound[i]],
        )
        wanted = (decision.kind, decision.reason, decision.desired, decision.bound)
        assert got == wanted, (i, config, observation, state, decision.detail)
        assert _same(decision.cooldown_until_s, out.cooldown_until_s[i]), i
        assert _same(after.last_scale_up_s, out.last_scale_up_s[i]), i
        assert _same(after.last_scale_change_s, out.last_scale_change_s[i]), i
        assert _same(after.burst_until_s, out.burst_until_s[i]), i
        assert out.changed_state[i] == (after is not state), i
        for signal, column in (
            (Signal.LOAD, out.load_estimate),
            (Signal.SATURATION, out.queue_estimate),
        ):
            vote = decision.contributions.get(signal)
            estimate = math.nan if vote is None else vote.estimate
            assert estimate == column[i] or (math.isnan(estimate) and math.isnan(column[i])), i
        voted = policy.decide_voted(config, observation, state, voter.votes(i))
        assert repr(voted) == repr((decision, after)), i
        seen.add((decision.kind, decision.reason))
    # The cases reach every outcome the batch can give, so none goes untested.
    reachable = {
        (model.Kind.SCALE_UP, model.Reason.BELOW_MIN),
        (model.Kind.SCALE_DOWN, model.Reason.ABOVE_MAX),
        (model.Kind.HOLD, model.Reason.MISSING_DATA),
        (model.Kind.STEADY, model.Reason.IN_DEADBAND),
        (model.Kind.HOLD, model.Reason.COOLDOWN),
        (model.Kind.HOLD, model.Reason.QUOTA),
        (model.Kind.SCALE_UP, model.Reason.QUOTA),
        (model.Kind.HOLD, model.Reason.NO_PLACEMENT),
        (model.Kind.SCALE_UP, model.Reason.BURST),
        (model.Kind.SCALE_UP, model.Reason.FORECAST),
        (model.Kind.SCALE_UP, model.Reason.ABOVE_TARGET),
        (model.Kind.HOLD, model.Reason.RECENT_LOAD),
        (model.Kind.HOLD, model.Reason.CAPACITY_VETO),
        (model.Kind.HOLD, model.Reason.BURST_HOLD),
        (model.Kind.SCALE_DOWN, model.Reason.BELOW_TARGET),
        (model.Kind.STEADY, model.Reason.AT_DESIRED),
    }
    assert reachable <= seen, reachable - seen


def test_unread_fields_are_not_batchable() -> None:
    """A pause, an SLO or an LLM target sends the service to the per-service policy."""
    base = policy.default(max_replicas=8, target_load_per_replica=5.0)
    assert batch.batchable(base)
    for change in (
        {"pause": model.Pause()},
        {"slo": model.SloConfig(target_latency_s=1.0)},
        {"target_kv_cache_ratio": 0.8},
        {"target_tokens_per_replica": 100.0},
        {"target_ttft_p95_s": 1.0},
        {"target_tpot_p95_s": 0.05},
    ):
        assert not batch.batchable(dataclasses.replace(base, **change)), change


def test_a_vote_past_float_precision_is_left_to_the_policy() -> None:
    """A vote too large for float64 to count exactly is marked for the per-service policy."""
    config = policy.seed(max_replicas=4, target_load_per_replica=1e-300)
    observation = model.Observation(
        now_s=NOW_S,
        replicas=2,
        serving=2,
        signals={Signal.LOAD: SignalEstimate(1e10, 1e10, 0.0, 1e10, 1e10, True)},
    )
    out = batch.decide(batch.Configs.of([config]), _inputs([observation], [model.PolicyState()]))
    assert not out.exact[0]

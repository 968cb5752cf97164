"""The replica policy, step by step (see the module docstring of `policy`), then its properties."""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from autoscaler.core import model, policy
from autoscaler.core.model import (
    Bound,
    BurstConfig,
    Kind,
    LookaheadConfig,
    QueueDrainConfig,
    Reason,
    Signal,
    SignalEstimate,
)

from . import builders
from .builders import NOW_S, estimate, stale


def decide(
    config: model.PolicyConfig | None = None,
    observation: model.Observation | None = None,
    state: model.PolicyState | None = None,
) -> tuple[model.Decision, model.PolicyState]:
    return policy.decide(
        config or builders.config(),
        observation or builders.observation(),
        state or builders.state(),
    )


# 1. Votes ------------------------------------------------------------------------------------


def test_vote_is_the_ceiling_of_estimate_over_target() -> None:
    """A load of 45 against a target of 10 per replica asks for ceil(4.5) = 5 replicas."""
    decision, _ = decide(observation=builders.observation(load=45.0))
    vote = decision.contributions[Signal.LOAD]
    assert (vote.ratio, vote.desired, vote.estimator) == (45.0 / 40.0, 5, "mean")
    assert (decision.kind, decision.desired, decision.reason) == (
        Kind.SCALE_UP,
        5,
        Reason.ABOVE_TARGET,
    )


def test_vote_on_an_exact_multiple_is_that_multiple() -> None:
    """A load of exactly 5 targets asks for 5 replicas, not 6."""
    decision, _ = decide(observation=builders.observation(load=50.0))
    assert decision.contributions[Signal.LOAD].desired == 5


@pytest.mark.parametrize(
    ("target", "load", "votes"),
    [
        (1.0, 2.0000000001, 2),  # float noise just above an integer
        (0.1, 1.1, 11),  # 1.1 / 0.1 == 11.000000000000002 in floating point
        (0.1, 0.3, 3),  # 0.3 / 0.1 == 2.9999999999999996
        (1.0, 2.001, 3),  # a real excess still rounds up
    ],
)
def test_vote_ignores_float_noise_around_an_integer(target: float, load: float, votes: int) -> None:
    """A ratio off an integer by float rounding alone asks for that integer, either side."""
    config = builders.config(target_load_per_replica=target, min_replicas=1, max_replicas=50)
    observation = builders.observation(load=load, replicas=1, serving=1)
    decision, _ = decide(config, observation)
    assert decision.contributions[Signal.LOAD].desired == votes


def test_desired_is_the_max_of_load_and_saturation() -> None:
    """Load asks for 3, the queue for 7: the decision follows the queue."""
    config = builders.config(target_queue_per_replica=2.0)
    decision, _ = decide(config, builders.observation(load=30.0, queue=14.0))
    assert decision.contributions[Signal.LOAD].desired == 3
    assert decision.contributions[Signal.SATURATION].desired == 7
    assert (decision.kind, decision.desired) == (Kind.SCALE_UP, 7)
    assert decision.detail.startswith("saturation")


def test_scale_up_follows_any_signal_above_the_deadband_when_votes_tie() -> None:
    """Load in the deadband does not mask a queue above it when both ask for the same count."""
    config = builders.config(target_load_per_replica=1.0, target_queue_per_replica=1.0)
    observation = builders.observation(load=5.2, queue=5.8, replicas=5, serving=5)
    decision, _ = decide(config, observation)
    assert (decision.kind, decision.desired) == (Kind.SCALE_UP, 6)
    assert decision.detail.startswith("saturation ratio 1.16")


def test_more_load_never_masks_a_queue_above_target() -> None:
    """Raising the load from 5.0 to 5.2 does not lower the decision while the queue asks for 6."""
    config = builders.config(target_load_per_replica=1.0, target_queue_per_replica=1.0)
    observations = [
        builders.observation(load=load, queue=5.8, replicas=5, serving=5) for load in (5.0, 5.2)
    ]
    desired = [decide(config, observation)[0].desired for observation in observations]
    assert desired == [6, 6]


def test_negative_estimates_vote_as_zero() -> None:
    """A negative estimate (a counter reset artefact) asks for no replicas rather than fewer."""
    decision, _ = decide(observation=builders.observation(load=-30.0, replicas=3, serving=3))
    assert decision.contributions[Signal.LOAD].desired == 0
    assert decision.desired == 2


# 2. Data -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "load",
    [stale(5.0), estimate(math.nan), SignalEstimate.missing(), None],
    ids=["stale", "nan", "empty-window", "absent"],
)
def test_no_fresh_data_holds(load: SignalEstimate | None) -> None:
    """Without a fresh primary signal the policy holds and names the missing signal."""
    decision, state = decide(observation=builders.observation(load=load, replicas=6, serving=6))
    assert (decision.kind, decision.reason, decision.desired) == (Kind.HOLD, Reason.MISSING_DATA, 6)
    assert "load" in decision.detail
    assert decision.contributions[Signal.LOAD].desired is None
    assert state == builders.state()


def test_missing_data_is_never_read_as_zero_load() -> None:
    """A missing signal does not vote, so it never asks for fewer replicas."""
    config = builders.config(target_queue_per_replica=1.0)
    observation = builders.observation(load=5.0, queue=stale(0.0), replicas=6, serving=6)
    decision, _ = decide(config, observation)
    assert decision.contributions[Signal.SATURATION].desired is None
    assert (decision.kind, decision.reason, decision.desired) == (Kind.HOLD, Reason.MISSING_DATA, 6)
    assert "saturation" in decision.detail


def test_scale_up_proceeds_on_the_fresh_signal_alone() -> None:
    """With the queue stale, a fresh load above target still scales up."""
    config = builders.config(target_queue_per_replica=1.0)
    observation = builders.observation(load=60.0, queue=stale(0.0))
    decision, _ = decide(config, observation)
    assert (decision.kind, decision.desired, decision.reason) == (
        Kind.SCALE_UP,
        6,
        Reason.ABOVE_TARGET,
    )


# 3. Bounds -----------------------------------------------------------------------------------


def test_vote_above_max_is_clamped_and_says_so() -> None:
    """A vote for 20 with max 10 scales to 10 and reports the max bound."""
    decision, _ = decide(observation=builders.observation(load=200.0))
    assert (decision.desired, decision.bound, decision.reason) == (
        10,
        Bound.MAX,
        Reason.ABOVE_TARGET,
    )


def test_at_max_with_more_load_stays_and_says_so() -> None:
    """At max replicas with a vote above it, the decision is steady at the max bound."""
    observation = builders.observation(load=200.0, replicas=10, serving=10)
    decision, _ = decide(observation=observation)
    assert (decision.kind, decision.desired, decision.bound) == (Kind.STEADY, 10, Bound.MAX)


def test_vote_below_min_is_clamped_and_says_so() -> None:
    """No load at 3 replicas scales down to min 2 and reports the min bound."""
    decision, _ = decide(observation=builders.observation(load=0.0, replicas=3, serving=3))
    assert (decision.kind, decision.desired, decision.bound, decision.reason) == (
        Kind.SCALE_DOWN,
        2,
        Bound.MIN,
        Reason.BELOW_TARGET,
    )


def test_below_min_scales_up_at_once() -> None:
    """One replica under min 2 goes to 2 despite a recent scale-up."""
    state = builders.state(last_scale_up_s=NOW_S - 1, last_scale_change_s=NOW_S - 1)
    observation = builders.observation(load=0.0, replicas=1, serving=1)
    decision, _ = decide(observation=observation, state=state)
    assert (decision.kind, decision.desired, decision.reason) == (
        Kind.SCALE_UP,
        2,
        Reason.BELOW_MIN,
    )


def test_below_min_goes_straight_to_the_vote() -> None:
    """Below min with a vote for 5, the scale-up goes to 5 in one step."""
    decision, _ = decide(observation=builders.observation(load=50.0, replicas=0, serving=0))
    assert (decision.desired, decision.reason) == (5, Reason.BELOW_MIN)


def test_below_min_without_data_goes_to_min() -> None:
    """Below min with no data, the scale-up goes to min and no further."""
    observation = builders.observation(load=stale(500.0), replicas=0, serving=0)
    decision, _ = decide(observation=observation)
    assert (decision.kind, decision.desired, decision.reason) == (
        Kind.SCALE_UP,
        2,
        Reason.BELOW_MIN,
    )


def test_above_max_scales_down_at_once() -> None:
    """Fourteen replicas over max 10 go to 10 in one step, past the cap, cooldown and no data."""
    state = builders.state(last_scale_up_s=NOW_S - 1, last_scale_change_s=NOW_S - 1)
    observation = builders.observation(load=stale(500.0), replicas=14, serving=14)
    decision, _ = decide(observation=observation, state=state)
    assert (decision.kind, decision.desired, decision.reason) == (
        Kind.SCALE_DOWN,
        10,
        Reason.ABOVE_MAX,
    )


# 4. Deadband ---------------------------------------------------------------------------------


def test_ratio_at_the_upper_edge_of_the_deadband_is_steady() -> None:
    """A ratio of exactly 1.1 does nothing though it rounds up to one more replica."""
    decision, _ = decide(observation=builders.observation(load=44.0))
    assert decision.contributions[Signal.LOAD].desired == 5
    assert (decision.kind, decision.reason, decision.desired) == (
        Kind.STEADY,
        Reason.IN_DEADBAND,
        4,
    )


def test_ratio_above_the_deadband_scales_up() -> None:
    """A ratio of 1.125 is above the deadband and scales up."""
    decision, _ = decide(observation=builders.observation(load=45.0))
    assert decision.kind is Kind.SCALE_UP


def test_ratio_at_the_lower_edge_of_the_deadband_is_steady() -> None:
    """A ratio of exactly 0.9 does nothing though it rounds down to one fewer replica."""
    observation = builders.observation(load=90.0, replicas=10, serving=10)
    decision, _ = decide(observation=observation)
    assert (decision.kind, decision.reason, decision.desired) == (
        Kind.STEADY,
        Reason.IN_DEADBAND,
        10,
    )


def test_ratio_below_the_deadband_scales_down() -> None:
    """A ratio of 0.89 on 10 replicas scales down to 9."""
    observation = builders.observation(load=89.0, replicas=10, serving=10)
    decision, _ = decide(observation=observation)
    assert (decision.kind, decision.reason, decision.desired) == (
        Kind.SCALE_DOWN,
        Reason.BELOW_TARGET,
        9,
    )


def test_scale_down_needs_every_signal_below_the_deadband() -> None:
    """A low load does not scale down while the queue sits at its target."""
    config = builders.config(target_queue_per_replica=1.0)
    observation = builders.observation(load=10.0, queue=9.0, replicas=10, serving=10)
    decision, _ = decide(config, observation)
    assert decision.contributions[Signal.SATURATION].desired == 9
    assert (decision.kind, decision.reason, decision.desired) == (
        Kind.STEADY,
        Reason.IN_DEADBAND,
        10,
    )
    assert decision.detail.startswith("saturation ratio 0.90")


def test_exact_vote_is_steady_at_desired() -> None:
    """A load of exactly the target on every replica is steady at the desired count."""
    decision, state = decide()
    assert (decision.kind, decision.reason, decision.desired) == (
        Kind.STEADY,
        Reason.AT_DESIRED,
        4,
    )
    assert not decision.changes
    assert state == builders.state()


# 5. Capacity veto ----------------------------------------------------------------------------


def test_gpu_above_target_vetoes_a_scale_down() -> None:
    """GPU utilisation of 80 % over a 75 % target holds a scale-down."""
    observation = builders.observation(load=80.0, gpu=80.0, replicas=10, serving=10)
    decision, _ = decide(observation=observation)
    assert (decision.kind, decision.reason, decision.desired) == (
        Kind.HOLD,
        Reason.CAPACITY_VETO,
        10,
    )


def test_projected_gpu_veto_holds_a_scale_down_the_gpu_work_does_not_fit() -> None:
    """With the projected veto, GPU utilisation over its target holds a scale-down to replicas
    that would carry 160 % of a GPU each."""
    config = builders.config(gpu_veto_projected=True)
    observation = builders.observation(load=50.0, gpu=80.0, replicas=10, serving=10)
    decision, _ = decide(config, observation)
    assert (decision.kind, decision.reason, decision.desired) == (
        Kind.HOLD,
        Reason.CAPACITY_VETO,
        10,
    )
    assert "5 replicas would carry 160%" in decision.detail


def test_projected_gpu_veto_lets_a_scale_down_the_gpu_work_fits() -> None:
    """With the projected veto, GPU utilisation over its target lets a scale-down through when
    the replicas that remain can carry the GPU work, as for a load target above the GPU target."""
    config = builders.config(gpu_veto_projected=True)
    observation = builders.observation(load=80.0, gpu=80.0, replicas=10, serving=10)
    decision, _ = decide(config, observation)
    assert (decision.kind, decision.reason, decision.desired) == (
        Kind.SCALE_DOWN,
        Reason.BELOW_TARGET,
        8,
    )


def test_projected_gpu_veto_spreads_the_gpu_work_of_the_serving_replicas_only() -> None:
    """With the projected veto, the GPU work is the utilisation of the serving replicas times
    their number, so replicas still starting do not make a scale-down the work fits look short."""
    config = builders.config(gpu_veto_projected=True)
    # 8 serving at 80 % carry 6.4 GPUs of work: 7 replicas carry 91 % each (10 x 80 % / 7 would
    # read 114 %). The cap removes 2 of the 10.
    observation = builders.observation(load=70.0, gpu=80.0, replicas=10, serving=8)
    decision, _ = decide(config, observation)
    assert (decision.kind, decision.reason, decision.desired) == (
        Kind.SCALE_DOWN,
        Reason.BELOW_TARGET,
        8,
    )


def test_projected_gpu_veto_holds_a_scale_down_to_zero() -> None:
    """With the projected veto, GPU utilisation over its target holds a scale-down to no
    replicas, which carry nothing."""
    config = builders.config(min_replicas=0, gpu_veto_projected=True)
    observation = builders.observation(load=0.0, gpu=80.0, replicas=1, serving=1)
    decision, _ = decide(config, observation)
    assert (decision.kind, decision.reason) == (Kind.HOLD, Reason.CAPACITY_VETO)


@pytest.mark.parametrize(
    ("gpu", "gpu_target"),
    [(75.0, 75.0), (stale(99.0), 75.0), (99.0, None)],
    ids=["at-target", "stale", "no-target"],
)
def test_gpu_at_target_stale_or_unused_does_not_veto(
    gpu: float | SignalEstimate, gpu_target: float | None
) -> None:
    """GPU utilisation not above its target, stale or without a target lets a scale-down through."""
    config = builders.config(target_gpu_utilization_pct=gpu_target)
    observation = builders.observation(load=50.0, gpu=gpu, replicas=10, serving=10)
    decision, _ = decide(config, observation)
    assert decision.kind is Kind.SCALE_DOWN


def test_gpu_alone_never_scales_up() -> None:
    """A saturated GPU with load on target keeps the count."""
    decision, _ = decide(observation=builders.observation(load=40.0, gpu=100.0))
    assert (decision.kind, decision.desired) == (Kind.STEADY, 4)
    assert Signal.CAPACITY not in decision.contributions


# 6. Cooldowns --------------------------------------------------------------------------------


def test_scale_up_waits_for_the_scale_up_cooldown() -> None:
    """A scale-up 59 s after the last one holds until 60 s have passed."""
    state = builders.state(last_scale_up_s=NOW_S - 59, last_scale_change_s=NOW_S - 59)
    decision, next_state = decide(observation=builders.observation(load=60.0), state=state)
    assert (decision.kind, decision.reason, decision.desired) == (Kind.HOLD, Reason.COOLDOWN, 4)
    assert decision.cooldown_until_s == NOW_S + 1
    assert next_state == state


def test_scale_up_proceeds_once_the_cooldown_has_passed() -> None:
    """A scale-up exactly 60 s after the last one proceeds and restarts both timestamps."""
    state = builders.state(last_scale_up_s=NOW_S - 60, last_scale_change_s=NOW_S - 60)
    decision, next_state = decide(observation=builders.observation(load=60.0), state=state)
    assert (decision.kind, decision.desired) == (Kind.SCALE_UP, 6)
    assert next_state == builders.state(last_scale_up_s=NOW_S, last_scale_change_s=NOW_S)


def test_a_recent_scale_down_does_not_block_a_scale_up() -> None:
    """A scale-down 1 s ago leaves a scale-up free: only scale-ups start the up cooldown."""
    state = builders.state(last_scale_up_s=NOW_S - 1000, last_scale_change_s=NOW_S - 1)
    decision, _ = decide(observation=builders.observation(load=60.0), state=state)
    assert decision.kind is Kind.SCALE_UP


@pytest.mark.parametrize("last_up", [None, NOW_S - 299])
def test_scale_down_waits_300_s_after_any_change(last_up: float | None) -> None:
    """A scale-down 299 s after the last change of either direction holds until 300 s."""
    state = builders.state(last_scale_up_s=last_up, last_scale_change_s=NOW_S - 299)
    observation = builders.observation(load=50.0, replicas=10, serving=10)
    decision, next_state = decide(observation=observation, state=state)
    assert (decision.kind, decision.reason, decision.desired) == (Kind.HOLD, Reason.COOLDOWN, 10)
    assert decision.cooldown_until_s == NOW_S + 1
    assert next_state == state


def test_scale_down_proceeds_once_the_cooldown_has_passed() -> None:
    """A scale-down exactly 300 s after the last change proceeds and stamps only the change."""
    state = builders.state(last_scale_up_s=NOW_S - 300, last_scale_change_s=NOW_S - 300)
    observation = builders.observation(load=50.0, replicas=10, serving=10)
    decision, next_state = decide(observation=observation, state=state)
    assert (decision.kind, decision.desired) == (Kind.SCALE_DOWN, 8)
    assert next_state == builders.state(last_scale_up_s=NOW_S - 300, last_scale_change_s=NOW_S)


# 7. Cap --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("current", "ratio", "step"),
    [
        (1, 0.2, 1),
        (4, 0.2, 1),
        (5, 0.2, 1),
        (9, 0.2, 1),
        (10, 0.2, 2),
        (14, 0.2, 2),
        (15, 0.2, 3),
        (35, 0.2, 7),
        (100, 0.2, 20),
        (100, 0.29, 29),  # 0.29 * 100 == 28.999999999999996 in floating point
        (7, 1.0, 7),
    ],
)
def test_scale_down_step_is_max_one_or_the_ratio_of_current(
    current: int, ratio: float, step: int
) -> None:
    """One scale-down removes at most max(1, floor(ratio x current)) replicas."""
    assert policy.max_scale_down_step(current, ratio) == step


def test_scale_down_is_capped_and_says_so() -> None:
    """No load on 25 replicas removes 5, not 23, and the detail names the cap."""
    config = builders.config(max_replicas=30)
    observation = builders.observation(load=0.0, replicas=25, serving=25)
    decision, _ = decide(config, observation)
    assert (decision.kind, decision.desired) == (Kind.SCALE_DOWN, 20)
    assert "at most 5 removed" in decision.detail


def test_small_services_still_scale_down_by_one() -> None:
    """Four replicas with no load lose one, as floor(0.2 x 4) is 0."""
    decision, _ = decide(observation=builders.observation(load=0.0))
    assert (decision.kind, decision.desired) == (Kind.SCALE_DOWN, 3)


# Burst path ----------------------------------------------------------------------------------

BURST = BurstConfig(window_s=6.0, threshold_ratio=2.0, hold_s=60.0)


def test_burst_scales_on_the_short_mean_past_the_up_cooldown() -> None:
    """A short mean of twice the serving capacity scales to it at once, cooldown or not."""
    config = builders.config(burst=BURST, max_replicas=20)
    observation = builders.observation(load=estimate(45.0, burst_mean=80.0))
    state = builders.state(last_scale_up_s=NOW_S - 10, last_scale_change_s=NOW_S - 10)
    decision, next_state = decide(config, observation, state)
    assert (decision.kind, decision.reason, decision.desired) == (
        Kind.SCALE_UP,
        Reason.BURST,
        8,
    )
    assert decision.contributions[Signal.LOAD].estimator == "burst"
    assert next_state == builders.state(
        last_scale_up_s=NOW_S, last_scale_change_s=NOW_S, burst_until_s=NOW_S + 60
    )


def test_short_mean_below_the_threshold_is_no_burst() -> None:
    """A short mean just under twice the capacity leaves the up cooldown in force."""
    config = builders.config(burst=BURST, max_replicas=20)
    observation = builders.observation(load=estimate(45.0, burst_mean=79.9))
    state = builders.state(last_scale_up_s=NOW_S - 10, last_scale_change_s=NOW_S - 10)
    decision, next_state = decide(config, observation, state)
    assert (decision.kind, decision.reason) == (Kind.HOLD, Reason.COOLDOWN)
    assert next_state == state


def test_burst_judges_the_newest_sample_not_the_short_mean() -> None:
    """A newest sample at twice the capacity fires the burst while the short mean still lags."""
    config = builders.config(burst=BURST, max_replicas=20)
    observation = builders.observation(load=estimate(45.0, burst_mean=50.0, last=80.0))
    state = builders.state(last_scale_up_s=NOW_S - 10, last_scale_change_s=NOW_S - 10)
    decision, _ = decide(config, observation, state)
    assert (decision.kind, decision.reason, decision.desired) == (Kind.SCALE_UP, Reason.BURST, 8)


def test_a_short_mean_above_the_threshold_with_the_newest_sample_below_is_no_burst() -> None:
    """A burst that is over by the newest sample leaves the up cooldown in force."""
    config = builders.config(burst=BURST, max_replicas=20)
    observation = builders.observation(load=estimate(45.0, burst_mean=80.0, last=45.0))
    state = builders.state(last_scale_up_s=NOW_S - 10, last_scale_change_s=NOW_S - 10)
    decision, _ = decide(config, observation, state)
    assert (decision.kind, decision.reason) == (Kind.HOLD, Reason.COOLDOWN)


def test_a_queue_rising_over_its_short_mean_fires_the_burst() -> None:
    """The queue's newest rise over its short mean counts as arrivals the served rate cannot
    show yet; the same queue without the rise is no burst."""
    config = builders.config(
        burst=model.BurstConfig(threshold_ratio=1.5),
        queue_drain=QueueDrainConfig(),
        target_queue_per_replica=2.0,
        max_replicas=20,
    )
    state = builders.state(last_scale_up_s=NOW_S - 10, last_scale_change_s=NOW_S - 10)
    rising = estimate(0.0, burst_mean=10.0, last=100.0)
    decision, _ = decide(config, builders.observation(load=30.0, queue=rising), state)
    assert (decision.kind, decision.reason, decision.desired) == (Kind.SCALE_UP, Reason.BURST, 7)

    steady = estimate(0.0, burst_mean=100.0, last=100.0)
    decision, _ = decide(config, builders.observation(load=30.0, queue=steady), state)
    assert decision.reason is not Reason.BURST


def test_burst_is_ignored_without_a_burst_config() -> None:
    """The seed policy scales on the smoothed mean only, whatever the short mean says."""
    observation = builders.observation(load=estimate(45.0, burst_mean=400.0))
    decision, _ = decide(observation=observation)
    assert (decision.reason, decision.desired) == (Reason.ABOVE_TARGET, 5)


def test_burst_holds_scale_down_until_it_expires() -> None:
    """A scale-down within the burst hold waits, and names when the hold ends."""
    config = builders.config(burst=BURST)
    observation = builders.observation(load=10.0, replicas=8, serving=8)
    state = builders.state(burst_until_s=NOW_S + 30)
    decision, next_state = decide(config, observation, state)
    assert (decision.kind, decision.reason, decision.desired) == (Kind.HOLD, Reason.BURST_HOLD, 8)
    assert decision.cooldown_until_s == NOW_S + 30
    assert next_state == state

    later = dataclasses.replace(observation, now_s=NOW_S + 30)
    decision, _ = decide(config, later, state)
    assert decision.kind is Kind.SCALE_DOWN


def _queue_burst_config(**overrides: object) -> model.PolicyConfig:
    return builders.config(
        burst=model.BurstConfig(threshold_ratio=1.5),
        queue_drain=QueueDrainConfig(),
        target_queue_per_replica=2.0,
        max_replicas=20,
        **overrides,
    )


@pytest.mark.parametrize(
    ("startup_s", "desired"),
    # 30 rps, 100 waiting (94 beyond the allowance) rising at 30 a second: 63.1 rps now,
    # plus 30 rps x min(start-up, 30 s) / 30 s for the backlog's growth until new pods serve.
    [(None, 7), (15.0, 8), (60.0, 10)],
    ids=["no-startup-seen", "within-the-drain", "capped-at-the-drain"],
)
def test_a_queue_burst_asks_for_the_backlog_its_new_pods_will_find(
    startup_s: float | None, desired: int
) -> None:
    """With `burst_backlog_ahead`, a burst the queue fires also drains the backlog's growth
    over the pod start-up (at most the drain horizon), and its detail says how much."""
    state = builders.state(last_scale_up_s=NOW_S - 10, last_scale_change_s=NOW_S - 10)
    rising = estimate(0.0, burst_mean=10.0, last=100.0)
    observation = builders.observation(load=30.0, queue=rising, startup_s=startup_s)
    plain, _ = decide(_queue_burst_config(), observation, state)
    assert (plain.kind, plain.reason, plain.desired) == (Kind.SCALE_UP, Reason.BURST, 7)

    decision, _ = decide(_queue_burst_config(burst_backlog_ahead=True), observation, state)
    assert (decision.kind, decision.reason, decision.desired) == (
        Kind.SCALE_UP,
        Reason.BURST,
        desired,
    )
    if startup_s is None:
        assert "backlog" not in decision.detail
    else:
        assert f"of it the backlog's growth over {min(startup_s, 30.0):.0f} s" in decision.detail


def test_a_queue_burst_without_a_load_target_names_no_backlog_it_did_not_count() -> None:
    """Without a load target the queue is not read as demand (no drain), so the backlog ahead
    adds nothing, and the detail does not claim it did."""
    state = builders.state(last_scale_up_s=NOW_S - 10, last_scale_change_s=NOW_S - 10)
    rising = estimate(0.0, burst_mean=10.0, last=100.0)
    observation = builders.observation(load=30.0, queue=rising, startup_s=15.0)
    queue_only = {"target_load_per_replica": None}
    plain, _ = decide(_queue_burst_config(**queue_only), observation, state)
    assert (plain.kind, plain.reason) == (Kind.SCALE_UP, Reason.BURST)

    decision, _ = decide(
        _queue_burst_config(burst_backlog_ahead=True, **queue_only), observation, state
    )
    assert (decision.kind, decision.reason, decision.desired) == (
        Kind.SCALE_UP,
        Reason.BURST,
        plain.desired,
    )
    assert "backlog" not in decision.detail


def test_the_backlog_ahead_neither_fires_a_burst_nor_counts_a_steady_queue() -> None:
    """The burst fires as before; a queue not rising has no growth to carry ahead."""
    state = builders.state(last_scale_up_s=NOW_S - 10, last_scale_change_s=NOW_S - 10)
    config = _queue_burst_config(burst_backlog_ahead=True)
    steady = estimate(0.0, burst_mean=100.0, last=100.0)
    decision, _ = decide(
        config, builders.observation(load=30.0, queue=steady, startup_s=15.0), state
    )
    assert decision.reason is not Reason.BURST


@pytest.mark.parametrize(
    ("serving", "kind"), [(8, Kind.SCALE_DOWN), (7, Kind.HOLD)], ids=["serving", "starting"]
)
def test_a_burst_s_scale_up_is_released_once_its_pods_serve_and_its_hold_ends(
    serving: int, kind: Kind
) -> None:
    """With `burst_release`, after a scale-up a burst drove a scale-down waits for the burst
    hold only, not the scale-down cooldown, once every pod serves."""
    config = builders.config(burst=BURST, burst_release=True)
    up = NOW_S - 90
    state = builders.state(last_scale_up_s=up, last_scale_change_s=up, burst_until_s=up + 60)
    observation = builders.observation(load=10.0, replicas=8, serving=serving)
    decision, _ = decide(config, observation, state)
    assert decision.kind is kind
    if kind is Kind.SCALE_DOWN:
        assert "a burst's scale-up, released once its pods serve" in decision.detail
    else:
        assert decision.reason is Reason.COOLDOWN
    held, _ = decide(dataclasses.replace(config, burst_release=False), observation, state)
    assert (held.kind, held.reason) == (Kind.HOLD, Reason.COOLDOWN)


@pytest.mark.parametrize(
    ("last_up", "burst_until"),
    [(NOW_S - 120, NOW_S - 100), (NOW_S - 90, NOW_S - 60)],
    ids=["scale-down-since", "burst-before-the-scale-up"],
)
def test_the_release_is_only_for_a_burst_s_own_scale_up(last_up: float, burst_until: float) -> None:
    """After a later scale-down, or a scale-up no burst drove, the cooldown holds."""
    config = builders.config(burst=BURST, burst_release=True)
    change = NOW_S - 90
    state = builders.state(
        last_scale_up_s=last_up, last_scale_change_s=change, burst_until_s=burst_until
    )
    observation = builders.observation(load=10.0, replicas=8, serving=8)
    decision, _ = decide(config, observation, state)
    assert (decision.kind, decision.reason) == (Kind.HOLD, Reason.COOLDOWN)


# Look-ahead ----------------------------------------------------------------------------------

AHEAD = LookaheadConfig(default_startup_s=60.0, max_horizon_s=600.0, confidence_z=2.0)


@pytest.mark.parametrize(
    ("startup_s", "forecast"),
    [(None, 40.0 + 0.1 * 60), (120.0, 40.0 + 0.1 * 120), (10_000.0, 40.0 + 0.1 * 600)],
    ids=["default-startup", "observed-startup", "capped"],
)
def test_lookahead_raises_a_rising_estimate_by_trend_times_startup(
    startup_s: float | None, forecast: float
) -> None:
    """A rising load is forecast one start-up time ahead, at most `max_horizon_s`."""
    config = builders.config(lookahead=AHEAD, max_replicas=20)
    load = estimate(40.0, trend_per_s=0.1)
    decision, _ = decide(config, builders.observation(load=load, startup_s=startup_s))
    vote = decision.contributions[Signal.LOAD]
    assert vote.ratio == pytest.approx(forecast / 40.0)
    assert (vote.desired, vote.estimator) == (math.ceil(forecast / 10.0), "forecast")
    assert (decision.kind, decision.reason) == (Kind.SCALE_UP, Reason.FORECAST)


def test_lookahead_also_covers_the_lag_of_the_mean() -> None:
    """A mean whose samples are 30 s old on average is forecast 30 s further ahead."""
    config = builders.config(lookahead=AHEAD, max_replicas=20)
    # The last seconds stand where the trend's line says the load is now: still rising.
    load = estimate(40.0, trend_per_s=0.1, mean_age_s=30.0, burst_mean=43.0)
    decision, _ = decide(config, builders.observation(load=load))
    assert decision.contributions[Signal.LOAD].ratio == pytest.approx((40.0 + 0.1 * 90) / 40.0)


def test_lookahead_stops_extending_the_trend_once_the_load_stops_rising() -> None:
    """A trend whose line stands above the last seconds' mean is brought to now over the mean's
    lag, not extended over the start-up."""
    config = builders.config(lookahead=AHEAD, max_replicas=20)
    # A step from 5 to 24 a minute ago: the mean (42 s behind) is catching up, the window's
    # trend is still steep, and the last seconds are flat at the new level.
    load = estimate(17.0, trend_per_s=0.17, mean_age_s=42.0, burst_mean=23.5)
    decision, _ = decide(config, builders.observation(load=load, startup_s=120.0))
    vote = decision.contributions[Signal.LOAD]
    assert (vote.estimate, vote.estimator) == (pytest.approx(17.0 + 0.17 * 42), "forecast")
    assert vote.desired == 3


def test_lookahead_keeps_extending_while_the_last_seconds_are_within_its_doubt() -> None:
    """Last seconds below the trend's line by less than its doubt over the mean's lag (noise)
    leave the forecast over the start-up in place."""
    config = builders.config(lookahead=AHEAD, max_replicas=20)
    # The line at now: 30 + (0.05 - 2 x 0.01) x 40 = 31.2; its doubt: 2 x 0.01 x 40 = 0.8.
    rising = {"trend_per_s": 0.05, "trend_stderr_per_s": 0.01, "mean_age_s": 40.0}
    noisy = estimate(30.0, burst_mean=30.6, **rising)
    decision, _ = decide(config, builders.observation(load=noisy, startup_s=120.0))
    assert decision.contributions[Signal.LOAD].estimate == pytest.approx(30.0 + 0.03 * 160)

    below = estimate(30.0, burst_mean=30.3, **rising)
    decision, _ = decide(config, builders.observation(load=below, startup_s=120.0))
    assert decision.contributions[Signal.LOAD].estimate == pytest.approx(31.2)


def test_lookahead_still_extends_a_step_that_is_ahead_of_its_trend() -> None:
    """Last seconds above the trend's line (a step just begun) keep the forecast over the
    start-up."""
    config = builders.config(lookahead=AHEAD, max_replicas=20)
    load = estimate(12.6, trend_per_s=0.144, mean_age_s=42.0, burst_mean=24.6)
    decision, _ = decide(config, builders.observation(load=load, startup_s=120.0))
    assert decision.contributions[Signal.LOAD].estimate == pytest.approx(12.6 + 0.144 * 162)


def test_lookahead_counts_only_the_trend_beyond_its_noise() -> None:
    """A trend of 0.1 with a standard error of 0.04 grows at 0.1 - 2 x 0.04 = 0.02 per second."""
    config = builders.config(lookahead=AHEAD, max_replicas=20)
    load = estimate(40.0, trend_per_s=0.1, trend_stderr_per_s=0.04)
    decision, _ = decide(config, builders.observation(load=load))
    assert decision.contributions[Signal.LOAD].ratio == pytest.approx((40.0 + 0.02 * 60) / 40.0)
    assert (decision.kind, decision.reason) == (Kind.STEADY, Reason.IN_DEADBAND)


@pytest.mark.parametrize(
    ("trend_per_s", "trend_stderr_per_s"),
    [(-0.5, 0.0), (0.1, 0.05), (0.1, math.inf)],
    ids=["falling", "within-noise", "unknown-noise"],
)
def test_lookahead_never_lowers_the_estimate(trend_per_s: float, trend_stderr_per_s: float) -> None:
    """A falling trend, or one no larger than its noise, leaves the mean in charge."""
    config = builders.config(lookahead=AHEAD)
    load = estimate(45.0, trend_per_s=trend_per_s, trend_stderr_per_s=trend_stderr_per_s)
    decision, _ = decide(config, builders.observation(load=load))
    assert decision.contributions[Signal.LOAD].estimator == "mean"
    assert (decision.reason, decision.desired) == (Reason.ABOVE_TARGET, 5)


# Configuration -------------------------------------------------------------------------------


def test_seed_is_the_default_with_every_extension_off() -> None:
    """The seed policy is the default one with the burst path (and its backlog ahead and
    release), look-ahead, queue drain, seasonal forecast and projected capacity veto off."""
    seed = policy.seed(max_replicas=8, target_load_per_replica=5.0)
    ours = policy.default(max_replicas=8, target_load_per_replica=5.0)
    assert ours.lookahead == LookaheadConfig()
    assert ours.burst == BurstConfig(threshold_ratio=1.5)
    differing = [
        f.name for f in dataclasses.fields(seed) if getattr(seed, f.name) != getattr(ours, f.name)
    ]
    assert set(differing) == {
        "burst",
        "burst_backlog_ahead",
        "burst_release",
        "lookahead",
        "queue_drain",
        "forecast",
        "gpu_veto_projected",
    }
    assert all(getattr(seed, name) in (None, False) for name in differing)


@pytest.mark.parametrize(
    "overrides",
    [
        {"min_replicas": 11},
        {"max_replicas": 0, "min_replicas": 0},
        {"min_replicas": -1},
        {"target_load_per_replica": None},
        {"target_load_per_replica": 0.0},
        {"target_load_per_replica": math.inf},
        {"target_queue_per_replica": -1.0},
        {"target_gpu_utilization_pct": 101.0},
        {"deadband_ratio": 1.0},
        {"scale_up_cooldown_s": -1.0},
        {"scale_down_max_ratio": 0.0},
    ],
)
def test_invalid_config_raises(overrides: dict[str, object]) -> None:
    """A configuration that breaks a documented rule is a programming error."""
    with pytest.raises(ValueError, match=r"must|required"):
        builders.config(**overrides)


# Properties ----------------------------------------------------------------------------------

# Strategies are built once: building them inside a composite costs more than drawing.
# Whole seconds make cooldown edges (now == last + cooldown) common and keep draws cheap.
SECONDS = st.integers(0, 900).map(float)
TARGETS = st.floats(0.1, 100.0)
WHICH_TARGETS = st.sampled_from([(True, False), (False, True), (True, True)])
GPU_TARGETS = st.none() | st.integers(1, 100).map(float)
DEADBANDS = st.integers(0, 50).map(lambda p: p / 100)
# Whole percentages, so the cap has an exact decimal oracle.
DOWN_RATIOS = st.integers(1, 100).map(lambda p: p / 100)
MAX_REPLICAS = st.integers(1, 40)
BURSTS = st.none() | st.builds(
    BurstConfig, window_s=st.just(6.0), threshold_ratio=st.floats(1.01, 5.0), hold_s=SECONDS
)
LOOKAHEADS = st.none() | st.builds(
    LookaheadConfig,
    default_startup_s=SECONDS,
    max_horizon_s=SECONDS,
    confidence_z=st.floats(0.0, 3.0),
)
QUEUE_DRAINS = st.none() | st.builds(
    QueueDrainConfig, drain_s=st.floats(1.0, 600.0), confidence_z=st.floats(0.0, 3.0)
)
# Values are drawn relative to the service's capacity (target x replicas), so that every
# branch of the policy comes up: deadband, both directions, bounds, burst and look-ahead.
LOAD_RATIOS = {"any": st.floats(0.0, 3.0), "low": st.floats(0.0, 1.0), "high": st.floats(1.0, 3.0)}
LEVEL_RATIOS = st.floats(-0.5, 0.5)
TREND_RATIOS = st.floats(-0.005, 0.005)
STDERR_RATIOS = st.just(0.0) | st.floats(0.0, 0.005) | st.just(math.inf)
# The short mean is usually near the smoothed mean, sometimes a burst.
BURST_RATIOS = st.floats(0.5, 1.5) | st.floats(0.5, 1.5) | st.floats(0.0, 4.0)
FRESHNESS = st.sampled_from(["fresh"] * 6 + ["stale", "missing"])
OUTSIDE_BOUNDS = st.integers(0, 3).map(lambda n: n == 0)
GPUS = st.none() | st.none() | st.integers(0, 100).map(float)
STARTUPS = st.none() | SECONDS
BURST_OFFSETS = st.none() | st.integers(-300, 300).map(float)
# The age of the last change, usually set; the last scale-up is that same change, an earlier
# one, or none at all.
CHANGE_AGES = st.none() | SECONDS | SECONDS
UP_BEFORE_CHANGE = st.none() | st.just(0.0) | SECONDS


@st.composite
def configs(draw: st.DrawFn, *, burst: bool = True) -> model.PolicyConfig:
    max_replicas = draw(MAX_REPLICAS)
    targets = draw(WHICH_TARGETS)
    return model.PolicyConfig(
        max_replicas=max_replicas,
        min_replicas=draw(st.integers(0, max_replicas)),
        target_load_per_replica=draw(TARGETS) if targets[0] else None,
        target_queue_per_replica=draw(TARGETS) if targets[1] else None,
        target_gpu_utilization_pct=draw(GPU_TARGETS),
        deadband_ratio=draw(DEADBANDS),
        scale_up_cooldown_s=draw(SECONDS),
        scale_down_cooldown_s=draw(SECONDS),
        scale_down_max_ratio=draw(DOWN_RATIOS),
        burst=draw(BURSTS) if burst else None,
        lookahead=draw(LOOKAHEADS),
        queue_drain=draw(QUEUE_DRAINS),
    )


@st.composite
def signal_estimates(
    draw: st.DrawFn, scale: float, *, fresh_only: bool, load: str
) -> SignalEstimate:
    """A smoothed signal around `scale`: fresh, stale (old samples only) or an empty window."""
    freshness = "fresh" if fresh_only else draw(FRESHNESS)
    if freshness == "missing":
        return SignalEstimate.missing()
    mean = draw(LOAD_RATIOS[load]) * scale
    return SignalEstimate(
        mean=mean,
        level=max(0.0, mean + draw(LEVEL_RATIOS) * scale),
        trend_per_s=draw(TREND_RATIOS) * scale,
        burst_mean=draw(BURST_RATIOS) * mean,
        last=mean if freshness == "fresh" else math.nan,
        fresh=freshness == "fresh",
        trend_stderr_per_s=draw(STDERR_RATIOS) * scale,
        mean_age_s=draw(SECONDS) / 3,
    )


@st.composite
def observations(
    draw: st.DrawFn, config: model.PolicyConfig, *, fresh_only: bool = False, load: str = "any"
) -> model.Observation:
    """An observation for `config`; a `low` load comes without a GPU reading (and its veto)."""
    lo, hi = config.min_replicas, config.max_replicas
    anywhere = draw(OUTSIDE_BOUNDS)
    if anywhere:
        replicas = draw(st.integers(0, hi + 10))
    else:  # leave room to move the way the load asks
        lowest = lo + 1 if load == "low" and lo < hi else lo
        highest = hi - 1 if load == "high" and lo < hi else hi
        replicas = draw(st.integers(lowest, highest))
    serving = draw(st.just(replicas) | st.integers(0, replicas))
    signals: dict[Signal, SignalEstimate] = {}
    for signal in model.PRIMARY_SIGNALS:
        scale = (config.target(signal) or 1.0) * max(1, replicas)
        signals[signal] = draw(signal_estimates(scale, fresh_only=fresh_only, load=load))
    gpu = None if load == "low" else draw(GPUS)
    signals[Signal.CAPACITY] = SignalEstimate.missing() if gpu is None else estimate(gpu)
    return model.Observation(
        now_s=NOW_S,
        replicas=replicas,
        serving=serving,
        signals=signals,
        startup_s=draw(STARTUPS),
    )


@st.composite
def states(draw: st.DrawFn, now_s: float, *, quiet: bool = False) -> model.PolicyState:
    """A policy state at `now_s`; `quiet` means every cooldown and burst hold has passed."""
    # Ages in seconds. A scale-up is also a change, so the last change is never older than it.
    change, extra, burst = draw(CHANGE_AGES), draw(UP_BEFORE_CHANGE), draw(BURST_OFFSETS)
    up = None if change is None or extra is None else change + extra
    if quiet:  # cooldowns are at most 900 s
        up, change = (None if up is None else up + 900), (None if change is None else change + 900)
        burst = None if burst is None else -abs(burst)
    return model.PolicyState(
        last_scale_up_s=None if up is None else now_s - up,
        last_scale_change_s=None if change is None else now_s - change,
        burst_until_s=None if burst is None else now_s + burst,
    )


@st.composite
def cases(
    draw: st.DrawFn, *, fresh_only: bool = False, load: str = "any", quiet: bool = False
) -> tuple[model.PolicyConfig, model.Observation, model.PolicyState]:
    """A config, an observation and a state.

    A `low` load asks for a scale-down and a `high` one for a scale-up; a `quiet` state has
    every cooldown and burst hold behind it.
    """
    config = draw(configs())
    observation = draw(observations(config, fresh_only=fresh_only, load=load))
    return config, observation, draw(states(observation.now_s, quiet=quiet))


def with_shift(est: SignalEstimate, delta: float) -> SignalEstimate:
    """The same estimate with every value raised by `delta`; the trend is unchanged."""
    return est._replace(
        mean=est.mean + delta,
        level=est.level + delta,
        burst_mean=est.burst_mean + delta,
        last=est.last + delta,
    )


@settings(max_examples=100, deadline=None)
@given(cases())
def test_desired_stays_within_bounds(
    case: tuple[model.PolicyConfig, model.Observation, model.PolicyState],
) -> None:
    """The desired count is always within [min, max], whatever the current count."""
    config, observation, state = case
    decision, _ = policy.decide(config, observation, state)
    assert config.min_replicas <= decision.desired <= config.max_replicas
    if observation.replicas > config.max_replicas:
        assert (decision.kind, decision.desired) == (Kind.SCALE_DOWN, config.max_replicas)
    if observation.replicas < config.min_replicas:
        assert decision.kind is Kind.SCALE_UP


@settings(max_examples=100, deadline=None)
@given(cases())
def test_kind_matches_the_change(
    case: tuple[model.PolicyConfig, model.Observation, model.PolicyState],
) -> None:
    """HOLD and STEADY keep the count, SCALE_UP raises it and SCALE_DOWN lowers it."""
    config, observation, state = case
    decision, _ = policy.decide(config, observation, state)
    assert decision.current == observation.replicas
    if decision.kind in (Kind.HOLD, Kind.STEADY):
        assert decision.desired == observation.replicas
        assert not decision.changes
    elif decision.kind is Kind.SCALE_UP:
        assert decision.desired > observation.replicas
    else:
        assert decision.desired < observation.replicas


@settings(max_examples=100, deadline=None)
@given(cases())
def test_state_changes_only_on_scaling(
    case: tuple[model.PolicyConfig, model.Observation, model.PolicyState],
) -> None:
    """Cooldown timestamps move only on a scale, and the burst hold only on a burst."""
    config, observation, state = case
    decision, after = policy.decide(config, observation, state)
    now = observation.now_s
    if decision.kind is Kind.SCALE_UP:
        assert (after.last_scale_up_s, after.last_scale_change_s) == (now, now)
    elif decision.kind is Kind.SCALE_DOWN:
        assert (after.last_scale_up_s, after.last_scale_change_s) == (state.last_scale_up_s, now)
    else:
        assert (after.last_scale_up_s, after.last_scale_change_s) == (
            state.last_scale_up_s,
            state.last_scale_change_s,
        )
    # The burst hold moves only to a full hold from now, as it must on a burst scale-up.
    if after.burst_until_s != state.burst_until_s or decision.reason is Reason.BURST:
        assert config.burst is not None
        assert after.burst_until_s == now + config.burst.hold_s


# How long ago the last scale (or change) was, as a fraction of the cooldown that guards it.
COOLDOWN_FRACTIONS = st.just(1.0) | st.floats(0.0, 1.5)


@settings(max_examples=100, deadline=None)
@given(cases(load="high", fresh_only=True), COOLDOWN_FRACTIONS)
def test_scale_up_respects_its_cooldown(
    case: tuple[model.PolicyConfig, model.Observation, model.PolicyState], fraction: float
) -> None:
    """No scale-up within the up cooldown of the last one, but for a burst or below min."""
    config, observation, state = case
    last_up = observation.now_s - fraction * config.scale_up_cooldown_s
    last_change = max(last_up, state.last_scale_change_s or last_up)
    state = dataclasses.replace(state, last_scale_up_s=last_up, last_scale_change_s=last_change)
    decision, _ = policy.decide(config, observation, state)
    if decision.kind is Kind.SCALE_UP and decision.reason not in (Reason.BURST, Reason.BELOW_MIN):
        assert observation.now_s >= last_up + config.scale_up_cooldown_s


@settings(max_examples=150, deadline=None)
@given(cases(load="low", fresh_only=True), COOLDOWN_FRACTIONS, st.booleans())
def test_scale_down_respects_its_cooldown_and_the_burst_hold(
    case: tuple[model.PolicyConfig, model.Observation, model.PolicyState],
    fraction: float,
    was_up: bool,
) -> None:
    """No scale-down inside the down cooldown, a burst or its hold, unless above max."""
    config, observation, state = case
    now = observation.now_s
    last_change = now - fraction * config.scale_down_cooldown_s
    # The last change was a scale-up, or a scale-down after an older scale-up (if any).
    last_up = last_change if was_up else state.last_scale_up_s
    if last_up is not None:
        last_up = min(last_up, last_change)
    state = dataclasses.replace(state, last_scale_up_s=last_up, last_scale_change_s=last_change)
    decision, after = policy.decide(config, observation, state)
    if decision.kind is Kind.SCALE_DOWN and decision.reason is not Reason.ABOVE_MAX:
        assert now >= last_change + config.scale_down_cooldown_s
        # Neither an earlier burst's hold nor a burst seen at this tick is in force.
        assert state.burst_until_s is None or now >= state.burst_until_s
        assert after.burst_until_s is None or now >= after.burst_until_s


@settings(max_examples=100, deadline=None)
@given(cases(load="low") | cases(load="low", quiet=True))
def test_scale_down_never_exceeds_the_cap(
    case: tuple[model.PolicyConfig, model.Observation, model.PolicyState],
) -> None:
    """Within the bounds a scale-down removes what the votes ask, at most the cap."""
    config, observation, state = case
    decision, _ = policy.decide(config, observation, state)
    if decision.kind is Kind.SCALE_DOWN and decision.reason is not Reason.ABOVE_MAX:
        current = observation.replicas
        ratio = Fraction(repr(config.scale_down_max_ratio))
        cap = max(1, math.floor(ratio * current))
        wanted = max(c.desired for c in decision.contributions.values() if c.desired is not None)
        assert current - decision.desired <= cap
        assert decision.desired == max(config.min_replicas, wanted, current - cap)


@settings(max_examples=100, deadline=None)
@given(cases() | cases(load="low", quiet=True), st.data())
def test_missing_data_never_scales_down(
    case: tuple[model.PolicyConfig, model.Observation, model.PolicyState], data: st.DataObject
) -> None:
    """With a primary signal missing or stale, the count never drops below min(current, max)."""
    config, observation, state = case
    used = [s for s in model.PRIMARY_SIGNALS if config.target(s) is not None]
    gone = data.draw(st.sampled_from(used), label="missing signal")
    blank = data.draw(st.sampled_from([SignalEstimate.missing(), stale(0.0), estimate(math.nan)]))
    observation = dataclasses.replace(observation, signals={**observation.signals, gone: blank})
    decision, _ = policy.decide(config, observation, state)
    assert decision.desired >= min(observation.replicas, config.max_replicas)
    assert decision.contributions[gone].desired is None
    if decision.kind is Kind.SCALE_UP and decision.reason is not Reason.BELOW_MIN:
        fresh_votes = [c.desired for c in decision.contributions.values() if c.desired is not None]
        assert decision.desired <= max(fresh_votes)


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_no_action_inside_the_deadband(data: st.DataObject) -> None:
    """When every signal's ratio is inside the deadband, the count stays where it is."""
    config = data.draw(configs(burst=False))
    replicas = data.draw(st.integers(max(1, config.min_replicas), config.max_replicas))
    d = config.deadband_ratio
    signals: dict[Signal, SignalEstimate] = {}
    for signal in model.PRIMARY_SIGNALS:
        target = config.target(signal)
        if target is not None:
            ratio = data.draw(st.floats(1 - d, 1 + d), label=signal.name)
            signals[signal] = estimate(ratio * target * replicas)
    observation = model.Observation(
        now_s=NOW_S, replicas=replicas, serving=replicas, signals=signals
    )
    state = data.draw(states(NOW_S))
    decision, _ = policy.decide(config, observation, state)
    ratios = [c.ratio for c in decision.contributions.values()]
    assume(all(1 - d <= r <= 1 + d for r in ratios))
    assert decision.desired == replicas
    assert decision.kind in (Kind.STEADY, Kind.HOLD)


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_any_signal_above_the_deadband_scales_up(data: st.DataObject) -> None:
    """With no cooldown, a signal above the deadband that asks for more replicas scales up."""
    config = data.draw(configs(burst=False))
    assume(config.max_replicas > max(1, config.min_replicas))
    # Both primary signals vote: the property is about one masking the other.
    config = dataclasses.replace(
        config,
        target_load_per_replica=data.draw(st.floats(0.1, 100.0), label="load target"),
        target_queue_per_replica=data.draw(st.floats(0.1, 100.0), label="queue target"),
    )
    replicas = data.draw(st.integers(max(1, config.min_replicas), config.max_replicas - 1))
    # Votes often tie, so that one signal can sit in the deadband while the other is above it.
    # The shared vote is often the one whose bucket holds the deadband's edge.
    edge = math.ceil((1 + config.deadband_ratio) * replicas)
    shared = data.draw(st.just(edge) | st.integers(1, 2 * replicas), label="shared vote")
    votes = st.just(shared) | st.integers(1, 2 * replicas)
    below = st.floats(0.0, 1.0, exclude_max=True)
    signals = {
        signal: estimate((data.draw(votes) - data.draw(below)) * target)
        for signal in model.PRIMARY_SIGNALS
        if (target := config.target(signal)) is not None
    }
    observation = model.Observation(
        now_s=NOW_S, replicas=replicas, serving=replicas, signals=signals
    )
    decision, _ = policy.decide(config, observation, model.PolicyState())
    above = [
        c
        for c in decision.contributions.values()
        if c.ratio > 1 + config.deadband_ratio and c.desired is not None and c.desired > replicas
    ]
    if above:
        assert decision.kind is Kind.SCALE_UP, decision
        assert decision.desired == min(
            config.max_replicas, max(c.desired or 0 for c in decision.contributions.values())
        )


def _monotone_in(signal: Signal, data: st.DataObject) -> None:
    config, observation, state = data.draw(cases(fresh_only=True))
    assume(config.target(signal) is not None)
    scale = (config.target(signal) or 1.0) * max(1, observation.replicas)
    delta = data.draw(st.floats(0.0, 2.0), label="delta") * scale
    more = dict(observation.signals)
    more[signal] = with_shift(observation.signal(signal), delta)
    lower, _ = policy.decide(config, observation, state)
    higher, _ = policy.decide(config, dataclasses.replace(observation, signals=more), state)
    assert higher.desired >= lower.desired, (lower, higher)


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_desired_is_monotone_in_load(data: st.DataObject) -> None:
    """More load never asks for fewer replicas, all else equal."""
    _monotone_in(Signal.LOAD, data)


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_desired_is_monotone_in_queue(data: st.DataObject) -> None:
    """A longer queue never asks for fewer replicas, all else equal."""
    _monotone_in(Signal.SATURATION, data)


def run_closed_loop(
    config: model.PolicyConfig,
    signals: dict[Signal, SignalEstimate],
    *,
    start: int,
    delay_ticks: int,
    tick_s: float,
    ticks: int,
) -> list[model.Decision]:
    """Apply every decision at once; a new pod serves `delay_ticks` later, a removed one at once.

    Serving is then the smallest count asked for over the last `delay_ticks` ticks.
    """
    asked = [start] * (delay_ticks + 1)
    state = model.PolicyState()
    decisions = []
    for i in range(ticks):
        observation = model.Observation(
            now_s=i * tick_s,
            replicas=asked[-1],
            serving=min(asked[-(delay_ticks + 1) :]),
            signals=signals,
        )
        decision, state = policy.decide(config, observation, state)
        decisions.append(decision)
        asked.append(decision.desired)
    return decisions


@settings(max_examples=100, deadline=None)
@given(
    config=configs(),
    load_ratio=st.floats(0.0, 1.5),
    queue_ratio=st.floats(0.0, 1.5),
    gpu=st.none() | st.floats(0.0, 100.0),
    start_ratio=st.floats(0.0, 1.2),
    delay_s=SECONDS,
    tick_s=st.sampled_from([5.0, 15.0, 30.0]),
)
def test_constant_load_never_oscillates(
    config: model.PolicyConfig,
    load_ratio: float,
    queue_ratio: float,
    gpu: float | None,
    start_ratio: float,
    delay_s: float,
    tick_s: float,
) -> None:
    """Under constant load the closed loop moves one way only, then settles and stays."""
    # Loads and the start are relative to the max, so the settled count is often inside the bounds.
    start = round(start_ratio * config.max_replicas)
    load = load_ratio * (config.target_load_per_replica or 1.0) * config.max_replicas
    queue = queue_ratio * (config.target_queue_per_replica or 1.0) * config.max_replicas
    signals = {Signal.LOAD: estimate(load), Signal.SATURATION: estimate(queue)}
    if gpu is not None:
        signals[Signal.CAPACITY] = estimate(gpu)
    # A bound on settling: the start-up delay, a burst hold, then moves of at least one replica
    # each, a cooldown (rounded up to a tick) apart.
    hold_s = 0.0 if config.burst is None else config.burst.hold_s
    moves = start + config.max_replicas + 2
    cooldowns_s = config.scale_up_cooldown_s + config.scale_down_cooldown_s
    waits_s = delay_s + hold_s + moves * cooldowns_s
    # Coarser ticks when settling is slow keep the run short; the property holds at any tick.
    tick_s = max(tick_s, waits_s / 250)
    settle_ticks = math.ceil(waits_s / tick_s) + moves + 2
    check_ticks = 20
    decisions = run_closed_loop(
        config,
        signals,
        start=start,
        delay_ticks=math.ceil(delay_s / tick_s),
        tick_s=tick_s,
        ticks=settle_ticks + check_ticks,
    )
    counts = [start] + [d.desired for d in decisions]
    # Monotone: no overshoot to undo, so not even the one turn a lagging loop might take.
    assert counts in (sorted(counts), sorted(counts, reverse=True)), counts
    assert not any(d.changes for d in decisions[-check_ticks:]), counts

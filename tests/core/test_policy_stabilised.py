"""The default policy's stabilised scale-down (`PolicyConfig.scale_down_stabilised`): a
scale-down follows the largest count wanted over the window instead of a fixed cooldown."""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from autoscaler.core import model, policy
from autoscaler.core.model import Kind, Reason

from . import builders
from .builders import NOW_S

WINDOW_S = 300.0


def stabilised(**overrides: object) -> model.PolicyConfig:
    """The builders' seed config with the stabilised scale-down and a cap that removes all."""
    fields: dict[str, object] = {"scale_down_stabilised": True, "scale_down_max_ratio": 1.0}
    fields.update(overrides)
    return builders.config(**fields)


def filled(*wanted: tuple[float, int], since_s: float = NOW_S - 1000) -> model.PolicyState:
    """A state whose window has been filling since `since_s`, holding `wanted` (ages in s)."""
    buckets = tuple((NOW_S - age, count) for age, count in wanted)
    return builders.state(wanted=buckets, wanted_since_s=since_s, last_scale_change_s=since_s)


def low_load(replicas: int = 10) -> model.Observation:
    """10 serving replicas and a load that asks for 3."""
    return builders.observation(load=25.0, replicas=replicas, serving=replicas)


def test_scale_down_goes_to_the_largest_count_wanted_in_the_window() -> None:
    """Load asks for 3; 7 was wanted 200 s ago: 10 replicas go to 7, and the detail says why."""
    decision, _ = policy.decide(stabilised(), low_load(), filled((200, 7), (100, 5)))
    assert (decision.kind, decision.reason, decision.desired) == (
        Kind.SCALE_DOWN,
        Reason.BELOW_TARGET,
        7,
    )
    assert "7 wanted within the last 300 s" in decision.detail


def test_scale_down_holds_while_the_window_wants_the_current_count() -> None:
    """10 wanted 100 s ago holds 10 replicas until that bucket leaves the window."""
    decision, next_state = policy.decide(stabilised(), low_load(), filled((100, 10)))
    assert (decision.kind, decision.reason, decision.desired) == (Kind.HOLD, Reason.COOLDOWN, 10)
    assert decision.cooldown_until_s == NOW_S - 100 + policy.WANTED_BUCKET_S + WINDOW_S
    assert "10 wanted within the last 300 s" in decision.detail
    assert next_state.wanted[-1] == (NOW_S, 3)


def test_a_scale_down_follows_a_scale_down_without_the_cooldown() -> None:
    """60 s after a scale-down, with nothing higher wanted since, the next one goes ahead."""
    state = dataclasses.replace(filled((30, 6)), last_scale_change_s=NOW_S - 60)
    decision, _ = policy.decide(stabilised(), low_load(), state)
    assert (decision.kind, decision.desired) == (Kind.SCALE_DOWN, 6)


def test_scale_downs_are_a_step_apart() -> None:
    """50 s after a change the next scale-down waits for the 60 s step."""
    state = dataclasses.replace(filled((30, 6)), last_scale_change_s=NOW_S - 50)
    decision, _ = policy.decide(stabilised(), low_load(), state)
    assert (decision.kind, decision.reason) == (Kind.HOLD, Reason.COOLDOWN)
    assert decision.cooldown_until_s == NOW_S + 10


def test_a_new_watch_keeps_the_fixed_cooldown() -> None:
    """A controller that just started (or restarted) has not seen the load calm: the cooldown
    after the last change holds, and the detail says why."""
    state = builders.state(last_scale_change_s=NOW_S - 100)
    decision, next_state = policy.decide(stabilised(), low_load(), state)
    assert (decision.kind, decision.reason) == (Kind.HOLD, Reason.COOLDOWN)
    assert decision.cooldown_until_s == NOW_S + 200
    assert "(load watched for 0 s only)" in decision.detail
    assert (next_state.wanted, next_state.wanted_since_s) == (((NOW_S, 3),), NOW_S)


def test_no_stabilised_scale_down_before_the_window_has_filled() -> None:
    """With no calm time asked for, a new watch still holds until a window of counts is known."""
    decision, next_state = policy.decide(stabilised(calm_s=0.0), low_load(), builders.state())
    assert (decision.kind, decision.reason) == (Kind.HOLD, Reason.COOLDOWN)
    assert decision.cooldown_until_s == NOW_S + WINDOW_S
    assert "waits until 300 s of wanted counts are known" in decision.detail
    assert (next_state.wanted, next_state.wanted_since_s) == (((NOW_S, 3),), NOW_S)


def test_a_scale_up_holds_scale_down_for_the_window() -> None:
    """The count a scale-up wanted keeps the service there for the whole window after it."""
    config = stabilised()
    state = filled()
    state, now = policy.decide(config, builders.observation(load=90.0), state)[1], NOW_S
    for offset in (60.0, 299.0):
        later = builders.observation(load=25.0, replicas=9, serving=9, now_s=now + offset)
        decision, _ = policy.decide(config, later, state)
        assert decision.kind is Kind.HOLD
    later = builders.observation(load=25.0, replicas=9, serving=9, now_s=now + 310.0)
    decision, _ = policy.decide(config, later, state)
    assert (decision.kind, decision.desired) == (Kind.SCALE_DOWN, 3)


def test_the_end_of_a_pause_restarts_the_window() -> None:
    """A resumed service forgets the counts wanted before its pause."""
    state = dataclasses.replace(filled((30, 6)), paused_s=NOW_S - 50)
    decision, next_state = policy.decide(stabilised(), low_load(), state)
    assert (decision.kind, decision.reason) == (Kind.HOLD, Reason.COOLDOWN)
    assert next_state.wanted_since_s == NOW_S


def test_seed_keeps_no_window() -> None:
    """Without the stabilised scale-down the state carries no counts."""
    _, next_state = policy.decide(builders.config(), low_load(), builders.state())
    assert (next_state.wanted, next_state.wanted_since_s) == ((), None)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.floats(0.1, 30.0), st.integers(0, 100)), min_size=1, max_size=200))
def test_the_window_stays_small_and_keeps_its_largest_count(
    ticks: list[tuple[float, float]],
) -> None:
    """Whatever the ticks, the state holds at most a window of buckets, and the largest count
    wanted within the window is among them."""
    config = stabilised(max_replicas=100, min_replicas=0)
    state, now = builders.state(), NOW_S
    seen: list[tuple[float, int]] = []
    for gap_s, load in ticks:
        now += gap_s
        observation = builders.observation(load=float(load), now_s=now, replicas=50, serving=50)
        decision, state = policy.decide(config, observation, state)
        wanted = decision.contributions[model.Signal.LOAD].desired
        assert wanted is not None
        seen.append((now, wanted))
    assert len(state.wanted) <= WINDOW_S / policy.WANTED_BUCKET_S + 2
    recent = max(count for at, count in seen if at >= now - WINDOW_S)
    assert max(count for _, count in state.wanted) >= min(recent, config.max_replicas)


# Calm load only ------------------------------------------------------------------------------


def surged(age_s: float, *, changed_s: float) -> model.PolicyState:
    """A filled window wanting 7 and 5, a surge `age_s` ago and a change `changed_s` ago."""
    return dataclasses.replace(
        filled((200, 7), (100, 5)), surge_s=NOW_S - age_s, last_scale_change_s=NOW_S - changed_s
    )


def test_after_a_surge_the_scale_down_waits_for_the_fixed_cooldown() -> None:
    """400 s after a surge, 100 s after a change, the scale-down waits out the cooldown."""
    decision, _ = policy.decide(stabilised(), low_load(), surged(400, changed_s=100))
    assert (decision.kind, decision.reason) == (Kind.HOLD, Reason.COOLDOWN)
    assert decision.cooldown_until_s == NOW_S - 100 + WINDOW_S
    assert "waits for the scale-down cooldown (load surged 400 s ago)" in decision.detail


def test_after_a_surge_the_scale_down_is_capped_not_stabilised() -> None:
    """Past the cooldown, a service that surged 400 s ago steps down by the cap alone."""
    config = stabilised(scale_down_max_ratio=0.2)
    decision, _ = policy.decide(config, low_load(), surged(400, changed_s=310))
    assert (decision.kind, decision.reason, decision.desired) == (
        Kind.SCALE_DOWN,
        Reason.BELOW_TARGET,
        8,
    )
    assert "load surged 400 s ago" in decision.detail
    assert "wanted within the last" not in decision.detail


def test_calm_again_after_calm_s() -> None:
    """901 s after a surge, the window's largest count leads the way down again."""
    decision, _ = policy.decide(stabilised(), low_load(), surged(901, changed_s=100))
    assert (decision.kind, decision.desired) == (Kind.SCALE_DOWN, 7)
    assert "surged" not in decision.detail


def test_a_count_half_again_the_windows_least_is_a_surge() -> None:
    """6 wanted after 4 within the window is a surge; 5 is not."""
    state = filled((100, 4))
    _, after = policy.decide(stabilised(), builders.observation(load=60.0), state)
    assert after.surge_s == NOW_S
    _, after = policy.decide(stabilised(), builders.observation(load=50.0), state)
    assert after.surge_s is None


def test_a_burst_vote_is_a_surge() -> None:
    """The burst path firing counts as a surge even when the count wanted is no higher."""
    config = stabilised(burst=model.BurstConfig(window_s=6.0, threshold_ratio=2.0, hold_s=60.0))
    load = builders.estimate(45.0, burst_mean=80.0)
    _, after = policy.decide(config, builders.observation(load=load), filled((100, 8)))
    assert after.surge_s == NOW_S


def test_the_end_of_a_pause_forgets_the_surge() -> None:
    """A resumed service starts calm: its window must fill again anyway."""
    state = dataclasses.replace(surged(100, changed_s=100), paused_s=NOW_S - 50)
    _, after = policy.decide(stabilised(), low_load(), state)
    assert after.surge_s is None

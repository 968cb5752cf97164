"""The scale-down cap spread over the cooldown (`PolicyConfig.scale_down_spread`, on in
`policy.default`): after its own scale-down the policy steps down again as soon as the cap has
earned a replica, at the rate of one cap per cooldown."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from autoscaler.core import model, policy
from autoscaler.core.model import Kind, Reason

from . import builders
from .builders import NOW_S


def spread(**overrides: object) -> model.PolicyConfig:
    """The builders' seed config up to 40 replicas with the cap spread over the cooldown."""
    fields: dict[str, object] = {"max_replicas": 40, "scale_down_spread": True}
    fields.update(overrides)
    return builders.config(**fields)


def low_load(replicas: int) -> model.Observation:
    """`replicas` serving replicas under a load that asks for 2."""
    return builders.observation(load=15.0, replicas=replicas, serving=replicas)


def after_scale_down(age_s: float) -> model.PolicyState:
    """The last change a scale-down `age_s` ago, the last scale-up long before."""
    return builders.state(
        last_scale_up_s=NOW_S - 5000,
        last_scale_change_s=NOW_S - age_s,
        last_scale_down_s=NOW_S - age_s,
    )


def test_spread_cap_removes_a_replica_a_minute_after_a_scale_down() -> None:
    """Thirty replicas 60 s after a scale-down lose the one replica the spread cap has earned."""
    decision, next_state = policy.decide(spread(), low_load(30), after_scale_down(60))
    assert (decision.kind, decision.reason, decision.desired) == (
        Kind.SCALE_DOWN,
        Reason.BELOW_TARGET,
        29,
    )
    assert "the cap spread over the 300 s cooldown" in decision.detail
    assert next_state.last_scale_change_s == NOW_S


def test_without_the_spread_a_minute_after_a_scale_down_holds() -> None:
    """The fixed cooldown holds thirty replicas 60 s after a scale-down."""
    config = spread(scale_down_spread=False)
    decision, _ = policy.decide(config, low_load(30), after_scale_down(60))
    assert (decision.kind, decision.reason) == (Kind.HOLD, Reason.COOLDOWN)


def test_spread_cap_waits_until_it_has_earned_a_whole_replica() -> None:
    """Five replicas earn a replica only after the whole cooldown: at 100 s they hold to 300 s."""
    decision, _ = policy.decide(spread(), low_load(5), after_scale_down(100))
    assert (decision.kind, decision.reason, decision.desired) == (Kind.HOLD, Reason.COOLDOWN, 5)
    assert decision.cooldown_until_s == pytest.approx(NOW_S + 200)
    assert "adds up to a replica" in decision.detail


def test_spread_cap_keeps_the_least_time_between_scale_downs() -> None:
    """Thirty replicas 30 s after a scale-down wait for the 60 s step although a replica is
    earned."""
    decision, _ = policy.decide(spread(), low_load(30), after_scale_down(30))
    assert (decision.kind, decision.reason) == (Kind.HOLD, Reason.COOLDOWN)
    assert decision.cooldown_until_s == pytest.approx(NOW_S + 30)


def test_spread_cap_keeps_the_whole_cooldown_after_a_scale_up() -> None:
    """A scale-up 60 s ago holds thirty replicas for the whole 300 s, as without the spread."""
    state = builders.state(last_scale_up_s=NOW_S - 60, last_scale_change_s=NOW_S - 60)
    decision, _ = policy.decide(spread(), low_load(30), state)
    assert (decision.kind, decision.reason) == (Kind.HOLD, Reason.COOLDOWN)
    assert decision.cooldown_until_s == NOW_S + 240


@given(
    replicas=st.integers(min_value=3, max_value=40),
    age_s=st.floats(min_value=0.0, max_value=600.0),
)
def test_spread_cap_never_removes_more_than_the_cap(replicas: int, age_s: float) -> None:
    """A spread scale-down removes no more than the fixed cap at any time after a scale-down."""
    decision, _ = policy.decide(spread(), low_load(replicas), after_scale_down(age_s))
    removed = replicas - decision.desired
    assert 0 <= removed <= policy.max_scale_down_step(replicas, 0.2)


def test_spread_cap_sheds_no_faster_than_one_cap_per_cooldown() -> None:
    """Scale-downs as soon as the spread cap allows keep, at the end of each cooldown, at least
    the count that the fixed cap's next step would leave."""
    config, state, replicas, now = spread(), after_scale_down(300), 40, NOW_S
    fixed = 40 - policy.max_scale_down_step(40, 0.2)  # both take a whole cap at once
    for cooldowns in range(1, 6):
        while now < NOW_S + 300 * cooldowns:
            observation = builders.observation(
                now_s=now, load=15.0, replicas=replicas, serving=replicas
            )
            decision, state = policy.decide(config, observation, state)
            replicas = decision.desired
            now += 5.0
        fixed -= policy.max_scale_down_step(fixed, 0.2)
        assert replicas >= fixed


def test_spread_cap_keeps_the_whole_cooldown_after_a_resume() -> None:
    """A minute after a pause ends, thirty replicas still hold for the whole 300 s cooldown."""
    state = builders.state(
        paused_s=NOW_S - 1000,
        last_scale_change_s=NOW_S - 5000,
        last_scale_down_s=NOW_S - 5000,
    )
    _, state = policy.decide(spread(), low_load(30), state)
    later = builders.observation(now_s=NOW_S + 60, load=15.0, replicas=30, serving=30)
    decision, _ = policy.decide(spread(), later, state)
    assert (decision.kind, decision.reason) == (Kind.HOLD, Reason.COOLDOWN)
    assert decision.cooldown_until_s == NOW_S + 300


def test_default_policy_spreads_the_cap() -> None:
    """The default policy spreads the scale-down cap over the cooldown; the seed one does not."""
    assert policy.default(max_replicas=10, target_load_per_replica=1.0).scale_down_spread
    assert not policy.seed(max_replicas=10, target_load_per_replica=1.0).scale_down_spread


def test_negative_step_raises() -> None:
    """A negative least time between scale-downs is a programming error."""
    with pytest.raises(ValueError, match="must"):
        builders.config(scale_down_step_s=-1.0)

"""The policy under a GPU ResourceQuota (docs/architecture.md, "The placement ladder"): a scale-up
never asks past `admissible`."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from autoscaler.core import model, policy
from autoscaler.core.model import Bound, Kind, Reason

from . import builders
from .builders import NOW_S, estimate


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


def test_scale_up_is_clamped_to_what_the_quota_admits() -> None:
    """Load asks for 8 but the quota admits 6: the decision scales to 6 and names the cap."""
    decision, state = decide(observation=builders.observation(load=80.0, admissible=6))
    assert (decision.kind, decision.desired) == (Kind.SCALE_UP, 6)
    assert (decision.reason, decision.bound) == (Reason.QUOTA, Bound.QUOTA)
    assert decision.detail == "the GPU quota admits 6 replicas, 8 wanted"
    assert state.last_scale_up_s == NOW_S


def test_scale_up_the_quota_refuses_entirely_is_a_hold() -> None:
    """With the quota already full at the current 4, a scale-up to 8 holds and says why."""
    decision, state = decide(observation=builders.observation(load=80.0, admissible=4))
    assert (decision.kind, decision.desired, decision.reason) == (Kind.HOLD, 4, Reason.QUOTA)
    assert "admits 4" in decision.detail
    assert state == builders.state()


def test_quota_below_the_current_count_never_scales_down() -> None:
    """A quota lowered under the running 4 replicas holds them at 4 on a scale-up."""
    decision, _ = decide(observation=builders.observation(load=80.0, admissible=2))
    assert (decision.kind, decision.desired, decision.reason) == (Kind.HOLD, 4, Reason.QUOTA)


def test_quota_leaves_a_scale_down_alone() -> None:
    """A scale-down is not the quota's business: 4 go to 3 as without one."""
    observation = builders.observation(load=20.0, admissible=1)
    with_quota, _ = decide(observation=observation)
    without, _ = decide(observation=builders.observation(load=20.0))
    assert (with_quota.kind, with_quota.desired) == (Kind.SCALE_DOWN, without.desired)


def test_a_scale_up_within_the_quota_is_unchanged() -> None:
    """Admitting 8 of the 8 asked for changes nothing."""
    decision, _ = decide(observation=builders.observation(load=80.0, admissible=8))
    assert (decision.kind, decision.desired, decision.reason) == (
        Kind.SCALE_UP,
        8,
        Reason.ABOVE_TARGET,
    )
    assert decision.bound is None


def test_raising_to_min_replicas_respects_the_quota() -> None:
    """One replica under a minimum of 2 with the quota full stays at 1 and says so."""
    observation = builders.observation(replicas=1, serving=1, load=5.0, admissible=1)
    decision, _ = decide(observation=observation)
    assert (decision.kind, decision.desired, decision.reason) == (Kind.HOLD, 1, Reason.QUOTA)


def test_burst_is_clamped_by_the_quota_too() -> None:
    """A burst asking for 8 with room for 5 scales to 5."""
    config = builders.config(burst=model.BurstConfig(), max_replicas=20)
    observation = builders.observation(load=estimate(45.0, burst_mean=80.0), admissible=5)
    decision, _ = decide(config, observation)
    assert (decision.kind, decision.desired, decision.reason) == (Kind.SCALE_UP, 5, Reason.QUOTA)


def test_a_cap_from_an_unplaceable_model_names_the_placement() -> None:
    """Held at 4 because no node can place the model, the hold says so rather than blaming the
    quota."""
    observation = builders.observation(
        load=80.0, admissible=4, admissible_reason=Reason.NO_PLACEMENT
    )
    decision, state = decide(observation=observation)
    assert (decision.kind, decision.desired) == (Kind.HOLD, 4)
    assert decision.reason is Reason.NO_PLACEMENT
    assert decision.detail == "no node can place more than 4 replicas, 8 wanted"
    assert state == builders.state()


def test_a_partial_placement_cap_scales_up_and_names_the_placement() -> None:
    """Room for 6 of the 8 asked for, set by the placement: a scale-up to 6 with its reason."""
    observation = builders.observation(
        load=80.0, admissible=6, admissible_reason=Reason.NO_PLACEMENT
    )
    decision, _ = decide(observation=observation)
    assert (decision.kind, decision.desired, decision.bound) == (Kind.SCALE_UP, 6, Bound.QUOTA)
    assert decision.reason is Reason.NO_PLACEMENT


def test_the_admissible_reason_is_only_read_when_the_cap_binds() -> None:
    """Within the cap, an unplaceable-model reason changes nothing."""
    observation = builders.observation(
        load=80.0, admissible=8, admissible_reason=Reason.NO_PLACEMENT
    )
    decision, _ = decide(observation=observation)
    assert (decision.kind, decision.desired, decision.reason) == (
        Kind.SCALE_UP,
        8,
        Reason.ABOVE_TARGET,
    )


def test_cooldown_is_reported_before_the_quota() -> None:
    """Inside the scale-up cooldown the hold names the cooldown, not the quota."""
    state = builders.state(last_scale_up_s=NOW_S - 1)
    decision, _ = decide(observation=builders.observation(load=80.0, admissible=4), state=state)
    assert decision.reason is Reason.COOLDOWN


@given(
    load=st.floats(0.0, 500.0),
    replicas=st.integers(1, 10),
    admissible=st.none() | st.integers(0, 12),
)
def test_decision_never_exceeds_the_admissible_count_unless_already_above(
    load: float, replicas: int, admissible: int | None
) -> None:
    """Whatever the load, the desired count is at most max(current, admissible)."""
    observation = builders.observation(
        load=load, replicas=replicas, serving=replicas, admissible=admissible
    )
    decision, _ = decide(observation=observation)
    if admissible is not None and decision.desired > replicas:
        assert decision.desired <= max(replicas, admissible)
    unbounded, _ = decide(
        observation=builders.observation(load=load, replicas=replicas, serving=replicas)
    )
    assert decision.desired <= max(unbounded.desired, replicas)

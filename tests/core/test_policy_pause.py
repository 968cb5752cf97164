"""The service owner's pause (`PolicyConfig.pause`), with KEDA's semantics, and its end."""

from __future__ import annotations

from autoscaler.core import model, policy
from autoscaler.core.model import Kind, Pause, Reason

from . import builders
from .builders import NOW_S


def test_a_paused_service_holds_at_its_count_whatever_the_load() -> None:
    """Paused, a load that asks for 9 replicas is a hold at the current 4, reason `paused`."""
    decision, state = policy.decide(
        builders.config(pause=Pause()), builders.observation(load=90.0), builders.state()
    )
    assert (decision.kind, decision.reason, decision.desired) == (Kind.HOLD, Reason.PAUSED, 4)
    assert decision.detail == "paused at 4 replicas"
    assert state.paused_s == NOW_S
    assert state.last_scale_up_s is None


def test_a_paused_service_holds_below_its_minimum_too() -> None:
    """A count set by hand below `min-replicas` stays while paused: the bounds do not apply."""
    decision, _ = policy.decide(
        builders.config(pause=Pause()),
        builders.observation(replicas=1, serving=1),
        builders.state(),
    )
    assert (decision.kind, decision.reason, decision.desired) == (Kind.HOLD, Reason.PAUSED, 1)


def test_paused_replicas_are_set_once_then_the_service_holds() -> None:
    """`paused-replicas: 0` scales 4 to 0 once; a manual 3 afterwards is held, not undone."""
    config = builders.config(pause=Pause(replicas=0))
    first, state = policy.decide(config, builders.observation(), builders.state())
    assert (first.kind, first.reason, first.desired) == (Kind.SCALE_DOWN, Reason.PAUSED, 0)
    assert state.paused_replicas == 0
    later = builders.observation(now_s=NOW_S + 5, replicas=3, serving=3)
    second, state = policy.decide(config, later, state)
    assert (second.kind, second.reason, second.desired) == (Kind.HOLD, Reason.PAUSED, 3)
    assert second.detail == "paused at 3 replicas (paused-replicas 0)"


def test_a_new_paused_replicas_value_is_set_once_again() -> None:
    """Changing `paused-replicas` from 0 to 6 during the pause scales to 6 (a scale-up)."""
    state = builders.state(paused_s=NOW_S - 60, paused_replicas=0)
    decision, state = policy.decide(
        builders.config(pause=Pause(replicas=6)),
        builders.observation(replicas=0, serving=0, load=None),
        state,
    )
    assert (decision.kind, decision.desired) == (Kind.SCALE_UP, 6)
    assert (state.paused_s, state.paused_replicas) == (NOW_S - 60, 6)


def test_paused_replicas_already_met_is_a_hold() -> None:
    """`paused-replicas` equal to the current count writes nothing: a hold at once."""
    decision, state = policy.decide(
        builders.config(pause=Pause(replicas=4)), builders.observation(), builders.state()
    )
    assert (decision.kind, decision.reason) == (Kind.HOLD, Reason.PAUSED)
    assert state.paused_replicas == 4


def test_a_resume_counts_as_a_manual_change() -> None:
    """After a pause, a low load waits a full scale-down cooldown from the resume, and a
    burst hold from before the pause is dropped."""
    config = builders.config(scale_down_cooldown_s=300.0)
    paused = builders.state(
        paused_s=NOW_S - 3600, last_scale_change_s=NOW_S - 7200, burst_until_s=NOW_S + 10
    )
    decision, state = policy.decide(config, builders.observation(load=10.0), paused)
    assert (decision.kind, decision.reason) == (Kind.HOLD, Reason.COOLDOWN)
    assert decision.cooldown_until_s == NOW_S + 300.0
    assert (state.burst_until_s, state.paused_s, state.paused_replicas) == (None, None, None)
    assert state.last_scale_change_s == NOW_S


def test_a_resume_may_scale_up_at_once() -> None:
    """A load above target scales up on the tick of the resume: no scale-up cooldown starts."""
    paused = builders.state(paused_s=NOW_S - 3600, paused_replicas=2)
    decision, _ = policy.decide(builders.config(), builders.observation(load=90.0), paused)
    assert (decision.kind, decision.desired) == (Kind.SCALE_UP, 9)


def test_pause_never_leaves_the_service_without_a_hold_or_its_one_change() -> None:
    """Over a run of ticks with moving counts, a pause yields holds and at most one change."""
    config = builders.config(pause=Pause(replicas=5))
    state = model.PolicyState()
    changes = 0
    for tick, replicas in enumerate((4, 5, 7, 2, 2, 9)):
        observation = builders.observation(now_s=NOW_S + tick, replicas=replicas, serving=replicas)
        decision, state = policy.decide(config, observation, state)
        assert decision.reason is Reason.PAUSED
        changes += decision.changes
    assert changes == 1

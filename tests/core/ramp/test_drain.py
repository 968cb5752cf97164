"""Scale changes and the drain (`core.ramp.drain`): refusal, victims, draining, cancelling."""

from __future__ import annotations

import math

import pytest

from autoscaler.core import ramp
from autoscaler.core.ramp import (
    Label,
    MeasureInFlight,
    Phase,
    Plan,
    Pod,
    RampConfig,
    RampState,
    Refusal,
    ScaleTo,
    SetWarm,
)

from .world import World, cohort_world, reasons


def test_scaling_up_is_immediate() -> None:
    """A scale-up is one `ScaleTo`, whatever the ramp is doing."""
    world = cohort_world()
    answer = world.scale(8)
    assert isinstance(answer, Plan)
    assert answer.actions == (ScaleTo(8),)


def test_scaling_down_during_a_ramp_is_refused() -> None:
    """While new pods hold traffic the serving set is not scaled down; the refusal says why."""
    world = cohort_world()
    answer = world.scale(3)
    assert isinstance(answer, Refusal)
    assert "ramping at the 10 % step" in answer.reason


def test_victims_are_warming_first_then_the_lowest_tier_then_the_least_loaded() -> None:
    """The documented scale-down order."""
    pods = [
        Pod("whole-idle", True, True, False, True, tier="whole", in_flight=0.0),
        Pod("mig-busy", True, True, False, True, tier="mig-1g.10gb", in_flight=9.0),
        Pod("mig-idle", True, True, False, True, tier="mig-3g.40gb", in_flight=1.0),
        Pod("shared-unknown", True, True, False, True, tier="shared"),
        Pod("shared-busy", True, True, False, True, tier="shared", in_flight=5.0),
        Pod("new-whole", True, False, True, False, tier="whole"),
    ]
    order = [p.name for p in ramp.victim_order(pods)]
    assert order == [
        "new-whole",
        "shared-busy",
        "shared-unknown",
        "mig-idle",
        "mig-busy",
        "whole-idle",
    ]


def test_a_drain_takes_victims_out_of_routing_then_scales_when_they_are_idle() -> None:
    """Victims leave the endpoints and the stable set, and replicas drop once in-flight is 0."""
    world = World(stable=5)
    world.in_flight = 3.0
    world.change("p03", tier="shared")
    world.change("p01", tier="shared")
    answer = world.scale(3)
    assert isinstance(answer, Plan)
    assert answer.actions[:4] == (
        SetWarm("p01", False, "draining for a scale-down to 3"),
        Label("p01", warming=False, stable=False),
        SetWarm("p03", False, "draining for a scale-down to 3"),
        Label("p03", warming=False, stable=False),
    )
    assert world.state.phase is Phase.DRAINING
    assert world.replicas == 5
    for _ in range(10):
        world.tick()
    assert world.replicas == 5
    world.in_flight = 0.0
    world.run_until(lambda: world.replicas == 3)
    assert world.marked == {"p01", "p03"}
    assert sorted(world.pods) == ["p00", "p02", "p04"]
    assert ramp.DRAINED in reasons(world.actions)
    world.tick()
    assert world.state == RampState()


def test_a_drain_with_unknown_in_flight_waits_for_the_grace_period() -> None:
    """A missing in-flight count is not 0: the drain waits the whole grace period."""
    world = World(stable=3, config=RampConfig(drain_grace_s=60.0))
    world.in_flight = math.nan
    world.scale(2)
    world.tick()
    started = world.now
    world.run_until(lambda: world.replicas == 2)
    assert world.now - started == pytest.approx(60.0)


def test_a_drain_of_pods_that_never_served_scales_at_once() -> None:
    """Warming victims had no traffic to finish: replicas drop at the next tick."""
    world = World(stable=3)
    world.add(running=False)
    world.replicas = 4
    world.scale(3)
    assert world.state.drain is not None
    assert world.state.drain.victims == (ramp.Victim("p03", warm=False, stable=False),)
    world.tick()
    assert world.replicas == 3
    assert "p03" not in world.pods


def test_a_warm_victim_whose_container_restarts_still_leaves_the_endpoints() -> None:
    """Warm but not running now: it would rejoin the endpoints once up, so it is unset too."""
    world = World(stable=3)
    world.change("p00", running=False)
    answer = world.scale(2)
    assert isinstance(answer, Plan)
    assert SetWarm("p00", False, "draining for a scale-down to 2") in answer.actions
    assert not [a for a in answer.actions if isinstance(a, MeasureInFlight)]
    world.tick()
    assert world.replicas == 2


def test_scaling_up_during_a_drain_puts_the_victims_back() -> None:
    """A scale-up cancels the drain: victims are warm and stable again, replicas rise."""
    world = World(stable=4)
    world.in_flight = 2.0
    world.scale(3)
    world.tick()
    victim = "p00"
    assert not world.pods[victim].warm
    answer = world.scale(6)
    assert isinstance(answer, Plan)
    assert answer.actions[:2] == (
        SetWarm(victim, True, "drain cancelled by a scale-up"),
        Label(victim, warming=False, stable=True),
    )
    assert answer.actions[-1] == ScaleTo(6)
    assert world.state.drain is None
    assert victim in world.stable_set()


def test_a_second_scale_down_waits_for_the_running_drain() -> None:
    """The same target again is a no-op; another target is refused until the drain ends."""
    world = World(stable=5)
    world.in_flight = 1.0
    world.scale(4)
    same = world.scale(4)
    assert isinstance(same, Plan)
    assert same.actions == ()
    other = ramp.scale(world.config, world.state, pods=(), replicas=3, current=5)
    assert isinstance(other, Refusal)


def test_no_cohort_forms_while_draining() -> None:
    """New pods warm up during a drain but only ramp once it is over."""
    world = World(stable=5)
    world.in_flight = 1.0
    world.scale(4)
    del world.pods["p04"]  # crashed; its ReplicaSet replaces it
    world.add()
    for _ in range(10):
        world.tick()
        assert world.state.phase is Phase.DRAINING
        assert world.weight == 0
    world.in_flight = 0.0
    world.run_until(lambda: world.state.phase is Phase.RAMPING)

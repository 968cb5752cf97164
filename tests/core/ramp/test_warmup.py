"""The warm-up transition (`core.ramp.warmup`): probes, the warm verdict, the deadline."""

from __future__ import annotations

import pytest

from autoscaler.core import ramp
from autoscaler.core.ramp import Event, EventType, Phase, Probe, RampConfig, Reclaim, SetWarm

from .world import START_S, World


def test_a_running_new_pod_is_probed_with_serving_pods_as_the_baseline() -> None:
    """A new running pod gets a probe, and two serving pods are probed alongside it."""
    world = World(stable=4)
    new = world.add()
    plan = world.tick()
    probes = [a.pod for a in plan.actions if isinstance(a, Probe)]
    assert probes == [new, "p00", "p01"]
    assert plan.state.phase is Phase.WARMING
    assert plan.state.deadlines == {new: world.now + 600.0}


def test_a_pod_answering_its_probes_at_the_serving_pods_latency_is_set_warm() -> None:
    """All probes answered within 1.5 x the serving pods' median: the pod is set warm."""
    world = World(stable=4)
    new = world.add()
    world.tick()
    plan = world.tick()
    warm = [a for a in plan.actions if isinstance(a, SetWarm)]
    assert [(a.pod, a.warm) for a in warm] == [(new, True)]
    assert "within the serving pods'" in warm[0].message
    assert plan.state.deadlines == {}


def test_a_pod_slower_than_the_serving_pods_is_probed_again_later() -> None:
    """Probes answered at 9 x the serving latency do not warm the pod; the next probe waits."""
    world = World(stable=4)
    world.probe = "cold"
    new = world.add()
    world.tick()
    plan = world.tick()
    assert not [a for a in plan.actions if isinstance(a, SetWarm | Probe)]
    assert plan.state.probe_after[new] == START_S + 1.0 + 5.0
    plan = world.tick(4.0)
    assert Probe(new) in plan.actions


def test_an_absolute_latency_limit_also_warms_a_slow_pod() -> None:
    """A pod slower than the serving pods but under `max_p95_latency_s` is warm."""
    world = World(stable=4, config=RampConfig(max_p95_latency_s=1.0))
    world.probe = "cold"
    new = world.add()
    world.tick()
    plan = world.tick()
    assert [a.pod for a in plan.actions if isinstance(a, SetWarm)] == [new]


def test_failed_probes_never_warm_a_pod() -> None:
    """A pod whose probes fail stays out of traffic."""
    world = World(stable=4)
    world.probe = "failing"
    world.add()
    for _ in range(20):
        plan = world.tick()
        assert not [a for a in plan.actions if isinstance(a, SetWarm)]


def test_without_a_probe_a_pod_is_warm_once_running() -> None:
    """With no warm-up probe configured, a running pod is set warm without probing."""
    world = World(stable=2, config=RampConfig(warmup_probe=False))
    new = world.add(running=False)
    plan = world.tick()
    assert plan.actions == ()
    world.change(new, running=True)
    plan = world.tick()
    assert [type(a) for a in plan.actions] == [SetWarm]


def test_a_pod_not_warm_by_its_deadline_is_reclaimed_with_a_warning() -> None:
    """Past the warm-up deadline the pod is reclaimed and a Warning Event says so."""
    world = World(stable=4, config=RampConfig(warmup_deadline_s=60.0))
    world.probe = "failing"
    new = world.add()
    actions = world.run_until(lambda: new not in world.pods, dt_s=5.0)
    assert Reclaim(new, "not warm within 60 s") in actions
    warnings = [a for a in actions if isinstance(a, Event) and a.type is EventType.WARNING]
    assert [a.reason for a in warnings] == [ramp.WARMUP_TIMED_OUT]
    assert world.now - START_S == pytest.approx(65.0)


def test_a_pending_pod_has_no_deadline_yet() -> None:
    """The deadline starts when the pod runs: a pod waiting for a GPU is not reclaimed."""
    world = World(stable=2, config=RampConfig(warmup_deadline_s=60.0))
    world.add(running=False)
    for _ in range(10):
        plan = world.tick(30.0)
        assert not [a for a in plan.actions if isinstance(a, Reclaim)]

"""The warm standby pool (`core.ramp.pool`): filling it, promoting from it, refilling it,
keeping it through scale-downs and restarts."""

from __future__ import annotations

import dataclasses

from autoscaler.core import ramp
from autoscaler.core.ramp import Phase, Plan, RampConfig, ScaleTo, SetWarm, SetWeights

from .world import World, reasons


def pool_world(*, stable: int = 2, standby: int = 1, **config: object) -> World:
    """A world with `stable` serving pods and a full pool of `standby` warm pods."""
    world = World(stable=stable, config=RampConfig(**config))  # type: ignore[arg-type]
    world.scale(stable + standby, standby=standby)
    world.start_all()
    world.run_until(lambda: len(world.state.pool) == standby)
    return world


def promoted(actions: list[ramp.Action]) -> list[str]:
    return [a.pod for a in actions if isinstance(a, SetWarm) and a.warm and "standby" in a.message]


def test_a_pod_warm_beyond_the_serving_count_waits_in_the_pool_at_no_weight() -> None:
    """A pod that passes its warm-up while the serving count is met joins the pool, out of
    every routed set, and no cohort forms."""
    world = pool_world()
    (waiting,) = world.state.pool
    for _ in range(30):
        world.tick()
    pod = world.pods[waiting]
    assert (pod.warm, pod.warming, pod.stable) == (False, True, False)
    assert world.warming_set() == []
    assert world.weight == 0
    assert world.state.phase is Phase.IDLE
    assert world.state.pool == (waiting,)
    assert world.state.deadlines == {}


def test_pods_fill_the_serving_count_before_the_pool() -> None:
    """From nothing, the first pods to pass their warm-up serve and the last waits."""
    world = World(stable=0, config=RampConfig(warmup_probe=False))
    world.scale(3, standby=1)
    world.start_all()
    world.run_until(lambda: len(world.state.pool) == 1 and len(world.stable_set()) == 2)
    assert world.state.pool[0] not in world.stable_set()


def test_a_scale_up_promotes_the_pool_pod_first_and_a_new_pod_refills_the_pool() -> None:
    """The pool's pod is set warm at the scale-up's first tick and ramps while the new pod
    is not even running; once that one is warm it waits in the pool."""
    world = pool_world()
    (waiting,) = world.state.pool
    world.scale(4, standby=1)
    plan = world.tick()
    assert promoted(list(plan.actions)) == [waiting]
    (fresh,) = [n for n, p in world.pods.items() if not p.running]
    world.run_until(lambda: world.state.phase is Phase.RAMPING)
    assert world.state.cohort == (waiting,)
    assert any(isinstance(a, SetWeights) and a.warming_pct > 0 for a in world.actions)
    assert not world.pods[fresh].running
    world.start_all()
    world.run_until(lambda: world.state.pool == (fresh,))
    world.run_until(lambda: world.state.phase is Phase.IDLE)
    assert sorted(world.stable_set()) == sorted(["p00", "p01", waiting])
    assert not world.pods[fresh].warm


def test_a_pool_pod_promoted_during_a_ramp_joins_the_cohort_at_its_next_step() -> None:
    """While a cohort ramps, a pod let out of the pool is not set warm at once but joins at the
    next step boundary."""
    world = pool_world(stable=2, standby=1)
    (waiting,) = world.state.pool
    world.scale(4, standby=1)  # the pool pod is promoted and starts a ramp
    world.run_until(lambda: world.state.step_started_s is not None)
    world.scale(5, standby=1)  # the new pod is not warm yet: nothing to let out
    world.start_all()
    world.run_until(lambda: len(world.state.pool) == 1 or bool(world.state.passed))
    assert waiting in world.state.cohort


def test_a_lagging_cache_does_not_let_a_second_pod_out_of_the_pool() -> None:
    """A pod set warm but not yet seen warm counts as serving: one scale-up step promotes one."""
    world = pool_world(standby=2)
    world.scale(5, standby=2)
    plan = world.tick()
    (first,) = promoted(list(plan.actions))
    world.change(first, warm=False)  # the cache has not caught up with the write
    plan = world.tick()
    assert promoted(list(plan.actions)) == []
    assert len(world.state.pool) == 1


def test_a_scale_down_drains_a_serving_pod_and_keeps_the_pool() -> None:
    """Serving replicas go before the pool's warm pod."""
    world = pool_world(stable=3, standby=1)
    (waiting,) = world.state.pool
    world.in_flight = 0.0
    answer = world.scale(3, standby=1)
    assert isinstance(answer, Plan)
    assert answer.state.drain is not None
    (victim,) = answer.state.drain.victims
    assert victim.name != waiting
    assert victim.warm
    world.run_until(lambda: world.state.drain is None)
    assert world.state.pool == (waiting,)
    assert len(world.stable_set()) == 2


def test_a_smaller_pool_drains_its_surplus_pod_first() -> None:
    """A pool resized from 2 to 1 gives up a pool pod, not a serving one."""
    world = pool_world(stable=2, standby=2)
    oldest, newest = world.state.pool
    answer = world.scale(3, standby=1)
    assert isinstance(answer, Plan)
    assert answer.state.drain is not None
    assert [v.name for v in answer.state.drain.victims] == [newest]
    assert answer.state.pool == (oldest,)
    world.run_until(lambda: world.state.drain is None)
    assert ScaleTo(3) in world.actions
    assert len(world.stable_set()) == 2


def test_the_pool_survives_a_restart_and_none_of_its_pods_is_ramped() -> None:
    """A new leader reads the pool from the saved state and keeps its pods out of traffic."""
    world = pool_world(stable=2, standby=1)
    (waiting,) = world.state.pool
    plan = world.restart(30.0)
    assert plan.state.pool == (waiting,)
    assert plan.state.standby == 1
    for _ in range(20):
        world.tick()
    assert not [a for a in world.writes() if isinstance(a, SetWarm) and a.pod == waiting]
    assert world.state.phase is Phase.IDLE
    assert "RampStarted" not in reasons(world.actions)


def test_a_pool_pod_that_stops_running_leaves_the_pool_and_warms_up_again() -> None:
    """A container restart in the pool: the pod is probed afresh before it waits again."""
    world = pool_world()
    (waiting,) = world.state.pool
    world.change(waiting, running=False)
    plan = world.tick()
    assert plan.state.pool == ()
    world.change(waiting, running=True)
    plan = world.tick()
    assert waiting in plan.state.deadlines
    world.run_until(lambda: world.state.pool == (waiting,))


def test_without_a_known_count_the_pool_neither_fills_nor_promotes() -> None:
    """An unknown replica count leaves every passing pod to serve, as without a pool."""
    world = World(stable=2)
    world.state = dataclasses.replace(world.state, standby=1)
    new = world.add()
    world.replicas = None  # type: ignore[assignment]
    world.run_until(lambda: world.pods[new].warm)
    assert world.state.pool == ()

"""The loop and the standby pool: the policy decides serving replicas, the pool is added on
top, and `auto` is sized from the shortfall the loop feeds `core.standby`."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt

from autoscaler import clock, loop, ports
from autoscaler.core import model, ramp, standby
from tests.loop.test_ramp_driver import SERVICE, Rig, ramp_target

CONFIG = model.PolicyConfig(max_replicas=10, target_load_per_replica=10.0)


class OneService:
    """One gated service at `replicas`, its pool given by `pool`."""

    def __init__(self, pool: standby.PoolConfig, *, replicas: int = 3) -> None:
        self.target = dataclasses.replace(ramp_target(), standby=pool)
        self.replicas = replicas
        self.published: list[model.Decision] = []

    def workloads(self) -> Sequence[ports.Workload]:
        return [
            ports.Workload(
                SERVICE,
                CONFIG,
                half_life_s=30.0,
                replicas=self.replicas,
                serving=2,
                startup_s=30.0,
                ramp=self.target,
            )
        ]

    async def scale(self, service: model.ServiceId, replicas: int) -> None:
        raise AssertionError("a gated service scales through the driver")

    async def publish(
        self, service: model.ServiceId, decision: model.Decision, state: model.PolicyState
    ) -> None:
        self.published.append(decision)


class PoolRamps:
    """A driver whose pool holds `in_count` replicas of the count; it records what it is asked."""

    def __init__(self, in_count: int) -> None:
        self.in_count = in_count
        self.scales: list[tuple[int, int, int | None]] = []
        self.sizes: list[int] = []

    def standby(self, workload: ports.Workload) -> model.Standby:
        return model.Standby(size=self.in_count, replicas=self.in_count, waiting=self.in_count)

    async def scale(
        self, workload: ports.Workload, replicas: int, current: int, *, standby: int | None = None
    ) -> None:
        self.scales.append((replicas, current, standby))

    async def reconcile(
        self,
        now_s: float,
        workloads: Sequence[ports.Workload],
        *,
        standby: Mapping[model.ServiceId, int] | None = None,
    ) -> None:
        self.sizes.append((standby or {}).get(SERVICE, -1))


class Load:
    """Requests per second from a function of the time."""

    def __init__(self, the_clock: clock.ManualClock, rate: object) -> None:
        self.clock = the_clock
        self.rate = rate

    async def sample(
        self, workloads: Sequence[ports.Workload], now_s: float
    ) -> npt.NDArray[np.float64]:
        values = np.full((len(workloads), len(model.Signal)), np.nan)
        assert callable(self.rate)
        values[:, model.Signal.LOAD] = self.rate(now_s)
        values[:, model.Signal.SATURATION] = 0.0
        return values


async def test_the_policy_sees_the_serving_replicas_and_the_pool_rides_on_top() -> None:
    """Three replicas of which one is the pool: the policy counts two, and a scale-up to four
    serving asks the driver for four with the fixed pool of one on top."""
    the_clock = clock.ManualClock(1000.0)
    cluster = OneService(standby.PoolConfig(cap=0, fixed=1))
    ramps = PoolRamps(in_count=1)
    the_loop = loop.Loop(
        cluster=cluster, metrics=Load(the_clock, lambda _: 35.0), clock=the_clock, ramps=ramps
    )
    report = await the_loop.step()
    decision = report.decisions[SERVICE]
    assert decision.current == 2
    assert decision.desired == 4
    assert ramps.scales == [(4, 2, 1)]
    assert ramps.sizes == [1]
    assert decision.standby == model.Standby(size=1, replicas=1, waiting=1, why="fixed at 1")
    assert cluster.published[0].standby == decision.standby


async def test_auto_sizes_the_pool_from_the_load_outrunning_the_estimate_within_a_start_up() -> (
    None
):
    """A load that jumps by 25 req/s for a minute every five, above a smoothed estimate that
    lags it, asks for a pool of two (10 req/s a replica), capped at two; before 15 minutes of
    history it asks for none."""
    the_clock = clock.ManualClock(0.0)
    cluster = OneService(standby.PoolConfig(cap=2))

    def bursty(now_s: float) -> float:
        return 40.0 if now_s % 300.0 < 60.0 else 15.0

    ramps = PoolRamps(in_count=0)
    the_loop = loop.Loop(
        cluster=cluster, metrics=Load(the_clock, bursty), clock=the_clock, ramps=ramps
    )
    for _ in range(1200):
        await the_loop.step()
        the_clock.advance(1.0)
    assert ramps.sizes[600] == 0
    assert ramps.sizes[-1] == 2
    pool = cluster.published[-1].standby
    assert pool is not None
    assert "capped at 2" in pool.why


async def test_an_automatic_pool_found_by_a_new_leader_is_kept_until_history_sizes_it() -> None:
    """A new loop with no shortfall history keeps the pool of two it finds, not drains it."""
    the_clock = clock.ManualClock(0.0)
    cluster = OneService(standby.PoolConfig(cap=2))
    ramps = PoolRamps(in_count=2)
    the_loop = loop.Loop(
        cluster=cluster, metrics=Load(the_clock, lambda _: 15.0), clock=the_clock, ramps=ramps
    )
    for _ in range(60):
        await the_loop.step()
        the_clock.advance(1.0)
    assert set(ramps.sizes) == {2}
    pool = cluster.published[-1].standby
    assert pool is not None
    assert pool.why.startswith("kept at 2 while ")


async def test_a_service_without_a_pool_has_none_in_its_decision() -> None:
    """`standby-replicas: 0` and nothing in the count: no pool on the decision, none sized."""
    the_clock = clock.ManualClock(0.0)
    cluster = OneService(ports.NO_POOL, replicas=2)
    ramps = PoolRamps(in_count=0)
    the_loop = loop.Loop(
        cluster=cluster, metrics=Load(the_clock, lambda _: 15.0), clock=the_clock, ramps=ramps
    )
    report = await the_loop.step()
    assert report.decisions[SERVICE].standby is None
    assert ramps.sizes == [-1]


async def pool_rig(size: int = 1) -> Rig:
    """Three serving pods and a full pool of `size`, sized through `reconcile`."""
    rig = Rig(stable=3)
    await rig.driver.reconcile(rig.now, rig.cluster.workloads(), standby={SERVICE: size})
    await rig.run_until(lambda: len(rig.state().pool) == size)
    return rig


async def test_a_new_pool_size_scales_the_count_and_the_serving_replicas_stay() -> None:
    """A pool of one on three serving replicas asks for four; the fourth pod waits, not warm."""
    rig = await pool_rig()
    assert rig.journal.of("scale") == [("scale", 4)]
    (waiting,) = rig.state().pool
    assert not rig.cluster.pod_sets[SERVICE][waiting].warm
    assert rig.weight() == 0
    pool = rig.driver.standby(rig.cluster.workload(SERVICE))
    assert pool == model.Standby(size=1, replicas=1, waiting=1)


async def test_a_scale_up_lets_the_pool_pod_out_in_its_own_tick_while_the_record_lags() -> None:
    """The record still shows the old count; the driver reads the count it wrote, so the pool's
    pod is set warm at the reconcile right after the scale-up, and the pool is refilled behind."""
    rig = await pool_rig()
    (waiting,) = rig.state().pool
    workload = rig.cluster.workload(SERVICE)
    await rig.driver.scale(workload, 4, 3)
    assert rig.journal.of("scale")[-1] == ("scale", 5)
    rig.now += 1.0
    await rig.driver.reconcile(rig.now, rig.cluster.workloads())
    assert ("warm", waiting, True) in rig.journal
    await rig.run_until(lambda: len(rig.state().pool) == 1 and waiting not in rig.state().pool)
    await rig.run_until(lambda: waiting in rig.cluster.stable())


async def test_a_pool_resized_to_zero_drains_its_pod_and_not_a_serving_one() -> None:
    """Setting the pool to 0 removes the waiting pod; the serving pods stay."""
    rig = await pool_rig()
    (waiting,) = rig.state().pool
    serving = rig.cluster.stable()
    await rig.driver.reconcile(rig.now, rig.cluster.workloads(), standby={SERVICE: 0})
    await rig.run_until(lambda: waiting not in rig.cluster.pod_sets[SERVICE])
    assert rig.journal.of("victim") == [("victim", waiting)]
    assert rig.cluster.stable() == serving
    assert rig.journal.of("scale")[-1] == ("scale", 3)


async def test_a_pool_grown_during_a_drain_waits_for_the_drain_to_end() -> None:
    """A new pool size does not cancel the policy's scale-down: the drain ends first, then the
    count grows by the pool."""
    rig = Rig(stable=3)
    await rig.driver.scale(rig.cluster.workload(SERVICE), 2, 3)
    for _ in range(5):
        rig.now += 1.0
        await rig.driver.reconcile(rig.now, rig.cluster.workloads(), standby={SERVICE: 1})
    assert rig.state().drain is not None
    assert rig.journal.of("scale") == []
    assert ramp.DRAIN_CANCELLED not in [entry[2] for entry in rig.journal.of("event")]

    async def grown() -> bool:
        rig.now += 1.0
        rig.cluster.start_all()
        await rig.driver.reconcile(rig.now, rig.cluster.workloads(), standby={SERVICE: 1})
        return ("scale", 3) in rig.journal

    for _ in range(200):
        if await grown():
            break
    assert rig.journal.of("scale") == [("scale", 2), ("scale", 3)]

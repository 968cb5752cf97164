"""A scale-down waits for a young window (`PolicyConfig.scale_down_window_span_s`): at a start
or a failover the loop's windows are empty, while the cooldowns' times come persisted."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import pytest

from autoscaler import clock, loop, ports
from autoscaler.core import model, policy

SERVICE = model.ServiceId("ns/svc")


class Cluster:
    """One service at 10 replicas, its state persisted by a leader that scaled it an hour ago."""

    def __init__(self) -> None:
        config = policy.seed(
            max_replicas=20, target_load_per_replica=1.0, scale_down_window_span_s=60.0
        )
        self.record = ports.Workload(
            SERVICE,
            config,
            half_life_s=30.0,
            replicas=10,
            serving=10,
            state=model.PolicyState(last_scale_up_s=-3_600.0, last_scale_change_s=-3_600.0),
        )

    def workloads(self) -> Sequence[ports.Workload]:
        return [self.record]

    async def scale(self, service: model.ServiceId, replicas: int) -> None:
        self.record = dataclasses.replace(self.record, replicas=replicas, serving=replicas)

    async def publish(
        self, service: model.ServiceId, decision: model.Decision, state: model.PolicyState
    ) -> None:
        return None


class Load:
    """Half of the service's capacity, every tick but those of an outage."""

    def __init__(self, the_clock: clock.ManualClock, outage: range = range(0)) -> None:
        self._clock, self._outage = the_clock, outage

    async def sample(
        self, workloads: Sequence[ports.Workload], now_s: float
    ) -> npt.NDArray[np.float64]:
        values = np.full((len(workloads), len(model.Signal)), np.nan)
        if int(now_s) not in self._outage:
            values[:, model.Signal.LOAD] = 5.0
        return values


class PerService:
    """The core policy behind a port that is not `CorePolicy`: the loop decides one by one."""

    def decide(
        self, workload: ports.Workload, observation: model.Observation, state: model.PolicyState
    ) -> tuple[model.Decision, model.PolicyState]:
        return policy.decide(workload.policy, observation, state)


def _loop(
    cluster: Cluster, the_clock: clock.ManualClock, batched: bool, outage: range = range(0)
) -> loop.Loop:
    return loop.Loop(
        cluster=cluster,
        metrics=Load(the_clock, outage),
        clock=the_clock,
        policy=None if batched else PerService(),
    )


@pytest.mark.parametrize("batched", [True, False])
async def test_a_new_leader_scales_down_once_its_window_spans_a_minute(batched: bool) -> None:
    """The persisted cooldown is long over, but the new leader's window holds one sample on its
    first tick: it holds, saying so, until the window spans 60 s, then scales down."""
    cluster, the_clock = Cluster(), clock.ManualClock(0.0)
    the_loop = _loop(cluster, the_clock, batched)
    details: list[str] = []
    for _ in range(60):
        report = await the_loop.step()
        decision = report.decisions[SERVICE]
        assert (decision.kind, decision.reason) == (model.Kind.HOLD, model.Reason.COOLDOWN)
        details.append(decision.detail)
        the_clock.advance(1.0)
    assert details[0] == "scale-down to 5 waits for the window to span 60 s (0 s seen)"
    assert details[59] == "scale-down to 5 waits for the window to span 60 s (59 s seen)"
    report = await the_loop.step()
    assert report.decisions[SERVICE].kind is model.Kind.SCALE_DOWN
    assert cluster.record.replicas == 8


@pytest.mark.parametrize("batched", [True, False])
async def test_a_service_seen_all_along_never_waits_again(batched: bool) -> None:
    """A metrics outage longer than the window leaves one sample in it when the metrics come
    back; the service has been seen since the start, so its scale-down goes ahead."""
    cluster, the_clock = Cluster(), clock.ManualClock(0.0)
    the_loop = _loop(cluster, the_clock, batched, outage=range(100, 500))
    for _ in range(500):
        await the_loop.step()
        the_clock.advance(1.0)
    assert cluster.record.replicas == 8
    report = await the_loop.step()
    assert report.decisions[SERVICE].kind is model.Kind.SCALE_DOWN
    assert cluster.record.replicas == 7

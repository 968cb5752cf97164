"""The warm standby pool under a load step with a cold start, and with its leader killed at the
scale-up: the pool's pods take the traffic first, after the ramp alone.

Each case runs the ramp's e2e harness (Istio, 5 s steps) with pods whose containers are ready
60 s after they start (the cold start; the first two pods are ready at once), two serving pods
at 10 req/s and a pool of 0 or 2, then steps the load to 35 req/s: 4 serving replicas wanted.
It measures the controller seconds from the first scale-up's write to the first traffic on a
new replica and to its capacity (a third pod serving), and requires with a pool: no traffic on
a pool pod before the step, a pool pod ramped first (no new pod warm then), capacity within the
ramp's time (the policy asks for the fourth replica later, as its smoothed estimate rises),
no hold, rollback or timed-out warm-up, and no controller crash. The killed case kills the
leader hard right after the scale-up's write; its follower promotes the pool's pods.
Table `standby`: the case, the pool, the seconds to the first traffic and to capacity, and the
standby GPU core-hours counted by the controller leading at the end (over its own term: the
killed case's successor takes over after the pool's hours were spent).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import pytest
from e2e.ramped import ISTIO, STEP_S, Ramped, WarmupEndpoint, endpoint
from e2e.support import Controllers, Running, wait_for
from kube.kubelet import FakeCluster
from prom.fixtures import Stack

from .figures import Figures

__all__ = ["endpoint"]

COLD_START_S = 60.0
"""Controller seconds from a new pod's creation to its containers being ready."""
RAMP_S = 4 * STEP_S + 15
"""The ramp alone: four steps, the promotion's waits, and a few ticks of slack."""
FIRST_TRAFFIC_S = 5
"""From the scale-up's write to a pool pod's first traffic: its gate opens in that tick, its
ramp starts at the next, and the router reports the weights applied."""
TAKEOVER_LIMIT_S = 30
BAD_EVENTS = ("RampHeld", "RampRolledBack", "RampAbandoned", "WarmupTimedOut")


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    pool: int
    kill: bool = False


CASES = [Case("cold", 0), Case("pool", 2), Case("pool-leader-killed", 2, kill=True)]


class ColdStart:
    """New pods' containers are ready `COLD_START_S` controller seconds after the pod is first
    seen (the fake kubelet's own clock stands still in these tests)."""

    def __init__(self, chat: Ramped, kubelet: FakeCluster) -> None:
        self.chat = chat
        self.kubelet = kubelet
        self.seen_s: dict[str, float] = {}
        self.served: set[str] = set(chat.pods())
        self.released: set[str] = set(chat.pods())
        for pod in chat.pods():
            kubelet.set_ready_after(chat.namespace, pod, 0.0)
            self.seen_s[pod] = -math.inf
        kubelet.ready_after_s = math.inf

    async def run_until(self, condition: Callable[[], bool], *, limit_s: int, what: str) -> None:
        """Tick until `condition()`, releasing on the way the pods whose cold start is over;
        each new pod serves 10 req/s from its first sight, and is released only once
        Prometheus has its request rate, so that the ramp's health gate has the pod's counts
        however little wall time the controller seconds took."""
        started = self.chat.clock.now()
        while True:
            await self._release()
            if condition():
                return
            if self.chat.clock.now() - started >= limit_s:
                raise AssertionError(f"{what}: not after {limit_s} s of controller time")
            await self.chat.tick()

    async def _release(self) -> None:
        now_s = self.chat.clock.now()
        for pod in self.chat.pods():
            since_s = self.seen_s.setdefault(pod, now_s)
            if pod not in self.served:
                self.served.add(pod)
                self.chat.serve_pods([pod], rate_per_s=10.0)
            if now_s - since_s >= COLD_START_S and pod not in self.released:
                await self.chat.wait_for_rate([pod], 10.0)
                self.kubelet.set_ready_after(self.chat.namespace, pod, 0.0)
                self.released.add(pod)


def _pool(chat: Ramped) -> list[str]:
    return list((chat.ramp() or {}).get("pool") or ())


async def _take_over(chat: Ramped, killed: Running, follower: Running) -> None:
    await killed.kill()
    await chat.run_until(
        lambda: follower.controller.leading, limit_s=TAKEOVER_LIMIT_S, what="the takeover"
    )
    await wait_for(lambda: follower.controller.ticks > 0, what="the successor's first tick")


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
async def test_a_load_step_is_served_by_the_pool_after_the_ramp_alone(
    kubelet: FakeCluster,
    stack: Stack,
    cluster: Controllers,
    unique: str,
    endpoint: WarmupEndpoint,
    figures: Figures,
    case: Case,
) -> None:
    """A load step needing two more replicas is served after the ramp alone with a pool of two,
    after the cold start and the ramp without one, and by the pool's pods across a killed
    leader."""
    kubelet.add_node("gpu-1", gpus=8)
    # Without a cooldown the step's replicas are all asked for within a few ticks.
    notes = {"scale-up-cooldown": "0s"}
    if case.pool:
        notes["standby-replicas"] = str(case.pool)
    chat = await Ramped.make(cluster, kubelet, stack, f"{unique}-p", ISTIO, endpoint, **notes)
    first = chat.pods()
    cold = ColdStart(chat, kubelet)
    chat.serve_pods(first, rate_per_s=5.0)
    leader = await cluster.start()
    follower = await cluster.start("ctl-b", leader=False) if case.kill else None
    await cold.run_until(
        lambda: chat.stable() == first and len(_pool(chat)) == case.pool,
        limit_s=int(COLD_START_S) + 30,
        what="the serving pods promoted and the pool filled",
    )
    pool = _pool(chat)
    await chat.tick(5)
    assert set(chat.warming_weights()) == {0}, "traffic before the step"
    assert not any(chat.warm(p) for p in pool), "a pool pod in the endpoints before the step"

    chat.serve_pods(first, rate_per_s=17.5)
    await chat.wait_for_rate(first, 35.0)
    await cold.run_until(
        lambda: chat.replicas > 2 + case.pool,
        limit_s=60,
        what="the scale-up's write",
    )
    stepped_s = chat.clock.now()
    running = leader
    if follower is not None:
        await _take_over(chat, leader, follower)
        running = follower

    first_traffic = lambda: chat.warming_weights()[-1] > 0  # noqa: E731
    capacity = lambda: len(chat.stable()) >= 3  # noqa: E731
    traffic_s = capacity_s = float("nan")
    limit_s = int(COLD_START_S) + RAMP_S + TAKEOVER_LIMIT_S
    try:
        await cold.run_until(first_traffic, limit_s=limit_s, what="the first new traffic")
        traffic_s = chat.clock.now() - stepped_s
        cohort = (chat.ramp() or {}).get("cohort") or []
        warm_new = [p for p in chat.pods() if p not in first + pool and chat.warm(p)]
        await cold.run_until(capacity, limit_s=limit_s, what="a third serving pod")
        capacity_s = chat.clock.now() - stepped_s
    finally:
        hours = running.controller.telemetry.registry.get_sample_value(
            "autoscaler_standby_gpu_core_hours_total",
            {"namespace": chat.namespace, "service": "chat", "project": chat.namespace},
        )
        figures.record(
            "standby",
            case=case.name,
            pool=case.pool,
            seconds_to_first_traffic=traffic_s,
            seconds_to_capacity=capacity_s,
            standby_gpu_core_hours=hours or 0.0,
        )

    assert not running.task.done(), "the controller ended"
    await running.controller.cluster.events.wait_idle()
    reasons = [e["reason"] for e in chat.events()]
    assert not set(BAD_EVENTS) & set(reasons), reasons
    if case.pool:
        assert cohort, "no cohort at the first traffic"
        assert set(cohort) <= set(pool), "the pool's pods were not ramped first"
        assert warm_new == [], "a new pod was warm before the pool's"
        takeover_s = TAKEOVER_LIMIT_S if case.kill else 0
        assert traffic_s <= FIRST_TRAFFIC_S + takeover_s
        assert capacity_s <= RAMP_S + takeover_s
        assert set(chat.stable()) - set(first) <= set(pool), "a cold pod served first"
    else:
        assert traffic_s >= COLD_START_S
        assert capacity_s >= COLD_START_S

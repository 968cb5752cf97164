"""A leader killed at any point of a traffic ramp or of a drain: its successor finishes it.

Each case runs the ramp's e2e harness (two new pods ramping next to two serving ones, or one
serving pod drained for a scale-down) with a leader and a follower, kills the leader hard at one
point (no Lease release, nothing more written), lets the follower take over once the Lease has
expired, and requires the ramp to end promoted (or the drain to complete) with the route's
weights summing to 100 after every second, no step taken back, no hold, no rollback and no pod
removed but the drain's victim. Table `ramp_kills`: the case, whether it resumed, and the
controller seconds from the takeover to the promotion (or the drain's end).

Every kill point with every router at a 1 s step interval (the interval at which a successor
used to hold the ramp); a few points at 5 and 30 s.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest
from e2e.ramped import (
    GATEWAY_API,
    ISTIO,
    SMI,
    STABLE,
    WARMING,
    Ramped,
    Router,
    WarmupEndpoint,
    endpoint,
)
from e2e.support import Controllers, Running, wait_for
from kube.kubelet import FakeCluster
from prom.fixtures import Stack

from .figures import Figures

__all__ = ["endpoint"]

ROUTERS = (ISTIO, GATEWAY_API, SMI)
SHARES = {"step-10": 5, "step-30": 15, "step-50": 25, "step-100": 50}
"""The warming weight of each step for two new pods next to two serving ones."""
POINTS = ("warming", *SHARES, "promoting", "unweighted")
TAKEOVER_LIMIT_S = 30
"""Controller seconds for the follower to lead: a lease duration (15 s) and a few retries."""
RESUME_LIMIT_S = 90
"""Controller seconds for the successor to promote or drain; the 30 s interval needs most."""
BAD_EVENTS = ("RampHeld", "RampRolledBack", "RampAbandoned", "WarmupTimedOut")


@dataclasses.dataclass(frozen=True)
class Case:
    router: Router
    interval_s: int
    point: str

    @property
    def name(self) -> str:
        return f"{self.router.name}/{self.interval_s}s/{self.point}"


CASES = [Case(router, 1, point) for router in ROUTERS for point in POINTS] + [
    Case(ISTIO, 5, "step-30"),
    Case(GATEWAY_API, 5, "promoting"),
    Case(SMI, 30, "step-100"),
]


def _reached(chat: Ramped, new: list[str], point: str) -> Callable[[], bool]:
    """Whether the ramp is at `point` as the cluster shows it."""

    def reached() -> bool:
        ramp = chat.ramp() or {}
        if point == "warming":
            return bool(ramp.get("deadlines")) and not any(chat.warm(p) for p in new)
        if point in SHARES:
            return (chat.weights() or {}).get("warming") == SHARES[point]
        stage = "labelled" if point == "promoting" else "unweighted"
        return ramp.get("phase") == "promoting" and ramp.get("stage") == stage

    return reached


async def _take_over(chat: Ramped, killed: Running, follower: Running) -> float:
    """Kill the leader hard and tick until the follower leads; the controller time then.

    The follower's first tick starts when its elector wins, not when the clock wakes it: the
    clock stays put until that tick is over, so that every later tick is one the clock wakes
    and `Ramped.tick` waits for, as for a controller `Controllers.start` made the leader."""
    await killed.kill()
    await chat.run_until(
        lambda: follower.controller.leading, limit_s=TAKEOVER_LIMIT_S, what="the takeover"
    )
    await wait_for(lambda: follower.controller.ticks > 0, what="the successor's first tick")
    return chat.clock.now()


async def _events(chat: Ramped, running: Running) -> list[str]:
    await running.controller.cluster.events.wait_idle()
    return [e["reason"] for e in chat.events()]


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
async def test_a_ramp_resumes_after_its_leader_is_killed(
    kubelet: FakeCluster,
    stack: Stack,
    cluster: Controllers,
    unique: str,
    endpoint: WarmupEndpoint,
    figures: Figures,
    case: Case,
) -> None:
    """A leader killed at this point of the ramp leaves it to the follower, which promotes the
    new pods with the weights summing to 100, no step taken back, no hold and no pod lost."""
    kubelet.add_node("gpu-1", gpus=8)
    interval = {"traffic-step-interval": f"{case.interval_s}s"}
    chat = await Ramped.make(
        cluster, kubelet, stack, f"{unique}-k", case.router, endpoint, **interval
    )
    first = await chat.promote_first_pods()
    leader = cluster.running[-1]
    follower = await cluster.start("ctl-b", leader=False)

    await chat.run_until(lambda: chat.replicas == 4, limit_s=5, what="the scale-up")
    await kubelet.settle()
    new = sorted(set(chat.pods()) - set(first))
    chat.serve_pods(new, rate_per_s=10.0)
    await chat.wait_for_rate(new, 20.0)
    await chat.run_until(_reached(chat, new, case.point), limit_s=120, what=case.point)

    taken_over_s = await _take_over(chat, leader, follower)
    promoted = lambda: chat.stable() == sorted(first + new)  # noqa: E731
    try:
        await chat.run_until(promoted, limit_s=RESUME_LIMIT_S, what="the promotion")
    finally:
        figures.record(
            "ramp_kills",
            case=case.name,
            resumed="yes" if promoted() else "no",
            seconds_to_promoted_after_takeover=chat.clock.now() - taken_over_s,
        )

    ramped = [w for w in chat.warming_weights() if w]
    assert ramped == sorted(ramped), f"a step taken back: {chat.seen}"
    # A pod warm after the takeover may join at the next step: 3 % for one pod, then 15 %.
    assert max(ramped) <= SHARES["step-100"], chat.seen
    assert chat.weights() == {"stable": 100, "warming": 0}
    assert chat.ramp() == {"v": 1, "phase": "idle"}
    assert chat.pods() == sorted(first + new), "a pod was removed"
    assert all(chat.warm(p) for p in chat.pods())
    reasons = await _events(chat, follower)
    assert not set(BAD_EVENTS) & set(reasons), reasons
    assert "RampPromoted" in reasons


@pytest.mark.parametrize("router", ROUTERS, ids=[router.name for router in ROUTERS])
async def test_a_drain_resumes_after_its_leader_is_killed(
    kubelet: FakeCluster,
    stack: Stack,
    cluster: Controllers,
    unique: str,
    endpoint: WarmupEndpoint,
    figures: Figures,
    router: Router,
) -> None:
    """A leader killed while its victim drains leaves the drain to the follower, which drops
    the replicas once the victim is idle; no other pod goes and the weights stay whole."""
    kubelet.add_node("gpu-1", gpus=8)
    chat = await Ramped.make(
        cluster,
        kubelet,
        stack,
        f"{unique}-d",
        router,
        endpoint,
        replicas=4,
        **{"scale-down-cooldown": "0s", "traffic-step-interval": "1s"},
    )
    pods = chat.pods()
    # 6 req/s on 4 replicas, target 10 each: fewer wanted; pods[1] is the least loaded.
    chat.serve_pods(pods, rate_per_s=1.5, running=3.0)
    chat.metrics.set_vllm(chat.namespace, pods[1], running=1.0)
    await cluster.start()
    leader = cluster.running[-1]
    follower = await cluster.start("ctl-b", leader=False)
    await chat.run_until(lambda: chat.stable() == pods, limit_s=30, what="the first pods promoted")
    await chat.wait_for_rate(pods, 6.0)
    await chat.wait_for_running(pods[1:2], 1.0)

    victim = pods[1]
    await chat.run_until(
        lambda: STABLE not in chat.labels(victim), limit_s=10, what="the drain starts"
    )
    assert chat.warm(victim) is False
    await chat.tick(2)
    assert chat.replicas == 4  # a request is still in flight
    assert (chat.ramp() or {}).get("drain", {}).get("scaled_s") is None

    taken_over_s = await _take_over(chat, leader, follower)
    chat.metrics.set_vllm(chat.namespace, victim, running=0.0)
    await chat.wait_for_running([victim], 0.0)
    drained = lambda: chat.replicas == 3  # noqa: E731
    try:
        await chat.run_until(drained, limit_s=RESUME_LIMIT_S, what="the drain", settle=False)
    finally:
        figures.record(
            "ramp_kills",
            case=f"{router.name}/drain",
            resumed="yes" if drained() else "no",
            seconds_to_promoted_after_takeover=chat.clock.now() - taken_over_s,
        )
    await kubelet.settle()
    assert chat.pods() == [p for p in pods if p != victim]
    assert chat.weights() == {"stable": 100, "warming": 0}
    assert all(WARMING not in chat.labels(p) for p in chat.pods())
    reasons = await _events(chat, follower)
    assert reasons.count("Drained") == 1
    assert not set(BAD_EVENTS) & set(reasons), reasons

"""Two controller replicas: one leads and writes, the other follows and takes over."""

from __future__ import annotations

from kube.emulator import Kube
from kube.kubelet import FakeCluster
from prom.fixtures import Stack

from .support import (
    LEASE_NAMESPACE,
    LEASES,
    SCALE_UP_COOLDOWN_S,
    Controllers,
    Service,
    SteppedClock,
    advance_until,
    wait_for,
    wait_for_load,
)


async def test_the_follower_takes_over_when_the_leader_stops(
    kube: Kube,
    kubelet: FakeCluster,
    stack: Stack,
    cluster: Controllers,
    clock: SteppedClock,
    unique: str,
) -> None:
    """Only the leader writes; once it stops, the follower takes the Lease and scales."""
    kubelet.add_node("gpu-1", gpus=16)
    chat = await Service.create(kube, kubelet, stack.upper, f"{unique}-b", "chat")
    chat.serve(rate_per_s=12.5)
    await wait_for_load(stack.prometheus, chat, 25.0)

    first = await cluster.start("ctl-a")
    second = await cluster.start("ctl-b", leader=False)
    await advance_until(clock, lambda: chat.replicas == 3, limit_s=10, what="scale-up")
    up_s = chat.state()["lastScaleUp"]
    await clock.advance(10)
    await first.controller.cluster.events.wait_idle()

    assert (first.controller.is_leader(), second.controller.is_leader()) == (True, False)
    assert second.controller.ticks == 0
    assert second.controller.loop is None
    assert second.controller.ready()
    assert [e["reportingInstance"] for e in chat.events()] == ["ctl-a"]
    lease = kube.store.get(LEASES, LEASE_NAMESPACE, "inference-autoscaler")
    assert lease["spec"]["holderIdentity"] == "ctl-a"

    # More load while the scale-up cooldown runs: 75 req/s on 3 replicas wants about 8.
    await chat.sync_pods()
    chat.serve(rate_per_s=25.0)
    await wait_for_load(stack.prometheus, chat, 75.0)
    await first.stop()
    lease = kube.store.get(LEASES, LEASE_NAMESPACE, "inference-autoscaler")
    assert lease["spec"]["holderIdentity"] is None

    await advance_until(
        clock, lambda: second.controller.leading, limit_s=5, what="the follower leading"
    )
    taken_s = clock.now()
    await wait_for(lambda: second.controller.ticks > 0, what="the new leader's first tick")
    status = chat.status()
    assert status is not None
    # The new leader reads the cooldown the old one persisted instead of scaling at once.
    assert (status["kind"], status["reason"]) == ("hold", "cooldown")
    assert chat.replicas == 3

    await advance_until(clock, lambda: chat.replicas > 3, limit_s=60, what="second scale-up")
    await second.controller.cluster.events.wait_idle()
    status = chat.status()
    assert status is not None
    assert (status["kind"], status["desired"]) == ("scale-up", chat.replicas)
    assert taken_s < up_s + SCALE_UP_COOLDOWN_S <= clock.now()
    assert [e["reportingInstance"] for e in chat.events("SuccessfulRescale")] == [
        "ctl-a",
        "ctl-b",
    ]
    lease = kube.store.get(LEASES, LEASE_NAMESPACE, "inference-autoscaler")
    assert lease["spec"]["holderIdentity"] == "ctl-b"
    assert lease["spec"]["leaseTransitions"] == 1


async def test_a_killed_leader_is_replaced_once_its_lease_expires(
    kube: Kube,
    kubelet: FakeCluster,
    stack: Stack,
    cluster: Controllers,
    clock: SteppedClock,
    unique: str,
) -> None:
    """A leader that dies without releasing the Lease is replaced within one lease duration
    and one retry, and the successor goes on scaling."""
    kubelet.add_node("gpu-1", gpus=16)
    chat = await Service.create(kube, kubelet, stack.upper, f"{unique}-k", "chat")
    chat.serve(rate_per_s=12.5)
    await wait_for_load(stack.prometheus, chat, 25.0)

    first = await cluster.start("ctl-a")
    second = await cluster.start("ctl-b", leader=False)
    await advance_until(clock, lambda: chat.replicas == 3, limit_s=10, what="scale-up")
    await first.kill()
    killed_s = clock.now()
    lease = kube.store.get(LEASES, LEASE_NAMESPACE, "inference-autoscaler")
    assert lease["spec"]["holderIdentity"] == "ctl-a"  # nobody released it

    config = second.controller.settings.kubernetes
    bound_s = config.lease_duration_s + 1.2 * config.retry_interval_s
    # Time moves from one sleeper's deadline to the next, so the takeover is timed exactly
    # rather than on a one-second grid.
    while not second.controller.leading:
        assert clock.now() - killed_s <= bound_s, "the follower is not leading in time"
        await clock.advance_to_next(limit_s=1.0)
    assert clock.now() - killed_s <= bound_s
    await wait_for(lambda: second.controller.ticks > 0, what="the new leader's first tick")
    assert not first.controller.is_leader()

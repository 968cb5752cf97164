"""What goes wrong around the controller: bad annotations, a Prometheus outage, expired watches."""

from __future__ import annotations

import pytest
from kube.emulator import Kube
from kube.kubelet import FakeCluster
from prom import server
from prom.fixtures import Stack

from autoscaler.contract.annotations import PREFIX

from .support import (
    SCALE_DOWN_COOLDOWN_S,
    SCALE_UP_COOLDOWN_S,
    Controllers,
    Service,
    SteppedClock,
    advance_until,
    managed,
    wait_for,
    wait_for_load,
)


async def test_an_invalid_annotation_is_reported_and_the_others_keep_scaling(
    kube: Kube,
    kubelet: FakeCluster,
    stack: Stack,
    cluster: Controllers,
    clock: SteppedClock,
    unique: str,
) -> None:
    """A bad value gets counted InvalidConfig Events and no writes, and the neighbour keeps
    scaling."""
    kubelet.add_node("gpu-1", gpus=16)
    namespace = f"{unique}-c"
    bad_notes = managed(**{"max-replicas": "ten"})
    bad = await Service.create(kube, kubelet, stack.upper, namespace, "bad", annotations=bad_notes)
    good = await Service.create(kube, kubelet, stack.upper, namespace, "good")
    bad.serve(rate_per_s=50.0)
    good.serve(rate_per_s=12.5)  # 25 req/s on 2 replicas, target 10 each: 3 wanted
    await wait_for_load(stack.prometheus, good, 25.0)

    running = await cluster.start()
    await advance_until(clock, lambda: good.replicas == 3, limit_s=5, what="scale-up")
    events = running.controller.cluster.events
    await events.wait_idle()

    (invalid,) = bad.events("InvalidConfig")
    assert invalid["type"] == "Warning"
    assert invalid["message"] == (
        f'{PREFIX}max-replicas="ten": must be a whole number from 1 to 10000'
    )
    assert (bad.replicas, bad.status(), bad.state()) == (2, None, None)
    assert [e["reason"] for e in good.events()] == ["SuccessfulRescale"]

    # Fixed wrongly, then back: the same problem again bumps the first Event's count.
    bad.annotate(**{"max-replicas": "0"})
    await advance_until(
        clock, lambda: len(bad.events("InvalidConfig")) == 2, limit_s=5, what="second problem"
    )
    bad.annotate(**{"max-replicas": "ten"})
    await advance_until(
        clock, lambda: bad.events("InvalidConfig")[0]["count"] == 2, limit_s=5, what="repeat"
    )
    assert len(bad.events("InvalidConfig")) == 2
    assert bad.replicas == 2

    # The good service goes on deciding: more load after its cooldown scales it again.
    await good.sync_pods()
    good.serve(rate_per_s=20.0)
    await wait_for_load(stack.prometheus, good, 60.0)
    await advance_until(
        clock, lambda: good.replicas > 3, limit_s=SCALE_UP_COOLDOWN_S, what="second scale-up"
    )
    await events.wait_idle()
    assert len(good.events("SuccessfulRescale")) == 2
    assert bad.status() is None
    # What became of each Event is exported, a repeat's count patched in place.
    registry = running.controller.telemetry.registry
    for outcome in ("created", "patched"):
        exported = registry.get_sample_value(
            "autoscaler_kubernetes_events_total", {"outcome": outcome}
        )
        assert exported == events.counts[outcome] >= 1


async def test_no_scale_down_while_prometheus_is_down_and_recovery_after(
    kube: Kube,
    kubelet: FakeCluster,
    stack: Stack,
    prometheus_binary: str,
    cluster: Controllers,
    clock: SteppedClock,
    unique: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """With Prometheus stopped the service holds (missing-data) past every cooldown; it scales
    down once Prometheus is back."""
    kubelet.add_node("gpu-1", gpus=16)
    chat = await Service.create(kube, kubelet, stack.upper, f"{unique}-d", "chat", replicas=4)
    chat.serve(rate_per_s=9.0)  # 36 req/s on 4 replicas: 4 wanted
    work_dir = tmp_path_factory.mktemp("outage")
    own = server.start(prometheus_binary, work_dir, targets=[stack.upper.target])
    try:
        port = int(own.url.rsplit(":", 1)[1])
        await wait_for_load(own, chat, 36.0)
        running = await cluster.start(prometheus_url=own.url)
        await clock.advance(5)
        status = chat.status()
        assert status is not None
        assert (status["kind"], chat.replicas) in {("steady", 4), ("hold", 4)}

        own.stop()
        chat.serve(rate_per_s=1.0)  # what Prometheus would now show: 2 replicas would do
        await clock.advance(SCALE_DOWN_COOLDOWN_S + 60)
        await running.controller.cluster.events.wait_idle()

        assert chat.replicas == 4
        status = chat.status()
        assert status is not None
        assert (status["kind"], status["reason"]) == ("hold", "missing-data")
        assert status["contributions"]["load"]["ratio"] is None
        (held,) = chat.events("ScaleHeld")
        assert held["message"].startswith("Holding at 4 replicas; reason: missing-data")
        metrics = running.controller.telemetry.exposition().decode()
        assert 'autoscaler_holding_services{reason="missing-data"} 1.0' in metrics

        own = server.start(prometheus_binary, work_dir, targets=[stack.upper.target], port=port)
        await wait_for_load(own, chat, 4.0, timeout_s=30)
        await advance_until(
            clock, lambda: chat.replicas < 4, limit_s=SCALE_DOWN_COOLDOWN_S, what="scale-down"
        )
        status = chat.status()
        assert status is not None
        assert (status["kind"], status["reason"], status["desired"]) == (
            "scale-down",
            "below-target",
            3,
        )
    finally:
        own.stop()


async def test_an_expired_watch_is_relisted_without_losing_a_decision(
    kube: Kube,
    kubelet: FakeCluster,
    stack: Stack,
    cluster: Controllers,
    clock: SteppedClock,
    unique: str,
) -> None:
    """A change made while the watch was expired (410) arrives by relist, and the cooldown of the
    decision made before it still holds."""
    kubelet.add_node("gpu-1", gpus=16)
    chat = await Service.create(kube, kubelet, stack.upper, f"{unique}-e", "chat")
    chat.serve(rate_per_s=12.5)
    await wait_for_load(stack.prometheus, chat, 25.0)
    running = await cluster.start()
    deployments = running.controller.cluster.caches.deployments
    await advance_until(clock, lambda: chat.replicas == 3, limit_s=5, what="scale-up")
    up_s = chat.state()["lastScaleUp"]
    await chat.sync_pods()
    chat.serve(rate_per_s=9.0)  # 27 req/s on 3 replicas: 3 wanted
    await wait_for_load(stack.prometheus, chat, 27.0)
    lists = kube.requests.count("list", "deployments")

    # The owner halves the target while the open watch falls behind compacted history, and the
    # watch after the relist is refused as well: only a relist can bring the change.
    chat.annotate(**{"target-qps-per-replica": "5"})
    kube.compact()
    kube.expire_next_watch("deployments")
    notes_key = PREFIX + "target-qps-per-replica"

    def relisted() -> bool:
        cached = deployments.get(chat.namespace, chat.name)
        return cached is not None and cached["metadata"]["annotations"][notes_key] == "5"

    await wait_for(relisted, what="the relist")
    await wait_for(
        lambda: kube.requests.count("list", "deployments") == lists + 2, what="second relist"
    )
    await clock.advance(5)

    status = chat.status()
    assert status is not None
    assert (status["kind"], status["reason"], chat.replicas) == ("hold", "cooldown", 3)
    assert chat.state()["lastScaleUp"] == up_s
    await advance_until(clock, lambda: chat.replicas > 3, limit_s=60, what="scale-up")
    assert clock.now() >= up_s + SCALE_UP_COOLDOWN_S
    status = chat.status()
    assert status is not None
    assert (status["kind"], status["desired"]) == ("scale-up", chat.replicas)
    assert chat.replicas >= 5  # 27 req/s at 5 each
    await running.controller.cluster.events.wait_idle()
    assert len(chat.events("SuccessfulRescale")) == 2

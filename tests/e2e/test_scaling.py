"""The controller end to end: the real clients against the API emulator and a real Prometheus."""

from __future__ import annotations

import aiohttp
from kube.emulator import Kube
from kube.kubelet import FakeCluster
from prom.fixtures import Stack

from .support import (
    SCALE_DOWN_COOLDOWN_S,
    Controllers,
    Service,
    SteppedClock,
    advance_until,
    wait_for_load,
)


async def get(url: str) -> tuple[int, str]:
    """Status and body of a GET on the controller's own HTTP server."""
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        return response.status, await response.text()


async def test_rising_load_scales_up_then_falling_load_scales_down(
    kube: Kube,
    kubelet: FakeCluster,
    stack: Stack,
    cluster: Controllers,
    clock: SteppedClock,
    unique: str,
) -> None:
    """Load above target scales up, load below it scales down after the cooldown, with Events."""
    kubelet.add_node("gpu-1", gpus=8)
    chat = await Service.create(kube, kubelet, stack.upper, f"{unique}-a", "chat")
    chat.serve(rate_per_s=12.5)  # 25 req/s on 2 replicas, target 10 each: 3 wanted
    await wait_for_load(stack.prometheus, chat, 25.0)
    # The first status write meets a conflict: it is read again and retried.
    kube.fail("patch", "deployments", status=409, namespace=chat.namespace)

    started_s = clock.now()
    running = await cluster.start()
    await advance_until(clock, lambda: chat.replicas == 3, limit_s=10, what="scale-up")
    up_s = chat.state()["lastScaleUp"]
    await running.controller.cluster.events.wait_idle()

    status = chat.status()
    assert status is not None
    assert (status["current"], status["desired"], status["kind"]) == (2, 3, "scale-up")
    assert status["reason"] == "above-target"
    assert status["contributions"]["load"]["ratio"] > 1.1
    assert chat.state() == {"lastScaleChange": up_s, "lastScaleUp": up_s, "replicas": 3}
    assert kube.requests.count("get", "deployments", namespace=chat.namespace) == 1
    (rescaled,) = chat.events("SuccessfulRescale")
    assert rescaled["message"].startswith("New size: 3; reason: above-target")
    assert up_s - started_s <= 2

    port = running.controller.http_port
    assert (await get(f"http://127.0.0.1:{port}/readyz"))[0] == 200
    # One bucket, the single Lease, which this replica leads.
    healthy = (200, "ok\nbuckets: 1/1 inference-autoscaler\n")
    assert await get(f"http://127.0.0.1:{port}/healthz") == healthy
    metrics = (await get(f"http://127.0.0.1:{port}/metrics"))[1]
    decided = f'kind="scale-up",namespace="{chat.namespace}",reason="above-target",service="chat"'
    assert f"autoscaler_decisions_total{{{decided}}} 1.0" in metrics
    assert "autoscaler_leader 1.0" in metrics

    await chat.sync_pods()
    chat.serve(rate_per_s=3.0)  # 9 req/s on 3 replicas: 1 wanted, the floor is 2
    await wait_for_load(stack.prometheus, chat, 9.0)
    await clock.advance(30)
    status = chat.status()
    assert status is not None
    assert (status["kind"], status["reason"]) == ("hold", "cooldown")
    assert chat.replicas == 3

    await advance_until(
        clock, lambda: chat.replicas == 2, limit_s=SCALE_DOWN_COOLDOWN_S, what="scale-down"
    )
    await running.controller.cluster.events.wait_idle()
    assert chat.state()["lastScaleChange"] == up_s + SCALE_DOWN_COOLDOWN_S
    status = chat.status()
    assert status is not None
    assert (status["current"], status["desired"], status["kind"]) == (3, 2, "scale-down")
    assert [e["message"].split(";")[0] for e in chat.events("SuccessfulRescale")] == [
        "New size: 3",
        "New size: 2",
    ]


async def test_dry_run_decides_for_the_included_namespaces_and_writes_nothing(
    kube: Kube,
    kubelet: FakeCluster,
    stack: Stack,
    cluster: Controllers,
    clock: SteppedClock,
    unique: str,
) -> None:
    """`--dry-run` decides (and counts) without any write, the Lease included; excluded and
    unlisted namespaces are not managed."""
    kubelet.add_node("gpu-1", gpus=8)
    services = [
        await Service.create(kube, kubelet, stack.upper, f"{unique}-{suffix}", "chat", replicas=1)
        for suffix in ("in", "out", "other")
    ]
    included, excluded, other = services

    everywhere_but = await cluster.start(
        "ctl-a", dry_run=True, exclude_namespaces=excluded.namespace
    )
    only = await cluster.start("ctl-b", dry_run=True, namespaces=included.namespace)
    await clock.advance(5)

    writes = [c for c in kube.requests.counts if c.verb in ("create", "update", "patch", "delete")]
    assert writes == []
    assert [s.replicas for s in services] == [1, 1, 1]
    for running, managed in ((everywhere_but, [included, other]), (only, [included])):
        assert running.controller.elector is None
        assert running.controller.ready()
        metrics = running.controller.telemetry.exposition().decode()
        assert f"autoscaler_managed_services {len(managed)}.0" in metrics
        # Below min-replicas (2): the decision is to scale up, and it is not carried out.
        for service in managed:
            desired = (
                f'autoscaler_replicas{{namespace="{service.namespace}",service="chat",'
                'state="desired"} 2.0'
            )
            assert desired in metrics

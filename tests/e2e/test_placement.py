"""The placement ladder end to end: GPU nodes, a namespace quota and a model no card can hold."""

from __future__ import annotations

from typing import Any

from kube.emulator import Kube
from kube.kubelet import FakeCluster
from prom.fixtures import Stack

from .support import (
    DEPLOYMENTS,
    Controllers,
    Service,
    SteppedClock,
    advance_until,
    ensure_namespace,
    managed,
    wait_for_load,
)

A800 = {"nvidia.com/gpu.product": "NVIDIA-A800-SXM4-80GB", "nvidia.com/gpu.memory": "81920"}
MIG = "mig-3g.40gb"
TIER_LABEL = "autoscaler.dsec.io/tier"


def replicas_of(kube: Kube, namespace: str, name: str) -> int | None:
    for deployment in kube.store.list_objects(DEPLOYMENTS, namespace):
        if deployment["metadata"]["name"] == name:
            return int(deployment["spec"]["replicas"])
    return None


def status_of(service: Service) -> dict[str, Any]:
    status = service.status()
    assert status is not None
    return status


async def test_overflow_goes_to_mig_slices_and_a_quota_caps_with_its_reason(
    kube: Kube,
    kubelet: FakeCluster,
    stack: Stack,
    cluster: Controllers,
    clock: SteppedClock,
    unique: str,
) -> None:
    """With whole cards full, a small model's new replicas go to a MIG tier Deployment; in a
    namespace whose GPU quota is nearly spent, the decision and its status say why fewer came."""
    kubelet.add_node("gpu-a", gpus=4, labels=A800)
    kubelet.add_node(
        "gpu-b",
        allocatable={"nvidia.com/mig-3g.40gb": "2"},
        labels={**A800, "nvidia.com/mig.strategy": "mixed"},
    )
    small = managed(**{"model-memory": "12Gi"})
    chat = await Service.create(
        kube, kubelet, stack.upper, f"{unique}-a", "chat", annotations=small
    )
    capped_ns = f"{unique}-q"
    ensure_namespace(kube, capped_ns)
    quota = {"metadata": {"name": "gpus"}, "spec": {"hard": {"requests.nvidia.com/gpu": "3"}}}
    kube.store.create("v1/resourcequotas", quota, namespace=capped_ns)
    capped = await Service.create(kube, kubelet, stack.upper, capped_ns, "capped")
    for service in (chat, capped):
        # 35 req/s on 2 replicas, target 10 each: 4 wanted. Not 40, which asks for exactly 4:
        # the rate Prometheus extrapolates from scrapes a busy machine delays can read 40.1.
        service.serve(rate_per_s=17.5)
    await wait_for_load(stack.prometheus, chat, 35.0)
    await wait_for_load(stack.prometheus, capped, 35.0)

    running = await cluster.start()
    await advance_until(
        clock,
        lambda: replicas_of(kube, chat.namespace, f"chat-{MIG}") == 2 and capped.replicas == 3,
        limit_s=10,
        what="placement",
    )
    await kubelet.settle()
    await running.controller.cluster.events.wait_idle()

    assert chat.replicas == 2  # whole cards were full
    status = status_of(chat)
    assert (status["kind"], status["desired"]) == ("scale-up", 4)
    assert status["placement"]["tiers"] == {"whole": 2, MIG: 2}
    (fallback,) = chat.events("PlacementFallback")
    assert fallback["message"].startswith(f"Placed 2 on {MIG} below whole cards")
    mig_pods = [
        pod
        for pod in kube.store.list_objects("v1/pods", chat.namespace)
        if pod["metadata"]["labels"].get(TIER_LABEL) == MIG
    ]
    assert sorted(pod["spec"].get("nodeName") for pod in mig_pods) == ["gpu-b", "gpu-b"]

    status = status_of(capped)
    assert (status["kind"], status["desired"], status["reason"]) == ("scale-up", 3, "quota")
    assert status["detail"] == "the GPU quota admits 3 replicas, 4 wanted"
    assert status["placement"]["tiers"] == {"whole": 3}
    assert status["placement"]["admissible"] == 3
    assert status["placement"]["unplaced"] == 1  # whole cards are full: it waits there
    (rescaled,) = capped.events("SuccessfulRescale")
    assert rescaled["message"].startswith("New size: 3; reason: quota")
    assert kubelet.refused == 0


async def test_a_model_no_card_can_hold_keeps_its_size_and_spares_the_others(
    kube: Kube,
    kubelet: FakeCluster,
    stack: Stack,
    cluster: Controllers,
    clock: SteppedClock,
    unique: str,
) -> None:
    """`model-memory` above every card: a Warning Event, the size kept with the reason
    `no-placement`; a neighbour scales."""
    kubelet.add_node("gpu-a", gpus=8, labels=A800)
    huge = managed(**{"model-memory": "200Gi"})
    namespace = f"{unique}-m"
    big = await Service.create(kube, kubelet, stack.upper, namespace, "big", annotations=huge)
    chat = await Service.create(kube, kubelet, stack.upper, namespace, "chat")
    for service in (big, chat):
        service.serve(rate_per_s=12.5)  # 25 req/s on 2 replicas, target 10 each: 3 wanted
    await wait_for_load(stack.prometheus, big, 25.0)
    await wait_for_load(stack.prometheus, chat, 25.0)

    running = await cluster.start()
    await advance_until(clock, lambda: chat.replicas == 3, limit_s=10, what="neighbour scale-up")
    await clock.advance(5)
    await running.controller.cluster.events.wait_idle()

    assert big.replicas == 2
    (warning,) = big.events("PlacementUnsatisfiable")
    assert warning["type"] == "Warning"
    assert warning["count"] == 1
    assert warning["message"] == (
        "model-memory 204800 MiB exceeds every GPU card in the cluster (largest 81920 MiB); "
        "the service stays at its current size, nothing else is affected"
    )
    assert not big.events("SuccessfulRescale")
    status = status_of(big)
    assert (status["kind"], status["current"], status["desired"]) == ("hold", 2, 2)
    assert status["reason"] == "no-placement"
    assert status["detail"] == "no node can place more than 2 replicas, 3 wanted"
    assert status["placement"]["problem"].startswith("model-memory 204800 MiB exceeds")
    assert [e["reason"] for e in chat.events()] == ["SuccessfulRescale"]


async def test_an_empty_tier_left_behind_is_deleted_once_idle(
    kube: Kube,
    kubelet: FakeCluster,
    stack: Stack,
    cluster: Controllers,
    clock: SteppedClock,
    unique: str,
) -> None:
    """A tier Deployment at 0 replicas without pods goes after the idle grace; the owner stays."""
    kubelet.add_node("gpu-a", gpus=8, labels=A800)
    chat = await Service.create(kube, kubelet, stack.upper, f"{unique}-i", "chat")
    owner = chat.object
    labels = {"app": "chat", TIER_LABEL: "shared"}
    left = {
        "metadata": {
            "name": "chat-shared",
            "labels": labels,
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "name": "chat",
                    "uid": owner["metadata"]["uid"],
                    "controller": True,
                }
            ],
        },
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": owner["spec"]["template"]["spec"]},
        },
    }
    kube.store.create(DEPLOYMENTS, left, namespace=chat.namespace)
    await kubelet.settle()

    await cluster.start()
    await clock.advance(540, step_s=60)
    assert replicas_of(kube, chat.namespace, "chat-shared") == 0
    await advance_until(
        clock,
        lambda: replicas_of(kube, chat.namespace, "chat-shared") is None,
        limit_s=120,
        what="idle tier deleted",
    )
    assert chat.replicas == 2
    assert len(chat.pods()) == 2

"""Pausing a service (`paused`, `paused-replicas`) and the one-owner rule against HPAs and KEDA,
end to end: the real clients against the API emulator and a real Prometheus."""

from __future__ import annotations

from typing import Any

import pytest
from kube.emulator import Kube
from kube.kubelet import FakeCluster
from prom.fixtures import Stack

from autoscaler.contract.annotations import PREFIX

from .support import (
    DEPLOYMENTS,
    SCALE_UP_COOLDOWN_S,
    Controllers,
    Service,
    SteppedClock,
    advance_until,
    managed,
    wait_for_load,
)

HPAS = "autoscaling/v2/horizontalpodautoscalers"
SCALED_OBJECTS = "keda.sh/v1alpha1/scaledobjects"


def scale_by_hand(kube: Kube, service: Service, replicas: int) -> None:
    """`kubectl scale`: the Deployment's replicas set outside the controller."""
    kube.store.patch(
        DEPLOYMENTS,
        service.namespace,
        service.name,
        {"spec": {"replicas": replicas}},
        content_type="application/merge-patch+json",
    )


def remove_annotation(kube: Kube, service: Service, key: str) -> None:
    """`kubectl annotate deploy NAME KEY-`."""
    kube.store.patch(
        DEPLOYMENTS,
        service.namespace,
        service.name,
        {"metadata": {"annotations": {PREFIX + key: None}}},
        content_type="application/merge-patch+json",
    )


def scale_writes(kube: Kube, service: Service) -> int:
    return kube.requests.count("patch", "deployments/scale", namespace=service.namespace)


async def test_a_pause_holds_through_a_manual_scale_and_a_resume_scales_from_there(
    kube: Kube,
    kubelet: FakeCluster,
    stack: Stack,
    cluster: Controllers,
    clock: SteppedClock,
    unique: str,
) -> None:
    """Paused, a service that wants more replicas holds, a manual count stays over many ticks,
    and removing the annotation scales up from that count."""
    kubelet.add_node("gpu-1", gpus=8)
    chat = await Service.create(
        kube, kubelet, stack.upper, unique, "chat", annotations=managed(paused="true")
    )
    chat.serve(rate_per_s=12.5)  # 25 req/s on 2 replicas, target 10 each: 3 wanted
    await wait_for_load(stack.prometheus, chat, 25.0)

    running = await cluster.start()
    await clock.advance(5)
    status = chat.status()
    assert status is not None
    assert (status["kind"], status["reason"], status["current"]) == ("hold", "paused", 2)
    assert chat.replicas == 2

    scale_by_hand(kube, chat, 4)
    await chat.sync_pods()
    chat.serve(rate_per_s=15.0)  # 60 req/s on 4 replicas: 6 wanted
    await wait_for_load(stack.prometheus, chat, 60.0)
    await clock.advance(30)
    assert chat.replicas == 4
    assert scale_writes(kube, chat) == 0
    status = chat.status()
    assert status is not None
    assert (status["reason"], status["current"], status["detail"]) == (
        "paused",
        4,
        "paused at 4 replicas",
    )
    await running.controller.cluster.events.wait_idle()
    (held,) = chat.events("ScaleHeld")
    assert held["message"] == "Holding at 2 replicas; reason: paused: paused at 2 replicas"
    assert chat.events("ReplicasOverridden") == []
    metrics = running.controller.telemetry.exposition().decode()
    assert f'autoscaler_paused{{namespace="{unique}",service="chat"}} 1.0' in metrics

    remove_annotation(kube, chat, "paused")
    await advance_until(clock, lambda: chat.replicas == 6, limit_s=10, what="resumed scale-up")
    status = chat.status()
    assert status is not None
    assert (status["current"], status["desired"], status["kind"]) == (4, 6, "scale-up")
    assert "pausedSince" not in chat.state()
    metrics = running.controller.telemetry.exposition().decode()
    assert f'autoscaler_paused{{namespace="{unique}",service="chat"}} 0.0' in metrics
    await running.controller.cluster.events.wait_idle()
    assert chat.events("ReplicasOverridden") == []


async def test_paused_replicas_scale_once_then_hold(
    kube: Kube,
    kubelet: FakeCluster,
    stack: Stack,
    cluster: Controllers,
    clock: SteppedClock,
    unique: str,
) -> None:
    """`paused-replicas: "5"` (with `paused: "false"`) scales 2 to 5 once, above max-replicas
    (4); a manual 3 afterwards stays, and is no override once the service resumes."""
    kubelet.add_node("gpu-1", gpus=8)
    notes = managed(paused="false", **{"paused-replicas": "5", "max-replicas": "4"})
    chat = await Service.create(kube, kubelet, stack.upper, unique, "chat", annotations=notes)

    running = await cluster.start()
    await advance_until(clock, lambda: chat.replicas == 5, limit_s=5, what="paused-replicas")
    status = chat.status()
    assert status is not None
    assert (status["kind"], status["reason"], status["desired"]) == ("scale-up", "paused", 5)
    assert chat.state()["pausedReplicas"] == 5
    await chat.sync_pods()

    scale_by_hand(kube, chat, 3)
    await clock.advance(20)
    assert chat.replicas == 3
    assert scale_writes(kube, chat) == 1
    status = chat.status()
    assert status is not None
    assert (status["kind"], status["reason"], status["current"]) == ("hold", "paused", 3)
    await running.controller.cluster.events.wait_idle()
    (rescaled,) = chat.events("SuccessfulRescale")
    assert rescaled["message"].startswith("New size: 5; reason: paused")

    await chat.sync_pods()
    chat.serve(rate_per_s=20.0)  # 60 req/s on 3 replicas: 6 wanted, max-replicas 4
    await wait_for_load(stack.prometheus, chat, 60.0)
    remove_annotation(kube, chat, "paused-replicas")
    # The scale to paused-replicas was a scale-up: the next one waits for its cooldown.
    await advance_until(
        clock, lambda: chat.replicas == 4, limit_s=SCALE_UP_COOLDOWN_S, what="resumed scale-up"
    )
    await running.controller.cluster.events.wait_idle()
    assert chat.events("ReplicasOverridden") == []


def hpa(name: str, target: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target},
            "minReplicas": 1,
            "maxReplicas": 3,
        },
    }


def scaled_object(name: str, target: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {"scaleTargetRef": {"name": target}, "triggers": []},
    }


@pytest.mark.parametrize(
    ("resource", "kind", "body"),
    [
        (HPAS, "HorizontalPodAutoscaler", hpa),
        (SCALED_OBJECTS, "ScaledObject", scaled_object),
    ],
)
async def test_a_deployment_another_autoscaler_scales_is_refused(
    kube: Kube,
    kubelet: FakeCluster,
    stack: Stack,
    cluster: Controllers,
    clock: SteppedClock,
    unique: str,
    resource: str,
    kind: str,
    body: Any,
) -> None:
    """A Deployment that an HPA or a ScaledObject also scales gets an InvalidConfig Event
    naming it and no write, while its neighbour scales; it is managed once the other goes."""
    kubelet.add_node("gpu-1", gpus=8)
    contested = await Service.create(kube, kubelet, stack.upper, f"{unique}-a", "chat", replicas=1)
    neighbour = await Service.create(kube, kubelet, stack.upper, f"{unique}-b", "chat", replicas=1)
    kube.store.create(resource, body("chat-scaler", "chat"), namespace=contested.namespace)

    running = await cluster.start()
    await advance_until(clock, lambda: neighbour.replicas == 2, limit_s=5, what="neighbour")
    await clock.advance(5)
    assert contested.replicas == 1
    assert contested.status() is None
    assert kube.requests.count("patch", namespace=contested.namespace) == 0
    await running.controller.cluster.events.wait_idle()
    (invalid,) = contested.events("InvalidConfig")
    assert invalid["type"] == "Warning"
    assert f"{kind} {contested.namespace}/chat-scaler" in invalid["message"]
    assert invalid["message"].startswith(f'{PREFIX}enabled="true": another autoscaler scales')

    kube.store.delete(resource, contested.namespace, "chat-scaler")
    await advance_until(clock, lambda: contested.replicas == 2, limit_s=5, what="released")

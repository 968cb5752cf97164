"""The warm-up gate fails open end to end: gated pods that no ramp answers for become Ready.

A pod that carries the `autoscaler.dsec.io/warm` readiness gate is Ready only once that
condition is True. The controller sets it for the pods of a Deployment in dry-run (its own or
the service's), opted out, no longer annotated or with invalid annotations, once their
containers are ready, with one `GateOpened` Event; an active ramp's pods wait for the ramp.
"""

from __future__ import annotations

from typing import Any

import pytest
from kube.kubelet import FakeCluster
from prom.fixtures import Stack

from autoscaler.contract.annotations import PREFIX

from .ramped import NONE, WARM, Ramped, WarmupEndpoint, endpoint
from .support import DEPLOYMENTS, Controllers, Running

__all__ = ["endpoint"]

OPENED = "GateOpened"


def ready(chat: Ramped, name: str) -> bool:
    """Whether the kubelet reports the pod Ready (containers ready and every gate open)."""
    pod = chat.pod(name) or {}
    return any(
        c["type"] == "Ready" and c["status"] == "True"
        for c in pod.get("status", {}).get("conditions") or []
    )


def warm_condition(chat: Ramped, name: str) -> dict[str, Any] | None:
    pod = chat.pod(name) or {}
    for condition in pod.get("status", {}).get("conditions") or []:
        if condition["type"] == WARM:
            return dict(condition)
    return None


async def gated(
    cluster: Controllers,
    kubelet: FakeCluster,
    stack: Stack,
    namespace: str,
    endpoint: WarmupEndpoint,
    **annotations: str,
) -> Ramped:
    """Two gated pods (the gate alone, `none`) whose containers are ready and gate closed."""
    kubelet.add_node("gpu-1", gpus=8)
    chat = await Ramped.make(
        cluster,
        kubelet,
        stack,
        namespace,
        NONE,
        endpoint,
        **{"warmup-deadline": "5m"},
        **annotations,
    )
    pods = chat.pods()
    assert len(pods) == 2
    assert not any(ready(chat, p) for p in pods)
    return chat


async def assert_opened(chat: Ramped, running: Running, why: str) -> None:
    """Every pod is Ready through a gate opened without a ramp, and one Event says why."""
    pods = chat.pods()
    await chat.run_until(
        lambda: all(ready(chat, p) for p in pods), limit_s=5, what="the gates opened"
    )
    await chat.tick(3)  # nothing more is written or announced
    await running.controller.cluster.events.wait_idle()
    for pod in pods:
        condition = warm_condition(chat, pod)
        assert condition is not None
        assert (condition["status"], condition["reason"]) == ("True", OPENED)
    (event,) = chat.events(OPENED)
    assert event["type"] == "Normal"
    assert event["count"] == 1
    assert why in event["message"]
    assert all(pod in event["message"] for pod in pods)


async def test_a_service_in_dry_run_has_its_gates_opened(
    kubelet: FakeCluster,
    stack: Stack,
    cluster: Controllers,
    unique: str,
    endpoint: WarmupEndpoint,
) -> None:
    """Under an active controller, the gated pods of a service in `mode: dry-run` become Ready
    once their containers are, with one GateOpened Event, and nothing else is written."""
    chat = await gated(cluster, kubelet, stack, f"{unique}-g", endpoint, mode="dry-run")
    running = await cluster.start()
    await assert_opened(chat, running, "the service is in dry-run")
    assert chat.ramp() is None
    assert all(chat.labels(p).get("autoscaler.dsec.io/warming") == "true" for p in chat.pods())


async def test_a_dry_run_controller_opens_the_gates(
    kubelet: FakeCluster,
    stack: Stack,
    cluster: Controllers,
    unique: str,
    endpoint: WarmupEndpoint,
) -> None:
    """A controller-wide dry-run opens the gates of an active service's pods, its one write, with
    one GateOpened Event; no ramp state, label or replica is written."""
    chat = await gated(cluster, kubelet, stack, f"{unique}-g", endpoint)
    running = await cluster.start(dry_run=True)
    await assert_opened(chat, running, "the autoscaler runs in dry-run")
    assert chat.ramp() is None
    assert chat.status() is None
    assert all(chat.labels(p).get("autoscaler.dsec.io/warming") == "true" for p in chat.pods())


def _remove_annotations(chat: Ramped) -> None:
    """The service owner takes every autoscaler annotation off the Deployment."""
    notes = chat.object["metadata"].get("annotations") or {}
    removed = {key: None for key in notes if key.startswith(PREFIX)}
    chat.kube.store.patch(
        DEPLOYMENTS,
        chat.namespace,
        chat.name,
        {"metadata": {"annotations": removed}},
        content_type="application/merge-patch+json",
    )


@pytest.mark.parametrize(
    ("edit", "why"),
    [
        (lambda chat: chat.annotate(enabled="false"), "not managed by the autoscaler"),
        (_remove_annotations, "not managed by the autoscaler"),
        (lambda chat: chat.annotate(**{"max-replicas": "lots"}), "annotations are invalid"),
    ],
    ids=["opted-out", "annotations-removed", "invalid"],
)
async def test_a_service_no_longer_managed_has_its_gates_opened(
    kubelet: FakeCluster,
    stack: Stack,
    cluster: Controllers,
    unique: str,
    endpoint: WarmupEndpoint,
    edit: Any,
    why: str,
) -> None:
    """Gated pods that have not warmed up yet become Ready once their Deployment is opted out,
    stripped of its annotations or given invalid ones, with one GateOpened Event saying why."""
    endpoint.status = 503
    chat = await gated(cluster, kubelet, stack, f"{unique}-g", endpoint)
    running = await cluster.start()
    await chat.tick(3)
    assert not any(ready(chat, p) for p in chat.pods())
    assert chat.events(OPENED) == []

    edit(chat)
    await assert_opened(chat, running, why)


async def test_an_active_ramp_keeps_its_gates_until_the_warm_up_passes(
    kubelet: FakeCluster,
    stack: Stack,
    cluster: Controllers,
    unique: str,
    endpoint: WarmupEndpoint,
) -> None:
    """The gated pods of an active, managed service stay out of service while their warm-up
    fails, however ready their containers, and are let in by the ramp once it passes."""
    endpoint.status = 503
    chat = await gated(cluster, kubelet, stack, f"{unique}-g", endpoint)
    running = await cluster.start()
    await chat.tick(10)
    assert not any(ready(chat, p) for p in chat.pods())
    assert [warm_condition(chat, p) for p in chat.pods()] == [None, None]

    endpoint.status = 200
    pods = chat.pods()
    await chat.run_until(
        lambda: all(ready(chat, p) for p in pods), limit_s=20, what="the warm-up passed"
    )
    await running.controller.cluster.events.wait_idle()
    assert all((warm_condition(chat, p) or {}).get("reason") == "WarmupPassed" for p in pods)
    assert chat.events(OPENED) == []

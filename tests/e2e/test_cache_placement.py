"""Cache-aware placement end to end: the node that ran a model is labelled, a scale-up's new pod
prefers it, and its start-up counts as a cache hit."""

from __future__ import annotations

import copy
from typing import Any

from kube.emulator import Kube
from kube.kubelet import EPOCH, FakeCluster
from prom.fixtures import Stack

from autoscaler.contract import modelid
from autoscaler.core import cache

from .support import (
    DEPLOYMENTS,
    PODS,
    Controllers,
    Service,
    SteppedClock,
    advance_until,
    deployment,
    ensure_namespace,
    managed,
    wait_for_load,
)

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
LABEL = cache.Model(MODEL).label


def node_labels(kube: Kube, name: str) -> dict[str, str]:
    return dict(kube.store.get("v1/nodes", None, name)["metadata"].get("labels") or {})


def nodes_of(kube: Kube, namespace: str) -> list[str]:
    return sorted(
        str(pod["spec"].get("nodeName")) for pod in kube.store.list_objects(PODS, namespace)
    )


def with_snippet(body: dict[str, Any]) -> dict[str, Any]:
    """The service owner's Deployment with the preferred affinity docs/operations.md gives."""
    body = copy.deepcopy(body)
    modelid.with_preference(body["spec"]["template"], modelid.preference(LABEL))
    return body


async def test_a_scale_up_prefers_the_node_that_ran_the_model_and_counts_a_hit(
    kube: Kube,
    kubelet: FakeCluster,
    stack: Stack,
    cluster: Controllers,
    clock: SteppedClock,
    unique: str,
) -> None:
    """The node of the model's first pod gets the cache label; the next pod goes there rather
    than to the first node by name, and the status counts its start-up as a cache hit and the
    first pod's as a miss."""

    async def settle() -> None:
        # The fake kubelet stamps pods with its own clock: keep it on the controller's.
        kubelet.clock.now_s = clock.now() - EPOCH.timestamp()
        await kubelet.settle()

    kubelet.add_node("gpu-b", gpus=2)
    notes = managed(**{"min-replicas": "1", "model": MODEL, "model-size-gib": "16"})
    body = with_snippet(deployment("chat", replicas=1, annotations=notes))
    ensure_namespace(kube, unique)
    kube.store.create(DEPLOYMENTS, body, namespace=unique)
    chat = Service(kube, kubelet, stack.upper, unique, "chat")
    running = await cluster.start(cache={"enabled": True})
    await settle()
    assert nodes_of(kube, unique) == ["gpu-b"]

    await advance_until(
        clock,
        lambda: node_labels(kube, "gpu-b").get(LABEL) == "1",
        limit_s=10,
        what="the warm node's label",
    )
    kubelet.add_node("gpu-a", gpus=2)  # first by name, and cold
    chat.serve(rate_per_s=15.0)  # target 10 per replica: 2 wanted
    await wait_for_load(stack.prometheus, chat, 15.0)
    await advance_until(clock, lambda: chat.replicas == 2, limit_s=20, what="the scale-up")
    await settle()
    assert nodes_of(kube, unique) == ["gpu-b", "gpu-b"]
    assert LABEL not in node_labels(kube, "gpu-a")

    def counted() -> bool:
        status = chat.status() or {}
        return (status.get("startup") or {}).get("hits") == 1

    chat.serve(rate_per_s=7.5)
    await advance_until(clock, counted, limit_s=30, what="the start-up split in the status")
    status = chat.status()
    assert status is not None
    # The first pod warmed a cold node: a miss.
    assert (status["startup"]["hits"], status["startup"]["misses"]) == (1, 1)
    assert status["startup"]["hitSeconds"] is not None
    exposition = running.controller.telemetry.exposition().decode()
    for kind in ("hit", "miss"):
        labels = f'cache="{kind}",namespace="{unique}",service="chat"'
        assert f"autoscaler_pod_starts_total{{{labels}}} 1.0" in exposition

"""Cache-aware placement on Kubernetes: warm nodes learnt from the pods, their labels written and
forgotten, tier Deployments that prefer them, and what a restarted controller relearns."""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kube.emulator import Kube
from kube.kubelet import EPOCH, FakeClock, FakeCluster
from kubernetes_asyncio import client

from autoscaler.adapters.kubernetes import cluster, nodecache, placement
from autoscaler.clock import ManualClock
from autoscaler.contract import annotations as contract
from autoscaler.contract import modelid
from autoscaler.core import cache

from .support import NS, WALL_S, eventually, running, settings
from .test_placement import (
    MIG,
    WEB,
    MakeCluster,
    add_mig_node,
    add_whole_node,
    gpu_deployment,
    settled,
    stored,
)

MODEL = "org/chat-model"
LABEL = cache.Model(MODEL).label
RETENTION = cache.Retention(base_s=3600.0, reference_gib=16.0, min_s=60.0, max_s=7200.0)
"""A 32 GiB model is kept 1800 s."""


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(WALL_S)


@pytest.fixture
async def make_cluster(api: client.ApiClient, clock: ManualClock) -> AsyncIterator[MakeCluster]:
    """Builds running, synced clusters on the emulator; stops them at the end of the test."""
    async with contextlib.AsyncExitStack() as stack:

        async def make(**kwargs: Any) -> cluster.KubeCluster:
            options: dict[str, Any] = {
                "identity": "autoscaler-0",
                "clock": clock,
                "wall_now": clock.now,
                "rng": random.Random(7),
                **kwargs,
            }
            made = cluster.KubeCluster(api, **options)
            await stack.enter_async_context(running(made.run()))
            async with asyncio.timeout(5):
                await made.wait_synced()
            return made

        yield make


def labels_of(kube: Kube, node: str) -> dict[str, str]:
    return dict(kube.store.get("v1/nodes", None, node)["metadata"].get("labels") or {})


def in_step(kube_clock: FakeClock, clock: ManualClock) -> None:
    """The fake kubelet stamps pods with its own clock: keep it on the adapter's."""
    kube_clock.now_s = clock.now() - EPOCH.timestamp()


async def test_warm_nodes_are_labelled_preferred_by_new_tiers_and_forgotten_after_retention(
    kube: Kube,
    kubelet: FakeCluster,
    kube_clock: FakeClock,
    apps: client.AppsV1Api,
    clock: ManualClock,
    make_cluster: MakeCluster,
) -> None:
    """A node running the model is labelled `1`; the MIG tier created on a scale-up prefers the
    label; once its pods go, their starts stay counted, and the node keeps an expiry for the
    size-weighted retention, then loses the label."""
    add_whole_node(kubelet)
    add_mig_node(kubelet)
    notes = settings(**{"model-memory": "12Gi", "model": MODEL, "model-size-gib": "32"})
    in_step(kube_clock, clock)
    await apps.create_namespaced_deployment(NS, gpu_deployment("web", annotations=notes))
    made = await make_cluster(cache_retention=RETENTION)
    await settled(kube, kubelet, made)
    made.workloads()
    await made.tend()
    assert labels_of(kube, "gpu-a")[LABEL] == "1"
    assert LABEL not in labels_of(kube, "gpu-b")

    await made.scale(WEB, 4)
    mig = stored(kube, f"web-{MIG}")
    assert mig is not None
    term = modelid.preference(LABEL)
    preferred = mig["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]
    assert preferred["preferredDuringSchedulingIgnoredDuringExecution"] == [term]
    clock.advance(10)
    in_step(kube_clock, clock)
    await settled(kube, kubelet, made)
    made.workloads()
    await made.tend()
    assert labels_of(kube, "gpu-b")[LABEL] == "1"

    await made.scale(WEB, 2)
    clock.advance(10)
    in_step(kube_clock, clock)
    await settled(kube, kubelet, made)
    (web,) = made.workloads()
    await made.tend()
    assert web.startup_split is not None
    assert (web.startup_split.misses, web.startup_split.started_misses) == (2, 4)
    expiry = math.ceil(clock.now() + 1800)
    assert labels_of(kube, "gpu-b")[LABEL] == str(expiry)
    assert labels_of(kube, "gpu-a")[LABEL] == "1"

    clock.advance(1800)
    made.workloads()
    await made.tend()
    assert LABEL not in labels_of(kube, "gpu-b")
    assert labels_of(kube, "gpu-a")[LABEL] == "1"


async def test_a_restarted_controller_relearns_warm_nodes_from_labels_and_counts_hits(
    kube: Kube,
    kubelet: FakeCluster,
    kube_clock: FakeClock,
    apps: client.AppsV1Api,
    clock: ManualClock,
    make_cluster: MakeCluster,
) -> None:
    """A node whose label an earlier controller left is warm until the label's second: a pod
    created there afterwards is a cache hit, and the label goes once it expires."""
    expiry = int(WALL_S + 600)
    kubelet.add_node("gpu-a", gpus=1)
    kubelet.add_node("gpu-b", gpus=1, labels={LABEL: str(expiry)})
    made: cluster.KubeCluster = await make_cluster(cache_retention=RETENTION)
    clock.advance(5)
    in_step(kube_clock, clock)
    notes = settings(model=MODEL)
    body = gpu_deployment("web", replicas=1, annotations=notes)
    modelid.with_preference(body["spec"]["template"], modelid.preference(LABEL))
    await apps.create_namespaced_deployment(NS, body)
    await settled(kube, kubelet, made)

    (web,) = made.workloads()
    assert web.startup_split == cache.StartupSplit(
        hit_s=0.0, miss_s=None, hits=1, misses=0, started_hits=1
    )
    await made.tend()
    assert labels_of(kube, "gpu-b")[LABEL] == "1"  # a pod of the model runs there now

    await apps.delete_namespaced_deployment("web", NS)
    await settled(kube, kubelet, made)
    made.workloads()
    await made.tend()
    assert labels_of(kube, "gpu-b")[LABEL] == str(math.ceil(clock.now() + 3600))


async def test_an_idle_tier_gets_the_preference_before_it_grows(
    kube: Kube,
    kubelet: FakeCluster,
    kube_clock: FakeClock,
    apps: client.AppsV1Api,
    clock: ManualClock,
    make_cluster: MakeCluster,
) -> None:
    """A MIG tier made before cache-aware placement was on, now at 0 replicas, prefers the warm
    nodes once it grows again; its template hash still names the owner's template."""
    add_whole_node(kubelet)
    add_mig_node(kubelet)
    notes = settings(**{"model-memory": "12Gi", "model": MODEL})
    in_step(kube_clock, clock)
    await apps.create_namespaced_deployment(NS, gpu_deployment("web", annotations=notes))
    plain = await make_cluster()
    await settled(kube, kubelet, plain)
    plain.workloads()
    await plain.scale(WEB, 4)
    await settled(kube, kubelet, plain)
    plain.workloads()
    await plain.scale(WEB, 2)
    await settled(kube, kubelet, plain)
    before = stored(kube, f"web-{MIG}")
    assert before is not None
    assert before["spec"]["replicas"] == 0
    assert "affinity" not in before["spec"]["template"]["spec"]

    made = await make_cluster(cache_retention=RETENTION)
    await settled(kube, kubelet, made)
    made.workloads()
    await made.scale(WEB, 4)
    after = stored(kube, f"web-{MIG}")
    assert after is not None
    assert after["spec"]["replicas"] == 2
    preferred = after["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]
    assert preferred["preferredDuringSchedulingIgnoredDuringExecution"] == [
        modelid.preference(LABEL)
    ]
    hash_key = placement.TEMPLATE_HASH_KEY
    assert after["metadata"]["annotations"][hash_key] == before["metadata"]["annotations"][hash_key]


async def test_a_label_another_replica_wrote_is_left_alone(
    kube: Kube,
    kubelet: FakeCluster,
    kube_clock: FakeClock,
    apps: client.AppsV1Api,
    clock: ManualClock,
    make_cluster: MakeCluster,
) -> None:
    """A cache label that appears on a node after this instance learnt the map (another
    replica's, under another bucket Lease) is neither removed nor rewritten."""
    add_whole_node(kubelet)
    in_step(kube_clock, clock)
    notes = settings(model=MODEL)
    await apps.create_namespaced_deployment(NS, gpu_deployment("web", annotations=notes))
    made = await make_cluster(cache_retention=RETENTION)
    await settled(kube, kubelet, made)
    made.workloads()
    await made.tend()
    other = cache.Model("org/other-model").label
    kube.store.patch(
        "v1/nodes",
        None,
        "gpu-a",
        {"metadata": {"labels": {other: "1"}}},
        content_type="application/merge-patch+json",
    )
    cached = made.caches.nodes
    await eventually(lambda: other in (cached.get("", "gpu-a") or {})["metadata"]["labels"], cached)
    clock.advance(30)
    made.workloads()
    await made.tend()
    assert labels_of(kube, "gpu-a")[other] == "1"
    assert labels_of(kube, "gpu-a")[LABEL] == "1"


def test_a_pod_let_out_of_the_standby_pool_started_when_its_containers_were_ready() -> None:
    """A pod promoted from the standby pool counts its start-up to ContainersReady, not to the
    Ready its promotion brought, as the serving start-up does."""

    def pod(reason: str) -> dict[str, Any]:
        conditions = [
            {
                "type": "ContainersReady",
                "status": "True",
                "lastTransitionTime": "2026-01-01T00:01:30Z",
            },
            {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T01:00:00Z"},
            {"type": contract.WARM_GATE, "status": "True", "reason": reason},
        ]
        return {"metadata": {"name": "web-1"}, "status": {"conditions": conditions}}

    promoted = nodecache.startup_end_s(pod(cluster.STANDBY_REASON))
    warmed = nodecache.startup_end_s(pod("Warm"))
    assert warmed is not None
    assert promoted is not None
    assert warmed - promoted == 3600 - 90

"""Cache-aware placement on Kubernetes: warm nodes learnt from the pods, their labels written and
forgotten, tier Deployments that prefer them, and what a restarted controller relearns."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import pytest
from kube.emulator import Kube
from kube.kubelet import EPOCH, FakeClock, FakeCluster
from kubernetes_asyncio import client

from autoscaler import ports
from autoscaler.adapters.kubernetes import cluster, nodecache, placement
from autoscaler.clock import ManualClock
from autoscaler.contract import annotations as contract
from autoscaler.contract import modelid
from autoscaler.core import cache

from .support import NS, MakeCluster, eventually, settings
from .test_placement import (
    MIG,
    WEB,
    add_mig_node,
    add_whole_node,
    gpu_deployment,
    settled,
    stored,
)
from .test_placement import clock as clock  # the fixture: the adapter's clock at WALL_S
from .test_placement import make_cluster as make_cluster  # the fixture, on that clock

MODEL = "org/chat-model"
LABEL = cache.Model(MODEL).label
RETENTION = cache.Retention(base_s=3600.0, reference_gib=16.0, min_s=60.0, max_s=7200.0)
"""A 32 GiB model is kept 1800 s."""
NO_NOTES: Mapping[str, str] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Scene:
    """One test's emulated cluster, its fake kubelet and the adapter's clock, kept in step."""

    kube: Kube
    kubelet: FakeCluster
    apps: client.AppsV1Api
    clock: ManualClock
    kube_clock: FakeClock
    make_cluster: MakeCluster

    def advance(self, seconds: float) -> None:
        """Move the adapter's clock, and the kubelet's with it: it stamps pods by its own."""
        self.clock.advance(seconds)
        self.kube_clock.now_s = self.clock.now() - EPOCH.timestamp()

    async def deploy(
        self, notes: Mapping[str, str] = NO_NOTES, *, replicas: int = 2, preferring: bool = False
    ) -> None:
        """The Deployment `web` serving `MODEL`, with `notes` (short keys) on top; `preferring`
        adds the node affinity term its owner copies once (`contract.modelid`)."""
        annotations = settings(**{"model": MODEL, **notes})
        body = gpu_deployment("web", replicas=replicas, annotations=annotations)
        if preferring:
            modelid.with_preference(body["spec"]["template"], modelid.preference(LABEL))
        await self.apps.create_namespaced_deployment(NS, body)

    async def start(self, **options: Any) -> cluster.KubeCluster:
        """A running, synced controller with cache-aware placement on, unless `options` say."""
        return await self.make_cluster(**{"cache_retention": RETENTION, **options})

    async def round(self, made: cluster.KubeCluster) -> list[ports.Workload]:
        """Let the pods settle, read the records (the node cache learns from them) and tend the
        labels, as one tick of the loop does."""
        await settled(self.kube, self.kubelet, made)
        found = made.workloads()
        await made.tend()
        return found

    def labels(self, node: str) -> dict[str, str]:
        return dict(self.kube.store.get("v1/nodes", None, node)["metadata"].get("labels") or {})


@pytest.fixture
def scene(
    kube: Kube,
    kubelet: FakeCluster,
    apps: client.AppsV1Api,
    clock: ManualClock,
    kube_clock: FakeClock,
    make_cluster: MakeCluster,
) -> Scene:
    found = Scene(kube, kubelet, apps, clock, kube_clock, make_cluster)
    found.advance(0)
    return found


async def test_warm_nodes_are_labelled_preferred_by_new_tiers_and_forgotten_after_retention(
    scene: Scene,
) -> None:
    """A node running the model is labelled `1`; the MIG tier created on a scale-up prefers the
    label; once its pods go, their starts stay counted, and the node keeps an expiry for the
    size-weighted retention, then loses the label."""
    add_whole_node(scene.kubelet)
    add_mig_node(scene.kubelet)
    await scene.deploy({"model-memory": "12Gi", "model-size-gib": "32"})
    made = await scene.start()
    await scene.round(made)
    assert scene.labels("gpu-a")[LABEL] == "1"
    assert LABEL not in scene.labels("gpu-b")

    await made.scale(WEB, 4)
    mig = stored(scene.kube, f"web-{MIG}")
    assert mig is not None
    preferred = mig["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]
    assert preferred["preferredDuringSchedulingIgnoredDuringExecution"] == [
        modelid.preference(LABEL)
    ]
    scene.advance(10)
    await scene.round(made)
    assert scene.labels("gpu-b")[LABEL] == "1"

    await made.scale(WEB, 2)
    scene.advance(10)
    (web,) = await scene.round(made)
    assert web.startup_split is not None
    assert (web.startup_split.misses, web.startup_split.started_misses) == (2, 4)
    expiry = math.ceil(scene.clock.now() + 1800)
    assert scene.labels("gpu-b")[LABEL] == str(expiry)
    assert scene.labels("gpu-a")[LABEL] == "1"

    scene.advance(1800)
    made.workloads()
    await made.tend()
    assert LABEL not in scene.labels("gpu-b")
    assert scene.labels("gpu-a")[LABEL] == "1"


async def test_a_restarted_controller_relearns_warm_nodes_from_labels_and_counts_hits(
    scene: Scene,
) -> None:
    """A node whose label an earlier controller left is warm until the label's second: a pod
    created there afterwards is a cache hit, and the label goes once it expires."""
    expiry = int(scene.clock.now() + 600)
    scene.kubelet.add_node("gpu-a", gpus=1)
    scene.kubelet.add_node("gpu-b", gpus=1, labels={LABEL: str(expiry)})
    made = await scene.start()
    scene.advance(5)
    await scene.deploy(preferring=True, replicas=1)
    await settled(scene.kube, scene.kubelet, made)

    (web,) = made.workloads()
    assert web.startup_split == cache.StartupSplit(
        hit_s=0.0, miss_s=None, hits=1, misses=0, started_hits=1
    )
    await made.tend()
    assert scene.labels("gpu-b")[LABEL] == "1"  # a pod of the model runs there now

    await scene.apps.delete_namespaced_deployment("web", NS)
    await scene.round(made)
    assert scene.labels("gpu-b")[LABEL] == str(math.ceil(scene.clock.now() + 3600))


async def test_an_idle_tier_gets_the_preference_before_it_grows(scene: Scene) -> None:
    """A MIG tier made before cache-aware placement was on, now at 0 replicas, prefers the warm
    nodes once it grows again; its template hash still names the owner's template."""
    add_whole_node(scene.kubelet)
    add_mig_node(scene.kubelet)
    await scene.deploy({"model-memory": "12Gi"})
    plain = await scene.start(cache_retention=None)
    for replicas in (4, 2):
        await settled(scene.kube, scene.kubelet, plain)
        plain.workloads()
        await plain.scale(WEB, replicas)
    await settled(scene.kube, scene.kubelet, plain)
    before = stored(scene.kube, f"web-{MIG}")
    assert before is not None
    assert before["spec"]["replicas"] == 0
    assert "affinity" not in before["spec"]["template"]["spec"]

    made = await scene.start()
    await settled(scene.kube, scene.kubelet, made)
    made.workloads()
    await made.scale(WEB, 4)
    after = stored(scene.kube, f"web-{MIG}")
    assert after is not None
    assert after["spec"]["replicas"] == 2
    preferred = after["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]
    assert preferred["preferredDuringSchedulingIgnoredDuringExecution"] == [
        modelid.preference(LABEL)
    ]
    hash_key = placement.TEMPLATE_HASH_KEY
    assert after["metadata"]["annotations"][hash_key] == before["metadata"]["annotations"][hash_key]


async def test_a_label_another_replica_wrote_is_left_alone(scene: Scene) -> None:
    """A cache label that appears on a node after this instance learnt the map (another
    replica's, under another bucket Lease) is neither removed nor rewritten."""
    add_whole_node(scene.kubelet)
    await scene.deploy()
    made = await scene.start()
    await scene.round(made)
    other = cache.Model("org/other-model").label
    scene.kube.store.patch(
        "v1/nodes",
        None,
        "gpu-a",
        {"metadata": {"labels": {other: "1"}}},
        content_type="application/merge-patch+json",
    )
    cached = made.caches.nodes
    await eventually(lambda: other in (cached.get("", "gpu-a") or {})["metadata"]["labels"], cached)
    scene.advance(30)
    made.workloads()
    await made.tend()
    assert scene.labels("gpu-a")[other] == "1"
    assert scene.labels("gpu-a")[LABEL] == "1"


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

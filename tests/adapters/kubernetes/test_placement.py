"""The placement ladder on Kubernetes: capacity from the caches, tier Deployments, quota and
accounting, with the real client against the emulator and its fake scheduler."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from kube.emulator import Kube
from kube.kubelet import FakeCluster
from kubernetes_asyncio import client

from autoscaler import errors
from autoscaler.adapters.kubernetes import cluster, placement
from autoscaler.clock import ManualClock
from autoscaler.contract import annotations as contract
from autoscaler.core import model
from autoscaler.core import placement as ladder

from .support import NS, WALL_S, MakeCluster, events_of, eventually, settings

WEB = model.ServiceId(f"{NS}/web")
DEPLOYMENTS = "apps/v1/deployments"
PODS = "v1/pods"
A800 = "NVIDIA-A800-SXM4-80GB"
CARD_MIB = "81920"
MIG = "mig-3g.40gb"
MIG_RESOURCE = "nvidia.com/mig-3g.40gb"
A800_WEIGHT = 54.0


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(WALL_S)


@pytest.fixture
def make_cluster(make_cluster: MakeCluster, clock: ManualClock) -> MakeCluster:
    """The adapter tests' cluster factory, on this module's clock."""

    def make(**kwargs: Any) -> Awaitable[cluster.KubeCluster]:
        return make_cluster(**{"clock": clock, "wall_now": clock.now, **kwargs})

    return make


def gpu_deployment(
    name: str,
    *,
    replicas: int = 2,
    annotations: dict[str, str] | None = None,
    gpus: int = 1,
    node_selector: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A Deployment whose one container asks for `gpus` whole cards."""
    labels = {"app": name}
    container: dict[str, Any] = {"name": "server", "image": "vllm:1"}
    if gpus:
        container["resources"] = {
            "limits": {"nvidia.com/gpu": str(gpus), "memory": "32Gi"},
            "requests": {"nvidia.com/gpu": str(gpus), "cpu": "4"},
        }
    spec: dict[str, Any] = {"containers": [container]}
    if node_selector:
        spec["nodeSelector"] = node_selector
    return {
        "metadata": {"name": name, "labels": {"team": "ml"}, "annotations": annotations or {}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": spec},
        },
    }


def gfd(**extra: str) -> dict[str, str]:
    """GPU Feature Discovery labels of an A800 80 GB node."""
    return {"nvidia.com/gpu.product": A800, "nvidia.com/gpu.memory": CARD_MIB, **extra}


def add_whole_node(kubelet: FakeCluster, name: str = "gpu-a", *, gpus: int = 2) -> None:
    kubelet.add_node(name, gpus=gpus, labels=gfd())


def add_mig_node(
    kubelet: FakeCluster, name: str = "gpu-b", *, slices: int = 2, **labels: str
) -> None:
    kubelet.add_node(
        name,
        allocatable={MIG_RESOURCE: str(slices)},
        labels=gfd(
            **{"nvidia.com/mig.strategy": "mixed", f"{MIG_RESOURCE}.memory": "40192"}, **labels
        ),
    )


def add_shared_node(kubelet: FakeCluster, name: str = "gpu-c", *, shares: int = 4) -> None:
    kubelet.add_node(
        name,
        allocatable={"nvidia.com/gpu.shared": str(shares)},
        labels=gfd(**{"nvidia.com/gpu.replicas": str(shares)}),
    )


def stored(kube: Kube, name: str) -> dict[str, Any] | None:
    found = [d for d in kube.store.list_objects(DEPLOYMENTS, NS) if d["metadata"]["name"] == name]
    return found[0] if found else None


def replicas_of(kube: Kube, name: str) -> int | None:
    deployment = stored(kube, name)
    return None if deployment is None else int(deployment["spec"]["replicas"])


def pods_on(kube: Kube) -> dict[str, list[str]]:
    """Pod names by the node they are bound to."""
    found: dict[str, list[str]] = {}
    for pod in kube.store.list_objects(PODS, NS):
        found.setdefault(pod["spec"].get("nodeName") or "", []).append(pod["metadata"]["name"])
    return found


async def until(made: cluster.KubeCluster, condition: Callable[[], bool]) -> None:
    """Wait until `condition()` holds, re-checked whenever a cache changes."""
    await eventually(condition, *made.caches.informers)


async def settled(kube: Kube, kubelet: FakeCluster, made: cluster.KubeCluster) -> None:
    """Let the fake cluster turn replicas into Ready pods and the caches see all of it."""
    await kubelet.settle()

    def versions(objects: list[dict[str, Any]]) -> dict[str, str]:
        return {o["metadata"]["name"]: o["metadata"]["resourceVersion"] for o in objects}

    caches = made.caches
    expected = [
        (cache, versions(kube.store.list_objects(kind)))
        for cache, kind in (
            (caches.pods, PODS),
            (caches.replicasets, "apps/v1/replicasets"),
            (caches.deployments, DEPLOYMENTS),
        )
    ]
    await until(made, lambda: all(versions(cache.items()) == known for cache, known in expected))


async def test_overflow_climbs_down_the_ladder_and_scale_down_climbs_back(
    kube: Kube,
    kubelet: FakeCluster,
    api: client.ApiClient,
    apps: client.AppsV1Api,
    make_cluster: MakeCluster,
) -> None:
    """Whole cards fill first, then MIG slices, then shared GPUs; scale-down empties them in
    reverse, and the workload sums replicas, serving pods and core-hours over every tier."""
    add_whole_node(kubelet)
    add_mig_node(kubelet)
    add_shared_node(kubelet)
    notes = settings(**{"model-memory": "12Gi", "project": "search"})
    await apps.create_namespaced_deployment(NS, gpu_deployment("web", annotations=notes))
    tiers: list[dict[str, int]] = []
    fell: list[tuple[str, int]] = []
    made = await make_cluster(
        on_tiers=lambda _, counts: tiers.append(counts),
        on_fallback=lambda _, tier, n: fell.append((tier, n)),
    )
    await settled(kube, kubelet, made)
    (web,) = made.workloads()
    assert (web.replicas, web.serving, web.admissible) == (2, 2, None)
    assert web.core_rate == pytest.approx(2 * A800_WEIGHT)
    assert web.project == "search"

    await made.scale(WEB, 4)
    mig = stored(kube, f"web-{MIG}")
    assert mig is not None
    assert replicas_of(kube, "web") == 2
    assert mig["spec"]["replicas"] == 2
    assert mig["metadata"]["labels"] == {"team": "ml", placement.TIER_LABEL: MIG}
    assert contract.ENABLED_KEY not in mig["metadata"]["annotations"]
    assert mig["metadata"]["annotations"][placement.TEMPLATE_HASH_KEY]
    (owner_ref,) = mig["metadata"]["ownerReferences"]
    assert (owner_ref["kind"], owner_ref["name"], owner_ref["controller"]) == (
        "Deployment",
        "web",
        True,
    )
    assert owner_ref["uid"] == stored(kube, "web")["metadata"]["uid"]  # type: ignore[index]
    assert mig["spec"]["selector"]["matchLabels"] == {"app": "web", placement.TIER_LABEL: MIG}
    template = mig["spec"]["template"]
    assert template["metadata"]["labels"] == {"app": "web", placement.TIER_LABEL: MIG}
    assert template["spec"]["nodeSelector"] == {"nvidia.com/mig.strategy": "mixed"}
    resources = template["spec"]["containers"][0]["resources"]
    assert resources == {
        "limits": {MIG_RESOURCE: "1", "memory": "32Gi"},
        "requests": {MIG_RESOURCE: "1", "cpu": "4"},
    }

    await settled(kube, kubelet, made)
    assert sorted(len(pods) for pods in pods_on(kube).values()) == [2, 2]
    assert "" not in pods_on(kube)
    (web,) = made.workloads()
    assert [w.id for w in made.workloads()] == [WEB]  # the sibling is not a service
    assert (web.replicas, web.serving) == (4, 4)
    assert len(made.workload(WEB).pods) == 4  # type: ignore[union-attr]

    await made.scale(WEB, 6)
    shared = stored(kube, "web-shared")
    assert shared is not None
    assert shared["spec"]["replicas"] == 2
    limits = shared["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {"nvidia.com/gpu.shared": "1", "memory": "32Gi"}
    assert "nodeSelector" not in shared["spec"]["template"]["spec"]
    await settled(kube, kubelet, made)
    (web,) = made.workloads()
    assert (web.replicas, web.serving) == (6, 6)
    assert web.core_rate == pytest.approx(A800_WEIGHT * (2 + 2 * 3 / 7 + 2 / 4))
    await made.events.wait_idle()
    assert fell == [(MIG, 2), ("shared", 2)]
    assert tiers[-1] == {"whole": 2, MIG: 2, "shared": 2}
    fallbacks = [e["message"] for e in await events_of(api, "web", placement.FALLBACK)]
    placed = sorted(m.split(" below")[0] for m in fallbacks)
    assert placed == sorted([f"Placed 2 on {MIG}", "Placed 2 on shared"])

    await made.scale(WEB, 4)
    assert (replicas_of(kube, "web"), replicas_of(kube, f"web-{MIG}")) == (2, 2)
    assert replicas_of(kube, "web-shared") == 0
    await settled(kube, kubelet, made)
    made.workloads()
    await made.scale(WEB, 2)
    assert (replicas_of(kube, "web"), replicas_of(kube, f"web-{MIG}")) == (2, 0)
    await settled(kube, kubelet, made)
    made.workloads()
    await made.scale(WEB, 1)
    assert replicas_of(kube, "web") == 1
    await settled(kube, kubelet, made)
    (web,) = made.workloads()
    assert (web.replicas, web.serving) == (1, 1)
    for kind in ("deployments", "pods", "nodes", "resourcequotas"):
        assert kube.requests.count("list", kind) == 1


async def test_an_owner_template_change_reaches_its_tiers(
    kube: Kube, kubelet: FakeCluster, apps: client.AppsV1Api, make_cluster: MakeCluster
) -> None:
    """A new owner template is written into each sibling, rewritten for its tier."""
    kubelet.add_node("gpu-a", gpus=1, labels=gfd(pool="inference"))
    add_mig_node(kubelet, pool="inference")
    selector = {"nvidia.com/gpu.product": A800, "pool": "inference"}
    body = gpu_deployment(
        "web", replicas=1, annotations=settings(**{"model-memory": "12Gi"}), node_selector=selector
    )
    await apps.create_namespaced_deployment(NS, body)
    made = await make_cluster()
    await settled(kube, kubelet, made)
    made.workloads()
    await made.scale(WEB, 2)
    await settled(kube, kubelet, made)
    assert sorted(pods_on(kube)) == ["gpu-a", "gpu-b"]
    mig = stored(kube, f"web-{MIG}")
    assert mig is not None
    # The product selector describes whole cards: the MIG tier keeps only the rest.
    assert mig["spec"]["template"]["spec"]["nodeSelector"] == {
        "pool": "inference",
        "nvidia.com/mig.strategy": "mixed",
    }
    old_hash = mig["metadata"]["annotations"][placement.TEMPLATE_HASH_KEY]

    patch = {
        "spec": {"template": {"spec": {"containers": [{"name": "server", "image": "vllm:2"}]}}}
    }
    await apps.patch_namespaced_deployment("web", NS, patch)
    await until(
        made,
        lambda: (
            (made.caches.deployment(NS, "web") or {})["spec"]["template"]["spec"]["containers"][0][
                "image"
            ]
            == "vllm:2"
        ),
    )
    made.workloads()
    await made.tend()

    def synced() -> bool:
        current = made.caches.deployment(NS, f"web-{MIG}") or {}
        return current["spec"]["template"]["spec"]["containers"][0]["image"] == "vllm:2"

    await until(made, synced)
    mig = stored(kube, f"web-{MIG}")
    assert mig is not None
    assert mig["metadata"]["annotations"][placement.TEMPLATE_HASH_KEY] != old_hash
    # Rewritten from the owner's whole template, not the cache's trimmed copy of it.
    assert mig["spec"]["template"]["spec"]["nodeSelector"] == {
        "pool": "inference",
        "nvidia.com/mig.strategy": "mixed",
    }
    assert "nodeSelector" not in made.caches.deployment(NS, "web")["spec"]["template"]["spec"]
    container = mig["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"] == {MIG_RESOURCE: "1", "memory": "32Gi"}
    assert mig["spec"]["template"]["metadata"]["labels"][placement.TIER_LABEL] == MIG
    assert kube.requests.count("patch", "deployments") == 2  # the owner's change, the sync

    made.workloads()  # in sync now: nothing more to write
    await made.tend()
    assert kube.requests.count("patch", "deployments") == 2


async def test_faulty_and_cordoned_nodes_are_not_used(
    kube: Kube, kubelet: FakeCluster, apps: client.AppsV1Api, make_cluster: MakeCluster
) -> None:
    """A node labelled faulty or cordoned offers nothing; replicas go to the next tier."""
    add_whole_node(kubelet, gpus=1)
    add_mig_node(kubelet, "gpu-b", **{placement.HEALTH_LABEL: placement.FAULTY})
    add_mig_node(kubelet, "gpu-bb")
    kube.store.patch("v1/nodes", None, "gpu-bb", {"spec": {"unschedulable": True}})
    add_shared_node(kubelet)
    body = gpu_deployment("web", replicas=1, annotations=settings(**{"model-memory": "12Gi"}))
    await apps.create_namespaced_deployment(NS, body)
    made = await make_cluster()
    await settled(kube, kubelet, made)
    made.workloads()

    snapshot = made.placement.capacity.snapshot()
    assert {node.name: node.usable for node in snapshot.nodes} == {
        "gpu-a": True,
        "gpu-b": False,
        "gpu-bb": False,
        "gpu-c": True,
    }
    await made.scale(WEB, 3)

    assert stored(kube, f"web-{MIG}") is None
    assert replicas_of(kube, "web-shared") == 2
    await settled(kube, kubelet, made)
    assert sorted(pods_on(kube)) == ["gpu-a", "gpu-c"]


async def test_capacity_counts_bound_live_pods_and_never_a_time_shared_gpu_as_whole(
    kube: Kube, kubelet: FakeCluster, make_cluster: MakeCluster
) -> None:
    """Free = allocatable minus requests of bound, non-terminated pods; shared cards are not
    whole cards, whatever the resource is called."""
    add_whole_node(kubelet, gpus=4)
    kubelet.add_node(
        "gpu-t",
        gpus=8,
        labels={"nvidia.com/gpu.product": "Tesla-T4-SHARED", "nvidia.com/gpu.memory": "15360"},
    )
    kubelet.add_node("cpu-1")

    def pod(name: str, node: str | None, phase: str, gpus: int) -> None:
        body: dict[str, Any] = {
            "metadata": {"name": name, "namespace": NS},
            "spec": {
                "containers": [
                    {"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}
                ]
            },
        }
        if node:
            body["spec"]["nodeName"] = node
        kube.store.create(PODS, body)
        kube.store.patch(PODS, NS, name, {"status": {"phase": phase}}, subresource="status")

    pod("running", "gpu-a", "Running", 1)
    pod("done", "gpu-a", "Succeeded", 2)
    pod("pending", None, "Pending", 1)
    made = await make_cluster()
    await until(made, lambda: len(made.caches.pods) == 3)

    nodes = {node.name: node for node in made.placement.capacity.snapshot().nodes}
    assert sorted(nodes) == ["gpu-a", "gpu-t"]
    assert (nodes["gpu-a"].whole_free, nodes["gpu-a"].card_memory_mib) == (3, 81920)
    assert nodes["gpu-a"].product == A800
    assert nodes["gpu-t"].whole_free == 0

    kube.store.patch(PODS, NS, "running", {"status": {"phase": "Failed"}}, subresource="status")
    await until(made, lambda: made.placement.capacity.node("gpu-a").whole_free == 4)  # type: ignore[union-attr]
    kube.store.delete(PODS, NS, "done")
    await until(made, lambda: len(made.caches.pods) == 2)
    assert made.placement.capacity.node("gpu-a").whole_free == 4  # type: ignore[union-attr]


async def test_a_quota_caps_the_plan_and_says_why(
    kube: Kube,
    kubelet: FakeCluster,
    api: client.ApiClient,
    apps: client.AppsV1Api,
    make_cluster: MakeCluster,
) -> None:
    """The namespace's GPU quota bounds what is asked for; the status and an Event say so."""
    add_whole_node(kubelet, gpus=8)
    quota = {"metadata": {"name": "gpus"}, "spec": {"hard": {"requests.nvidia.com/gpu": "3"}}}
    await client.CoreV1Api(api).create_namespaced_resource_quota(NS, quota)
    await apps.create_namespaced_deployment(NS, gpu_deployment("web", annotations=settings()))
    made = await make_cluster()
    await settled(kube, kubelet, made)
    await until(made, lambda: bool(made.caches.quotas_in(NS)[0].get("status")))

    (web,) = made.workloads()
    assert web.admissible == 3
    await made.scale(WEB, 5)

    assert replicas_of(kube, "web") == 3
    decision = model.Decision(
        current=2,
        desired=5,
        kind=model.Kind.SCALE_UP,
        reason=model.Reason.ABOVE_TARGET,
        detail="load ratio 2.50 asks for 5",
        contributions={},
    )
    await made.publish(WEB, decision, model.PolicyState(last_scale_up_s=WALL_S))
    await made.events.wait_idle()
    notes = stored(kube, "web")["metadata"]["annotations"]  # type: ignore[index]
    status = json.loads(notes[contract.STATUS_KEY])
    assert status["placement"]["tiers"] == {"whole": 3}
    assert status["placement"]["admissible"] == 3
    assert (
        "quota refuses 2 more (requests.nvidia.com/gpu exhausted)" in status["placement"]["reason"]
    )
    (limited,) = await events_of(api, "web", placement.LIMITED)
    assert limited["type"] == "Warning"
    assert limited["message"].startswith("Asked for 5 replicas, placed 3; reason: ")
    assert not await events_of(api, "web", cluster.RESCALED)
    await settled(kube, kubelet, made)
    assert kubelet.refused == 0


async def test_the_tightest_quota_counts_and_one_not_yet_counted_admits_nothing_more(
    kube: Kube, apps: client.AppsV1Api, make_cluster: MakeCluster
) -> None:
    """Of several quotas the one with least room caps; `used` not reported yet is never zero."""
    add_whole_node(FakeCluster(kube.store), gpus=8)

    def quota(name: str, hard: str, used: str | None) -> None:
        body = {"metadata": {"name": name}, "spec": {"hard": {"requests.nvidia.com/gpu": hard}}}
        kube.store.create("v1/resourcequotas", body, namespace=NS)
        if used is not None:
            status = {"hard": body["spec"]["hard"], "used": {"requests.nvidia.com/gpu": used}}
            kube.store.patch(
                "v1/resourcequotas", NS, name, {"status": status}, subresource="status"
            )

    quota("team", "10", "2")
    quota("gpus", "4", "2")
    await apps.create_namespaced_deployment(NS, gpu_deployment("web", annotations=settings()))
    made = await make_cluster()
    await until(made, lambda: len(made.caches.quotas) == 2 and bool(made.caches.deployments))

    (web,) = made.workloads()
    assert web.admissible == 4
    assert made.placement.capacity.quota(NS) == ladder.Quota(
        hard={"requests.nvidia.com/gpu": 4}, used={"requests.nvidia.com/gpu": 2}
    )

    quota("fresh", "100", None)
    await until(made, lambda: len(made.caches.quotas) == 3)
    (web,) = made.workloads()
    assert web.admissible == 2


async def test_a_model_larger_than_every_card_holds_only_that_service(
    kube: Kube,
    kubelet: FakeCluster,
    api: client.ApiClient,
    apps: client.AppsV1Api,
    make_cluster: MakeCluster,
) -> None:
    """`model-memory` above every card: one Warning Event, the size kept, others unaffected."""
    add_whole_node(kubelet, gpus=8)
    huge = settings(**{"model-memory": "200Gi"})
    await apps.create_namespaced_deployment(NS, gpu_deployment("web", annotations=huge))
    await apps.create_namespaced_deployment(NS, gpu_deployment("chat", annotations=settings()))
    made = await make_cluster()
    await settled(kube, kubelet, made)

    found = {w.id: w for w in made.workloads()}
    made.workloads()
    assert found[WEB].admissible == 2
    assert found[WEB].admissible_reason is model.Reason.NO_PLACEMENT
    assert found[model.ServiceId(f"{NS}/chat")].admissible_reason is model.Reason.QUOTA
    with pytest.raises(errors.ActuationError) as raised:
        await made.scale(WEB, 4)
    assert isinstance(raised.value, placement.UnplaceableError)
    assert "exceeds every GPU card in the cluster (largest 81920 MiB)" in str(raised.value)
    await made.scale(model.ServiceId(f"{NS}/chat"), 3)
    await made.events.wait_idle()

    assert (replicas_of(kube, "web"), replicas_of(kube, "chat")) == (2, 3)
    (warning,) = await events_of(api, "web", placement.UNSATISFIABLE)
    assert warning["type"] == "Warning"
    assert warning["message"] == (
        "model-memory 204800 MiB exceeds every GPU card in the cluster (largest 81920 MiB); "
        "the service stays at its current size, nothing else is affected"
    )
    assert not await events_of(api, "chat", placement.UNSATISFIABLE)


async def test_an_empty_sibling_is_deleted_once_idle(
    kube: Kube,
    kubelet: FakeCluster,
    apps: client.AppsV1Api,
    clock: ManualClock,
    make_cluster: MakeCluster,
) -> None:
    """A tier at 0 replicas without pods is deleted after the idle grace, not before."""
    add_whole_node(kubelet, gpus=1)
    add_shared_node(kubelet)
    body = gpu_deployment("web", replicas=1, annotations=settings(**{"model-memory": "12Gi"}))
    await apps.create_namespaced_deployment(NS, body)
    made = await make_cluster(idle_tier_grace_s=120)
    await settled(kube, kubelet, made)
    made.workloads()
    await made.scale(WEB, 2)
    await settled(kube, kubelet, made)
    made.workloads()
    await made.scale(WEB, 1)
    await settled(kube, kubelet, made)
    assert replicas_of(kube, "web-shared") == 0

    made.workloads()
    await made.tend()
    clock.advance(119)
    made.workloads()
    await made.tend()
    assert stored(kube, "web-shared") is not None
    clock.advance(1)
    made.workloads()
    await made.tend()
    assert stored(kube, "web-shared") is None
    assert kube.requests.count("delete", "deployments") == 1
    assert replicas_of(kube, "web") == 1


async def test_a_write_after_the_round_drops_the_chores_it_found(
    kube: Kube, kubelet: FakeCluster, apps: client.AppsV1Api, make_cluster: MakeCluster
) -> None:
    """An idle tier found due for deletion but scaled up before the upkeep runs is left alone."""
    add_whole_node(kubelet, gpus=1)
    add_shared_node(kubelet)
    body = gpu_deployment("web", replicas=1, annotations=settings(**{"model-memory": "12Gi"}))
    await apps.create_namespaced_deployment(NS, body)
    made = await make_cluster(idle_tier_grace_s=0)
    await settled(kube, kubelet, made)
    made.workloads()
    await made.scale(WEB, 2)
    await settled(kube, kubelet, made)
    made.workloads()
    await made.scale(WEB, 1)
    await settled(kube, kubelet, made)
    assert replicas_of(kube, "web-shared") == 0

    made.workloads()  # the empty tier is due for deletion at once
    await made.scale(WEB, 2)  # and takes a replica again before the upkeep runs
    await made.tend()

    assert kube.requests.count("delete", "deployments") == 0
    assert replicas_of(kube, "web-shared") == 1


async def test_a_name_taken_by_another_deployment_is_never_touched(
    kube: Kube,
    kubelet: FakeCluster,
    api: client.ApiClient,
    apps: client.AppsV1Api,
    make_cluster: MakeCluster,
) -> None:
    """A tier whose name belongs to someone else's Deployment is refused with a Warning."""
    add_whole_node(kubelet, gpus=1)
    add_shared_node(kubelet)
    await apps.create_namespaced_deployment(NS, gpu_deployment("web-shared", replicas=0, gpus=0))
    body = gpu_deployment("web", replicas=1, annotations=settings(**{"model-memory": "12Gi"}))
    await apps.create_namespaced_deployment(NS, body)
    made = await make_cluster()
    await settled(kube, kubelet, made)
    made.workloads()

    with pytest.raises(cluster.KubeApiError) as raised:
        await made.scale(WEB, 2)
    await made.events.wait_idle()

    assert raised.value.status == 409
    assert replicas_of(kube, "web-shared") == 0
    assert "ownerReferences" not in stored(kube, "web-shared")["metadata"]  # type: ignore[index]
    (taken,) = await events_of(api, "web", placement.NAME_TAKEN)
    assert taken["message"].startswith("Deployment web-shared exists and is not this service's")


async def test_a_dry_run_service_leaves_its_tiers_alone(
    kube: Kube,
    kubelet: FakeCluster,
    apps: client.AppsV1Api,
    clock: ManualClock,
    make_cluster: MakeCluster,
) -> None:
    """In `mode: dry-run` an idle, stale tier is neither rewritten nor deleted; an active
    service's is."""
    add_whole_node(kubelet, gpus=4)

    async def with_stale_tier(name: str, **overrides: str) -> None:
        body = gpu_deployment(name, replicas=1, annotations=settings(**overrides))
        created = await apps.create_namespaced_deployment(NS, body)
        owner = {**body, "metadata": {**body["metadata"], "uid": created.metadata.uid}}
        left = placement.sibling(owner, ladder.SHARED, replicas=0)
        left["metadata"]["annotations"] = {}  # built from no known template
        await apps.create_namespaced_deployment(NS, left)

    await with_stale_tier("web", mode="dry-run")
    await with_stale_tier("zeta")  # observed after `web`: its upkeep comes later
    made = await make_cluster(idle_tier_grace_s=10)
    await settled(kube, kubelet, made)
    made.workloads()
    await made.tend()  # the stale template: synced for zeta, left for web
    await settled(kube, kubelet, made)
    clock.advance(60)
    made.workloads()
    await made.tend()
    assert stored(kube, "zeta-shared") is None
    left = stored(kube, "web-shared")
    assert left is not None
    assert left["metadata"].get("annotations", {}) == {}


async def test_replicas_move_back_up_when_whole_cards_free_up(
    kube: Kube, kubelet: FakeCluster, apps: client.AppsV1Api, make_cluster: MakeCluster
) -> None:
    """Freed whole cards get a new whole replica first; the lower tier's goes once it serves."""
    add_whole_node(kubelet, gpus=2)
    add_shared_node(kubelet)
    await apps.create_namespaced_deployment(NS, gpu_deployment("batch", replicas=1, annotations={}))
    body = gpu_deployment("web", replicas=1, annotations=settings(**{"model-memory": "12Gi"}))
    await apps.create_namespaced_deployment(NS, body)
    made = await make_cluster()
    await settled(kube, kubelet, made)
    made.workloads()
    await made.scale(WEB, 2)
    assert replicas_of(kube, "web-shared") == 1
    await settled(kube, kubelet, made)

    await apps.patch_namespaced_deployment_scale("batch", NS, {"spec": {"replicas": 0}})
    await settled(kube, kubelet, made)
    (web,) = made.workloads()
    assert web.replicas == 2
    await made.tend()
    assert replicas_of(kube, "web") == 2
    assert replicas_of(kube, "web-shared") == 1  # kept until the new whole replica serves
    (web,) = made.workloads()
    assert web.replicas == 2  # the surge is not news to the policy

    await settled(kube, kubelet, made)
    made.workloads()
    await made.tend()
    assert replicas_of(kube, "web-shared") == 0
    assert replicas_of(kube, "web") == 2


def test_a_sibling_drops_whole_card_affinity_and_keeps_the_rest() -> None:
    """Required node affinity loses its whole-card terms; a term left empty goes."""
    owner = gpu_deployment("web")
    owner["metadata"]["uid"] = "u-1"
    owner["metadata"]["namespace"] = NS
    owner["spec"]["template"]["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": "nvidia.com/gpu.product", "operator": "In", "values": [A800]},
                            {"key": "zone", "operator": "In", "values": ["a"]},
                        ]
                    },
                    {
                        "matchExpressions": [
                            {"key": "nvidia.com/gpu.memory", "operator": "Gt", "values": ["40000"]}
                        ]
                    },
                ]
            }
        },
        "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []},
    }

    made = placement.sibling(owner, ladder.SHARED, replicas=3)

    affinity = made["spec"]["template"]["spec"]["affinity"]
    assert affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] == {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
        ]
    }
    assert "podAntiAffinity" in affinity
    assert made["metadata"]["name"] == "web-shared"
    assert placement.is_sibling(made)
    assert not placement.is_sibling({**made, "metadata": {**made["metadata"], "labels": {}}})
    odd = {**made["metadata"]["labels"], placement.TIER_LABEL: "mig-oops"}
    assert not placement.is_sibling({**made, "metadata": {**made["metadata"], "labels": odd}})
    assert made["spec"]["replicas"] == 3
    assert owner["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"] == {
        "nvidia.com/gpu": "1",
        "memory": "32Gi",
    }

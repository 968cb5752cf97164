"""The fake controllers and kubelet, observed through the real kubernetes-asyncio client."""

import math
import re
from typing import Any

from kubernetes_asyncio import client, watch

from .emulator import Kube
from .fixtures import wait_next
from .kubelet import (
    DELETION_COST,
    LEADER_WORKER_SETS,
    LWS_NAME,
    LWS_WORKER_INDEX,
    POD_IP,
    POD_TEMPLATE_HASH,
    READY_AFTER,
    FakeClock,
    FakeCluster,
)

NS = "default"
GATE = "autoscaler.example.com/warm"


def deployment(
    name: str = "llm",
    replicas: int = 2,
    *,
    gpus: int = 0,
    gates: tuple[str, ...] = (),
    annotations: dict[str, str] | None = None,
    **pod_spec: Any,
) -> dict[str, Any]:
    labels = {"app": name}
    container: dict[str, Any] = {"name": "server", "image": "vllm:1"}
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    spec: dict[str, Any] = {"containers": [container], **pod_spec}
    if gates:
        spec["readinessGates"] = [{"conditionType": gate} for gate in gates]
    return {
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels, "annotations": annotations or {}},
                "spec": spec,
            },
        },
    }


async def pods(core: client.CoreV1Api, **selectors: str) -> list[client.V1Pod]:
    return (await core.list_namespaced_pod(NS, **selectors)).items


def conditions(pod: client.V1Pod) -> dict[str, str]:
    return {c.type: c.status for c in pod.status.conditions or []}


async def test_replicas_become_a_replicaset_and_pods(
    kubelet: FakeCluster, apps: client.AppsV1Api, core: client.CoreV1Api
) -> None:
    """A Deployment's replicas become a ReplicaSet and pods built from its template."""
    kubelet.add_node("node-1")
    created = await apps.create_namespaced_deployment(NS, deployment(replicas=3))
    await kubelet.reconcile()

    (replicaset,) = (await apps.list_namespaced_replica_set(NS)).items
    pod_hash = replicaset.metadata.labels[POD_TEMPLATE_HASH]
    assert replicaset.metadata.name == f"llm-{pod_hash}"
    assert replicaset.metadata.owner_references[0].uid == created.metadata.uid
    assert replicaset.spec.replicas == 3

    found = await pods(core, label_selector=f"app=llm,{POD_TEMPLATE_HASH}={pod_hash}")
    assert len(found) == 3
    for pod in found:
        assert re.fullmatch(rf"llm-{pod_hash}-[a-z0-9]{{5}}", pod.metadata.name)
        assert pod.metadata.owner_references[0].uid == replicaset.metadata.uid
        assert pod.metadata.owner_references[0].controller is True
        assert pod.spec.containers[0].image == "vllm:1"
        assert (pod.status.phase, conditions(pod)["Ready"]) == ("Running", "False")

    await kubelet.reconcile()  # with no delay, containers are ready on the next pass
    assert {conditions(pod)["Ready"] for pod in await pods(core)} == {"True"}


async def test_statefulset_replicas_become_ordinal_pods(
    kubelet: FakeCluster, apps: client.AppsV1Api, core: client.CoreV1Api
) -> None:
    """A StatefulSet's replicas become pods NAME-0.. that it owns, the highest removed first."""
    kubelet.add_node("node-1")
    created = await apps.create_namespaced_stateful_set(NS, deployment(replicas=3))
    await kubelet.settle()
    found = await pods(core, label_selector="app=llm")
    assert sorted(p.metadata.name for p in found) == ["llm-0", "llm-1", "llm-2"]
    assert {p.metadata.owner_references[0].uid for p in found} == {created.metadata.uid}
    assert (await apps.read_namespaced_stateful_set("llm", NS)).status.ready_replicas == 3

    await apps.patch_namespaced_stateful_set_scale("llm", NS, {"spec": {"replicas": 1}})
    await kubelet.settle()
    assert [p.metadata.name for p in await pods(core)] == ["llm-0"]


async def test_leaderworkerset_groups_have_a_leader_the_selector_picks(
    kube: Kube, kubelet: FakeCluster, api: client.ApiClient, core: client.CoreV1Api
) -> None:
    """A LeaderWorkerSet's replica is a group of `size` pods; its hpaPodSelector picks leaders."""
    kube.store.register(
        LEADER_WORKER_SETS,
        kind="LeaderWorkerSet",
        subresources=("status", "scale"),
        label_selector_path=".status.hpaPodSelector",
    )
    kubelet.add_node("node-1")
    template = deployment()["spec"]["template"]
    lws = {"metadata": {"name": "big"}, "spec": {"replicas": 2}}
    lws["spec"]["leaderWorkerTemplate"] = {"size": 3, "workerTemplate": template}
    custom = client.CustomObjectsApi(api)
    args = ("leaderworkerset.x-k8s.io", "v1", NS, "leaderworkersets")
    await custom.create_namespaced_custom_object(*args, lws)
    await kubelet.settle()
    assert len(await pods(core, label_selector=f"{LWS_NAME}=big")) == 6
    scale = await custom.get_namespaced_custom_object_scale(*args, "big")
    assert scale["status"] == {
        "replicas": 2,
        "selector": f"{LWS_NAME}=big,{LWS_WORKER_INDEX}=0",
    }
    leaders = await pods(core, label_selector=scale["status"]["selector"])
    assert sorted(p.metadata.name for p in leaders) == ["big-0", "big-1"]


async def test_pods_run_then_become_ready_after_the_simulated_delay(
    kubelet: FakeCluster, kube_clock: FakeClock, apps: client.AppsV1Api, core: client.CoreV1Api
) -> None:
    """Pods go Pending, then Running, then Ready once ready_after_s of simulated time passed."""
    kubelet.add_node("node-1")
    await apps.create_namespaced_deployment(
        NS, deployment(replicas=1, annotations={READY_AFTER: "30"})
    )
    await kubelet.reconcile()
    (pod,) = await pods(core)
    assert pod.status.phase == "Running"
    assert conditions(pod) == {
        "PodScheduled": "True",
        "Initialized": "True",
        "ContainersReady": "False",
        "Ready": "False",
    }

    kube_clock.advance(29)
    await kubelet.reconcile()
    assert conditions((await pods(core))[0])["Ready"] == "False"

    kube_clock.advance(1)
    await kubelet.reconcile()
    (pod,) = await pods(core)
    assert (conditions(pod)["ContainersReady"], conditions(pod)["Ready"]) == ("True", "True")
    assert pod.status.container_statuses[0].ready is True


async def test_started_pods_get_their_own_ip_or_the_one_their_template_names(
    kubelet: FakeCluster, apps: client.AppsV1Api, core: client.CoreV1Api
) -> None:
    """Each started pod has a distinct address, unless its template names one (loopback, for
    code under test that calls the pod)."""
    kubelet.add_node("node-1")
    await apps.create_namespaced_deployment(NS, deployment(replicas=2))
    local = deployment("local", replicas=1, annotations={POD_IP: "127.0.0.1"})
    await apps.create_namespaced_deployment(NS, local)
    await kubelet.reconcile()

    ips = {p.metadata.name.split("-")[0]: p.status.pod_ip for p in await pods(core)}
    addresses = [p.status.pod_ip for p in await pods(core, label_selector="app=llm")]
    assert len(set(addresses)) == 2
    assert all(ip.startswith("10.0.") for ip in addresses)
    assert ips["local"] == "127.0.0.1"


async def test_readiness_gates_hold_ready_until_their_conditions_are_true(
    kubelet: FakeCluster, apps: client.AppsV1Api, core: client.CoreV1Api
) -> None:
    """A pod with readiness gates is Ready only while every gate's condition is True."""
    kubelet.add_node("node-1")
    await apps.create_namespaced_deployment(NS, deployment(replicas=1, gates=(GATE,)))
    await kubelet.settle()
    (pod,) = await pods(core)
    assert conditions(pod)["ContainersReady"] == "True"
    assert conditions(pod)["Ready"] == "False"

    warm = {"status": {"conditions": [{"type": GATE, "status": "True"}]}}
    await core.patch_namespaced_pod_status(pod.metadata.name, NS, warm)
    await kubelet.reconcile()
    (pod,) = await pods(core)
    assert (conditions(pod)[GATE], conditions(pod)["Ready"]) == ("True", "True")

    cold = {"status": {"conditions": [{"type": GATE, "status": "False"}]}}
    await core.patch_namespaced_pod_status(pod.metadata.name, NS, cold)
    await kubelet.reconcile()
    assert conditions((await pods(core))[0])["Ready"] == "False"


async def test_gpu_pods_are_scheduled_where_gpus_are_free(
    kubelet: FakeCluster, apps: client.AppsV1Api, core: client.CoreV1Api
) -> None:
    """Pods requesting GPUs bind to nodes with allocatable GPUs left, else stay Pending."""
    kubelet.add_node("cpu-1")
    kubelet.add_node("gpu-1", gpus=2)
    kubelet.add_node("gpu-2", gpus=1)
    await apps.create_namespaced_deployment(NS, deployment(replicas=4, gpus=1))
    await kubelet.settle()

    found = await pods(core)
    placed = sorted(p.spec.node_name for p in found if p.spec.node_name)
    assert placed == ["gpu-1", "gpu-1", "gpu-2"]
    (pending,) = [p for p in found if not p.spec.node_name]
    assert pending.status.phase == "Pending"
    scheduled = next(c for c in pending.status.conditions if c.type == "PodScheduled")
    assert (scheduled.status, scheduled.reason) == ("False", "Unschedulable")

    kubelet.add_node("gpu-3", gpus=1)
    await kubelet.settle()
    assert all(p.spec.node_name for p in await pods(core))


async def test_scheduler_honours_selectors_affinity_and_taints(
    kubelet: FakeCluster, apps: client.AppsV1Api, core: client.CoreV1Api
) -> None:
    """The scheduler honours nodeSelector, required node affinity and NoSchedule taints."""
    taint = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    kubelet.add_node("a-tainted", gpus=1, labels={"pool": "a100"}, taints=[taint])
    kubelet.add_node("b-h100", gpus=1, labels={"pool": "h100"})
    kubelet.add_node("c-a100", gpus=1, labels={"pool": "a100"})
    term = {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["a100"]}]}
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
        }
    }
    await apps.create_namespaced_deployment(
        NS, deployment("x", replicas=1, gpus=1, affinity=affinity)
    )
    await apps.create_namespaced_deployment(
        NS, deployment("y", replicas=1, gpus=1, nodeSelector={"pool": "h100"})
    )
    toleration = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    await apps.create_namespaced_deployment(
        NS, deployment("z", replicas=1, gpus=1, tolerations=[toleration])
    )
    await kubelet.settle()

    placement = {p.metadata.labels["app"]: p.spec.node_name for p in await pods(core)}
    assert placement == {"x": "c-a100", "y": "b-h100", "z": "a-tainted"}


async def test_scheduler_prefers_the_nodes_of_the_heaviest_preferred_terms(
    kubelet: FakeCluster, apps: client.AppsV1Api, core: client.CoreV1Api
) -> None:
    """Among fitting nodes the scheduler picks the one matching the most preferred weight."""
    kubelet.add_node("a-cold", gpus=1)
    kubelet.add_node("b-warm", gpus=1, labels={"cache": "1"})
    kubelet.add_node("c-other", gpus=1, labels={"zone": "z"})
    preferred = [
        {"weight": 10, "preference": {"matchExpressions": [{"key": "zone", "operator": "Exists"}]}},
        {
            "weight": 50,
            "preference": {"matchExpressions": [{"key": "cache", "operator": "Exists"}]},
        },
    ]
    affinity = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": preferred}}
    await apps.create_namespaced_deployment(
        NS, deployment("x", replicas=2, gpus=1, affinity=affinity)
    )
    await apps.create_namespaced_deployment(NS, deployment("y", replicas=1, gpus=1))
    await kubelet.settle()

    placed = sorted((p.metadata.labels["app"], p.spec.node_name) for p in await pods(core))
    assert placed == [("x", "b-warm"), ("x", "c-other"), ("y", "a-cold")]


async def test_scale_down_deletes_lowest_deletion_cost_then_newest(
    kubelet: FakeCluster, apps: client.AppsV1Api, core: client.CoreV1Api
) -> None:
    """Scaling down deletes the pods with the lowest pod-deletion-cost first, then the newest."""
    kubelet.add_node("node-1")
    await apps.create_namespaced_deployment(NS, deployment(replicas=2))
    await kubelet.settle()
    await apps.patch_namespaced_deployment_scale("llm", NS, {"spec": {"replicas": 4}})
    await kubelet.settle()
    names = [p.metadata.name for p in await pods(core)]
    by_age = sorted(
        names, key=lambda name: kubelet.store.creation_order(kubelet.store.get("v1/pods", NS, name))
    )
    old_1, old_2, new_1, _ = by_age

    cheap = {"metadata": {"annotations": {DELETION_COST: "-10"}}}
    await core.patch_namespaced_pod(old_1, NS, cheap)
    await apps.patch_namespaced_deployment_scale("llm", NS, {"spec": {"replicas": 2}})
    await kubelet.settle()
    assert {p.metadata.name for p in await pods(core)} == {old_2, new_1}


async def test_deployment_status_counts_ready_and_available_replicas(
    kubelet: FakeCluster, kube_clock: FakeClock, apps: client.AppsV1Api
) -> None:
    """Deployment status reports replicas, ready, available (after minReadySeconds) and updated."""
    kubelet.add_node("node-1")
    body = deployment(replicas=2)
    body["spec"]["minReadySeconds"] = 10
    await apps.create_namespaced_deployment(NS, body)
    await kubelet.settle()
    status = (await apps.read_namespaced_deployment("llm", NS)).status
    assert (status.replicas, status.ready_replicas, status.available_replicas) == (2, 2, None)
    assert (status.updated_replicas, status.observed_generation) == (2, 1)

    kube_clock.advance(10)
    await kubelet.reconcile()
    status = (await apps.read_namespaced_deployment("llm", NS)).status
    assert status.available_replicas == 2

    await apps.patch_namespaced_deployment("llm", NS, {"spec": {"replicas": 3}})
    await kubelet.reconcile()
    status = (await apps.read_namespaced_deployment("llm", NS)).status
    assert (status.replicas, status.ready_replicas, status.observed_generation) == (3, 2, 2)


async def test_a_new_template_replaces_the_replicaset(
    kubelet: FakeCluster, apps: client.AppsV1Api, core: client.CoreV1Api
) -> None:
    """A changed pod template gets a new ReplicaSet; the old one is scaled to zero."""
    kubelet.add_node("node-1")
    await apps.create_namespaced_deployment(NS, deployment(replicas=2))
    await kubelet.settle()
    image = {
        "spec": {"template": {"spec": {"containers": [{"name": "server", "image": "vllm:2"}]}}}
    }
    await apps.patch_namespaced_deployment("llm", NS, image)
    await kubelet.settle()

    replicasets = {
        rs.spec.template.spec.containers[0].image: rs.spec.replicas
        for rs in (await apps.list_namespaced_replica_set(NS)).items
    }
    assert replicasets == {"vllm:1": 0, "vllm:2": 2}
    assert {p.spec.containers[0].image for p in await pods(core)} == {"vllm:2"}
    assert (await apps.read_namespaced_deployment("llm", NS)).status.updated_replicas == 2


async def test_deleting_a_deployment_collects_its_replicasets_and_pods(
    kubelet: FakeCluster, apps: client.AppsV1Api, core: client.CoreV1Api
) -> None:
    """Garbage collection removes the ReplicaSets and pods of a deleted Deployment."""
    kubelet.add_node("node-1")
    await apps.create_namespaced_deployment(NS, deployment(replicas=2))
    await kubelet.settle()
    await apps.delete_namespaced_deployment("llm", NS)
    await kubelet.settle()
    assert (await apps.list_namespaced_replica_set(NS)).items == []
    assert await pods(core) == []


async def test_deleting_a_deployment_collects_the_deployments_it_controls(
    kubelet: FakeCluster, apps: client.AppsV1Api, core: client.CoreV1Api
) -> None:
    """A Deployment controlled by a deleted one goes too, and its pods with it."""
    kubelet.add_node("node-1")
    owner = await apps.create_namespaced_deployment(NS, deployment(replicas=1))
    sibling = deployment("llm-shared", replicas=1)
    sibling["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "name": "llm",
            "uid": owner.metadata.uid,
            "controller": True,
        }
    ]
    await apps.create_namespaced_deployment(NS, sibling)
    await kubelet.settle()
    assert len(await pods(core)) == 2

    await apps.delete_namespaced_deployment("llm", NS)
    await kubelet.settle()
    assert (await apps.list_namespaced_deployment(NS)).items == []
    assert await pods(core) == []


async def test_a_resource_quota_refuses_pods_beyond_it_and_reports_its_use(
    kubelet: FakeCluster, apps: client.AppsV1Api, core: client.CoreV1Api
) -> None:
    """Pods a ResourceQuota would not admit are not created; its status says hard and used."""
    kubelet.add_node("gpu-1", gpus=8)
    quota = {
        "metadata": {"name": "gpus"},
        "spec": {"hard": {"requests.nvidia.com/gpu": "3", "pods": "10"}},
    }
    await core.create_namespaced_resource_quota(NS, quota)
    await apps.create_namespaced_deployment(NS, deployment(replicas=2, gpus=2))
    await kubelet.settle()

    assert len(await pods(core)) == 1
    assert kubelet.refused >= 1
    status = (await core.read_namespaced_resource_quota("gpus", NS)).status
    assert status.hard == {"requests.nvidia.com/gpu": "3", "pods": "10"}
    assert status.used == {"requests.nvidia.com/gpu": "2", "pods": "1"}


async def test_a_pod_can_be_made_unready(
    kubelet: FakeCluster, apps: client.AppsV1Api, core: client.CoreV1Api
) -> None:
    """set_ready_after(inf) takes a ready pod out of service on the next reconcile."""
    kubelet.add_node("node-1")
    await apps.create_namespaced_deployment(NS, deployment(replicas=2))
    await kubelet.settle()
    victim, survivor = sorted(p.metadata.name for p in await pods(core))
    kubelet.set_ready_after(NS, victim, math.inf)
    await kubelet.reconcile()
    ready = {p.metadata.name: conditions(p)["Ready"] for p in await pods(core)}
    assert ready == {victim: "False", survivor: "True"}
    assert (await apps.read_namespaced_deployment("llm", NS)).status.ready_replicas == 1


async def test_watches_see_what_the_fakes_do(
    kube: Kube, kubelet: FakeCluster, apps: client.AppsV1Api, core: client.CoreV1Api
) -> None:
    """The fakes' writes reach watches, but not the request log of the code under test."""
    kubelet.add_node("node-1")
    await apps.create_namespaced_deployment(NS, deployment(replicas=1))
    listed = await core.list_namespaced_pod(NS)
    await kubelet.reconcile()
    async with watch.Watch() as w:  # the stream's request goes out at the first read
        events = w.stream(
            core.list_namespaced_pod, NS, resource_version=listed.metadata.resource_version
        )
        seen = [await wait_next(events) for _ in range(4)]
    assert [(e["type"], e["object"].status.phase) for e in seen] == [
        ("ADDED", "Pending"),
        ("MODIFIED", "Pending"),  # bound to the node
        ("MODIFIED", "Pending"),  # PodScheduled
        ("MODIFIED", "Running"),
    ]
    assert kube.requests.rules() == {
        ("create", "apps", "deployments"),
        ("list", "", "pods"),
        ("watch", "", "pods"),
    }

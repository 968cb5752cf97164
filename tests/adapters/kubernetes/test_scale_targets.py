"""`KubeCluster` on scale targets other than Deployments: records by selector, writes through
`/scale`, and the refusals, against the emulator."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import structlog
from kube.emulator import Kube
from kube.kubelet import FakeCluster
from kubernetes_asyncio import client

from autoscaler.adapters.kubernetes import _api, caches, cluster
from autoscaler.contract import annotations as contract
from autoscaler.contract import codec, targets
from autoscaler.core import model

from .support import (
    NS,
    WALL_S,
    MakeCluster,
    StepClock,
    deployment,
    events_of,
    eventually,
    settings,
)

MODEL = model.ServiceId(f"{NS}/model")
STATEFULSETS = "apps/v1/statefulsets"
MERGE = "application/merge-patch+json"


def statefulset(name: str, **kwargs: Any) -> dict[str, Any]:
    body = deployment(name, **kwargs)
    body["spec"]["serviceName"] = name
    return body


def records(made: cluster.KubeCluster) -> dict[model.ServiceId, Any]:
    return {w.id: w for w in made.workloads()}


async def test_a_statefulsets_serving_pods_are_those_its_selector_selects(
    kubelet: FakeCluster, apps: client.AppsV1Api, make_cluster: MakeCluster
) -> None:
    """A StatefulSet's record counts the Ready pods its selector selects; a pod relabelled out
    of the selector leaves it, and the record is built again."""
    kubelet.add_node("gpu-1", gpus=8)
    await apps.create_namespaced_stateful_set(
        NS, statefulset("model", replicas=3, annotations=settings())
    )
    # A Deployment whose pods the StatefulSet's selector does not select.
    await apps.create_namespaced_deployment(NS, deployment("other", replicas=2))
    await kubelet.settle()
    made = await make_cluster()
    await eventually(lambda: MODEL in records(made), made.caches.pods)
    await eventually(lambda: records(made)[MODEL].serving == 3, made.caches.pods)
    first = records(made)[MODEL]
    assert (first.replicas, first.pods) == (3, frozenset({"model-0", "model-1", "model-2"}))
    assert records(made)[MODEL] is first

    core = client.CoreV1Api(apps.api_client)
    await core.patch_namespaced_pod("model-2", NS, {"metadata": {"labels": {"app": "gone"}}})
    await eventually(lambda: records(made)[MODEL].serving == 2, made.caches.pods)
    assert records(made)[MODEL].pods == frozenset({"model-0", "model-1"})


async def test_a_statefulsets_state_write_keeps_its_pods_and_a_pod_change_scans_them(
    kube: Kube,
    kubelet: FakeCluster,
    apps: client.AppsV1Api,
    make_cluster: MakeCluster,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A write of the `state` (and `status`) annotations, a publish's own, reaches a new record
    built around the serving pods of the last build, without scanning the namespace's pods; a
    change to a pod scans them again."""
    kubelet.add_node("gpu-1", gpus=8)
    await apps.create_namespaced_stateful_set(
        NS, statefulset("model", replicas=2, annotations=settings())
    )
    await kubelet.settle()
    made = await make_cluster()
    await eventually(
        lambda: MODEL in records(made) and records(made)[MODEL].serving == 2, made.caches.pods
    )
    first = records(made)[MODEL]

    scanned: list[str] = []
    selected_pods = made.caches.selected_pods

    def counted(namespace: str, selector: targets.Selector) -> Any:
        scanned.append(namespace)
        return selected_pods(namespace, selector)

    monkeypatch.setattr(made.caches, "selected_pods", counted)
    state = model.PolicyState(last_scale_change_s=WALL_S)
    notes = {
        contract.STATE_KEY: codec.state_text(state, replicas=2),
        contract.STATUS_KEY: '{"desired":2}',
    }
    patch = {"metadata": {"annotations": notes}}
    kube.store.patch(STATEFULSETS, NS, "model", patch, content_type=MERGE)
    sts = made.caches.workloads[targets.STATEFULSETS]
    await eventually(lambda: records(made)[MODEL].state == state, sts)
    restated = records(made)[MODEL]
    assert restated is not first
    assert scanned == []
    assert restated.pods is first.pods
    assert dataclasses.replace(restated, state=first.state) == first

    core = client.CoreV1Api(apps.api_client)
    await core.patch_namespaced_pod("model-1", NS, {"metadata": {"labels": {"app": "gone"}}})
    await eventually(lambda: records(made)[MODEL].serving == 1, made.caches.pods)
    assert scanned
    assert records(made)[MODEL].state == state


async def test_a_selectors_pods_are_looked_up_by_label_not_scanned(
    kubelet: FakeCluster,
    apps: client.AppsV1Api,
    make_cluster: MakeCluster,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A selector with an `in` (or `=`) requirement finds its pods through the label index,
    not by a scan of the namespace's pods; one without such a requirement scans them."""
    kubelet.add_node("gpu-1", gpus=8)
    await apps.create_namespaced_stateful_set(
        NS, statefulset("model", replicas=3, annotations=settings())
    )
    await apps.create_namespaced_deployment(NS, deployment("other", replicas=2))
    await kubelet.settle()
    made = await make_cluster()
    await eventually(lambda: len(made.caches.pods_in(NS)) == 5, made.caches.pods)
    everything = made.caches.pods_in(NS)

    def names(selector: str) -> set[str]:
        found = made.caches.selected_pods(NS, targets.parse_selector(selector))
        return {_api.name(pod) for pod in found}

    def scanned(selector: str) -> set[str]:
        wanted = targets.parse_selector(selector)
        return {_api.name(p) for p in everything if wanted.matches(_api.meta(p)["labels"])}

    selectors = ["app=model", "app in (model,other)", "app=model,app notin (other)", "app=none"]
    monkeypatch.setattr(made.caches, "pods_in", lambda _: pytest.fail("scanned"))
    for selector in selectors:
        assert names(selector) == scanned(selector)
    assert names("app=model") == {"model-0", "model-1", "model-2"}
    assert len(names("app in (model,other)")) == 5
    monkeypatch.setattr(made.caches, "pods_in", lambda _: everything)
    assert names("app notin (model)") == scanned("app notin (model)") == names("app=other")
    assert names("app") == scanned("app")


async def test_scale_patches_statefulsets_scale_at_the_version_read(
    kube: Kube, api: client.ApiClient, apps: client.AppsV1Api, make_cluster: MakeCluster
) -> None:
    """`scale` patches statefulsets/scale with the cached resourceVersion; a conflict on moved
    replicas is raised for the loop to decide again."""
    await apps.create_namespaced_stateful_set(NS, statefulset("model", annotations=settings()))
    made = await make_cluster()
    await eventually(lambda: MODEL in records(made), made.caches.workloads[targets.STATEFULSETS])

    await made.scale(MODEL, 4)
    assert (await apps.read_namespaced_stateful_set_scale("model", NS)).spec.replicas == 4
    assert kube.requests.count("patch", "deployments/scale") == 0

    await eventually(
        lambda: records(made)[MODEL].replicas == 4, made.caches.workloads[targets.STATEFULSETS]
    )
    # Another writer sets 7; the cache has not seen it when the controller writes (no await
    # between the two), so the write carries the old version and meets a real conflict.
    patch = {"spec": {"replicas": 7}}
    kube.store.patch(STATEFULSETS, NS, "model", patch, content_type=MERGE)
    with pytest.raises(cluster.KubeApiError) as error:
        await made.scale(MODEL, 5)
    assert error.value.status == 409
    assert "replicas changed to 7" in str(error.value)
    # The test read it once above; the controller re-read it once after the conflict.
    assert kube.requests.count("get", "statefulsets/scale") == 2


async def test_a_deployment_and_a_statefulset_of_one_name_manage_the_deployment(
    api: client.ApiClient, apps: client.AppsV1Api, make_cluster: MakeCluster
) -> None:
    """When both kinds opt in under one name, the Deployment is the service and the
    StatefulSet gets one InvalidConfig Event saying so."""
    await apps.create_namespaced_deployment(NS, deployment("model", annotations=settings()))
    await apps.create_namespaced_stateful_set(NS, statefulset("model", annotations=settings()))
    made = await make_cluster()
    sts = made.caches.workloads[targets.STATEFULSETS]
    with structlog.testing.capture_logs() as logs:
        await eventually(lambda: MODEL in records(made) and bool(sts.items()), sts)
        for _ in range(3):
            made.forget_unless(lambda _: False)  # built again: still said once
            made.workloads()
    await made.events.wait_idle()

    assert made.workload(MODEL) is not None
    events = await events_of(api, "model", "InvalidConfig")
    assert [e["involvedObject"]["kind"] for e in events] == ["StatefulSet"]
    assert "the Deployment default/model opts in too" in events[0]["message"]
    assert [e["kind"] for e in logs if e["event"] == "config.invalid"] == ["StatefulSet"]


async def test_an_hpa_on_the_statefulset_contests_it_and_one_on_a_namesake_does_not(
    api: client.ApiClient, apps: client.AppsV1Api, make_cluster: MakeCluster
) -> None:
    """An HPA whose scaleTargetRef is the StatefulSet refuses it; one naming a Deployment of
    the same name is about another workload."""
    await apps.create_namespaced_stateful_set(NS, statefulset("model", annotations=settings()))
    scaling = client.AutoscalingV2Api(api)

    def hpa(name: str, kind: str) -> dict[str, Any]:
        target = {"apiVersion": "apps/v1", "kind": kind, "name": "model"}
        spec = {"scaleTargetRef": target, "maxReplicas": 4}
        return {"metadata": {"name": name}, "spec": spec}

    await scaling.create_namespaced_horizontal_pod_autoscaler(NS, hpa("on-deploy", "Deployment"))
    made = await make_cluster()
    sts = made.caches.workloads[targets.STATEFULSETS]
    await eventually(lambda: MODEL in records(made), sts)

    await scaling.create_namespaced_horizontal_pod_autoscaler(NS, hpa("on-sts", "StatefulSet"))
    await eventually(lambda: MODEL not in records(made), made.caches.hpas)
    await made.events.wait_idle()
    (event,) = await events_of(api, "model", "InvalidConfig")
    assert "HorizontalPodAutoscaler default/on-sts" in event["message"]
    assert "on-deploy" not in event["message"]


async def test_a_kind_left_out_of_the_setting_is_neither_watched_nor_managed(
    kube: Kube, apps: client.AppsV1Api, make_cluster: MakeCluster
) -> None:
    """With Deployments only, an annotated StatefulSet is not listed and not managed."""
    await apps.create_namespaced_stateful_set(NS, statefulset("model", annotations=settings()))
    await apps.create_namespaced_deployment(NS, deployment("web", annotations=settings()))
    made = await make_cluster(kinds=(targets.DEPLOYMENTS,))
    await eventually(lambda: bool(records(made)), made.caches.deployments)
    assert list(records(made)) == [model.ServiceId(f"{NS}/web")]
    assert kube.requests.count("list", "statefulsets") == 0
    assert made.caches.workloads == {}


async def test_a_leaderworkerset_replica_is_a_group_and_its_leaders_serve(
    kube: Kube, kubelet: FakeCluster, api: client.ApiClient, make_cluster: MakeCluster
) -> None:
    """A LeaderWorkerSet reports its groups as replicas and its leaders as serving pods; its
    workers' GPUs count in its core-hour rate."""
    kube.store.register(
        "leaderworkerset.x-k8s.io/v1/leaderworkersets",
        kind="LeaderWorkerSet",
        subresources=("status", "scale"),
        label_selector_path=".status.hpaPodSelector",
    )
    kubelet.add_node("gpu-1", gpus=8, labels={"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB"})
    template = deployment("model")["spec"]["template"]
    gpu = {"limits": {"nvidia.com/gpu": "1"}}
    template["spec"]["containers"][0]["resources"] = gpu
    body = {
        "metadata": {"name": "model", "annotations": settings()},
        "spec": {"replicas": 2, "leaderWorkerTemplate": {"size": 2, "workerTemplate": template}},
    }
    custom = client.CustomObjectsApi(api)
    args = ("leaderworkerset.x-k8s.io", "v1", NS, "leaderworkersets")
    await custom.create_namespaced_custom_object(*args, body)
    await kubelet.settle()
    made = await make_cluster()
    await eventually(
        lambda: MODEL in records(made) and records(made)[MODEL].serving == 2,
        made.caches.pods,
        made.caches.workloads[targets.LEADER_WORKER_SETS],
    )
    record = records(made)[MODEL]
    assert (record.replicas, record.pods) == (2, frozenset({"model-0", "model-1"}))
    # Four pods of one A100-40GB card each: four times the card's weight.
    one_card = made.placement.capacity.core_rate([kube.store.get("v1/pods", NS, "model-0")])
    assert one_card > 0
    assert record.core_rate == pytest.approx(4 * one_card)
    # A worker is not selected, but a change to it is the record's: it is built again.
    core = client.CoreV1Api(api)
    await core.patch_namespaced_pod("model-1-1", NS, {"metadata": {"labels": {"seen": "yes"}}})
    await eventually(lambda: records(made)[MODEL] is not record, made.caches.pods)


async def test_read_workload_finds_the_kind_that_opts_in_and_skips_absent_crds(
    kube: Kube, api: client.ApiClient, apps: client.AppsV1Api
) -> None:
    """`explain` reads the workload of a name that opts in, of whatever kind, stamped with its
    kind; a kind whose CRD answers 404 is passed over."""
    await apps.create_namespaced_deployment(NS, deployment("model"))
    await apps.create_namespaced_stateful_set(NS, statefulset("model", annotations=settings()))
    kube.fail("get", "rollouts", status=404)
    found = await cluster.read_workload(api, NS, "model")
    assert found is not None
    assert (found["kind"], found["apiVersion"]) == ("StatefulSet", "apps/v1")
    only = await cluster.read_workload(api, NS, "model", kinds=(targets.DEPLOYMENTS,))
    assert only is not None
    assert only["kind"] == "Deployment"
    assert await cluster.read_workload(api, NS, "nothing") is None


async def test_list_workloads_lists_every_kind_and_passes_over_absent_crds(
    kube: Kube, api: client.ApiClient, apps: client.AppsV1Api
) -> None:
    """`autoscaler list` reads the Deployments and the other kinds, each stamped with its
    kind; a kind whose CRD answers 404 lists as none."""
    await apps.create_namespaced_deployment(NS, deployment("web"))
    await apps.create_namespaced_stateful_set(NS, statefulset("model", annotations=settings()))
    kube.fail("list", "leaderworkersets", status=404)
    found = await cluster.list_workloads(api, NS)
    assert sorted((o["kind"], _api.name(o)) for o in found) == [
        ("Deployment", "web"),
        ("StatefulSet", "model"),
    ]
    assert kube.requests.count("list", "rollouts") == 1


async def test_a_crd_installed_after_start_is_picked_up_at_the_next_retry(
    kube: Kube, kubelet: FakeCluster, api: client.ApiClient, make_cluster: MakeCluster
) -> None:
    """Without the LeaderWorkerSet CRD the caches sync and the kind is said absent once; an
    annotated LeaderWorkerSet made once the CRD is installed is managed after the next retry
    of the list, without a restart."""
    clock = StepClock()
    kube.fail("list", "leaderworkersets", status=404)
    with structlog.testing.capture_logs() as logs:
        made = await make_cluster(clock=clock)
        kube.store.register(
            "leaderworkerset.x-k8s.io/v1/leaderworkersets",
            kind="LeaderWorkerSet",
            subresources=("status", "scale"),
            label_selector_path=".status.hpaPodSelector",
        )
        template = deployment("model")["spec"]["template"]
        body = {
            "metadata": {"name": "model", "annotations": settings()},
            "spec": {"leaderWorkerTemplate": {"size": 2, "workerTemplate": template}},
        }
        custom = client.CustomObjectsApi(api)
        args = ("leaderworkerset.x-k8s.io", "v1", NS, "leaderworkersets")
        await custom.create_namespaced_custom_object(*args, body)
        assert MODEL not in records(made)
        clock.advance(caches.CRD_RETRY_S)
        lws = made.caches.workloads[targets.LEADER_WORKER_SETS]
        await eventually(lambda: MODEL in records(made), lws)
    said = [
        e["event"]
        for e in logs
        if str(e.get("kind", "")).startswith("leaderworkersets")
        and e["event"] in ("cache.kind_absent", "cache.kind_present")
    ]
    assert said == ["cache.kind_absent", "cache.kind_present"]

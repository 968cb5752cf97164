"""`KubeRamp`: pods of every tier, the warm condition, labels, victims and the saved ramp state,
through the real client against the emulator."""

from __future__ import annotations

import math
import random
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import pytest
from kube.emulator import Kube
from kube.kubelet import EPOCH, FakeClock, FakeCluster
from kubernetes_asyncio import client

from autoscaler import errors, metricnames
from autoscaler.adapters.kubernetes import _api, cluster, ramp
from autoscaler.clock import ManualClock
from autoscaler.contract import annotations as contract
from autoscaler.contract import codec
from autoscaler.core import gates, model
from autoscaler.core.ramp import pool

from .support import NS, MakeCluster, deployment, eventually, settings

WEB = model.ServiceId(f"{NS}/web")
WARMING, STABLE = cluster.WARMING_LABEL, cluster.STABLE_LABEL
LOOP_START_S = 1_000.0
"""The loop clock's reading while the test runs: pods' creation times are given on it."""
PODS = "v1/pods"
DEPLOYMENTS = "apps/v1/deployments"


def inference(
    name: str = "web",
    *,
    replicas: int = 2,
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    owner: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A Deployment set up for the ramp: pods start `warming` behind the `warm` readiness gate.

    The selector is `labels` (default `app: NAME`); `owner` makes it a placement-tier sibling.
    """
    labels = labels or {"app": name}
    made = deployment(name, replicas=replicas, annotations=annotations, labels=labels)
    template = made["spec"]["template"]
    template["metadata"]["labels"] = {**labels, WARMING: "true"}
    template["spec"]["readinessGates"] = [{"conditionType": ramp.WARM_CONDITION}]
    template["spec"]["containers"][0]["ports"] = [{"containerPort": 8000}]
    if owner is not None:
        made["metadata"]["ownerReferences"] = [
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "name": owner["metadata"]["name"],
                "uid": owner["metadata"]["uid"],
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
    return made


class MakeRamp(Protocol):
    def __call__(self, **kwargs: Any) -> Awaitable[tuple[cluster.KubeCluster, ramp.KubeRamp]]: ...


@pytest.fixture
def make_ramp(api: client.ApiClient, kube_clock: FakeClock, make_cluster: MakeCluster) -> MakeRamp:
    """Builds a running, synced `KubeCluster` (its `workloads()` taken once) and a `KubeRamp`."""

    def wall_now() -> float:
        return EPOCH.timestamp() + kube_clock.now()

    async def make(**kwargs: Any) -> tuple[cluster.KubeCluster, ramp.KubeRamp]:
        made = await make_cluster(**kwargs)
        made.workloads()
        built = ramp.KubeRamp(
            api, made, clock=ManualClock(LOOP_START_S), wall_now=wall_now, rng=random.Random(7)
        )
        return made, built

    return make


async def cluster_with_tiers(
    kube: Kube, kubelet: FakeCluster, apps: client.AppsV1Api, **notes: str
) -> dict[str, Any]:
    """`web` (2 pods), its MIG sibling (1 pod) and an impostor with `web`'s labels (1 pod)."""
    kubelet.add_node("gpu-1", gpus=8)
    await apps.create_namespaced_deployment(NS, inference(annotations=settings(**notes)))
    owner_obj = kube.store.get(DEPLOYMENTS, NS, "web")
    tier = {"app": "web", ramp.TIER_LABEL: "mig-1g.10gb"}
    await apps.create_namespaced_deployment(
        NS, inference("web-mig-1g-10gb", replicas=1, labels=tier, owner=owner_obj)
    )
    await apps.create_namespaced_deployment(
        NS, inference("impostor", replicas=1, labels={"app": "web"})
    )
    await kubelet.settle()
    return owner_obj


def pods_named(kube: Kube, prefix: str) -> list[dict[str, Any]]:
    return [
        pod
        for pod in kube.store.list_objects(PODS, NS)
        if pod["metadata"]["name"].startswith(prefix)
    ]


def whole_tier(kube: Kube) -> list[str]:
    """The names of `web`'s own pods (the whole tier), sorted."""
    names = (pod["metadata"]["name"] for pod in pods_named(kube, "web-"))
    return sorted(name for name in names if not name.startswith("web-mig-"))


def owner_pod(kube: Kube) -> str:
    """The name of one of `web`'s own pods."""
    return whole_tier(kube)[0]


async def cached(
    made: cluster.KubeCluster, name: str, condition: Callable[[dict[str, Any]], bool]
) -> None:
    """Wait until the pod cache holds `name` in a state satisfying `condition`."""

    def holds() -> bool:
        pod = made.caches.pods.get(NS, name)
        return pod is not None and condition(pod)

    await eventually(holds, made.caches.pods)


async def all_pods_cached(made: cluster.KubeCluster, kube: Kube) -> None:
    def complete() -> bool:
        stored = {
            (p["metadata"]["name"], p["metadata"]["resourceVersion"])
            for p in kube.store.list_objects(PODS, NS)
        }
        seen = {
            (p["metadata"]["name"], p["metadata"]["resourceVersion"])
            for p in made.caches.pods.items()
        }
        return stored == seen

    await eventually(complete, made.caches.pods)


# -- reads ---------------------------------------------------------------------------------------


async def test_pods_span_every_tier_of_the_service_and_no_foreign_pod(
    kube: Kube,
    kubelet: FakeCluster,
    kube_clock: FakeClock,
    apps: client.AppsV1Api,
    make_ramp: MakeRamp,
) -> None:
    """The owner's and its sibling's pods, with tier, flags and times; not an impostor's."""
    await cluster_with_tiers(kube, kubelet, apps)
    made, built = await make_ramp()
    await all_pods_cached(made, kube)
    kube_clock.advance(30)

    pods = built.pods(WEB)

    assert len(pods) == 3
    assert sorted(pod.tier for pod in pods) == ["mig-1g.10gb", "whole", "whole"]
    assert not any(pod.name.startswith("impostor") for pod in pods)
    for pod in pods:
        assert (pod.running, pod.warm, pod.warming, pod.stable, pod.terminating) == (
            True,
            False,
            True,
            False,
            False,
        )
        assert pod.port == 8000  # the first container port, for the warm-up probe
        assert pod.ip is not None
        assert pod.ip.startswith("10.0.")
        # Created 30 s before the loop clock's reading.
        assert pod.created_s == pytest.approx(LOOP_START_S - 30)
    assert built.pods(model.ServiceId(f"{NS}/impostor")) == []


async def test_a_pod_being_deleted_reads_as_terminating_and_a_stopped_one_not_running(
    kube: Kube, kubelet: FakeCluster, apps: client.AppsV1Api, make_ramp: MakeRamp
) -> None:
    """deletionTimestamp marks a pod terminating; containers not ready mean not running."""
    await cluster_with_tiers(kube, kubelet, apps)
    first, second = whole_tier(kube)
    kube.store.patch(PODS, NS, first, {"metadata": {"finalizers": ["example.com/hold"]}})
    kube.store.delete(PODS, NS, first)
    kubelet.set_ready_after(NS, second, float("inf"))
    await kubelet.reconcile()
    made, built = await make_ramp()
    await all_pods_cached(made, kube)

    by_name = {pod.name: pod for pod in built.pods(WEB)}

    assert by_name[first].terminating
    assert not by_name[second].running
    assert not by_name[second].terminating


async def test_ramp_targets_carry_the_config_the_route_and_the_saved_state(
    kube: Kube, kubelet: FakeCluster, apps: client.AppsV1Api, make_ramp: MakeRamp
) -> None:
    """Traffic, warm-up and metrics from the contract; the route's labels without the ramp's;
    the saved ramp text, which is no unknown setting."""
    notes = settings(**{"traffic-router": "istio", "warmup-path": "/warm", "mode": "dry-run"})
    notes[contract.RAMP_KEY] = '{"step": 30}'
    await apps.create_namespaced_deployment(NS, inference(annotations=notes))
    await apps.create_namespaced_deployment(NS, inference("plain", annotations=settings()))
    _, built = await make_ramp()

    targets = {target.service: target for target in built.ramp_targets()}
    web, plain = targets[WEB], targets[model.ServiceId(f"{NS}/plain")]

    assert web.service == WEB
    assert web.route.namespace == NS
    assert web.route.deployment == "web"
    assert dict(web.route.pod_labels) == {"app": "web"}
    assert web.traffic.router is contract.TrafficRouter.ISTIO
    assert (web.warmup.path, web.warmup.port) == ("/warm", None)
    assert web.metrics == metricnames.PRESETS["vllm"]
    assert web.saved == '{"step": 30}'
    assert web.dry_run
    assert plain.saved is None
    assert not plain.dry_run


async def test_only_services_whose_template_opts_into_the_gate_are_ramp_targets(
    kube: Kube, kubelet: FakeCluster, apps: client.AppsV1Api, make_ramp: MakeRamp
) -> None:
    """The readiness gate or the `warming` label makes a target; a plain Deployment, even with
    a traffic router named, has nothing to gate or drain."""
    await apps.create_namespaced_deployment(NS, inference(annotations=settings()))
    labelled = deployment("labelled", annotations=settings())
    labelled["spec"]["template"]["metadata"]["labels"][WARMING] = "true"
    await apps.create_namespaced_deployment(NS, labelled)
    plain = deployment("plain", annotations=settings(**{"traffic-router": "istio"}))
    await apps.create_namespaced_deployment(NS, plain)
    made, built = await make_ramp()

    assert {w.id for w in made.workloads()} == {WEB, f"{NS}/labelled", f"{NS}/plain"}
    assert sorted(t.service for t in built.ramp_targets()) == [f"{NS}/labelled", WEB]


# -- writes ----------------------------------------------------------------------------------------


async def test_set_warm_merges_the_condition_by_type_and_opens_the_readiness_gate(
    kube: Kube, kubelet: FakeCluster, apps: client.AppsV1Api, make_ramp: MakeRamp
) -> None:
    """The warm condition joins the kubelet's (Ready survives); a repeat writes nothing."""
    await cluster_with_tiers(kube, kubelet, apps)
    made, built = await make_ramp()
    name = owner_pod(kube)
    await cached(made, name, lambda pod: _api.condition(pod, "Ready") is not None)

    await built.set_warm(WEB, name, True, "3 of 3 probes answered")

    stored = kube.store.get(PODS, NS, name)
    warm = _api.condition(stored, ramp.WARM_CONDITION)
    assert warm is not None
    assert (warm["status"], warm["reason"], warm["message"]) == (
        "True",
        ramp.WARM_REASON,
        "3 of 3 probes answered",
    )
    assert warm["lastTransitionTime"] == codec.format_time(EPOCH.timestamp())
    assert _api.condition(stored, "ContainersReady") is not None
    ready = _api.condition(stored, "Ready")
    assert ready is not None
    assert ready["status"] == "False"
    await kubelet.reconcile()
    ready = _api.condition(kube.store.get(PODS, NS, name), "Ready")
    assert ready is not None
    assert ready["status"] == "True"

    await cached(made, name, lambda pod: _api.condition(pod, ramp.WARM_CONDITION) is not None)
    await built.set_warm(WEB, name, True, "3 of 3 probes answered")
    assert kube.requests.count("patch", "pods/status") == 1

    await built.set_warm(WEB, name, False, "gate failed")
    warm = _api.condition(kube.store.get(PODS, NS, name), ramp.WARM_CONDITION)
    assert warm is not None
    assert (warm["status"], warm["reason"]) == ("False", ramp.COLD_REASON)


async def test_a_pod_let_out_of_the_standby_pool_says_so_in_its_warm_condition(
    kube: Kube, kubelet: FakeCluster, apps: client.AppsV1Api, make_ramp: MakeRamp
) -> None:
    """The pool's promotion gets its own reason, which the start-up measure reads."""
    await cluster_with_tiers(kube, kubelet, apps)
    made, built = await make_ramp()
    name = owner_pod(kube)
    await cached(made, name, lambda pod: _api.condition(pod, "Ready") is not None)

    await built.set_warm(WEB, name, True, pool.PROMOTED)

    warm = _api.condition(kube.store.get(PODS, NS, name), ramp.WARM_CONDITION)
    assert warm is not None
    assert (warm["status"], warm["reason"]) == ("True", cluster.STANDBY_REASON)


def test_a_pod_from_the_standby_pool_counts_its_start_up_until_its_containers_were_ready() -> None:
    """Its wait in the pool is not start-up: a pod Ready an hour after its containers counts
    the 90 s to the containers, the other pod its 60 s to Ready."""

    def pod(ready_s: int, containers_s: int, reason: str) -> dict[str, object]:
        def at(seconds: int) -> str:
            return codec.format_time(EPOCH.timestamp() + seconds)

        return {
            "metadata": {"creationTimestamp": at(0)},
            "status": {
                "conditions": [
                    {"type": "Ready", "status": "True", "lastTransitionTime": at(ready_s)},
                    {
                        "type": "ContainersReady",
                        "status": "True",
                        "lastTransitionTime": at(containers_s),
                    },
                    {"type": ramp.WARM_CONDITION, "status": "True", "reason": reason},
                ]
            },
        }

    promoted = pod(3_600, 90, cluster.STANDBY_REASON)
    warmed = pod(60, 50, ramp.WARM_REASON)
    assert cluster.startup_s([promoted], recent=5) == 90.0
    assert cluster.startup_s([warmed], recent=5) == 60.0


async def test_set_labels_sets_and_removes_the_ramp_labels(
    kube: Kube, kubelet: FakeCluster, apps: client.AppsV1Api, make_ramp: MakeRamp
) -> None:
    """Promotion drops `warming` and adds `stable`; the app labels stay; a repeat writes nothing."""
    await cluster_with_tiers(kube, kubelet, apps)
    made, built = await make_ramp()
    name = owner_pod(kube)
    await cached(made, name, lambda pod: True)

    await built.set_labels(WEB, name, warming=False, stable=True)

    labels = kube.store.get(PODS, NS, name)["metadata"]["labels"]
    assert labels["app"] == "web"
    assert labels[STABLE] == "true"
    assert WARMING not in labels
    await cached(made, name, lambda pod: STABLE in _api.meta(pod)["labels"])
    await built.set_labels(WEB, name, warming=False, stable=True)
    assert kube.requests.count("patch", "pods") == 1
    assert [pod.stable for pod in built.pods(WEB) if pod.name == name] == [True]

    await built.set_labels(WEB, name, warming=True, stable=False)
    labels = kube.store.get(PODS, NS, name)["metadata"]["labels"]
    assert (labels.get(WARMING), labels.get(STABLE)) == ("true", None)


async def test_a_marked_victim_is_the_one_a_scale_down_removes(
    kube: Kube, kubelet: FakeCluster, apps: client.AppsV1Api, make_ramp: MakeRamp
) -> None:
    """The lowest pod-deletion-cost goes on the pod, and its ReplicaSet deletes it first."""
    await cluster_with_tiers(kube, kubelet, apps)
    made, built = await make_ramp()
    # The older pod: the ReplicaSet would remove the newer one if nothing said otherwise.
    victim = min(pods_named(kube, "web-"), key=kube.store.creation_order)["metadata"]["name"]
    await cached(made, victim, lambda pod: True)

    await built.mark_victim(WEB, victim)

    notes = kube.store.get(PODS, NS, victim)["metadata"]["annotations"]
    assert notes[ramp.DELETION_COST] == "-2147483648"
    kube.store.patch(DEPLOYMENTS, NS, "web", {"spec": {"replicas": 1}})
    await kubelet.settle()
    left = whole_tier(kube)
    assert len(left) == 1
    assert victim not in left


async def test_reclaim_marks_and_deletes_the_pod_and_a_fresh_one_replaces_it(
    kube: Kube, kubelet: FakeCluster, apps: client.AppsV1Api, make_ramp: MakeRamp
) -> None:
    """Reclaim deletes the pod; reclaiming it again once gone raises nothing."""
    await cluster_with_tiers(kube, kubelet, apps)
    made, built = await make_ramp()
    (sibling,) = pods_named(kube, "web-mig-")
    name = sibling["metadata"]["name"]
    await cached(made, name, lambda pod: True)

    await built.reclaim(WEB, name)

    assert kube.requests.count("patch", "pods") == 1
    assert kube.requests.count("delete", "pods") == 1
    assert name not in {p["metadata"]["name"] for p in kube.store.list_objects(PODS, NS)}
    await built.reclaim(WEB, name)  # the cache may still hold it: the API says 404
    await eventually(lambda: made.caches.pods.get(NS, name) is None, made.caches.pods)
    await built.reclaim(WEB, name)  # gone from the cache too
    await kubelet.settle()
    assert len(pods_named(kube, "web-mig-")) == 1


async def test_save_ramp_round_trips_through_the_deployment(
    kube: Kube, kubelet: FakeCluster, apps: client.AppsV1Api, make_ramp: MakeRamp
) -> None:
    """The text is saved once; a restarted controller reads it back from its targets."""
    await cluster_with_tiers(kube, kubelet, apps)
    _, built = await make_ramp()

    await built.save_ramp(WEB, '{"step": 10}')
    await built.save_ramp(WEB, '{"step": 10}')  # the cache lags the write: still no second

    notes = kube.store.get(DEPLOYMENTS, NS, "web")["metadata"]["annotations"]
    assert notes[contract.RAMP_KEY] == '{"step": 10}'
    assert kube.requests.count("patch", "deployments") == 1
    _, restarted = await make_ramp()
    (target,) = restarted.ramp_targets()
    assert target.saved == '{"step": 10}'
    await restarted.save_ramp(WEB, '{"step": 10}')
    assert kube.requests.count("patch", "deployments") == 1


async def test_save_ramp_retries_a_conflict_and_keeps_the_other_writers_change(
    kube: Kube, kubelet: FakeCluster, apps: client.AppsV1Api, make_ramp: MakeRamp
) -> None:
    """A stale cache conflicts for real; the re-read and retry keep what the other wrote."""
    await cluster_with_tiers(kube, kubelet, apps)
    counted: list[str] = []
    _, built = await make_ramp(on_api_error=counted.append)
    kube.store.patch(DEPLOYMENTS, NS, "web", {"metadata": {"labels": {"team": "ml"}}})

    await built.save_ramp(WEB, '{"step": 50}')

    stored = kube.store.get(DEPLOYMENTS, NS, "web")
    assert stored["metadata"]["labels"]["team"] == "ml"
    assert stored["metadata"]["annotations"][contract.RAMP_KEY] == '{"step": 50}'
    assert kube.requests.count("patch", "deployments") == 2
    assert kube.requests.count("get", "deployments") == 1
    assert counted == ["deployments.patch"]


async def test_record_posts_an_event_on_the_deployment(
    kube: Kube,
    kubelet: FakeCluster,
    api: client.ApiClient,
    apps: client.AppsV1Api,
    make_ramp: MakeRamp,
) -> None:
    """An Event of the ramp lands on the service's Deployment; a bad type is refused."""
    await cluster_with_tiers(kube, kubelet, apps)
    made, built = await make_ramp()

    built.record(WEB, "Warning", "RampHeld", "3 failed gates in a row")
    await made.events.wait_idle()

    listed = await _api.call_json(client.CoreV1Api(api).list_namespaced_event, NS)
    (event,) = listed["items"]
    assert (event["involvedObject"]["name"], event["type"], event["reason"]) == (
        "web",
        "Warning",
        "RampHeld",
    )
    with pytest.raises(ValueError, match="Normal or Warning"):
        built.record(WEB, "Error", "RampHeld", "no")


# -- what is never written -----------------------------------------------------------------------


def every_write(built: ramp.KubeRamp, pod: str) -> list[Callable[[], Awaitable[None]]]:
    return [
        lambda: built.set_warm(WEB, pod, True, "warm"),
        lambda: built.set_labels(WEB, pod, warming=False, stable=True),
        lambda: built.mark_victim(WEB, pod),
        lambda: built.reclaim(WEB, pod),
        lambda: built.save_ramp(WEB, '{"step": 10}'),
    ]


@pytest.mark.parametrize("scope", ["global", "service"])
async def test_dry_run_writes_nothing(
    kube: Kube, kubelet: FakeCluster, apps: client.AppsV1Api, make_ramp: MakeRamp, scope: str
) -> None:
    """The controller's dry-run and a service's `mode: dry-run` skip every write."""
    notes = {"mode": "dry-run"} if scope == "service" else {}
    await cluster_with_tiers(kube, kubelet, apps, **notes)
    made, built = await make_ramp(dry_run=scope == "global")
    name = owner_pod(kube)
    await cached(made, name, lambda pod: True)

    for write in every_write(built, name):
        await write()

    assert kube.requests.count("patch") == 0
    assert kube.requests.count("delete") == 0


async def test_a_follower_refuses_every_write(
    kube: Kube, kubelet: FakeCluster, apps: client.AppsV1Api, make_ramp: MakeRamp
) -> None:
    """Without the Lease every write raises NotLeaderError and nothing reaches the API."""
    await cluster_with_tiers(kube, kubelet, apps)
    made, built = await make_ramp(may_write=lambda _: False)
    name = owner_pod(kube)
    await cached(made, name, lambda pod: True)

    for write in every_write(built, name):
        with pytest.raises(ramp.NotLeaderError):
            await write()

    assert kube.requests.count("patch") == 0
    assert kube.requests.count("delete") == 0


async def test_writes_to_pods_of_another_service_are_refused(
    kube: Kube, kubelet: FakeCluster, apps: client.AppsV1Api, make_ramp: MakeRamp
) -> None:
    """A pod with the service's labels but another owner, or no such pod, is never written."""
    await cluster_with_tiers(kube, kubelet, apps)
    made, built = await make_ramp()
    (impostor,) = pods_named(kube, "impostor-")
    foreign = impostor["metadata"]["name"]
    await cached(made, foreign, lambda pod: True)

    for write in every_write(built, foreign)[:4]:
        with pytest.raises(ramp.KubeApiError, match="not a pod of default/web"):
            await write()
    with pytest.raises(ramp.KubeApiError, match="no such pod") as missing:
        await built.set_labels(WEB, "web-nothere", warming=False, stable=True)
    with pytest.raises(ramp.KubeApiError, match="not a managed Deployment"):
        await built.save_ramp(model.ServiceId(f"{NS}/impostor"), "{}")

    assert missing.value.status == 404
    assert kube.requests.count("patch") == 0
    assert kube.requests.count("delete") == 0


async def test_api_errors_become_actuation_errors_with_the_status(
    kube: Kube, kubelet: FakeCluster, apps: client.AppsV1Api, make_ramp: MakeRamp
) -> None:
    """A failed call raises KubeApiError (an ActuationError) with its status, and is counted."""
    await cluster_with_tiers(kube, kubelet, apps)
    counted: list[str] = []
    made, built = await make_ramp(on_api_error=counted.append)
    name = owner_pod(kube)
    await cached(made, name, lambda pod: True)
    kube.fail("patch", "pods/status", status=500)
    kube.fail("delete", "pods", status=403)

    with pytest.raises(errors.ActuationError) as failed:
        await built.set_warm(WEB, name, True, "warm")
    with pytest.raises(ramp.KubeApiError) as forbidden:
        await built.reclaim(WEB, name)

    assert isinstance(failed.value, ramp.KubeApiError)
    assert failed.value.status == 500
    assert forbidden.value.status == 403
    assert counted == ["pods/status.patch", "pods.delete"]


# -- gates no ramp answers for -------------------------------------------------------------------


def custodies(built: ramp.KubeRamp) -> dict[str, gates.Custody]:
    return {gate.pod: gate.custody for gate in built.closed_gates()}


async def test_closed_gates_name_who_answers_for_each_ready_pod(
    kube: Kube, kubelet: FakeCluster, apps: client.AppsV1Api, make_ramp: MakeRamp
) -> None:
    """The pods of an active gated service and of its tiers are the ramp's; an unannotated
    Deployment's pods are not managed; a pod whose containers are not ready is not listed."""
    await cluster_with_tiers(kube, kubelet, apps)
    made, built = await make_ramp()
    await all_pods_cached(made, kube)

    found = custodies(built)
    impostor = [p["metadata"]["name"] for p in pods_named(kube, "impostor-")]
    tier = [p["metadata"]["name"] for p in pods_named(kube, "web-mig-")]
    assert found == {
        **dict.fromkeys(whole_tier(kube) + tier, gates.Custody.RAMP),
        **dict.fromkeys(impostor, gates.Custody.NOT_MANAGED),
    }
    assert {gate.deployment for gate in built.closed_gates()} == {"web", "impostor"}

    kubelet.set_ready_after(NS, impostor[0], math.inf)
    await kubelet.reconcile()
    await all_pods_cached(made, kube)
    assert impostor[0] not in custodies(built)


@pytest.mark.parametrize(
    ("notes", "dry_run", "custody"),
    [
        ({"mode": "dry-run"}, False, gates.Custody.SERVICE_DRY_RUN),
        ({}, True, gates.Custody.DRY_RUN),
        ({"max-replicas": "lots"}, False, gates.Custody.INVALID),
    ],
    ids=["service-dry-run", "dry-run", "invalid"],
)
async def test_closed_gates_of_a_service_no_ramp_drives(
    kube: Kube,
    kubelet: FakeCluster,
    apps: client.AppsV1Api,
    make_ramp: MakeRamp,
    notes: dict[str, str],
    dry_run: bool,
    custody: gates.Custody,
) -> None:
    """A service in dry-run (its own or the controller's) or with invalid annotations has its
    pods' gates, its tiers' included, listed as no ramp's."""
    await cluster_with_tiers(kube, kubelet, apps, **notes)
    made, built = await make_ramp(dry_run=dry_run)
    await all_pods_cached(made, kube)

    owned = whole_tier(kube) + [p["metadata"]["name"] for p in pods_named(kube, "web-mig-")]
    found = custodies(built)
    assert {name: found[name] for name in owned} == dict.fromkeys(owned, custody)


@pytest.mark.parametrize("dry_run", [False, True], ids=["active", "dry-run"])
async def test_open_gate_writes_even_in_dry_run_and_the_pod_is_not_listed_again(
    kube: Kube, kubelet: FakeCluster, apps: client.AppsV1Api, make_ramp: MakeRamp, dry_run: bool
) -> None:
    """Opening a gate sets the warm condition True (in dry-run too), the pod turns Ready, and it
    is not listed again even before the cache has seen the write; the Event is posted."""
    await cluster_with_tiers(kube, kubelet, apps, mode="dry-run")
    made, built = await make_ramp(dry_run=dry_run)
    await all_pods_cached(made, kube)
    name = owner_pod(kube)
    (gate,) = [g for g in built.closed_gates() if g.pod == name]

    await built.open_gate(gate, "opened without a warm-up")
    assert name not in custodies(built)
    built.announce(gates.Opening(NS, "web", (name,), gate.custody))
    await made.events.wait_idle()

    await kubelet.reconcile()
    pod = kube.store.get(PODS, NS, name)
    conditions = {c["type"]: c for c in pod["status"]["conditions"]}
    assert conditions[ramp.WARM_CONDITION]["status"] == "True"
    assert conditions[ramp.WARM_CONDITION]["reason"] == "GateOpened"
    assert conditions["Ready"]["status"] == "True"
    assert [e["reason"] for e in kube.store.list_objects("v1/events", NS)] == ["GateOpened"]


async def test_a_follower_opens_no_gate(
    kube: Kube, kubelet: FakeCluster, apps: client.AppsV1Api, make_ramp: MakeRamp
) -> None:
    """Without the Lease, opening a gate raises NotLeaderError and nothing reaches the API."""
    await cluster_with_tiers(kube, kubelet, apps, mode="dry-run")
    made, built = await make_ramp(may_write=lambda _: False)
    await all_pods_cached(made, kube)
    gate = built.closed_gates()[0]

    with pytest.raises(ramp.NotLeaderError):
        await built.open_gate(gate, "opened without a warm-up")
    assert kube.requests.count("patch") == 0

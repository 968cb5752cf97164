"""`KubeCluster`: workloads from the caches, scale, publish and Events, against the emulator."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import math
from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt
import pytest
import structlog
from kube.emulator import Kube
from kube.kubelet import FakeCluster
from kubernetes_asyncio import client

from autoscaler import errors, ports
from autoscaler.adapters import prometheus
from autoscaler.adapters.kubernetes import _api, cluster
from autoscaler.clock import ManualClock
from autoscaler.contract import annotations as contract
from autoscaler.contract import codec
from autoscaler.core import model
from autoscaler.loop import Loop

from .support import (
    NS,
    WALL_S,
    MakeCluster,
    deployment,
    events_of,
    eventually,
    settings,
)

WEB = model.ServiceId(f"{NS}/web")


def decision(
    current: int,
    desired: int,
    *,
    kind: model.Kind | None = None,
    reason: model.Reason | None = None,
) -> model.Decision:
    if kind is None:
        kind = (
            model.Kind.SCALE_UP
            if desired > current
            else model.Kind.SCALE_DOWN
            if desired < current
            else model.Kind.STEADY
        )
    load = model.Contribution(ratio=1.5, desired=desired, estimator="mean", estimate=30.0)
    return model.Decision(
        current=current,
        desired=desired,
        kind=kind,
        reason=reason or model.Reason.ABOVE_TARGET,
        detail="load ratio 1.50 asks for 3",
        contributions={
            model.Signal.LOAD: load,
            model.Signal.SATURATION: load._replace(ratio=math.nan),
        },
    )


async def managed(made: cluster.KubeCluster, *names: str) -> list[ports.Workload]:
    """The workloads once the caches show the Deployments `names`."""
    await eventually(
        lambda: all(made.caches.deployment(NS, name) for name in names), made.caches.deployments
    )
    return made.workloads()


# -- workloads --------------------------------------------------------------------------------


async def test_workloads_report_replicas_serving_and_startup_from_pods(
    kube: Kube, kubelet: FakeCluster, apps: client.AppsV1Api, make_cluster: MakeCluster
) -> None:
    """A managed Deployment reports spec replicas, its Ready pods and their start-up time."""
    kubelet.add_node("gpu-1", gpus=8)
    kubelet.ready_after_s = 30
    await apps.create_namespaced_deployment(
        NS, deployment("web", replicas=3, annotations=settings())
    )
    # A sibling whose pods carry the owner's labels too; they are not the owner's.
    sibling = deployment("web-mig", replicas=2, labels={"app": "web", "tier": "mig"})
    await apps.create_namespaced_deployment(NS, sibling)
    await apps.create_namespaced_deployment(NS, deployment("plain", replicas=1))
    await kubelet.settle()
    kubelet.clock.advance(30)
    await kubelet.reconcile()
    made = await make_cluster()

    def all_ready() -> bool:
        found = made.workloads()
        return len(found) == 1 and found[0].serving == 3

    await eventually(all_ready, made.caches.pods)
    (web,) = made.workloads()
    assert (web.id, web.replicas, web.serving) == (WEB, 3, 3)
    assert web.startup_s == pytest.approx(30.0)
    assert web.policy.max_replicas == 10
    assert web.policy.target_load_per_replica == 5.0
    assert web.state is None
    serving = made.workload(WEB)
    assert serving is not None
    assert (serving.namespace, serving.deployment) == (NS, "web")
    assert serving.metrics == prometheus.PRESETS["vllm"]
    assert len(serving.pods) == 3
    assert all(pod.startswith("web-") and not pod.startswith("web-mig-") for pod in serving.pods)

    # One pod stops being Ready: it no longer counts as serving.
    victim = sorted(serving.pods)[0]
    kubelet.set_ready_after(NS, victim, math.inf)
    await kubelet.reconcile()
    await eventually(lambda: made.workloads()[0].serving == 2, made.caches.pods)
    assert victim not in (made.workload(WEB) or serving).pods

    for _ in range(50):
        made.workloads()
    for kind in ("deployments", "replicasets", "pods", "nodes"):
        assert kube.requests.count("list", kind) == 1


async def test_workloads_skip_the_services_of_buckets_led_elsewhere(
    api: client.ApiClient, apps: client.AppsV1Api, make_cluster: MakeCluster
) -> None:
    """Only the services this replica owns are returned, and an invalid one it does not own
    is left to its owner: no Event from here."""
    bad = settings(**{"max-replicas": "lots"})
    await apps.create_namespaced_deployment(NS, deployment("bad", annotations=bad))
    await apps.create_namespaced_deployment(NS, deployment("web", annotations=settings()))
    await apps.create_namespaced_deployment(NS, deployment("api", annotations=settings()))
    made = await make_cluster(owned=lambda: lambda service: service == WEB)

    found = await managed(made, "bad", "web", "api")
    await made.events.wait_idle()

    assert [w.id for w in found] == [WEB]
    assert [w.id for w in made.managed()] == [WEB]
    assert await events_of(api, "bad") == []


async def test_a_bucket_that_moves_brings_its_services_in_and_takes_them_out(
    apps: client.AppsV1Api, make_cluster: MakeCluster
) -> None:
    """Records are kept between calls, yet a service comes in when its bucket is won and goes
    when it is lost, with no change to its Deployment."""
    await apps.create_namespaced_deployment(NS, deployment("web", annotations=settings()))
    await apps.create_namespaced_deployment(NS, deployment("api", annotations=settings()))
    owned = {WEB}
    made = await make_cluster(owned=lambda: set(owned).__contains__)
    found = await managed(made, "web", "api")
    assert [w.id for w in found] == [WEB]
    web = found[0]

    owned.add(model.ServiceId(f"{NS}/api"))
    assert sorted(w.id for w in made.workloads()) == [f"{NS}/api", WEB]
    assert {w.id: w for w in made.workloads()}[WEB] is web

    owned.discard(WEB)
    assert [w.id for w in made.workloads()] == [f"{NS}/api"]


async def test_a_service_led_elsewhere_builds_nothing_until_its_bucket_comes_here(
    kubelet: FakeCluster,
    apps: client.AppsV1Api,
    make_cluster: MakeCluster,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Changes to a service of another replica's bucket (a pod leaves its serving set, its
    annotations are edited) build nothing here; when its bucket is won, the next call returns
    its record at once, with those changes; when it is lost, the next call leaves it out."""
    kubelet.add_node("gpu-1", gpus=8)
    await apps.create_namespaced_deployment(
        NS, deployment("web", replicas=2, annotations=settings())
    )
    await apps.create_namespaced_deployment(
        NS, deployment("api", replicas=2, annotations=settings())
    )
    await kubelet.settle()
    api_id = model.ServiceId(f"{NS}/api")
    owned = {WEB}
    filters: dict[frozenset[str], Callable[[str], bool]] = {}

    def owned_now() -> Callable[[str], bool]:  # as the bucket Leases give it: one per set
        led = frozenset(owned)
        return filters.setdefault(led, led.__contains__)

    made = await make_cluster(owned=owned_now)
    await eventually(lambda: [w.serving for w in made.workloads()] == [2], made.caches.pods)
    built: list[tuple[str, str]] = []
    update = made._update

    def counted(key: tuple[str, str], *args: object, **kwargs: bool) -> None:
        built.append(key)
        update(key, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(made, "_update", counted)

    core = client.CoreV1Api(apps.api_client)
    pods = sorted(p["metadata"]["name"] for p in made.caches.pods_in(NS))
    victim = next(p for p in pods if p.startswith("api-"))
    labels = {"metadata": {"labels": {cluster.WARMING_LABEL: "true"}}}
    await core.patch_namespaced_pod(victim, NS, labels)
    window = settings(window="1m")
    edited = {"metadata": {"annotations": window}}
    await apps.patch_namespaced_deployment("api", NS, edited)

    def edited_seen() -> bool:
        notes = _api.annotations_of(made.caches.deployment(NS, "api") or {})
        return all(notes.get(k) == v for k, v in window.items())

    def warming_seen() -> bool:
        pod = made.caches.pods.get(NS, victim) or {"metadata": {}}
        return (pod["metadata"].get("labels") or {}).get(cluster.WARMING_LABEL) == "true"

    await eventually(edited_seen, made.caches.deployments)
    await eventually(warming_seen, made.caches.pods)
    for _ in range(3):
        assert [w.id for w in made.workloads()] == [WEB]
    assert (NS, "api") not in built

    owned.add(api_id)
    found = {w.id: w for w in made.workloads()}
    assert sorted(found) == [api_id, WEB]
    assert (found[api_id].serving, found[api_id].window_s) == (1, 60.0)

    owned.discard(api_id)
    assert [w.id for w in made.workloads()] == [WEB]


async def test_an_unchanged_service_keeps_its_record_and_a_change_to_its_pod_rebuilds_it(
    kube: Kube, kubelet: FakeCluster, apps: client.AppsV1Api, make_cluster: MakeCluster
) -> None:
    """Records are the same objects call after call until the informers report a change: a pod
    of `web` leaving the serving set rebuilds `web`'s alone, and so does an edited annotation."""
    kubelet.add_node("gpu-1", gpus=8)
    await apps.create_namespaced_deployment(
        NS, deployment("web", replicas=2, annotations=settings(window="1m"))
    )
    await apps.create_namespaced_deployment(
        NS, deployment("api", replicas=2, annotations=settings())
    )
    await kubelet.settle()
    made = await make_cluster()
    await eventually(lambda: [w.serving for w in made.workloads()] == [2, 2], made.caches.pods)
    web, api = sorted(made.workloads(), key=lambda w: w.id, reverse=True)
    assert (web.window_s, api.window_s) == (60.0, None)

    again = {w.id: w for w in made.workloads()}
    assert again[WEB] is web
    assert again[api.id] is api

    # Labelled warming, the pod leaves the serving set; nothing else about `web` changes.
    victim = sorted(web.pods)[0]
    labels = {"metadata": {"labels": {cluster.WARMING_LABEL: "true"}}}
    await client.CoreV1Api(apps.api_client).patch_namespaced_pod(victim, NS, labels)
    await eventually(
        lambda: {w.id: w.serving for w in made.workloads()}[WEB] == 1, made.caches.pods
    )
    after = {w.id: w for w in made.workloads()}
    assert after[WEB] is not web
    assert victim not in after[WEB].pods
    assert after[api.id] is api

    await apps.patch_namespaced_deployment(
        "web", NS, {"metadata": {"annotations": {contract.PREFIX + "window": "2m"}}}
    )
    await eventually(
        lambda: {w.id: w.window_s for w in made.workloads()}[WEB] == 120.0, made.caches.deployments
    )
    assert {w.id: w for w in made.workloads()}[api.id] is api


async def test_its_own_status_write_keeps_the_record_and_a_state_write_rebuilds_it(
    kube: Kube,
    kubelet: FakeCluster,
    apps: client.AppsV1Api,
    make_cluster: MakeCluster,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A record outlives the status annotation's writes; a new state reaches a new record built
    around the placement view of the last build, which a change to a pod makes again."""
    kubelet.add_node("gpu-1", gpus=8)
    await apps.create_namespaced_deployment(NS, deployment("web", annotations=settings()))
    await kubelet.settle()
    made = await make_cluster()
    await eventually(lambda: [w.serving for w in made.workloads()] == [2], made.caches.pods)

    def shown() -> object:
        notes = _api.annotations_of(made.caches.deployment(NS, "web") or {})
        return (codec.read_status(notes.get(contract.STATUS_KEY)) or {}).get("desired")

    await made.publish(WEB, decision(2, 2, kind=model.Kind.STEADY), model.PolicyState())
    await eventually(lambda: shown() == 2, made.caches.deployments)
    (web,) = made.workloads()  # the first state annotation: a record with its state
    await made.publish(WEB, decision(2, 3), model.PolicyState())
    await made.publish(WEB, decision(2, 4), model.PolicyState())
    await eventually(lambda: shown() == 4, made.caches.deployments)
    assert made.workloads()[0] is web

    viewed: list[model.ServiceId] = []
    view = made.placement.view

    def counted(service: model.ServiceId, *args: object) -> object:
        viewed.append(service)
        return view(service, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(made.placement, "view", counted)
    state = model.PolicyState(last_scale_change_s=WALL_S)
    await made.publish(WEB, decision(2, 2, kind=model.Kind.STEADY), state)
    await eventually(lambda: made.workloads()[0].state == state, made.caches.deployments)
    restated = made.workloads()[0]
    assert restated is not web
    assert viewed == []
    assert restated.pods is web.pods
    assert dataclasses.replace(restated, state=web.state) == web

    victim = sorted(web.pods)[0]
    labels = {"metadata": {"labels": {cluster.WARMING_LABEL: "true"}}}
    await client.CoreV1Api(apps.api_client).patch_namespaced_pod(victim, NS, labels)
    await eventually(lambda: made.workloads()[0].serving == 1, made.caches.pods)
    assert viewed == [WEB]
    assert made.workloads()[0].state == state


async def test_invalid_annotations_skip_the_service_with_one_event(
    kube: Kube, api: client.ApiClient, apps: client.AppsV1Api, make_cluster: MakeCluster
) -> None:
    """An invalid Deployment gets one InvalidConfig Event per set of problems; others go on."""
    bad = settings(**{"max-replicas": "lots"})
    await apps.create_namespaced_deployment(NS, deployment("bad", annotations=bad))
    await apps.create_namespaced_deployment(NS, deployment("web", annotations=settings()))
    made = await make_cluster()

    with structlog.testing.capture_logs() as logs:
        for _ in range(5):
            found = await managed(made, "bad", "web")
    await made.events.wait_idle()

    assert [w.id for w in found] == [WEB]
    (event,) = await events_of(api, "bad")
    assert (event["type"], event["reason"]) == ("Warning", "InvalidConfig")
    assert "autoscaler.dsec.io/max-replicas" in event["message"]
    assert '"lots"' in event["message"]
    assert contract.RULES["autoscaler.dsec.io/max-replicas"] in event["message"]
    assert event["reportingComponent"] == "inference-autoscaler"
    assert event["involvedObject"]["kind"] == "Deployment"
    (line,) = [entry for entry in logs if entry["event"] == "config.invalid"]
    assert line["service"] == f"{NS}/bad"
    assert line["problems"] == [event["message"]]

    # Another mistake is another set of problems: one more Event.
    worse = {"metadata": {"annotations": {"autoscaler.dsec.io/min-replicas": "-1"}}}
    await apps.patch_namespaced_deployment("bad", NS, worse)
    await eventually(
        lambda: (
            "autoscaler.dsec.io/min-replicas"
            in _api.annotations_of(made.caches.deployment(NS, "bad") or {})
        ),
        made.caches.deployments,
    )
    made.workloads()
    made.workloads()
    await made.events.wait_idle()
    assert len(await events_of(api, "bad", "InvalidConfig")) == 2


async def test_a_pool_without_the_warm_up_gate_is_refused_and_the_service_goes_on(
    kube: Kube, api: client.ApiClient, apps: client.AppsV1Api, make_cluster: MakeCluster
) -> None:
    """A standby pool asked for on a template without the gate gets an InvalidConfig Event
    naming the key, value and rule; the service is managed without a pool."""
    notes = settings(**{"standby-replicas": "1"})
    await apps.create_namespaced_deployment(NS, deployment("web", annotations=notes))
    made = await make_cluster()

    with structlog.testing.capture_logs() as logs:
        (found,) = await managed(made, "web")
    await made.events.wait_idle()

    assert found.ramp is None
    (event,) = await events_of(api, "web", "InvalidConfig")
    assert event["type"] == "Warning"
    assert event["message"].startswith(
        'autoscaler.dsec.io/standby-replicas="1": needs the warm-up gate in the pod template'
    )
    (line,) = [entry for entry in logs if entry["event"] == "config.invalid"]
    assert line["problems"] == [event["message"]]


async def test_state_annotation_is_resumed_and_a_malformed_one_ignored(
    apps: client.AppsV1Api, make_cluster: MakeCluster
) -> None:
    """The persisted state comes back as the workload's; a malformed one is logged, ignored."""
    state = codec.state_text(
        model.PolicyState(last_scale_up_s=WALL_S - 10, last_scale_change_s=WALL_S - 10), replicas=4
    )
    good = settings() | {contract.STATE_KEY: state}
    broken = settings() | {contract.STATE_KEY: '{"lastScaleUp": "yesterday"}'}
    await apps.create_namespaced_deployment(NS, deployment("web", annotations=good))
    await apps.create_namespaced_deployment(NS, deployment("odd", annotations=broken))
    made = await make_cluster()
    with structlog.testing.capture_logs() as logs:
        found = {w.id: w for w in await managed(made, "web", "odd")}
        made.workloads()

    assert found[WEB].state == model.PolicyState(
        last_scale_up_s=WALL_S - 10, last_scale_change_s=WALL_S - 10
    )
    assert found[model.ServiceId(f"{NS}/odd")].state is None
    assert [entry["service"] for entry in logs if entry["event"] == "state.invalid"] == [
        f"{NS}/odd"
    ]


@pytest.mark.parametrize(
    ("text", "rule"),
    [
        ('{"lastScaleUp": ' + "9" * 400 + "}", "has an integer beyond 2^53 (400 characters)"),
        ("[" * 100_000, "longer than 4096 bytes"),
        ("[" * 1000, "nested deeper than 8 arrays or objects"),
        ('{"lastScaleUp": Infinity}', "has Infinity, which is not a JSON number"),
    ],
)
async def test_a_hostile_state_is_rebuilt_with_one_corrupt_state_event(
    api: client.ApiClient,
    apps: client.AppsV1Api,
    make_cluster: MakeCluster,
    text: str,
    rule: str,
) -> None:
    """A state no parser should take costs its own service a fresh state, one CorruptState
    Event and one log line naming the key, the value and the rule; the neighbour is untouched."""
    hostile = settings() | {contract.STATE_KEY: text}
    await apps.create_namespaced_deployment(NS, deployment("odd", annotations=hostile))
    await apps.create_namespaced_deployment(NS, deployment("web", annotations=settings()))
    made = await make_cluster()
    with structlog.testing.capture_logs() as logs:
        found = {w.id: w for w in await managed(made, "web", "odd")}
        made.workloads()
    await made.events.wait_idle()

    assert found[model.ServiceId(f"{NS}/odd")].state is None
    assert WEB in found
    (logged,) = [entry for entry in logs if entry["event"] == "state.invalid"]
    assert (logged["key"], logged["value"], logged["rule"]) == (
        contract.STATE_KEY,
        contract.quote(text),
        rule,
    )
    (event,) = await events_of(api, "odd", contract.CORRUPT_STATE)
    assert event["type"] == "Warning"
    assert event["message"] == (
        f"{contract.STATE_KEY}={contract.quote(text)}: {rule}; ignored, the state is rebuilt as "
        "for a new service"
    )
    assert await events_of(api, "web") == []


# -- scale ----------------------------------------------------------------------------------------


async def test_scale_patches_the_scale_subresource_and_publish_reports_it(
    kube: Kube, api: client.ApiClient, apps: client.AppsV1Api, make_cluster: MakeCluster
) -> None:
    """Scaling writes spec.replicas through deployments/scale; publishing adds SuccessfulRescale."""
    await apps.create_namespaced_deployment(
        NS, deployment("web", replicas=2, annotations=settings())
    )
    made = await make_cluster()
    await managed(made, "web")

    await made.scale(WEB, 3)
    await made.publish(WEB, decision(2, 3), model.PolicyState(last_scale_up_s=WALL_S))
    await made.events.wait_idle()

    assert kube.requests.count("patch", "deployments/scale") == 1
    assert kube.requests.count("update", "deployments") == 0
    assert kube.store.get("apps/v1/deployments", NS, "web")["spec"]["replicas"] == 3
    (event,) = await events_of(api, "web", "SuccessfulRescale")
    assert event["type"] == "Normal"
    assert event["message"] == "New size: 3; reason: above-target: load ratio 1.50 asks for 3"


async def test_scale_errors_become_actuation_errors_with_the_status(
    kube: Kube, apps: client.AppsV1Api, make_cluster: MakeCluster
) -> None:
    """A refused scale raises ActuationError carrying the HTTP status, and is counted."""
    await apps.create_namespaced_deployment(NS, deployment("web", annotations=settings()))
    counted: list[str] = []
    made = await make_cluster(on_api_error=counted.append)
    await managed(made, "web")
    kube.fail("patch", "deployments/scale", status=403, message="scale is forbidden")

    with pytest.raises(errors.ActuationError) as raised:
        await made.scale(WEB, 5)

    assert isinstance(raised.value, cluster.KubeApiError)
    assert raised.value.status == 403
    assert isinstance(raised.value.__cause__, client.ApiException)
    assert "scale is forbidden" in str(raised.value)
    assert counted == ["deployments/scale.patch"]
    assert kube.store.get("apps/v1/deployments", NS, "web")["spec"]["replicas"] == 2


async def test_a_manual_scale_is_overridden_with_an_event(
    kube: Kube, api: client.ApiClient, apps: client.AppsV1Api, make_cluster: MakeCluster
) -> None:
    """After someone runs `kubectl scale`, the next scale overrides it and says so in an Event."""
    await apps.create_namespaced_deployment(NS, deployment("web", annotations=settings()))
    made = await make_cluster()
    await managed(made, "web")
    await made.scale(WEB, 3)
    await apps.patch_namespaced_deployment_scale("web", NS, {"spec": {"replicas": 7}})
    await eventually(
        lambda: cluster.spec_replicas(made.caches.deployment(NS, "web") or {}) == 7,
        made.caches.deployments,
    )
    made.workloads()

    await made.scale(WEB, 4)
    await made.events.wait_idle()

    (event,) = await events_of(api, "web", "ReplicasOverridden")
    assert event["type"] == "Warning"
    assert "changed to 7 outside the autoscaler (it had set 3)" in event["message"]
    assert "sets 4" in event["message"]
    assert kube.store.get("apps/v1/deployments", NS, "web")["spec"]["replicas"] == 4


async def test_a_service_whose_bucket_comes_back_is_not_taken_for_overridden(
    kube: Kube, api: client.ApiClient, apps: client.AppsV1Api, make_cluster: MakeCluster
) -> None:
    """A replica that lost a service's bucket Lease forgets the count it set, so the count the
    bucket's next holder set is not reported as a manual override when the bucket comes back."""
    await apps.create_namespaced_deployment(NS, deployment("web", annotations=settings()))
    made = await make_cluster()
    await managed(made, "web")
    await made.scale(WEB, 3)
    made.forget_unless(lambda service: service != WEB)  # the bucket of `web` moved away
    await apps.patch_namespaced_deployment_scale("web", NS, {"spec": {"replicas": 7}})
    await eventually(
        lambda: cluster.spec_replicas(made.caches.deployment(NS, "web") or {}) == 7,
        made.caches.deployments,
    )
    made.workloads()

    await made.scale(WEB, 4)
    await made.events.wait_idle()

    assert await events_of(api, "web", "ReplicasOverridden") == []
    assert kube.store.get("apps/v1/deployments", NS, "web")["spec"]["replicas"] == 4


# -- publish --------------------------------------------------------------------------------------


async def test_publish_writes_annotations_only_when_they_change(
    kube: Kube, apps: client.AppsV1Api, make_cluster: MakeCluster
) -> None:
    """Status and state are written once; the same decision again writes nothing."""
    await apps.create_namespaced_deployment(NS, deployment("web", annotations=settings()))
    clock_s = [WALL_S]
    made = await make_cluster(wall_now=lambda: clock_s[0])
    await managed(made, "web")
    held = decision(2, 2, kind=model.Kind.STEADY, reason=model.Reason.IN_DEADBAND)
    state = model.PolicyState(last_scale_change_s=WALL_S - 60)

    await made.publish(WEB, held, state)
    await eventually(
        lambda: contract.STATUS_KEY in _api.annotations_of(made.caches.deployment(NS, "web") or {}),
        made.caches.deployments,
    )
    clock_s[0] += 30  # a later time alone is no change
    await made.publish(WEB, held, state)

    assert kube.requests.count("patch", "deployments") == 1
    notes = kube.store.get("apps/v1/deployments", NS, "web")["metadata"]["annotations"]
    status = json.loads(notes[contract.STATUS_KEY])
    assert status == {
        "contributions": {
            "load": {"desired": 2, "estimate": 30.0, "estimator": "mean", "ratio": 1.5},
            "saturation": {"desired": 2, "estimate": 30.0, "estimator": "mean", "ratio": None},
        },
        "current": 2,
        "desired": 2,
        "detail": "load ratio 1.50 asks for 3",
        "kind": "steady",
        "reason": "in-deadband",
        "time": "2025-06-15T15:06:40Z",
    }
    assert json.loads(notes[contract.STATE_KEY]) == {"lastScaleChange": WALL_S - 60}
    (workload,) = made.workloads()
    assert workload.state == state

    changed = model.PolicyState(last_scale_change_s=WALL_S)
    await made.publish(WEB, held, changed)
    assert kube.requests.count("patch", "deployments") == 2


async def test_publish_retries_a_conflict_after_reading_the_deployment_again(
    kube: Kube, apps: client.AppsV1Api, make_cluster: MakeCluster
) -> None:
    """A 409 on the annotation patch re-reads the Deployment and retries with its new version."""
    await apps.create_namespaced_deployment(NS, deployment("web", annotations=settings()))
    counted: list[str] = []
    made = await make_cluster(on_api_error=counted.append)
    await managed(made, "web")
    kube.fail("patch", "deployments", status=409)

    await made.publish(WEB, decision(2, 2, kind=model.Kind.STEADY), model.PolicyState())

    assert kube.requests.count("patch", "deployments") == 2
    assert kube.requests.count("get", "deployments") == 1
    assert counted == ["deployments.patch"]
    notes = kube.store.get("apps/v1/deployments", NS, "web")["metadata"]["annotations"]
    assert contract.STATUS_KEY in notes


async def test_publish_carries_the_cached_resource_version(
    kube: Kube, apps: client.AppsV1Api, make_cluster: MakeCluster
) -> None:
    """A write from a stale cache conflicts for real; the retry keeps the other writer's change."""
    await apps.create_namespaced_deployment(NS, deployment("web", annotations=settings()))
    made = await make_cluster()
    await managed(made, "web")
    # Someone else writes; the cache cannot have seen it before `publish` reads it.
    kube.store.patch("apps/v1/deployments", NS, "web", {"metadata": {"labels": {"team": "ml"}}})

    await made.publish(WEB, decision(2, 2, kind=model.Kind.STEADY), model.PolicyState())

    assert kube.requests.count("patch", "deployments") == 2
    assert kube.requests.count("get", "deployments") == 1
    stored = kube.store.get("apps/v1/deployments", NS, "web")
    assert stored["metadata"]["labels"]["team"] == "ml"
    assert contract.STATUS_KEY in stored["metadata"]["annotations"]


async def test_publish_right_after_a_scale_carries_the_version_of_that_write(
    kube: Kube, apps: client.AppsV1Api, make_cluster: MakeCluster
) -> None:
    """The status written right after a scale uses the scale's resourceVersion: no 409, no read."""
    await apps.create_namespaced_deployment(NS, deployment("web", annotations=settings()))
    made = await make_cluster()
    await managed(made, "web")

    await made.scale(WEB, 3)
    await made.publish(WEB, decision(2, 3), model.PolicyState(last_scale_up_s=WALL_S))

    assert kube.requests.count("patch", "deployments") == 1
    assert kube.requests.count("get", "deployments") == 0
    stored = kube.store.get("apps/v1/deployments", NS, "web")
    assert stored["spec"]["replicas"] == 3
    assert contract.STATUS_KEY in stored["metadata"]["annotations"]


async def test_a_scale_that_conflicts_on_a_status_change_is_sent_again(
    kube: Kube, apps: client.AppsV1Api, make_cluster: MakeCluster
) -> None:
    """A 409 on the scale patch re-reads the Deployment and, its replicas unchanged, sends the
    patch again at the new resourceVersion."""
    await apps.create_namespaced_deployment(NS, deployment("web", annotations=settings()))
    made = await make_cluster()
    await managed(made, "web")
    kube.fail("patch", "deployments/scale", status=409)

    await made.scale(WEB, 3)

    assert kube.requests.count("patch", "deployments/scale") == 2
    assert kube.requests.count("get", "deployments") == 1
    assert kube.store.get("apps/v1/deployments", NS, "web")["spec"]["replicas"] == 3


async def test_a_deposed_leaders_delayed_scale_does_not_overwrite_its_successors(
    kube: Kube, apps: client.AppsV1Api, make_cluster: MakeCluster
) -> None:
    """A scale write held in flight until the successor has scaled gets 409 and leaves the
    successor's replicas."""
    await apps.create_namespaced_deployment(NS, deployment("web", annotations=settings()))
    deposed = await make_cluster(identity="autoscaler-0")
    successor = await make_cluster(identity="autoscaler-1")
    await managed(deposed, "web")
    await managed(successor, "web")
    held = kube.hold("patch", "deployments/scale")
    delayed = asyncio.create_task(deposed.scale(WEB, 3))
    async with asyncio.timeout(5):
        await held.arrived.wait()

    await successor.scale(WEB, 5)
    held.release()
    with pytest.raises(cluster.KubeApiError) as raised:
        await delayed

    assert raised.value.status == 409
    assert kube.store.get("apps/v1/deployments", NS, "web")["spec"]["replicas"] == 5
    answered = [w.status for w in kube.requests.writes if w.resource == "deployments/scale"]
    assert answered == [200, 409]


async def test_a_leader_past_its_renew_deadline_writes_nothing_more(
    kube: Kube, apps: client.AppsV1Api, make_cluster: MakeCluster
) -> None:
    """A renew deadline that passes while a conflicting publish backs off stops its retry
    before it is sent."""
    await apps.create_namespaced_deployment(NS, deployment("web", annotations=settings()))
    clock = ManualClock()
    renew_deadline_s = 0.001  # passes during the conflict's backoff (about 50 ms)
    made = await make_cluster(clock=clock, may_write=lambda _: clock.now() < renew_deadline_s)
    await managed(made, "web")
    kube.fail("patch", "deployments", status=409)

    with pytest.raises(cluster.NotLeaderError):
        await made.publish(WEB, decision(2, 2, kind=model.Kind.STEADY), model.PolicyState())

    assert kube.requests.count("patch", "deployments") == 1
    assert contract.STATUS_KEY not in _api.annotations_of(
        kube.store.get("apps/v1/deployments", NS, "web")
    )


async def test_publish_gives_up_after_repeated_conflicts(
    kube: Kube, apps: client.AppsV1Api, make_cluster: MakeCluster
) -> None:
    """Conflicts that persist past the attempts end in an ActuationError with status 409."""
    await apps.create_namespaced_deployment(NS, deployment("web", annotations=settings()))
    made = await make_cluster(conflict_attempts=3)
    await managed(made, "web")
    kube.fail("patch", "deployments", status=409, times=3)

    with pytest.raises(cluster.KubeApiError) as raised:
        await made.publish(WEB, decision(2, 2, kind=model.Kind.STEADY), model.PolicyState())

    assert raised.value.status == 409
    assert kube.requests.count("patch", "deployments") == 3
    assert contract.STATUS_KEY not in _api.annotations_of(
        kube.store.get("apps/v1/deployments", NS, "web")
    )


async def test_holds_post_one_event_per_new_reason(
    kube: Kube, api: client.ApiClient, apps: client.AppsV1Api, make_cluster: MakeCluster
) -> None:
    """Entering a hold posts ScaleHeld once; the same hold posts nothing; a new reason does."""
    await apps.create_namespaced_deployment(NS, deployment("web", annotations=settings()))
    made = await make_cluster()
    await managed(made, "web")
    cooldown = decision(2, 2, kind=model.Kind.HOLD, reason=model.Reason.COOLDOWN)
    missing = decision(2, 2, kind=model.Kind.HOLD, reason=model.Reason.MISSING_DATA)

    await made.publish(WEB, cooldown, model.PolicyState())
    await made.publish(WEB, cooldown, model.PolicyState(last_scale_up_s=WALL_S))
    await made.publish(WEB, missing, model.PolicyState())
    await made.events.wait_idle()

    held = await events_of(api, "web", "ScaleHeld")
    assert sorted(e["message"].split("reason: ")[1].split(":")[0] for e in held) == [
        "cooldown",
        "missing-data",
    ]
    assert all(e["message"].startswith("Holding at 2 replicas") for e in held)


async def test_a_hold_that_comes_back_soon_is_announced_once(
    kube: Kube, api: client.ApiClient, apps: client.AppsV1Api, make_cluster: MakeCluster
) -> None:
    """Going in and out of two holds posts one ScaleHeld each; another count or much later, one
    more."""
    await apps.create_namespaced_deployment(NS, deployment("web", annotations=settings()))
    clock_s = [WALL_S]
    made = await make_cluster(wall_now=lambda: clock_s[0])
    await managed(made, "web")
    steady = decision(2, 2, kind=model.Kind.STEADY)
    state = model.PolicyState()

    for n in range(6):
        reason = (model.Reason.COOLDOWN, model.Reason.BURST_HOLD)[n % 2]
        held = decision(2, 2, kind=model.Kind.HOLD, reason=reason)
        await made.publish(WEB, dataclasses.replace(held, detail=f"ratio {n}"), state)
        if n % 3 == 2:
            await made.publish(WEB, steady, state)
        clock_s[0] += 60
    await made.publish(
        WEB, decision(3, 3, kind=model.Kind.HOLD, reason=model.Reason.COOLDOWN), state
    )
    await made.publish(WEB, steady, state)
    clock_s[0] += cluster.HOLD_QUIET_S
    await made.publish(
        WEB, decision(3, 3, kind=model.Kind.HOLD, reason=model.Reason.COOLDOWN), state
    )
    await made.events.wait_idle()

    held_events = await events_of(api, "web", "ScaleHeld")
    # The later hold at 3 says what the first did: the recorder counts it on that Event.
    assert sorted((e["message"].split(";")[0], e["count"]) for e in held_events) == [
        ("Holding at 2 replicas", 1),
        ("Holding at 2 replicas", 1),
        ("Holding at 3 replicas", 2),
    ]


async def test_a_hold_already_on_the_deployment_is_not_announced_again(
    kube: Kube, api: client.ApiClient, apps: client.AppsV1Api, make_cluster: MakeCluster
) -> None:
    """A new leader that finds the same hold in the status annotation posts no second ScaleHeld."""
    await apps.create_namespaced_deployment(NS, deployment("web", annotations=settings()))
    cooldown = decision(2, 2, kind=model.Kind.HOLD, reason=model.Reason.COOLDOWN)
    before = await make_cluster(identity="autoscaler-0")
    await managed(before, "web")
    await before.publish(WEB, cooldown, model.PolicyState())
    await before.events.wait_idle()

    after = await make_cluster(identity="autoscaler-1")
    await eventually(
        lambda: (
            contract.STATUS_KEY in _api.annotations_of(after.caches.deployment(NS, "web") or {})
        ),
        after.caches.deployments,
    )
    after.workloads()
    await after.publish(WEB, cooldown, model.PolicyState())
    await after.publish(WEB, decision(2, 2, kind=model.Kind.STEADY), model.PolicyState())
    await after.publish(WEB, cooldown, model.PolicyState())
    await after.events.wait_idle()

    held = await events_of(api, "web", "ScaleHeld")
    assert [(e["reportingInstance"], e["count"]) for e in held] == [
        ("autoscaler-0", 1),
        ("autoscaler-1", 1),
    ]


async def test_a_new_leader_rewrites_no_status_that_says_the_same_decision(
    kube: Kube, apps: client.AppsV1Api, make_cluster: MakeCluster
) -> None:
    """A takeover writes no status whose decision is unchanged, only one that changed."""
    await apps.create_namespaced_deployment(NS, deployment("web", annotations=settings()))
    state = model.PolicyState(last_scale_change_s=WALL_S - 60)
    before = await make_cluster(identity="autoscaler-0")
    await managed(before, "web")
    await before.publish(WEB, decision(2, 2, kind=model.Kind.STEADY), state)

    after = await make_cluster(identity="autoscaler-1", wall_now=lambda: WALL_S + 30)
    await eventually(
        lambda: (
            contract.STATUS_KEY in _api.annotations_of(after.caches.deployment(NS, "web") or {})
        ),
        after.caches.deployments,
    )
    after.workloads()
    steady = decision(2, 2, kind=model.Kind.STEADY, reason=model.Reason.AT_DESIRED)
    vote = model.Contribution(ratio=1.04, desired=2, estimator="mean", estimate=10.4)
    await after.publish(
        WEB,
        dataclasses.replace(
            steady, detail="load ratio 1.04 asks for 2", contributions={model.Signal.LOAD: vote}
        ),
        state,
    )
    assert kube.requests.count("patch", "deployments") == 1

    await after.publish(WEB, decision(2, 3), state)
    assert kube.requests.count("patch", "deployments") == 2
    notes = kube.store.get("apps/v1/deployments", NS, "web")["metadata"]["annotations"]
    assert json.loads(notes[contract.STATUS_KEY])["desired"] == 3


async def test_a_decision_back_to_what_a_lagging_cache_shows_is_written(
    kube: Kube, apps: client.AppsV1Api, make_cluster: MakeCluster
) -> None:
    """Its own last status, not a cache that has not seen it, is what a new one is compared to."""
    await apps.create_namespaced_deployment(NS, deployment("web", annotations=settings()))
    state = model.PolicyState()
    hold = decision(2, 2, kind=model.Kind.HOLD, reason=model.Reason.COOLDOWN)
    first = await make_cluster(identity="autoscaler-0")
    await managed(first, "web")
    await first.publish(WEB, hold, state)
    watch = kube.hold("watch", "deployments")  # the next cache lists the hold, then sees nothing
    made = await make_cluster(identity="autoscaler-1")
    await managed(made, "web")

    await made.publish(WEB, decision(2, 2, kind=model.Kind.STEADY), state)
    await made.publish(WEB, hold, state)

    assert kube.requests.count("patch", "deployments") == 3
    assert kube.requests.count("get", "deployments") == 0
    notes = kube.store.get("apps/v1/deployments", NS, "web")["metadata"]["annotations"]
    assert json.loads(notes[contract.STATUS_KEY])["kind"] == "hold"
    watch.release()


async def test_repeated_events_bump_the_count_of_one_event(
    kube: Kube, api: client.ApiClient, apps: client.AppsV1Api, make_cluster: MakeCluster
) -> None:
    """The same Event twice is one Event object with count 2 and a later lastTimestamp."""
    await apps.create_namespaced_deployment(NS, deployment("web", annotations=settings()))
    clock_s = [WALL_S]
    made = await make_cluster(wall_now=lambda: clock_s[0])
    (target,) = [d for d in made.caches.deployments.items() if _api.name(d) == "web"]

    made.events.record(target, "Normal", "Tested", "same words")
    await made.events.wait_idle()
    clock_s[0] += 60
    made.events.record(target, "Normal", "Tested", "same words")
    await made.events.wait_idle()

    (event,) = await events_of(api, "web", "Tested")
    assert event["count"] == 2
    assert event["firstTimestamp"] == "2025-06-15T15:06:40Z"
    assert event["lastTimestamp"] == "2025-06-15T15:07:40Z"
    assert event["source"] == {"component": "inference-autoscaler"}
    assert event["reportingInstance"] == "autoscaler-0"


# -- writing nothing ------------------------------------------------------------------------------


async def test_global_dry_run_writes_nothing(
    kube: Kube, apps: client.AppsV1Api, make_cluster: MakeCluster
) -> None:
    """With the global dry-run, scale and publish only log; no write reaches the API."""
    bad = settings(**{"max-replicas": "0"})
    await apps.create_namespaced_deployment(NS, deployment("web", annotations=settings()))
    await apps.create_namespaced_deployment(NS, deployment("bad", annotations=bad))
    made = await make_cluster(dry_run=True)
    await managed(made, "web", "bad")
    kube.requests.clear()

    with structlog.testing.capture_logs() as logs:
        await made.scale(WEB, 5)
        await made.publish(WEB, decision(2, 5), model.PolicyState(last_scale_up_s=WALL_S))
    await made.events.wait_idle()

    writes = sum(kube.requests.count(verb) for verb in ("create", "update", "patch", "delete"))
    assert writes == 0
    assert [entry["event"] for entry in logs] == [
        "scale.skipped_dry_run",
        "publish.skipped_dry_run",
    ]
    assert logs[0]["replicas"] == 5
    assert kube.store.get("apps/v1/deployments", NS, "web")["spec"]["replicas"] == 2


async def test_a_dry_run_service_is_explained_but_never_scaled(
    kube: Kube, api: client.ApiClient, apps: client.AppsV1Api, make_cluster: MakeCluster
) -> None:
    """`mode: dry-run` writes status and Events but never replicas."""
    notes = settings(mode="dry-run")
    await apps.create_namespaced_deployment(NS, deployment("web", annotations=notes))
    made = await make_cluster()
    await managed(made, "web")

    await made.scale(WEB, 5)
    await made.publish(WEB, decision(2, 5), model.PolicyState(last_scale_up_s=WALL_S))
    await made.events.wait_idle()

    assert kube.requests.count("patch", "deployments/scale") == 0
    stored = kube.store.get("apps/v1/deployments", NS, "web")
    assert stored["spec"]["replicas"] == 2
    assert json.loads(stored["metadata"]["annotations"][contract.STATUS_KEY])["desired"] == 5
    assert [e["reason"] for e in await events_of(api, "web")] == ["DryRunRescale"]


async def test_a_follower_never_writes(
    kube: Kube, apps: client.AppsV1Api, make_cluster: MakeCluster
) -> None:
    """An instance that is not the leader refuses scale and publish and posts no Event."""
    bad = settings(**{"max-replicas": "0"})
    await apps.create_namespaced_deployment(NS, deployment("web", annotations=settings()))
    await apps.create_namespaced_deployment(NS, deployment("bad", annotations=bad))
    made = await make_cluster(may_write=lambda _: False)
    await managed(made, "web", "bad")
    kube.requests.clear()

    with pytest.raises(cluster.NotLeaderError):
        await made.scale(WEB, 5)
    with pytest.raises(errors.ActuationError):
        await made.publish(WEB, decision(2, 5), model.PolicyState())
    await made.events.wait_idle()

    writes = sum(kube.requests.count(verb) for verb in ("create", "update", "patch", "delete"))
    assert writes == 0


# -- with the loop ---------------------------------------------------------------------------


class SteadyLoad:
    """A `MetricsSource` that reports the same load for every service."""

    def __init__(self, rps: float) -> None:
        self.rps = rps

    async def sample(
        self, workloads: Sequence[ports.Workload], now_s: float
    ) -> npt.NDArray[np.float64]:
        values = np.full((len(workloads), len(model.Signal)), np.nan)
        values[:, model.Signal.LOAD] = self.rps
        values[:, model.Signal.CAPACITY] = 50.0
        return values


async def test_the_loop_scales_a_deployment_through_the_adapter(
    kube: Kube,
    api: client.ApiClient,
    kubelet: FakeCluster,
    apps: client.AppsV1Api,
    make_cluster: MakeCluster,
) -> None:
    """The loop, wired to the adapter, scales up under load and leaves status, state and Events."""
    kubelet.add_node("gpu-1", gpus=8)
    notes = settings(policy="seed")
    await apps.create_namespaced_deployment(NS, deployment("web", replicas=2, annotations=notes))
    await kubelet.settle()
    clock = ManualClock(WALL_S)
    made = await make_cluster(clock=clock, wall_now=clock.now)
    await eventually(lambda: made.workloads()[0].serving == 2, made.caches.pods)
    loop = Loop(cluster=made, metrics=SteadyLoad(rps=20.0), clock=clock)

    report = await loop.step()
    await made.events.wait_idle()

    assert report.scaled == (WEB,)
    assert report.decisions[WEB].desired == 4
    stored = kube.store.get("apps/v1/deployments", NS, "web")
    assert stored["spec"]["replicas"] == 4
    state = json.loads(stored["metadata"]["annotations"][contract.STATE_KEY])
    assert state == {"lastScaleChange": WALL_S, "lastScaleUp": WALL_S, "replicas": 4}
    assert [e["reason"] for e in await events_of(api, "web")] == ["SuccessfulRescale"]


class NoisyLoad:
    """A `MetricsSource` whose load wavers by a few percent around `rps`, tick after tick."""

    def __init__(self, rps: float) -> None:
        self.rps = rps
        self._wobble = itertools.cycle((1.0, 1.02, 0.99, 1.01, 0.98))

    async def sample(
        self, workloads: Sequence[ports.Workload], now_s: float
    ) -> npt.NDArray[np.float64]:
        values = np.full((len(workloads), len(model.Signal)), np.nan)
        values[:, model.Signal.LOAD] = self.rps * next(self._wobble)
        values[:, model.Signal.CAPACITY] = 50.0
        return values


async def test_a_settled_service_writes_no_status_until_its_decision_changes(
    kube: Kube, kubelet: FakeCluster, apps: client.AppsV1Api, make_cluster: MakeCluster
) -> None:
    """Once settled, a service under wavering load writes nothing, across a new term too."""
    kubelet.add_node("gpu-1", gpus=8)
    notes = settings(policy="seed")
    await apps.create_namespaced_deployment(NS, deployment("web", replicas=2, annotations=notes))
    await kubelet.settle()
    clock = ManualClock(WALL_S)
    made = await make_cluster(clock=clock, wall_now=clock.now)
    await eventually(lambda: made.workloads()[0].serving == 2, made.caches.pods)
    load = NoisyLoad(rps=19.0)

    async def ticks(loop: Loop, n: int) -> None:
        for _ in range(n):
            clock.advance(1.0)
            await loop.step()
            await kubelet.settle()

    await ticks(Loop(cluster=made, metrics=load, clock=clock), 3)  # scales to 4, then steady
    kube.requests.clear()
    await ticks(Loop(cluster=made, metrics=load, clock=clock), 1)  # a new leader's first tick
    await ticks(Loop(cluster=made, metrics=load, clock=clock), 10)
    assert kube.requests.count("patch", "deployments") == 0

    load.rps = 40.0
    loop = Loop(cluster=made, metrics=load, clock=clock)
    await ticks(loop, 1)
    assert kube.requests.count("patch", "deployments") == 1
    stored = kube.store.get("apps/v1/deployments", NS, "web")
    status = json.loads(stored["metadata"]["annotations"][contract.STATUS_KEY])
    assert (status["kind"], status["reason"]) == ("hold", "cooldown")  # news: it wants 8


async def test_publish_compares_its_own_last_status_without_parsing_it_again(
    kube: Kube,
    apps: client.AppsV1Api,
    make_cluster: MakeCluster,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The status the controller wrote last, found again (in the cache once it has caught up),
    is compared through the outcome kept when it was written: its text is not parsed back.
    A status written by someone else still is."""
    await apps.create_namespaced_deployment(NS, deployment("web", annotations=settings()))
    clock_s = [WALL_S]
    made = await make_cluster(wall_now=lambda: clock_s[0])
    await managed(made, "web")
    held = decision(2, 2, kind=model.Kind.STEADY, reason=model.Reason.IN_DEADBAND)
    state = model.PolicyState(last_scale_change_s=WALL_S - 60)
    await made.publish(WEB, held, state)
    await eventually(
        lambda: contract.STATUS_KEY in _api.annotations_of(made.caches.deployment(NS, "web") or {}),
        made.caches.deployments,
    )
    parsed: list[str | None] = []
    read_status = codec.read_status

    def counted(text: str | None) -> dict[str, object] | None:
        parsed.append(text)
        return read_status(text)

    monkeypatch.setattr(codec, "read_status", counted)
    clock_s[0] += 30
    await made.publish(WEB, held, state)  # the same decision: nothing written, nothing parsed
    assert kube.requests.count("patch", "deployments") == 1
    assert parsed == []

    foreign = '{"current":2,"desired":2,"kind":"steady"}'
    await apps.patch_namespaced_deployment(
        "web", NS, {"metadata": {"annotations": {contract.STATUS_KEY: foreign}}}
    )
    await eventually(
        lambda: (
            _api.annotations_of(made.caches.deployment(NS, "web") or {}).get(contract.STATUS_KEY)
            == foreign
        ),
        made.caches.deployments,
    )
    await made.publish(WEB, held, state)  # another writer's text is parsed, and says the same
    assert parsed == [foreign]
    assert kube.requests.count("patch", "deployments") == 2  # the foreign write alone

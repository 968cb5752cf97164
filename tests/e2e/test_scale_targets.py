"""Scale targets other than Deployments end to end: a StatefulSet, a LeaderWorkerSet and an Argo
Rollout, annotated as a Deployment is, scaled through their `/scale` subresource by the real
controller against the API emulator and a real Prometheus."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from kube.emulator import Kube
from kube.kubelet import LEADER_WORKER_SETS, LWS_NAME, LWS_WORKER_INDEX, ROLLOUTS, FakeCluster
from prom import exporter
from prom.fixtures import Stack
from structlog.testing import capture_logs

from autoscaler.contract import targets

from .support import (
    PREFIX,
    Controllers,
    Service,
    SteppedClock,
    advance_until,
    deployment,
    ensure_namespace,
    managed,
    wait_for_load,
)

STATEFULSETS = "apps/v1/statefulsets"
EVENTS = "v1/events"


class Workload(Service):
    """An annotated workload of any scalable kind, its pods and the series its serving pods
    export (those its Scale's selector selects)."""

    def __init__(
        self,
        kube: Kube,
        kubelet: FakeCluster,
        metrics: exporter.Exporter,
        namespace: str,
        name: str,
        *,
        kind: targets.TargetKind,
    ) -> None:
        super().__init__(kube, kubelet, metrics, namespace, name)
        self.kind = kind
        self.ref = f"{kind.api_version}/{kind.plural}"

    @classmethod
    async def make(
        cls,
        kube: Kube,
        kubelet: FakeCluster,
        metrics: exporter.Exporter,
        namespace: str,
        name: str,
        *,
        kind: targets.TargetKind,
        annotations: dict[str, str] | None = None,
        group_size: int = 2,
    ) -> Workload:
        ensure_namespace(kube, namespace)
        notes = managed() if annotations is None else annotations
        body = deployment(name, replicas=2, annotations=notes)
        body["apiVersion"], body["kind"] = kind.api_version, kind.kind
        if kind is targets.STATEFULSETS:
            body["spec"]["serviceName"] = name
        elif kind is targets.LEADER_WORKER_SETS:
            template = body["spec"].pop("template")
            del body["spec"]["selector"]
            shape = {"size": group_size, "workerTemplate": template}
            body["spec"]["leaderWorkerTemplate"] = shape
        workload = cls(kube, kubelet, metrics, namespace, name, kind=kind)
        kube.store.create(workload.ref, body, namespace=namespace)
        await kubelet.settle()
        return workload

    @property
    def object(self) -> dict[str, Any]:
        return self.kube.store.get(self.ref, self.namespace, self.name)

    def annotate(self, **values: str) -> None:
        notes = {PREFIX + key: value for key, value in values.items()}
        self.kube.store.patch(
            self.ref,
            self.namespace,
            self.name,
            {"metadata": {"annotations": notes}},
            content_type="application/merge-patch+json",
        )

    def pods(self) -> list[str]:
        """The pods its Scale's selector selects (a LeaderWorkerSet's leaders)."""
        scale = self.kube.store.get_scale(self.ref, self.namespace, self.name)
        selector = targets.parse_selector(scale["status"]["selector"])
        return sorted(
            pod["metadata"]["name"]
            for pod in self.kube.store.list_objects("v1/pods", self.namespace)
            if selector.matches(pod["metadata"].get("labels") or {})
            and not pod["metadata"].get("deletionTimestamp")
        )

    def all_pods(self) -> list[str]:
        return sorted(
            pod["metadata"]["name"]
            for pod in self.kube.store.list_objects("v1/pods", self.namespace)
            if pod["metadata"]["name"].startswith(f"{self.name}-")
        )


def install_crd(kube: Kube, kind: targets.TargetKind) -> None:
    """Register the custom resource as its CRD declares it, with its `scale` subresource."""
    path = "." + ".".join(kind.selector_path)
    ref = LEADER_WORKER_SETS if kind is targets.LEADER_WORKER_SETS else ROLLOUTS
    kube.store.register(
        ref, kind=kind.kind, subresources=("status", "scale"), label_selector_path=path
    )


async def test_an_annotated_statefulset_under_load_scales_up_through_its_scale_subresource(
    kube: Kube,
    kubelet: FakeCluster,
    stack: Stack,
    cluster: Controllers,
    clock: SteppedClock,
    unique: str,
) -> None:
    """A StatefulSet above target is scaled up by a patch of statefulsets/scale at the version
    its replicas were read at, with its status, state and Event, while a missing CRD is skipped."""
    kubelet.add_node("gpu-1", gpus=8)
    model = await Workload.make(
        kube, kubelet, stack.upper, f"{unique}-sts", "model", kind=targets.STATEFULSETS
    )
    assert model.pods() == ["model-0", "model-1"]
    model.serve(rate_per_s=12.5)  # 25 req/s on 2 replicas, target 10 each: 3 wanted
    await wait_for_load(stack.prometheus, model, 25.0)
    ns = model.namespace
    # The first status write and the first scale write each meet a conflict: each re-reads
    # (the StatefulSet; its Scale) and is sent again.
    kube.fail("patch", "statefulsets", status=409, namespace=ns)
    kube.fail("patch", "statefulsets/scale", status=409, namespace=ns)
    # LeaderWorkerSets are not installed in this cluster: their list answers 404.
    kube.fail("list", "leaderworkersets", status=404, times=1000)

    with capture_logs() as logs:
        running = await cluster.start()
        await advance_until(clock, lambda: model.replicas == 3, limit_s=10, what="scale-up")
        await running.controller.cluster.events.wait_idle()

    absent = [e for e in logs if e["event"] == "cache.kind_absent"]
    assert [e["kind"] for e in absent] == ["leaderworkersets.leaderworkerset.x-k8s.io"]
    assert kube.requests.count("patch", "statefulsets/scale", namespace=ns) == 2
    assert kube.requests.count("get", "statefulsets/scale", namespace=ns) == 1
    assert kube.requests.count("get", "statefulsets", namespace=ns) == 1
    assert kube.requests.count("patch", "deployments/scale", namespace=ns) == 0
    status = model.status()
    assert status is not None
    assert (status["current"], status["desired"], status["kind"]) == (2, 3, "scale-up")
    assert (model.state() or {})["replicas"] == 3
    (rescaled,) = model.events("SuccessfulRescale")
    assert rescaled["involvedObject"]["kind"] == "StatefulSet"
    assert rescaled["involvedObject"]["apiVersion"] == "apps/v1"
    assert rescaled["message"].startswith("New size: 3; reason: above-target")
    assert await model.sync_pods() == ["model-0", "model-1", "model-2"]


CUSTOM_KINDS = [targets.LEADER_WORKER_SETS, targets.ROLLOUTS]


@pytest.mark.parametrize("kind", CUSTOM_KINDS, ids=[k.name for k in CUSTOM_KINDS])
async def test_a_custom_resource_with_a_scale_subresource_is_scaled_by_its_selector(
    kube: Kube,
    kubelet: FakeCluster,
    stack: Stack,
    cluster: Controllers,
    clock: SteppedClock,
    unique: str,
    kind: targets.TargetKind,
) -> None:
    """A LeaderWorkerSet (one replica: a group of pods, its leader selected) or a Rollout above
    target is scaled up through its custom `/scale`, its serving pods found by its selector."""
    install_crd(kube, kind)
    kubelet.add_node("gpu-1", gpus=8)
    model = await Workload.make(
        kube, kubelet, stack.upper, f"{unique}-{kind.name[:4]}", "model", kind=kind
    )
    size = 2 if kind is targets.LEADER_WORKER_SETS else 1
    assert len(model.pods()) == 2
    assert len(model.all_pods()) == 2 * size
    model.serve(rate_per_s=12.5)  # on the selected pods only: 25 req/s, 3 replicas wanted
    await wait_for_load(stack.prometheus, model, 25.0)
    ns = model.namespace
    kube.fail("patch", kind.plural, status=409, namespace=ns)
    kube.fail("patch", f"{kind.plural}/scale", status=409, namespace=ns)

    running = await cluster.start()
    await advance_until(clock, lambda: model.replicas == 3, limit_s=10, what="scale-up")
    await running.controller.cluster.events.wait_idle()

    assert kube.requests.count("patch", f"{kind.plural}/scale", namespace=ns) == 2
    assert kube.requests.count("get", f"{kind.plural}/scale", namespace=ns) == 1
    record = running.controller.cluster.workload(f"{ns}/model")  # type: ignore[arg-type]
    assert record is not None
    assert record.pods == frozenset(model.pods())  # the kubelet has not run since
    (rescaled,) = model.events("SuccessfulRescale")
    assert (rescaled["involvedObject"]["kind"], rescaled["involvedObject"]["apiVersion"]) == (
        kind.kind,
        kind.api_version,
    )
    await kubelet.settle()
    assert len(model.pods()) == 3
    assert len(model.all_pods()) == 3 * size
    if kind is targets.LEADER_WORKER_SETS:
        scale = kube.store.get_scale(model.ref, ns, "model")
        assert scale["status"]["selector"] == f"{LWS_NAME}=model,{LWS_WORKER_INDEX}=0"


async def test_placement_tiers_and_the_warm_up_gate_on_a_statefulset_are_refused(
    kube: Kube,
    kubelet: FakeCluster,
    stack: Stack,
    cluster: Controllers,
    clock: SteppedClock,
    unique: str,
) -> None:
    """A StatefulSet asking for MIG placement or carrying the warm-up gate gets an InvalidConfig
    Event naming the key, the value and the rule, and keeps its replicas."""
    kubelet.add_node("gpu-1", gpus=8)
    ns = f"{unique}-bad"
    placed = await Workload.make(
        kube,
        kubelet,
        stack.upper,
        ns,
        "placed",
        kind=targets.STATEFULSETS,
        annotations=managed(placement="mig", **{"model-memory": "20Gi"}),
    )
    gated = await Workload.make(kube, kubelet, stack.upper, ns, "gated", kind=targets.STATEFULSETS)
    body = copy.deepcopy(gated.object)
    body["spec"]["template"]["spec"]["readinessGates"] = [{"conditionType": PREFIX + "warm"}]
    kube.store.replace(gated.ref, ns, "gated", body)
    for workload in (placed, gated):
        workload.serve(rate_per_s=12.5)

    running = await cluster.start()
    await clock.advance(5)
    await running.controller.cluster.events.wait_idle()

    (invalid,) = placed.events("InvalidConfig")
    assert invalid["involvedObject"]["kind"] == "StatefulSet"
    assert f'{PREFIX}placement="mig"' in invalid["message"]
    assert "placement tiers are Deployment-only" in invalid["message"]
    (invalid,) = gated.events("InvalidConfig")
    assert f'{PREFIX}warm="readinessGates"' in invalid["message"]
    assert "warm-up gate and the traffic ramp are Deployment-only" in invalid["message"]
    assert (placed.replicas, gated.replicas) == (2, 2)
    assert placed.status() is None
    assert gated.status() is None
    assert kube.requests.count("patch", "statefulsets/scale", namespace=ns) == 0

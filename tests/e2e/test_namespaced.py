"""A namespaced install end to end: the API calls of a controller that lists its namespaces, held
against the RBAC of the manifests that install it that way.

The manifests are rendered as a platform team would (manifests/overlays/namespaced, on the base
or a router's overlay), their two example namespaces renamed to the test's. Each call the
controller sent to the API emulator must be granted by a ClusterRoleBinding (any namespace) or
by a RoleBinding in the call's namespace, as the API server's RBAC authoriser decides; none may
list or watch a namespaced kind across all namespaces.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

import pytest
import yaml
from deploy.support import MANIFESTS, namespaced_on, run_kustomize
from kube.emulator import ApiCall, Kube
from kube.kubelet import FakeCluster
from prom.fixtures import Stack

from .support import LEASE_NAMESPACE, Controllers, Service, SteppedClock
from .test_ramp import ISTIO, Ramped, WarmupEndpoint, endpoint

__all__ = ["endpoint"]

SERVICE_ACCOUNT = {"kind": "ServiceAccount", "name": "inference-autoscaler"}
EXAMPLE_NAMESPACES = ("serving-a", "serving-b")
"""The namespaces manifests/overlays/namespaced lists."""
CLUSTER_SCOPED = {"nodes"}
"""The cluster-scoped kinds the controller reads; every other kind it uses is namespaced."""

Rule = tuple[str, str, str]
"""(verb, API group, resource[/subresource]), as RBAC names what it grants."""


@dataclasses.dataclass(frozen=True)
class Grants:
    """What the controller's ServiceAccount may do under one install: everywhere, and per
    namespace. (Resource names are not checked: the request log does not keep them.)"""

    everywhere: frozenset[Rule]
    by_namespace: dict[str, frozenset[Rule]]

    @classmethod
    def of(cls, objects: Iterable[dict[str, Any]]) -> Grants:
        objects = list(objects)

        def rules(kind: str, name: str, namespace: str | None) -> frozenset[Rule]:
            (role,) = [
                o
                for o in objects
                if o["kind"] == kind
                and o["metadata"]["name"] == name
                and o["metadata"].get("namespace") == namespace
            ]
            return frozenset(
                (verb, group, resource)
                for rule in role["rules"]
                for group in rule["apiGroups"]
                for resource in rule["resources"]
                for verb in rule["verbs"]
            )

        def binds_the_controller(binding: dict[str, Any]) -> bool:
            return any(
                s["kind"] == SERVICE_ACCOUNT["kind"]
                and s["name"] == SERVICE_ACCOUNT["name"]
                and s.get("namespace") == LEASE_NAMESPACE
                for s in binding.get("subjects") or ()
            )

        everywhere: frozenset[Rule] = frozenset()
        by_namespace: dict[str, frozenset[Rule]] = {}
        for binding in filter(binds_the_controller, objects):
            ref = binding["roleRef"]
            if binding["kind"] == "ClusterRoleBinding":
                everywhere |= rules("ClusterRole", ref["name"], None)
            elif binding["kind"] == "RoleBinding":
                namespace = binding["metadata"]["namespace"]
                # A RoleBinding to a ClusterRole grants its rules in the binding's namespace.
                scope = None if ref["kind"] == "ClusterRole" else namespace
                granted = rules(ref["kind"], ref["name"], scope)
                by_namespace[namespace] = by_namespace.get(namespace, frozenset()) | granted
        return cls(everywhere, by_namespace)

    def allows(self, call: ApiCall) -> bool:
        resource = f"{call.resource}/{call.subresource}" if call.subresource else call.resource
        rule = (call.verb, call.group, resource)
        if rule in self.everywhere:
            return True
        return call.namespace is not None and rule in self.by_namespace.get(call.namespace, ())


def install(rendered: str, namespaces: Iterable[str]) -> list[dict[str, Any]]:
    """The rendered objects, the example's managed namespaces renamed to `namespaces`."""
    renamed = dict(zip(EXAMPLE_NAMESPACES, namespaces, strict=True))
    objects = [d for d in yaml.safe_load_all(rendered) if isinstance(d, dict)]
    for obj in objects:
        metadata = obj["metadata"]
        if metadata.get("namespace") in renamed:
            metadata["namespace"] = renamed[metadata["namespace"]]
    return objects


def refused(grants: Grants, calls: Iterable[ApiCall]) -> list[ApiCall]:
    return sorted((c for c in calls if not grants.allows(c)), key=repr)


def cluster_wide(calls: Iterable[ApiCall]) -> list[ApiCall]:
    """The calls on a namespaced kind that named no namespace (a list or watch of them all)."""
    return sorted(
        (c for c in calls if c.namespace is None and c.resource not in CLUSTER_SCOPED), key=repr
    )


def test_the_grants_model_refuses_what_rbac_refuses() -> None:
    """Under the namespaced example, a write in a listed namespace is granted, the same write
    elsewhere or a list across all namespaces is not, and nodes are read everywhere."""
    grants = Grants.of(install(run_kustomize(MANIFESTS / "overlays/namespaced"), ["a", "b"]))
    assert grants.allows(ApiCall("patch", "apps", "deployments", "scale", "a"))
    assert grants.allows(ApiCall("create", "", "events", "", "b"))
    assert grants.allows(ApiCall("list", "", "nodes", "", None))
    assert grants.allows(ApiCall("update", "coordination.k8s.io", "leases", "", LEASE_NAMESPACE))
    assert not grants.allows(ApiCall("patch", "apps", "deployments", "scale", "kube-system"))
    assert not grants.allows(ApiCall("list", "", "pods", "", None))
    assert not grants.allows(ApiCall("update", "coordination.k8s.io", "leases", "", "a"))


async def test_a_namespaced_controller_needs_only_the_namespaced_grants(
    kube: Kube,
    kubelet: FakeCluster,
    stack: Stack,
    cluster: Controllers,
    unique: str,
    endpoint: WarmupEndpoint,
) -> None:
    """A controller listing two namespaces ramps an Istio service in one and scales a plain one
    in the other, with only calls the namespaced Istio install grants, none across all
    namespaces and none in a third namespace it does not list."""
    kubelet.add_node("gpu-1", gpus=8)
    chat = await Ramped.make(cluster, kubelet, stack, f"{unique}-a", ISTIO, endpoint)
    plain = await Service.create(kube, kubelet, stack.upper, f"{unique}-b", "chat", replicas=1)
    outside = await Service.create(kube, kubelet, stack.upper, f"{unique}-c", "chat", replicas=1)
    listed = [chat.namespace, plain.namespace]

    first = chat.pods()
    chat.serve_pods(first, rate_per_s=17.5)
    running = await cluster.start(namespaces=",".join(listed))
    await chat.run_until(lambda: chat.stable() == first, limit_s=30, what="the first promotion")
    await chat.wait_for_rate(first, 35.0)
    await chat.run_until(lambda: chat.replicas == 4, limit_s=5, what="the scale-up")
    await kubelet.settle()
    new = sorted(set(chat.pods()) - set(first))
    chat.serve_pods(new, rate_per_s=10.0)
    await chat.wait_for_rate(new, 20.0)
    await chat.run_until(
        lambda: chat.stable() == sorted(first + new), limit_s=60, what="the ramp's promotion"
    )
    await running.controller.cluster.events.wait_idle()
    await running.stop()

    assert (plain.replicas, outside.replicas) == (2, 1)
    calls = set(kube.requests.counts)
    assert chat.weights() == {"stable": 100, "warming": 0}
    assert cluster_wide(calls) == []
    assert [c for c in calls if c.namespace == outside.namespace] == []
    grants = Grants.of(install(namespaced_on("overlays/istio"), listed))
    assert refused(grants, calls) == []
    assert {c.verb for c in calls if c.resource == "virtualservices"} >= {"create", "patch"}


@pytest.mark.parametrize("namespaced", [False, True], ids=["cluster-wide", "namespaced"])
async def test_a_dry_run_controller_needs_only_the_dry_run_reads(
    kube: Kube,
    kubelet: FakeCluster,
    stack: Stack,
    cluster: Controllers,
    clock: SteppedClock,
    unique: str,
    namespaced: bool,
) -> None:
    """A dry-run controller deciding for a service below its minimum makes only the calls the
    read-only dry-run install grants, cluster-wide or namespaced."""
    kubelet.add_node("gpu-1", gpus=8)
    plain = await Service.create(kube, kubelet, stack.upper, f"{unique}-d", "chat", replicas=1)
    other = await Service.create(kube, kubelet, stack.upper, f"{unique}-e", "chat", replicas=1)
    listed = [plain.namespace, other.namespace]
    settings: dict[str, Any] = {"namespaces": ",".join(listed)} if namespaced else {}

    running = await cluster.start(dry_run=True, **settings)
    await clock.advance(5)
    metrics = running.controller.telemetry.exposition().decode()
    assert "autoscaler_managed_services 2.0" in metrics
    await running.stop()

    calls = set(kube.requests.counts)
    if namespaced:
        grants = Grants.of(install(namespaced_on("overlays/dry-run"), listed))
        assert cluster_wide(calls) == []
    else:
        grants = Grants.of(install(run_kustomize(MANIFESTS / "overlays/dry-run"), listed))
    assert refused(grants, calls) == []
    assert (plain.replicas, other.replicas) == (1, 1)

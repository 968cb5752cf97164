"""The Gateway API router: the two set Services, the HTTPRoute, and `settled`."""

from __future__ import annotations

from typing import Any

import pytest
from kube.emulator import Kube
from kube.patching import MERGE
from kubernetes_asyncio import client

from autoscaler.adapters.mesh import _objects, gateway

from .support import HTTP_ROUTES, NS, SERVICES, service, target

pytestmark = pytest.mark.usefixtures("owner")

WEB = target()
ROUTE = "web-autoscaler"


def accepted(status: str, generation: int, controller: str = "example.net/mesh") -> dict[str, Any]:
    """One `status.parents` entry, as a mesh's route controller writes it."""
    return {
        "parentRef": {"group": "", "kind": "Service", "name": "web", "sectionName": "http"},
        "controllerName": controller,
        "conditions": [
            {
                "type": "Accepted",
                "status": status,
                "reason": "Accepted" if status == "True" else "NotAllowedByListeners",
                "observedGeneration": generation,
                "lastTransitionTime": "2025-06-15T00:00:00Z",
                "message": "",
            }
        ],
    }


def report(kube: Kube, *parents: dict[str, Any]) -> None:
    body = {"status": {"parents": list(parents)}}
    kube.store.patch(HTTP_ROUTES, NS, ROUTE, body, content_type=MERGE, subresource="status")


async def test_the_set_services_select_the_owners_pods_plus_the_set_label(
    kube: Kube, api: client.ApiClient
) -> None:
    """Each set Service is the owner's selector plus its label, with the owner's ports."""
    await gateway.GatewayRouter(api).ensure(WEB)

    for which in ("stable", "warming"):
        spec = kube.store.get(SERVICES, NS, f"web-{which}")["spec"]
        assert spec["type"] == "ClusterIP"
        assert spec["selector"] == {"app": "web", f"autoscaler.dsec.io/{which}": "true"}
        assert [(p["name"], p["port"], p["targetPort"]) for p in spec["ports"]] == [
            ("metrics", 9090, 9090),
            ("http", 80, 8000),
        ]


async def test_the_route_attaches_to_the_owners_service_on_its_http_port(
    kube: Kube, api: client.ApiClient
) -> None:
    """The parentRef is the Service's HTTP port; both backends use that port."""
    await gateway.GatewayRouter(api).ensure(WEB)

    spec = kube.store.get(HTTP_ROUTES, NS, ROUTE)["spec"]
    assert spec["parentRefs"] == [
        {"group": "", "kind": "Service", "name": "web", "sectionName": "http"}
    ]
    (rule,) = spec["rules"]
    assert [(b["kind"], b["name"], b["port"]) for b in rule["backendRefs"]] == [
        ("Service", "web-stable", 80),
        ("Service", "web-warming", 80),
    ]


async def test_an_unnamed_single_port_is_routed_without_a_section(
    kube: Kube, api: client.ApiClient
) -> None:
    """A Service with one unnamed port gets a parentRef to the whole Service."""
    kube.store.delete(SERVICES, NS, "web")
    kube.store.create(SERVICES, service(ports=[{"port": 8000}]), namespace=NS)

    await gateway.GatewayRouter(api).ensure(WEB)

    spec = kube.store.get(HTTP_ROUTES, NS, ROUTE)["spec"]
    assert spec["parentRefs"] == [{"group": "", "kind": "Service", "name": "web"}]
    assert {b["port"] for b in spec["rules"][0]["backendRefs"]} == {8000}


async def test_a_service_without_ports_is_a_clear_error(kube: Kube, api: client.ApiClient) -> None:
    """Nothing can be routed to a Service without ports: `RouteError`, no route."""
    kube.store.delete(SERVICES, NS, "web")
    kube.store.create(SERVICES, service(ports=[]), namespace=NS)

    with pytest.raises(_objects.RouteError, match="has no port to route"):
        await gateway.GatewayRouter(api).ensure(WEB)

    assert kube.store.list_objects(HTTP_ROUTES, NS) == []


async def test_ensure_follows_the_owners_ports(kube: Kube, api: client.ApiClient) -> None:
    """When the owner's Service changes its ports, ensure patches the set Services."""
    router = gateway.GatewayRouter(api)
    await router.ensure(WEB)
    ports = [{"name": "http", "port": 8080, "targetPort": 8000, "protocol": "TCP"}]
    kube.store.patch(SERVICES, NS, "web", {"spec": {"ports": ports}}, content_type=MERGE)

    await router.ensure(WEB)

    for which in ("stable", "warming"):
        assert kube.store.get(SERVICES, NS, f"web-{which}")["spec"]["ports"] == ports
    backends = kube.store.get(HTTP_ROUTES, NS, ROUTE)["spec"]["rules"][0]["backendRefs"]
    assert {b["port"] for b in backends} == {8080}


async def test_settled_waits_for_accepted_at_the_current_generation(
    kube: Kube, api: client.ApiClient
) -> None:
    """Settled is False until every parent accepted the route's current generation."""
    router = gateway.GatewayRouter(api)
    assert not await router.settled(WEB)

    await router.ensure(WEB)
    assert not await router.settled(WEB)  # no controller has said anything
    report(kube, accepted("True", 1))
    assert await router.settled(WEB)

    await router.set_weights(WEB, 10)
    assert kube.store.get(HTTP_ROUTES, NS, ROUTE)["metadata"]["generation"] == 2
    assert not await router.settled(WEB)  # the acceptance is of the old weights
    report(kube, accepted("True", 2), accepted("False", 2, "example.net/other"))
    assert not await router.settled(WEB)
    report(kube, accepted("True", 2), accepted("True", 2, "example.net/other"))
    assert await router.settled(WEB)

    await router.set_weights(WEB, 10)  # the same weights: no new generation
    assert await router.settled(WEB)


async def test_release_deletes_only_set_services_it_owns(kube: Kube, api: client.ApiClient) -> None:
    """Our label on another Deployment's Services, or our name without it, keeps them."""
    for name, labels, owners in (
        ("api-stable", {"app.kubernetes.io/managed-by": "inference-autoscaler"}, "api"),
        ("web-v0-warming", {}, "web"),
    ):
        reference = {"apiVersion": "apps/v1", "kind": "Deployment", "name": owners, "uid": "x"}
        kube.store.create(
            SERVICES,
            {
                "metadata": {"name": name, "labels": labels, "ownerReferences": [reference]},
                "spec": {"selector": {"app": owners}, "ports": [{"port": 80}]},
            },
            namespace=NS,
        )
    router = gateway.GatewayRouter(api)
    await router.ensure(WEB)

    await router.release(WEB)

    left = {obj["metadata"]["name"] for obj in kube.store.list_objects(SERVICES, NS)}
    assert left == {"web", "api-stable", "web-v0-warming"}

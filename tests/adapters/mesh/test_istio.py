"""The Istio router: DestinationRule subsets, VirtualService weights, and `settled`."""

from __future__ import annotations

from typing import Any

import pytest
from kube.emulator import Kube
from kube.patching import MERGE
from kubernetes_asyncio import client

from autoscaler.adapters.mesh import istio

from .support import DESTINATION_RULES, NS, VIRTUAL_SERVICES, target

pytestmark = pytest.mark.usefixtures("owner")

WEB = target()
HOST = "web.default.svc.cluster.local"


def reconciled(kube: Kube, status: str, generation: int) -> None:
    """Model istiod's status writer (PILOT_ENABLE_STATUS) on our VirtualService."""
    condition = {"type": "Reconciled", "status": status, "observedGeneration": generation}
    body: dict[str, Any] = {"status": {"conditions": [condition]}}
    kube.store.patch(
        VIRTUAL_SERVICES, NS, "web-autoscaler", body, content_type=MERGE, subresource="status"
    )


async def test_the_rule_and_the_route_name_the_services_host_and_the_two_subsets(
    kube: Kube, api: client.ApiClient
) -> None:
    """The DestinationRule's subsets select the set labels; the route's destinations use them."""
    await istio.IstioRouter(api).ensure(WEB)

    rule = kube.store.get(DESTINATION_RULES, NS, "web-autoscaler")["spec"]
    assert rule == {
        "host": HOST,
        "subsets": [
            {"name": "stable", "labels": {"autoscaler.dsec.io/stable": "true"}},
            {"name": "warming", "labels": {"autoscaler.dsec.io/warming": "true"}},
        ],
    }
    route = kube.store.get(VIRTUAL_SERVICES, NS, "web-autoscaler")["spec"]
    assert route["hosts"] == [HOST]
    assert "gateways" not in route
    (http,) = route["http"]
    assert [(d["destination"]["host"], d["destination"]["subset"]) for d in http["route"]] == [
        (HOST, "stable"),
        (HOST, "warming"),
    ]


async def test_the_cluster_domain_and_api_version_are_settings(
    kube: Kube, api: client.ApiClient
) -> None:
    """An older mesh gets `v1beta1` objects; another cluster domain changes the host."""
    for plural, kind in (
        ("virtualservices", "VirtualService"),
        ("destinationrules", "DestinationRule"),
    ):
        kube.store.register(f"networking.istio.io/v1beta1/{plural}", kind=kind)
    router = istio.IstioRouter(api, version="v1beta1", cluster_domain="corp.internal")
    await router.ensure(WEB)

    stored = kube.store.get("networking.istio.io/v1beta1/virtualservices", NS, "web-autoscaler")
    assert stored["apiVersion"] == "networking.istio.io/v1beta1"
    assert stored["spec"]["hosts"] == ["web.default.svc.corp.internal"]


async def test_ensure_repairs_a_drifted_route_and_keeps_its_weights(
    kube: Kube, api: client.ApiClient
) -> None:
    """A route edited by hand gets its host back, at the weights it held."""
    router = istio.IstioRouter(api)
    await router.ensure(WEB)
    await router.set_weights(WEB, 30)
    kube.store.patch(
        VIRTUAL_SERVICES, NS, "web-autoscaler", {"spec": {"hosts": ["wrong"]}}, content_type=MERGE
    )

    await router.ensure(WEB)

    spec = kube.store.get(VIRTUAL_SERVICES, NS, "web-autoscaler")["spec"]
    assert spec["hosts"] == [HOST]
    assert [d["weight"] for d in spec["http"][0]["route"]] == [70, 30]


async def test_settled_follows_istios_reconciled_condition(
    kube: Kube, api: client.ApiClient
) -> None:
    """Without status reporting the route counts as settled; with it, only when reconciled."""
    router = istio.IstioRouter(api)
    assert not await router.settled(WEB)  # nothing to settle yet

    await router.ensure(WEB)
    assert await router.settled(WEB)

    await router.set_weights(WEB, 10)  # generation 2
    reconciled(kube, "False", 2)
    assert not await router.settled(WEB)
    reconciled(kube, "True", 1)
    assert not await router.settled(WEB)
    reconciled(kube, "True", 2)
    assert await router.settled(WEB)


async def test_a_clusterip_service_beats_a_headless_one(kube: Kube, api: client.ApiClient) -> None:
    """A headless Service over the same pods loses to the ClusterIP one."""
    kube.store.create(
        "v1/services",
        {
            "metadata": {"name": "a-headless"},
            "spec": {"clusterIP": "None", "selector": {"app": "web"}, "ports": [{"port": 80}]},
        },
        namespace=NS,
    )

    await istio.IstioRouter(api).ensure(WEB)

    assert kube.store.get(VIRTUAL_SERVICES, NS, "web-autoscaler")["spec"]["hosts"] == [HOST]

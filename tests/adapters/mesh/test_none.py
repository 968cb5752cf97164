"""The `none` router and the registry that builds one router per annotation value."""

from __future__ import annotations

from kube.emulator import Kube
from kubernetes_asyncio import client

from autoscaler.adapters.mesh import gateway, istio, none, registry, smi
from autoscaler.contract import annotations as contract

from .support import target


async def test_none_touches_nothing_and_is_always_settled(kube: Kube) -> None:
    """Every call is a no-op with no API request; settled is True."""
    router = none.NoRouter()
    web = target()

    await router.ensure(web)
    await router.set_weights(web, 30)
    assert await router.settled(web)
    await router.release(web)

    assert kube.requests.count() == 0


def test_the_registry_has_a_router_for_every_annotation_value(api: client.ApiClient) -> None:
    """Each `traffic-router` value maps to its router."""
    built = registry.routers(api)

    assert set(built) == set(contract.TrafficRouter)
    assert isinstance(built[contract.TrafficRouter.NONE], none.NoRouter)
    assert isinstance(built[contract.TrafficRouter.ISTIO], istio.IstioRouter)
    assert isinstance(built[contract.TrafficRouter.GATEWAY_API], gateway.GatewayRouter)
    assert isinstance(built[contract.TrafficRouter.SMI], smi.SmiRouter)

"""The SMI router: the TrafficSplit's root service, backends and version."""

from __future__ import annotations

import pytest
from kube.emulator import Kube
from kubernetes_asyncio import client

from autoscaler.adapters.mesh import smi

from .support import NS, SERVICES, TRAFFIC_SPLITS, target

pytestmark = pytest.mark.usefixtures("owner")

WEB = target()


async def test_the_split_has_the_owners_service_as_root_and_the_sets_as_backends(
    kube: Kube, api: client.ApiClient
) -> None:
    """Root `web`, backends `web-stable` and `web-warming`, which select the two sets."""
    await smi.SmiRouter(api).ensure(WEB)

    stored = kube.store.get(TRAFFIC_SPLITS, NS, "web-autoscaler")
    assert stored["apiVersion"] == "split.smi-spec.io/v1alpha2"
    assert stored["spec"] == {
        "service": "web",
        "backends": [
            {"service": "web-stable", "weight": 100},
            {"service": "web-warming", "weight": 0},
        ],
    }
    selector = kube.store.get(SERVICES, NS, "web-warming")["spec"]["selector"]
    assert selector == {"app": "web", "autoscaler.dsec.io/warming": "true"}


async def test_a_later_version_is_a_setting(kube: Kube, api: client.ApiClient) -> None:
    """`v1alpha4` writes the same fields under its own apiVersion."""
    kube.store.register("split.smi-spec.io/v1alpha4/trafficsplits", kind="TrafficSplit")
    router = smi.SmiRouter(api, version="v1alpha4")
    await router.ensure(WEB)
    await router.set_weights(WEB, 30)

    stored = kube.store.get("split.smi-spec.io/v1alpha4/trafficsplits", NS, "web-autoscaler")
    assert stored["apiVersion"] == "split.smi-spec.io/v1alpha4"
    assert [b["weight"] for b in stored["spec"]["backends"]] == [70, 30]


def test_weights_as_quantities_are_not_supported(api: client.ApiClient) -> None:
    """`v1alpha1` (weights as quantities) is refused at construction."""
    with pytest.raises(ValueError, match="v1alpha1"):
        smi.SmiRouter(api, version="v1alpha1")


async def test_settled_once_the_split_exists(api: client.ApiClient) -> None:
    """SMI has no status: settled is whether the TrafficSplit is there."""
    router = smi.SmiRouter(api)
    assert not await router.settled(WEB)
    await router.ensure(WEB)
    assert await router.settled(WEB)

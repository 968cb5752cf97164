"""The API calls each router makes over a whole ramp: the RBAC rules the controller needs."""

from __future__ import annotations

import pytest
from kube.emulator import Kube
from kube.patching import MERGE
from kubernetes_asyncio import client

from .support import GATEWAY, ISTIO, NS, SERVICES, SMI, Kit, service, target

pytestmark = pytest.mark.usefixtures("owner")

WEB = target()
READ_OWNER = {("list", "", "services"), ("get", "", "services"), ("get", "apps", "deployments")}
SET_SERVICES = {
    ("list", "", "services"),
    ("get", "", "services"),
    ("create", "", "services"),
    ("patch", "", "services"),
    ("delete", "", "services"),
}


def crud(group: str, resource: str) -> set[tuple[str, str, str]]:
    return {(verb, group, resource) for verb in ("get", "create", "patch", "delete")}


EXPECTED = {
    ISTIO.name: READ_OWNER
    | crud("networking.istio.io", "destinationrules")
    | crud("networking.istio.io", "virtualservices"),
    GATEWAY.name: READ_OWNER | SET_SERVICES | crud("gateway.networking.k8s.io", "httproutes"),
    SMI.name: READ_OWNER | SET_SERVICES | crud("split.smi-spec.io", "trafficsplits"),
}


@pytest.mark.parametrize("kit", [ISTIO, GATEWAY, SMI], ids=[ISTIO.name, GATEWAY.name, SMI.name])
async def test_a_whole_ramp_uses_exactly_these_rules(
    kit: Kit, kube: Kube, api: client.ApiClient
) -> None:
    """Ensure, owner changes, every step, settled and release need exactly the listed rules."""
    router = kit.router(api)
    await router.ensure(WEB)
    ports = [{"name": "http", "port": 8080, "targetPort": 8000}]
    kube.store.patch(SERVICES, NS, "web", {"spec": {"ports": ports}}, content_type=MERGE)
    await router.ensure(WEB)
    kube.store.delete(SERVICES, NS, "web")
    kube.store.create(SERVICES, service("web-v2"), namespace=NS)
    await router.ensure(WEB)
    for pct in (10, 30, 50, 100, 0):
        await router.set_weights(WEB, pct)
        await router.settled(WEB)
    await router.release(WEB)

    assert kube.requests.rules() == EXPECTED[kit.name]

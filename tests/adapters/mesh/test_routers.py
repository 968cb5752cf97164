"""What every mesh router does the same way, run against each of Istio, Gateway API and SMI."""

from __future__ import annotations

from typing import Any

import pytest
from kube.emulator import Kube
from kubernetes_asyncio import client

from autoscaler import errors
from autoscaler.adapters.kubernetes._api import Caller, KubeApiError, NotLeaderError
from autoscaler.adapters.mesh import _objects

from .support import KITS, MANAGED, NS, SERVICES, Kit, service, target

pytestmark = [
    pytest.mark.usefixtures("owner"),
    pytest.mark.parametrize("kit", KITS, ids=[kit.name for kit in KITS]),
]

ROUTE = "web-autoscaler"
WEB = target()


def ours(kube: Kube, kit: Kit) -> list[dict[str, Any]]:
    """Every object the router should have created for `web`, route last."""
    found = [kube.store.get(ref, NS, name) for ref, name in kit.companions]
    return [*found, kube.store.get(kit.route, NS, ROUTE)]


def exists(kube: Kube, ref: str, name: str) -> bool:
    return any(obj["metadata"]["name"] == name for obj in kube.store.list_objects(ref, NS))


async def test_ensure_creates_the_objects_with_all_traffic_on_stable(
    kit: Kit, kube: Kube, api: client.ApiClient, owner: dict[str, Any]
) -> None:
    """Ensure creates every object labelled and owned by the Deployment, stable at 100."""
    await kit.router(api).ensure(WEB)

    for obj in ours(kube, kit):
        meta = obj["metadata"]
        assert meta["labels"] == MANAGED
        (reference,) = meta["ownerReferences"]
        assert reference["kind"] == "Deployment"
        assert reference["name"] == "web"
        assert reference["uid"] == owner["metadata"]["uid"]
    route = kube.store.get(kit.route, NS, ROUTE)
    assert kit.split_of(route) == {"stable": 100, "warming": 0}
    assert kit.root_of(route) == "web"


async def test_set_weights_walks_the_steps_and_back(
    kit: Kit, kube: Kube, api: client.ApiClient
) -> None:
    """Each step stores exactly its weights, summing to 100, and a repeat writes nothing."""
    router = kit.router(api)
    await router.ensure(WEB)
    resource = kit.route.rsplit("/", 1)[1]

    for pct in (10, 30, 50, 100, 0):
        await router.set_weights(WEB, pct)
        stored = kit.split_of(kube.store.get(kit.route, NS, ROUTE))
        assert stored == {"stable": 100 - pct, "warming": pct}
        assert sum(stored.values()) == 100

    patches = kube.requests.count("patch", resource)
    await router.set_weights(WEB, 0)
    assert kube.requests.count("patch", resource) == patches == 5


async def test_ensure_is_idempotent_across_a_restart(
    kit: Kit, kube: Kube, api: client.ApiClient
) -> None:
    """A new router instance's ensure writes nothing and keeps a ramp where it was."""
    first = kit.router(api)
    await first.ensure(WEB)
    await first.set_weights(WEB, 30)
    before = ours(kube, kit)
    kube.requests.clear()

    restarted = kit.router(api)
    await restarted.ensure(WEB)
    await restarted.ensure(WEB)

    assert kube.requests.count("create") == kube.requests.count("patch") == 0
    assert ours(kube, kit) == before
    assert kit.split_of(before[-1]) == {"stable": 70, "warming": 30}


async def test_the_owners_other_routes_are_untouched(
    kit: Kit, kube: Kube, api: client.ApiClient
) -> None:
    """The owner's own mesh objects come out of a whole ramp exactly as they went in."""
    theirs = [
        (
            "networking.istio.io/v1/virtualservices",
            {
                "hosts": ["web.example.com"],
                "gateways": ["public"],
                "http": [{"route": [{"destination": {"host": "web.default.svc.cluster.local"}}]}],
            },
        ),
        ("networking.istio.io/v1/destinationrules", {"host": "web.default.svc.cluster.local"}),
        (
            "gateway.networking.k8s.io/v1/httproutes",
            {
                "parentRefs": [{"name": "public"}],
                "hostnames": ["web.example.com"],
                "rules": [{"backendRefs": [{"name": "web", "port": 80}]}],
            },
        ),
        (
            "split.smi-spec.io/v1alpha2/trafficsplits",
            {"service": "other", "backends": [{"service": "other-v1", "weight": 100}]},
        ),
    ]
    for ref, spec in theirs:
        kube.store.create(ref, {"metadata": {"name": "web"}, "spec": spec}, namespace=NS)
    before = [kube.store.get(ref, NS, "web") for ref, _ in theirs]

    router = kit.router(api)
    await router.ensure(WEB)
    for pct in (10, 50, 100):
        await router.set_weights(WEB, pct)
    await router.release(WEB)

    assert [kube.store.get(ref, NS, "web") for ref, _ in theirs] == before


async def test_release_removes_only_what_it_created(
    kit: Kit, kube: Kube, api: client.ApiClient
) -> None:
    """Release deletes the router's objects and leaves the owner's Service and Deployment."""
    router = kit.router(api)
    await router.ensure(WEB)
    await router.set_weights(WEB, 50)
    owners_service = kube.store.get(SERVICES, NS, "web")

    await router.release(WEB)
    await router.release(WEB)  # nothing left: a no-op

    assert not exists(kube, kit.route, ROUTE)
    for ref, name in kit.companions:
        assert not exists(kube, ref, name)
    assert kube.store.get(SERVICES, NS, "web") == owners_service
    assert kube.store.get("apps/v1/deployments", NS, "web")


async def test_release_leaves_an_object_of_its_name_that_is_not_its_own(
    kit: Kit, kube: Kube, api: client.ApiClient
) -> None:
    """An object under the router's name without its label survives release."""
    kube.store.create(kit.route, {"metadata": {"name": ROUTE}, "spec": {}}, namespace=NS)

    await kit.router(api).release(WEB)

    assert exists(kube, kit.route, ROUTE)


async def test_ensure_refuses_a_name_taken_by_someone_else(
    kit: Kit, kube: Kube, api: client.ApiClient
) -> None:
    """Ensure raises `RouteError` naming the object and leaves it as it was."""
    kube.store.create(kit.route, {"metadata": {"name": ROUTE}, "spec": {}}, namespace=NS)
    before = kube.store.get(kit.route, NS, ROUTE)

    with pytest.raises(_objects.RouteError, match=f"{ROUTE} exists and is not managed"):
        await kit.router(api).ensure(WEB)

    assert kube.store.get(kit.route, NS, ROUTE) == before


async def test_a_create_lost_to_another_writer_is_read_and_kept(
    kit: Kit, kube: Kube, api: client.ApiClient
) -> None:
    """A 409 on create reads the object the other writer made and goes on."""
    await kit.router(api).ensure(WEB)
    await kit.router(api).set_weights(WEB, 30)
    resource = kit.route.rsplit("/", 1)[1]
    # The read finds nothing (the other writer's create has not landed), the create then loses.
    kube.fail("get", resource, status=404, name=ROUTE)

    await kit.router(api).ensure(WEB)

    assert kube.requests.count("create", resource) == 2
    assert kit.split_of(kube.store.get(kit.route, NS, ROUTE)) == {"stable": 70, "warming": 30}


async def test_ensure_finds_the_owners_service_again_after_it_is_replaced(
    kit: Kit, kube: Kube, api: client.ApiClient
) -> None:
    """When the cached Service is gone (404), ensure finds the new one and routes through it."""
    router = kit.router(api)
    await router.ensure(WEB)
    kube.store.delete(SERVICES, NS, "web")
    kube.store.create(SERVICES, service("web-v2"), namespace=NS)

    await router.ensure(WEB)

    assert kit.root_of(kube.store.get(kit.route, NS, ROUTE)) == "web-v2"


async def test_no_service_selecting_the_pods_is_a_clear_error(
    kit: Kit, kube: Kube, api: client.ApiClient
) -> None:
    """Without a Service over the pods, ensure raises `RouteError` and creates nothing."""
    kube.store.delete(SERVICES, NS, "web")
    kube.store.create(SERVICES, service("other", {"app": "other"}), namespace=NS)

    with pytest.raises(_objects.RouteError, match="no Service in namespace default selects"):
        await kit.router(api).ensure(WEB)

    assert kube.requests.count("create") == 0


async def test_set_weights_before_ensure_is_a_clear_error(
    kit: Kit, kube: Kube, api: client.ApiClient
) -> None:
    """Weights for a route that does not exist raise `RouteError` and create nothing."""
    with pytest.raises(_objects.RouteError, match="ensure"):
        await kit.router(api).set_weights(WEB, 10)

    assert kube.requests.count("create") == 0


async def test_a_percentage_outside_0_to_100_is_refused(
    kit: Kit, kube: Kube, api: client.ApiClient
) -> None:
    """A bad percentage raises ValueError before any call."""
    router = kit.router(api)
    await router.ensure(WEB)
    kube.requests.clear()

    for pct in (-1, 101, 12.5, True):
        with pytest.raises(ValueError, match="warming_pct"):
            await router.set_weights(WEB, pct)  # type: ignore[arg-type]

    assert kube.requests.count() == 0


async def test_api_errors_become_actuation_errors_and_are_counted(
    kit: Kit, kube: Kube, api: client.ApiClient
) -> None:
    """A refused create leaves as `KubeApiError` with its status, counted by operation."""
    failed: list[str] = []
    resource = kit.route.rsplit("/", 1)[1]
    kube.fail("create", resource, status=403, message="forbidden by the test")

    with pytest.raises(KubeApiError) as raised:
        await kit.router(api, calls=Caller(on_error=failed.append)).ensure(WEB)

    assert isinstance(raised.value, errors.ActuationError)
    assert raised.value.status == 403
    assert "forbidden by the test" in str(raised.value)
    assert failed == [f"{resource}.create"]


async def test_a_follower_writes_nothing(kit: Kit, kube: Kube, api: client.ApiClient) -> None:
    """A router whose fence says no raises `NotLeaderError` before any write."""
    with pytest.raises(NotLeaderError):
        await kit.router(api, calls=Caller(fence=lambda _: False)).ensure(WEB)

    assert kube.requests.count("create") == kube.requests.count("patch") == 0

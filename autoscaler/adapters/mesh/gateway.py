"""Gateway API: two Services over the traffic sets and an HTTPRoute weighting them
(docs/architecture.md, "The warm-up gate and the traffic ramp").

For a target whose owner's Service is `<svc>`, in the Deployment's namespace:

- Services `<svc>-stable` and `<svc>-warming`: the owner's selector plus the set's label
  (`autoscaler.dsec.io/stable` or `/warming: "true"`), the owner's ports, type ClusterIP;
- an HTTPRoute `<deployment>-autoscaler` whose one rule sends the Service's traffic to the two,
  with weights summing to 100.

The contract with the owner: our HTTPRoute attaches to the owner's Service (a `Service`
parentRef: Gateway API for service mesh, "GAMMA", Standard channel since v1.1) on the port that
speaks HTTP (by name or appProtocol, else the first; named ports by `sectionName`), so every mesh
client calling the Service is split, and nothing of the owner's changes. The owner's own
HTTPRoutes are never read or touched: one attached to a Gateway keeps sending that Gateway's
traffic to the Service, which is split only where the implementation applies Service routes to
gateway traffic too. No setting moves our route onto the owner's Gateway.

`settled` is True only when `status.parents` is non-empty and every parent there reports
`Accepted` True with `observedGeneration` equal to the route's current `metadata.generation`:
the controller(s) implementing the route have seen the last weights written.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from kubernetes_asyncio import client

from autoscaler import ports
from autoscaler.adapters.kubernetes import _api
from autoscaler.adapters.kubernetes._api import Obj
from autoscaler.adapters.mesh import _objects
from autoscaler.adapters.mesh._objects import STABLE, WARMING

__all__ = ["HTTP_ROUTES", "GatewayRouter", "accepted"]

HTTP_ROUTES: Final = _objects.Resource("gateway.networking.k8s.io", "v1", "httproutes", "HTTPRoute")


class GatewayRouter:
    """`ports.TrafficRouter` on the Gateway API; see the module docstring."""

    def __init__(
        self,
        api: client.ApiClient,
        *,
        calls: _api.Caller | None = None,
    ) -> None:
        self._mesh = _objects.MeshClient(api, calls)

    async def ensure(self, target: ports.RouteTarget) -> None:
        """Create the two Services, then the HTTPRoute with all traffic on stable; an existing
        HTTPRoute keeps its weights."""
        owner = await self._mesh.owner_service(target, verify=True)
        port = _route_port(target, owner)
        await self._mesh.converge(
            target,
            [
                *self._mesh.set_services(owner),
                (
                    HTTP_ROUTES,
                    _objects.route_name(target),
                    lambda stored: route_spec(owner, port, *_weights_or_stable(owner, stored)),
                ),
            ],
        )

    async def set_weights(self, target: ports.RouteTarget, warming_pct: int) -> None:
        """Patch the HTTPRoute's backend weights when they differ from `warming_pct`."""
        stable, warming = _objects.split(warming_pct)
        stored = await self._mesh.route(HTTP_ROUTES, target)
        owner = await self._mesh.owner_service(target, verify=False)
        spec = route_spec(owner, _route_port(target, owner), stable, warming)
        await self._mesh.patch_spec(HTTP_ROUTES, target, stored, spec)

    async def settled(self, target: ports.RouteTarget) -> bool:
        stored = await self._mesh.get_ours(HTTP_ROUTES, target, _objects.route_name(target))
        return stored is not None and accepted(stored)

    async def release(self, target: ports.RouteTarget) -> None:
        """Delete the HTTPRoute, then the two Services it sent traffic to."""
        await self._mesh.delete_ours(HTTP_ROUTES, target, _objects.route_name(target))
        await self._mesh.delete_set_services(target)
        self._mesh.forget(target)


def accepted(route: Mapping[str, Any]) -> bool:
    """Whether every parent in `status.parents` accepted the route's current generation."""
    generation = _api.meta(route).get("generation")
    parents = _api.status(route).get("parents")
    if not isinstance(parents, list) or not parents:
        return False
    for parent in parents:
        conditions = parent.get("conditions") if isinstance(parent, dict) else None
        condition = next(
            (c for c in conditions or () if isinstance(c, dict) and c.get("type") == "Accepted"),
            None,
        )
        if condition is None or condition.get("status") != "True":
            return False
        if generation is None or condition.get("observedGeneration") != generation:
            return False
    return True


def route_spec(owner: _objects.OwnerService, port: Obj, stable: int, warming: int) -> Obj:
    parent: Obj = {"group": "", "kind": "Service", "name": owner.name}
    if port.get("name"):
        parent["sectionName"] = port["name"]
    return {
        "parentRefs": [parent],
        "rules": [
            {
                "backendRefs": [
                    _backend(_objects.set_service_name(owner.name, STABLE), port, stable),
                    _backend(_objects.set_service_name(owner.name, WARMING), port, warming),
                ]
            }
        ],
    }


def weights(route: Mapping[str, Any]) -> dict[str, int]:
    """Weight by backend Service name in the route's first rule."""
    rules = _api.spec(route).get("rules")
    first = rules[0] if isinstance(rules, list) and rules and isinstance(rules[0], dict) else {}
    return {
        backend["name"]: backend["weight"]
        for backend in first.get("backendRefs") or ()
        if isinstance(backend, dict)
        and isinstance(backend.get("name"), str)
        and isinstance(backend.get("weight"), int)
    }


def _backend(name: str, port: Obj, weight: int) -> Obj:
    return {"group": "", "kind": "Service", "name": name, "port": port["port"], "weight": weight}


def _route_port(target: ports.RouteTarget, owner: _objects.OwnerService) -> Obj:
    port = owner.http_port()
    if port is None or not isinstance(port.get("port"), int):
        raise _objects.RouteError(
            f"{target.service}: Service {target.namespace}/{owner.name} has no port to route"
        )
    return port


def _weights_or_stable(owner: _objects.OwnerService, stored: Obj | None) -> tuple[int, int]:
    return _objects.kept_split(
        weights(stored) if stored is not None else {},
        _objects.set_service_name(owner.name, STABLE),
        _objects.set_service_name(owner.name, WARMING),
    )

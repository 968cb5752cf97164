"""Istio: subsets on a DestinationRule and weights on a VirtualService (docs/architecture.md,
"The warm-up gate and the traffic ramp").

For a target whose owner's Service is `<svc>`, both named `<deployment>-autoscaler` in the
Deployment's namespace, on host `<svc>.<namespace>.svc.<cluster domain>`:

- a DestinationRule with subsets `stable` (pods labelled `autoscaler.dsec.io/stable: "true"`)
  and `warming` (`autoscaler.dsec.io/warming: "true"`);
- a VirtualService with one HTTP route whose two destinations, subsets `stable` and `warming`,
  carry weights summing to 100.

`networking.istio.io/v1` is served from Istio 1.22; older meshes take `version="v1beta1"` (the
same fields). The VirtualService names no `gateways`, so it steers mesh traffic (sidecars and
waypoints) to the Service. Istio merges the DestinationRules of one host, so an owner's own rule
for it keeps working beside ours; it does not merge VirtualServices outside gateways, so an owner
who already has a VirtualService for the same host must drop it, or keep
`traffic-router: none`. The owner's other VirtualServices and DestinationRules are never read or
touched.

`settled`: Istio reports propagation only with its experimental status feature (off by
default). When the VirtualService carries a `Reconciled` condition, settled waits for it to be
True at the current generation; without one, the written weights are taken as in effect and the
ramp's minimum dwell at each step (a third of the step interval by default) covers propagation.
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

__all__ = ["GROUP", "IstioRouter"]

GROUP: Final = "networking.istio.io"


class IstioRouter:
    """`ports.TrafficRouter` on Istio; see the module docstring."""

    def __init__(
        self,
        api: client.ApiClient,
        *,
        calls: _api.Caller | None = None,
        version: str = "v1",
        cluster_domain: str = "cluster.local",
    ) -> None:
        self._mesh = _objects.MeshClient(api, calls)
        self.destination_rules = _objects.Resource(
            GROUP, version, "destinationrules", "DestinationRule"
        )
        self.virtual_services = _objects.Resource(
            GROUP, version, "virtualservices", "VirtualService"
        )
        self._cluster_domain = cluster_domain

    async def ensure(self, target: ports.RouteTarget) -> None:
        """Create the DestinationRule, then the VirtualService with all traffic on stable; an
        existing VirtualService keeps its weights."""
        owner = await self._mesh.owner_service(target, verify=True)
        host = self._host(target, owner)
        name = _objects.route_name(target)
        await self._mesh.converge(
            target,
            [
                (self.destination_rules, name, lambda _: destination_rule_spec(host)),
                (
                    self.virtual_services,
                    name,
                    lambda stored: virtual_service_spec(host, *_weights_or_stable(stored)),
                ),
            ],
        )

    async def set_weights(self, target: ports.RouteTarget, warming_pct: int) -> None:
        """Patch the VirtualService's weights when they differ from `warming_pct`."""
        stable, warming = _objects.split(warming_pct)
        stored = await self._mesh.route(self.virtual_services, target)
        owner = await self._mesh.owner_service(target, verify=False)
        spec = virtual_service_spec(self._host(target, owner), stable, warming)
        await self._mesh.patch_spec(self.virtual_services, target, stored, spec)

    async def settled(self, target: ports.RouteTarget) -> bool:
        stored = await self._mesh.get_ours(
            self.virtual_services, target, _objects.route_name(target)
        )
        if stored is None:
            return False
        reconciled = _api.condition(stored, "Reconciled")
        if reconciled is None:
            return True
        observed = reconciled.get("observedGeneration")
        current = observed is None or observed == _api.meta(stored).get("generation")
        return current and reconciled.get("status") == "True"

    async def release(self, target: ports.RouteTarget) -> None:
        """Delete the VirtualService, then the DestinationRule its routes name."""
        name = _objects.route_name(target)
        await self._mesh.delete_ours(self.virtual_services, target, name)
        await self._mesh.delete_ours(self.destination_rules, target, name)
        self._mesh.forget(target)

    def _host(self, target: ports.RouteTarget, owner: _objects.OwnerService) -> str:
        return f"{owner.name}.{target.namespace}.svc.{self._cluster_domain}"


def destination_rule_spec(host: str) -> Obj:
    return {
        "host": host,
        "subsets": [
            {"name": which, "labels": {_objects.SET_LABELS[which]: "true"}}
            for which in (STABLE, WARMING)
        ],
    }


def virtual_service_spec(host: str, stable: int, warming: int) -> Obj:
    return {
        "hosts": [host],
        "http": [
            {
                "route": [
                    {"destination": {"host": host, "subset": STABLE}, "weight": stable},
                    {"destination": {"host": host, "subset": WARMING}, "weight": warming},
                ]
            }
        ],
    }


def weights(virtual_service: Mapping[str, Any]) -> dict[str, int]:
    """Weight by subset in the VirtualService's first HTTP route."""
    http = _api.spec(virtual_service).get("http")
    first = http[0] if isinstance(http, list) and http and isinstance(http[0], dict) else {}
    found: dict[str, int] = {}
    for destination in first.get("route") or ():
        if not isinstance(destination, dict):
            continue
        subset = (destination.get("destination") or {}).get("subset")
        weight = destination.get("weight")
        if isinstance(subset, str) and isinstance(weight, int):
            found[subset] = weight
    return found


def _weights_or_stable(stored: Obj | None) -> tuple[int, int]:
    return _objects.kept_split(weights(stored) if stored is not None else {}, STABLE, WARMING)

"""SMI: two Services over the traffic sets and a TrafficSplit weighting them (docs/architecture.md,
"The warm-up gate and the traffic ramp").

For a target whose owner's Service is `<svc>`, in the Deployment's namespace:

- Services `<svc>-stable` and `<svc>-warming`, as for the Gateway API: the owner's selector plus
  the set's label, the owner's ports, type ClusterIP;
- a TrafficSplit `<deployment>-autoscaler` with root service `<svc>` (the name clients call) and
  backends `<svc>-stable` and `<svc>-warming`, whole-number weights summing to 100.

`split.smi-spec.io/v1alpha4` is the specification's last version, but the meshes that still
implement TrafficSplit serve `v1alpha2` (Linkerd's SMI extension serves `v1alpha1` and
`v1alpha2`; Open Service Mesh served `v1alpha2`), so that is the default; `version` takes
`v1alpha3` or `v1alpha4` too, whose `service` and `backends` fields are the same. `v1alpha1`
(weights as quantities) is not supported.

An owner's own TrafficSplits are never read or touched; a mesh may refuse two splits on one root
service, so an owner who has one for the same Service drops it or keeps `traffic-router: none`.
SMI reports no status: `settled` is True once the TrafficSplit exists.
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

__all__ = ["GROUP", "SmiRouter"]

GROUP: Final = "split.smi-spec.io"
_VERSIONS: Final = ("v1alpha2", "v1alpha3", "v1alpha4")


class SmiRouter:
    """`ports.TrafficRouter` on an SMI TrafficSplit; see the module docstring."""

    def __init__(
        self,
        api: client.ApiClient,
        *,
        calls: _api.Caller | None = None,
        version: str = "v1alpha2",
    ) -> None:
        if version not in _VERSIONS:
            raise ValueError(f"TrafficSplit version must be one of {_VERSIONS}, not {version!r}")
        self._mesh = _objects.MeshClient(api, calls)
        self.traffic_splits = _objects.Resource(GROUP, version, "trafficsplits", "TrafficSplit")

    async def ensure(self, target: ports.RouteTarget) -> None:
        """Create the two Services, then the TrafficSplit with all traffic on stable; an
        existing TrafficSplit keeps its weights."""
        owner = await self._mesh.owner_service(target, verify=True)
        await self._mesh.converge(
            target,
            [
                *self._mesh.set_services(owner),
                (
                    self.traffic_splits,
                    _objects.route_name(target),
                    lambda stored: split_spec(owner, *_weights_or_stable(owner, stored)),
                ),
            ],
        )

    async def set_weights(self, target: ports.RouteTarget, warming_pct: int) -> None:
        """Patch the TrafficSplit's backend weights when they differ from `warming_pct`."""
        stable, warming = _objects.split(warming_pct)
        stored = await self._mesh.route(self.traffic_splits, target)
        owner = await self._mesh.owner_service(target, verify=False)
        await self._mesh.patch_spec(
            self.traffic_splits, target, stored, split_spec(owner, stable, warming)
        )

    async def settled(self, target: ports.RouteTarget) -> bool:
        name = _objects.route_name(target)
        return await self._mesh.get_ours(self.traffic_splits, target, name) is not None

    async def release(self, target: ports.RouteTarget) -> None:
        """Delete the TrafficSplit, then the two Services it sent traffic to."""
        await self._mesh.delete_ours(self.traffic_splits, target, _objects.route_name(target))
        await self._mesh.delete_set_services(target)
        self._mesh.forget(target)


def split_spec(owner: _objects.OwnerService, stable: int, warming: int) -> Obj:
    return {
        "service": owner.name,
        "backends": [
            {"service": _objects.set_service_name(owner.name, STABLE), "weight": stable},
            {"service": _objects.set_service_name(owner.name, WARMING), "weight": warming},
        ],
    }


def weights(traffic_split: Mapping[str, Any]) -> dict[str, int]:
    """Weight by backend Service name."""
    return {
        backend["service"]: backend["weight"]
        for backend in _api.spec(traffic_split).get("backends") or ()
        if isinstance(backend, dict)
        and isinstance(backend.get("service"), str)
        and isinstance(backend.get("weight"), int)
    }


def _weights_or_stable(owner: _objects.OwnerService, stored: Obj | None) -> tuple[int, int]:
    return _objects.kept_split(
        weights(stored) if stored is not None else {},
        _objects.set_service_name(owner.name, STABLE),
        _objects.set_service_name(owner.name, WARMING),
    )

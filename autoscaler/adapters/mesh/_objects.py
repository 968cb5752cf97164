"""What the mesh routers share: the owner's Service, the names, labels and ownership of what a
router creates, and the read / create / patch / delete calls with the project's errors.

- **The owner's Service** is the one whose selector is a non-empty subset of the Deployment's
  pod-template labels, found by listing the namespace's Services (ours excluded). When several
  match, a ClusterIP Service beats a headless one, then the most specific selector, then the
  name. The answer is cached per target; `ensure` reads it again by name, and a 404 finds it
  anew.
- **Ownership**: every object a router creates carries `app.kubernetes.io/managed-by:
  inference-autoscaler` and an ownerReference to the Deployment, so deleting the Deployment
  deletes them. A router reads, patches and deletes only objects with its own names *and* that
  label; an object of one of its names without the label belongs to someone else, and the router
  refuses to touch it (`RouteError`) instead of adopting it.
- **Converging**: `converge` creates an absent object (a 409 on create is another writer's
  create: read it and go on) or patches an existing one only when it lacks something the
  router wants; fields the API server or a person added are left alone.

Library errors leave as `KubeApiError` (an `errors.ActuationError` carrying the HTTP status),
each failed call counted, through the one `_api.Caller` the routers share (its fence, error count
and deadline). It decides nothing about weights or steps.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, Final

import structlog
from kubernetes_asyncio import client

from autoscaler import errors, ports
from autoscaler.adapters.kubernetes import _api
from autoscaler.adapters.kubernetes._api import KubeApiError, NotLeaderError, Obj
from autoscaler.adapters.kubernetes.cluster import STABLE_LABEL, WARMING_LABEL

__all__ = [
    "MANAGED_BY",
    "MANAGED_BY_LABEL",
    "SERVICES",
    "STABLE",
    "WARMING",
    "KubeApiError",
    "MeshClient",
    "OwnerService",
    "Resource",
    "RouteError",
    "bounded_name",
    "contains",
    "kept_split",
    "route_name",
    "set_service_name",
    "set_service_spec",
    "split",
]

log = structlog.get_logger(__name__)

MANAGED_BY_LABEL: Final = "app.kubernetes.io/managed-by"
MANAGED_BY: Final = "inference-autoscaler"

STABLE: Final = "stable"
WARMING: Final = "warming"
SET_LABELS: Final = {STABLE: STABLE_LABEL, WARMING: WARMING_LABEL}
"""The pod label that marks each traffic set (docs/architecture.md,
"The warm-up gate and the traffic ramp")."""

OBJECT_NAME_LIMIT: Final = 253
SERVICE_NAME_LIMIT: Final = 63


class RouteError(errors.ActuationError):
    """A router cannot do its work for a service: no Service selects its pods, or one of the
    router's names is taken by an object the autoscaler did not create."""


@dataclasses.dataclass(frozen=True, slots=True)
class Resource:
    """An API resource a router writes."""

    group: str
    version: str
    plural: str
    kind: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


SERVICES: Final = Resource("", "v1", "services", "Service")


@dataclasses.dataclass(frozen=True, slots=True)
class OwnerService:
    """The Service the owner's clients call, as far as a router needs it."""

    name: str
    selector: Mapping[str, str]
    ports: tuple[Obj, ...]

    def http_port(self) -> Obj | None:
        """The port a route covers: the first whose name or appProtocol says HTTP, else the
        first; None for a Service without ports."""
        for port in self.ports:
            if any(
                str(port.get(field) or "").lower().startswith("http")
                for field in ("name", "appProtocol")
            ):
                return port
        return self.ports[0] if self.ports else None


def split(warming_pct: int) -> tuple[int, int]:
    """(stable, warming) weights summing to 100; ValueError outside 0..100."""
    if isinstance(warming_pct, bool) or not isinstance(warming_pct, int):
        raise ValueError(f"warming_pct must be a whole percent, not {warming_pct!r}")
    if not 0 <= warming_pct <= 100:
        raise ValueError(f"warming_pct must be within 0..100, not {warming_pct}")
    return 100 - warming_pct, warming_pct


def kept_split(found: Mapping[str, int], stable_key: str, warming_key: str) -> tuple[int, int]:
    """The (stable, warming) weights an existing route holds, so `ensure` after a restart keeps
    a ramp where it was; all on stable when they are missing or do not sum to 100."""
    stable, warming = found.get(stable_key), found.get(warming_key)
    if stable is None or warming is None or min(stable, warming) < 0 or stable + warming != 100:
        return 100, 0
    return stable, warming


def bounded_name(base: str, suffix: str, limit: int) -> str:
    """`base + suffix`, or when that is longer than `limit`, `base` cut short and marked with a
    hash of all of it, so distinct long names stay distinct."""
    name = base + suffix
    if len(name) <= limit:
        return name
    digest = hashlib.sha256(base.encode()).hexdigest()[:8]
    kept = base[: limit - len(suffix) - len(digest) - 1].rstrip("-.")
    return f"{kept}-{digest}{suffix}"


def route_name(target: ports.RouteTarget) -> str:
    """`<deployment>-autoscaler`: the name of the route objects a router creates."""
    return bounded_name(target.deployment, "-autoscaler", OBJECT_NAME_LIMIT)


def set_service_name(service: str, which: str) -> str:
    """`<svc>-stable` or `<svc>-warming`."""
    return bounded_name(service, f"-{which}", SERVICE_NAME_LIMIT)


def set_service_spec(owner: OwnerService, which: str) -> Obj:
    """A ClusterIP Service over one traffic set: the owner's selector plus the set's label, and
    the owner's ports."""
    copied = ("name", "protocol", "appProtocol", "port", "targetPort")
    return {
        "type": "ClusterIP",
        "selector": {**owner.selector, SET_LABELS[which]: "true"},
        "ports": [{key: port[key] for key in copied if key in port} for port in owner.ports],
    }


def contains(stored: object, wanted: object) -> bool:
    """Whether `stored` holds everything `wanted` says: maps may carry more keys (defaults the
    API server filled in), lists must match item by item."""
    if isinstance(wanted, Mapping):
        return isinstance(stored, Mapping) and all(
            key in stored and contains(stored[key], value) for key, value in wanted.items()
        )
    if isinstance(wanted, list):
        return (
            isinstance(stored, list)
            and len(stored) == len(wanted)
            and all(contains(s, w) for s, w in zip(stored, wanted, strict=True))
        )
    return stored == wanted


def labels_of(obj: Mapping[str, Any]) -> dict[str, str]:
    value = _api.meta(obj).get("labels")
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}


def is_ours(obj: Mapping[str, Any]) -> bool:
    return labels_of(obj).get(MANAGED_BY_LABEL) == MANAGED_BY


def choose_service(services: Iterable[Obj], pod_labels: Mapping[str, str]) -> Obj | None:
    """The owner's Service among `services`; see the module docstring."""
    candidates: list[tuple[bool, int, str, Obj]] = []
    for service in services:
        if is_ours(service):
            continue
        selector = _api.spec(service).get("selector")
        if not isinstance(selector, dict) or not selector:
            continue
        if any(pod_labels.get(key) != value for key, value in selector.items()):
            continue
        headless = _api.spec(service).get("clusterIP") == "None"
        candidates.append((headless, -len(selector), _api.name(service), service))
    if not candidates:
        return None
    return min(candidates, key=lambda candidate: candidate[:3])[3]


def owner_service(service: Obj) -> OwnerService:
    spec = _api.spec(service)
    selector = spec.get("selector")
    found_ports = spec.get("ports")
    return OwnerService(
        name=_api.name(service),
        selector={str(k): str(v) for k, v in selector.items()}
        if isinstance(selector, dict)
        else {},
        ports=tuple(port for port in found_ports or () if isinstance(port, dict)),
    )


SpecFor = Callable[[Obj | None], Obj]
"""The spec a router wants for one object, given what is stored (None when absent)."""


def _set_service_spec_for(owner: OwnerService, which: str) -> SpecFor:
    return lambda _: set_service_spec(owner, which)


class MeshClient:
    """The API calls the routers make; see the module docstring."""

    def __init__(
        self,
        api: client.ApiClient,
        calls: _api.Caller | None = None,
    ) -> None:
        self._custom = client.CustomObjectsApi(api)
        self._core = client.CoreV1Api(api)
        self._apps = client.AppsV1Api(api)
        self._calls = calls or _api.Caller()
        self._owners: dict[tuple[str, str], OwnerService] = {}

    # -- the owner's Service -------------------------------------------------------------------

    async def owner_service(self, target: ports.RouteTarget, *, verify: bool) -> OwnerService:
        """The owner's Service: from the cache, read again by name when `verify`, and found by
        listing when not cached or gone (404)."""
        key = (target.namespace, target.deployment)
        cached = self._owners.get(key)
        if cached is not None and not verify:
            return cached
        if cached is not None:
            found = await self.get(SERVICES, target, cached.name)
            if found is not None:
                self._owners[key] = owner_service(found)
                return self._owners[key]
            log.info("route.service_lost", service=target.service, name=cached.name)
            del self._owners[key]
        listed = await self._calls.call(
            "services.list", target.service, self._core.list_namespaced_service, target.namespace
        )
        items = [item for item in listed.get("items") or () if isinstance(item, dict)]
        chosen = choose_service(items, target.pod_labels)
        if chosen is None:
            shown = ",".join(f"{k}={v}" for k, v in sorted(target.pod_labels.items()))
            raise RouteError(
                f"{target.service}: no Service in namespace {target.namespace} selects the "
                f"Deployment's pods ({shown}); the traffic ramp routes through that Service"
            )
        self._owners[key] = owner_service(chosen)
        return self._owners[key]

    def forget(self, target: ports.RouteTarget) -> None:
        self._owners.pop((target.namespace, target.deployment), None)

    # -- objects -------------------------------------------------------------------------------

    async def get(self, resource: Resource, target: ports.RouteTarget, name: str) -> Obj | None:
        """The object, or None when it does not exist."""
        call, args = self._reader(resource, target.namespace, name)
        return await self._calls.call_allowing(
            {404}, f"{resource.plural}.get", target.service, call, *args
        )

    async def get_ours(
        self, resource: Resource, target: ports.RouteTarget, name: str
    ) -> Obj | None:
        """The object if it exists; `RouteError` when it exists and is not the autoscaler's."""
        found = await self.get(resource, target, name)
        if found is not None and not is_ours(found):
            raise RouteError(
                f"{target.service}: {resource.kind} {target.namespace}/{name} exists and is not "
                f"managed by the autoscaler (no {MANAGED_BY_LABEL}={MANAGED_BY} label); "
                "rename or remove it to let the traffic ramp create its own"
            )
        return found

    async def route(self, resource: Resource, target: ports.RouteTarget) -> Obj:
        """The target's route object of `resource`; `RouteError` when it is absent (`ensure`
        creates it) or not the autoscaler's."""
        name = route_name(target)
        found = await self.get_ours(resource, target, name)
        if found is None:
            raise RouteError(
                f"{target.service}: {resource.kind} {target.namespace}/{name} is absent; "
                "ensure() creates it"
            )
        return found

    async def converge(
        self,
        target: ports.RouteTarget,
        wanted: Sequence[tuple[Resource, str, SpecFor]],
    ) -> list[Obj]:
        """Create each absent object, in order, and patch each one that lacks what its
        `SpecFor` asks; see the module docstring."""
        owner: Obj | None = None
        done: list[Obj] = []
        for resource, name, spec_for in wanted:
            stored = await self.get_ours(resource, target, name)
            if stored is None:
                if owner is None:
                    owner = await self._owner_reference(target)
                stored = await self._create(resource, target, name, spec_for(None), owner)
            done.append(await self.patch_spec(resource, target, stored, spec_for(stored)))
        return done

    async def patch_spec(
        self, resource: Resource, target: ports.RouteTarget, stored: Obj, spec: Obj
    ) -> Obj:
        """Merge-patch `spec` into the stored object unless it already holds all of it."""
        if contains(_api.spec(stored), spec):
            return stored
        self._require_leader(target)
        name = _api.name(stored)
        # No resourceVersion: a mesh controller's status writes would make every patch a 409,
        # and the object is the autoscaler's alone.
        body = {"spec": spec}
        call, args = self._patcher(resource, target.namespace, name, body)
        patched = await self._calls.call(
            f"{resource.plural}.patch",
            target.service,
            call,
            *args,
            write=True,
            service=target.service,
            _content_type=_api.MERGE_PATCH,
        )
        log.info("route.patched", service=target.service, kind=resource.kind, name=name)
        return patched

    async def delete_ours(self, resource: Resource, target: ports.RouteTarget, name: str) -> None:
        """Delete the object if it is the autoscaler's; leave anything else alone."""
        found = await self.get(resource, target, name)
        if found is None:
            return
        if not is_ours(found):
            log.warning(
                "route.release_skipped", service=target.service, kind=resource.kind, name=name
            )
            return
        self._require_leader(target)
        body = {"preconditions": {"uid": _api.uid(found)}}
        if resource is SERVICES:
            call: Callable[..., Awaitable[Any]] = self._core.delete_namespaced_service
            args: tuple[Any, ...] = (name, target.namespace)
        else:
            call = self._custom.delete_namespaced_custom_object
            args = (resource.group, resource.version, target.namespace, resource.plural, name)
        # 404: gone already; 409: the uid changed, so what has that name now is not what we read.
        await self._calls.call_allowing(
            {404, 409},
            f"{resource.plural}.delete",
            target.service,
            call,
            *args,
            write=True,
            service=target.service,
            body=body,
        )
        log.info("route.deleted", service=target.service, kind=resource.kind, name=name)

    # -- the Services over the two traffic sets (Gateway API, SMI) -----------------------------

    def set_services(self, owner: OwnerService) -> list[tuple[Resource, str, SpecFor]]:
        """What `converge` needs to keep `<svc>-stable` and `<svc>-warming`."""
        return [
            (SERVICES, set_service_name(owner.name, which), _set_service_spec_for(owner, which))
            for which in (STABLE, WARMING)
        ]

    async def delete_set_services(self, target: ports.RouteTarget) -> None:
        """Delete the autoscaler's `-stable`/`-warming` Services owned by the target's
        Deployment, found by label, so nothing else (not even the owner's Service) is needed."""
        listed = await self._calls.call(
            "services.list",
            target.service,
            self._core.list_namespaced_service,
            target.namespace,
            label_selector=f"{MANAGED_BY_LABEL}={MANAGED_BY}",
        )
        for service in listed.get("items") or ():
            name = _api.name(service)
            owned = any(
                isinstance(ref, dict)
                and ref.get("kind") == "Deployment"
                and ref.get("name") == target.deployment
                for ref in _api.meta(service).get("ownerReferences") or ()
            )
            if owned and name.endswith((f"-{STABLE}", f"-{WARMING}")):
                await self.delete_ours(SERVICES, target, name)

    # -- internals -------------------------------------------------------------------------------

    async def _owner_reference(self, target: ports.RouteTarget) -> Obj:
        """An ownerReference to the Deployment, read now so its uid is current."""
        deployment = await self._calls.call(
            "deployments.get",
            target.service,
            self._apps.read_namespaced_deployment,
            target.deployment,
            target.namespace,
        )
        return {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "name": target.deployment,
            "uid": _api.uid(deployment),
            "blockOwnerDeletion": False,
        }

    async def _create(
        self, resource: Resource, target: ports.RouteTarget, name: str, spec: Obj, owner: Obj
    ) -> Obj:
        self._require_leader(target)
        body = {
            "apiVersion": resource.api_version,
            "kind": resource.kind,
            "metadata": {
                "name": name,
                "namespace": target.namespace,
                "labels": {MANAGED_BY_LABEL: MANAGED_BY},
                "ownerReferences": [owner],
            },
            "spec": spec,
        }
        if resource is SERVICES:
            call: Callable[..., Awaitable[Any]] = self._core.create_namespaced_service
            args: tuple[Any, ...] = (target.namespace, body)
        else:
            call = self._custom.create_namespaced_custom_object
            args = (resource.group, resource.version, target.namespace, resource.plural, body)
        created = await self._calls.call_allowing(
            {409},
            f"{resource.plural}.create",
            target.service,
            call,
            *args,
            write=True,
            service=target.service,
        )
        if created is not None:
            log.info("route.created", service=target.service, kind=resource.kind, name=name)
            return created
        # Another writer created it between our read and our create: read it and go on.
        found = await self.get_ours(resource, target, name)
        if found is None:
            raise KubeApiError(
                f"{resource.plural}.create",
                f"{resource.plural}.create {target.service} failed: {name} already exists "
                "but cannot be read",
                status=409,
            )
        return found

    def _reader(
        self, resource: Resource, namespace: str, name: str
    ) -> tuple[Callable[..., Awaitable[Any]], tuple[Any, ...]]:
        if resource is SERVICES:
            return self._core.read_namespaced_service, (name, namespace)
        return self._custom.get_namespaced_custom_object, (
            resource.group,
            resource.version,
            namespace,
            resource.plural,
            name,
        )

    def _patcher(
        self, resource: Resource, namespace: str, name: str, body: Obj
    ) -> tuple[Callable[..., Awaitable[Any]], tuple[Any, ...]]:
        if resource is SERVICES:
            return self._core.patch_namespaced_service, (name, namespace, body)
        return self._custom.patch_namespaced_custom_object, (
            resource.group,
            resource.version,
            namespace,
            resource.plural,
            name,
            body,
        )

    def _require_leader(self, target: ports.RouteTarget) -> None:
        if not self._calls.fence(target.service):
            raise NotLeaderError(
                f"{target.service}: this instance does not lead its Lease; no route written"
            )

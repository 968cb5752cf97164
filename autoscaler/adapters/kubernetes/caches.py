"""The caches the controller reads: Deployments, ReplicaSets, Pods, Nodes and ResourceQuotas,
by list+watch.

Pods are indexed by their controlling ReplicaSet and ReplicaSets by their controlling
Deployment (ownerReferences, by uid), so `pods_of` groups pods by owner rather than by label
selector: sibling Deployments whose labels overlap (DESIGN §3.5) never count each other's pods.
Deployments are indexed by their controlling owner too (a placement tier's sibling by the
service owner's Deployment, `siblings_of`), and ResourceQuotas by namespace (`quotas_in`).
Namespaced kinds are watched in all namespaces, or in each namespace of an include list; an
exclude list drops objects as they arrive. Stored objects are trimmed of what no reader needs
(managed fields, pod templates of ReplicaSets, node image lists) to keep memory flat.

It must not write to the API, nor decide which Deployments are managed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
from collections.abc import Awaitable, Callable, Collection, Iterable
from typing import Any, Final

from kubernetes_asyncio import client

from autoscaler import clock as clock_
from autoscaler.adapters.kubernetes import _api, informer
from autoscaler.adapters.kubernetes._api import Obj

OWNER: Final = "owner"
"""Index of objects by the uid of their controlling owner."""
NAMESPACE: Final = "namespace"
"""Index of objects by their namespace."""

LAST_APPLIED: Final = "kubectl.kubernetes.io/last-applied-configuration"


@dataclasses.dataclass(frozen=True, slots=True)
class NamespaceFilter:
    """Which namespaces the controller sees: `include` (all when empty) minus `exclude`."""

    include: frozenset[str] = frozenset()
    exclude: frozenset[str] = frozenset()

    @classmethod
    def of(cls, include: Collection[str] = (), exclude: Collection[str] = ()) -> NamespaceFilter:
        return cls(frozenset(include), frozenset(exclude))

    def allows(self, namespace: str) -> bool:
        if self.include and namespace not in self.include:
            return False
        return namespace not in self.exclude

    def watched(self) -> list[str] | None:
        """The namespaces to watch one by one; None to watch all namespaces at once."""
        if not self.include:
            return None
        return sorted(self.include - self.exclude)


def owner_values(obj: Obj) -> Iterable[str]:
    owner = _api.controller_uid(obj)
    return () if owner is None else (owner,)


def namespace_values(obj: Obj) -> Iterable[str]:
    return (_api.namespace(obj),)


def _trim_meta(obj: Obj) -> Obj:
    metadata = dict(_api.meta(obj))
    metadata.pop("managedFields", None)
    notes = metadata.get("annotations")
    if isinstance(notes, dict) and LAST_APPLIED in notes:
        metadata["annotations"] = {k: v for k, v in notes.items() if k != LAST_APPLIED}
    return {**obj, "metadata": metadata}


def trim_replicaset(obj: Obj) -> Obj:
    """A ReplicaSet without its pod template: only its owner, size and status are read."""
    trimmed = _trim_meta(obj)
    trimmed["spec"] = {k: v for k, v in _api.spec(obj).items() if k != "template"}
    return trimmed


def trim_node(obj: Obj) -> Obj:
    """A Node without its image list, by far its largest part."""
    trimmed = _trim_meta(obj)
    trimmed["status"] = {k: v for k, v in _api.status(obj).items() if k != "images"}
    return trimmed


class Caches:
    """The five informers, built on one API client; see the module docstring."""

    def __init__(
        self,
        api: client.ApiClient,
        *,
        clock: clock_.Clock | None = None,
        namespaces: NamespaceFilter | None = None,
        on_api_error: _api.ErrorCallback = _api.ignore_error,
        backoff: informer.Backoff | None = None,
        watch_timeout_s: float = 300.0,
        request_timeout_s: float = 30.0,
        rng: random.Random | None = None,
    ) -> None:
        self.namespaces = namespaces or NamespaceFilter()
        apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
        watched = self.namespaces.watched()

        def sources(
            everywhere: Callable[..., Awaitable[Any]], namespaced: Callable[..., Awaitable[Any]]
        ) -> list[informer.Source]:
            if watched is None:
                return [informer.Source(everywhere)]
            return [informer.Source(namespaced, (ns,), namespace=ns) for ns in watched]

        def keep(obj: Obj) -> bool:
            return self.namespaces.allows(_api.namespace(obj))

        common: dict[str, Any] = {
            "clock": clock or clock_.LoopClock(),
            "on_api_error": on_api_error,
            "backoff": backoff,
            "watch_timeout_s": watch_timeout_s,
            "request_timeout_s": request_timeout_s,
            "rng": rng,
        }
        self.deployments = informer.Informer(
            "deployments",
            sources(apps.list_deployment_for_all_namespaces, apps.list_namespaced_deployment),
            keep=keep,
            transform=_trim_meta,
            indexers={OWNER: owner_values},
            **common,
        )
        self.replicasets = informer.Informer(
            "replicasets",
            sources(apps.list_replica_set_for_all_namespaces, apps.list_namespaced_replica_set),
            keep=keep,
            transform=trim_replicaset,
            indexers={OWNER: owner_values},
            **common,
        )
        self.pods = informer.Informer(
            "pods",
            sources(core.list_pod_for_all_namespaces, core.list_namespaced_pod),
            keep=keep,
            transform=_trim_meta,
            indexers={OWNER: owner_values},
            **common,
        )
        self.nodes = informer.Informer(
            "nodes", [informer.Source(core.list_node)], transform=trim_node, **common
        )
        self.quotas = informer.Informer(
            "resourcequotas",
            sources(
                core.list_resource_quota_for_all_namespaces, core.list_namespaced_resource_quota
            ),
            keep=keep,
            transform=_trim_meta,
            indexers={NAMESPACE: namespace_values},
            **common,
        )

    @property
    def informers(self) -> tuple[informer.Informer, ...]:
        return (self.deployments, self.replicasets, self.pods, self.nodes, self.quotas)

    @property
    def synced(self) -> bool:
        return all(cache.synced for cache in self.informers)

    async def wait_synced(self) -> None:
        for cache in self.informers:
            await cache.wait_synced()

    async def run(self) -> None:
        """Fill and follow every cache until cancelled."""
        async with asyncio.TaskGroup() as group:
            for cache in self.informers:
                group.create_task(cache.run())

    def deployment(self, namespace: str, name: str) -> Obj | None:
        return self.deployments.get(namespace, name)

    def siblings_of(self, deployment: Obj) -> list[Obj]:
        """The Deployments whose controlling owner is `deployment` (its placement tiers)."""
        return self.deployments.by_index(OWNER, _api.uid(deployment))

    def quotas_in(self, namespace: str) -> list[Obj]:
        return self.quotas.by_index(NAMESPACE, namespace)

    def replicasets_of(self, deployment: Obj) -> list[Obj]:
        return self.replicasets.by_index(OWNER, _api.uid(deployment))

    def pods_of(self, deployment: Obj) -> list[Obj]:
        """The pods a Deployment owns through its ReplicaSets, whatever their labels."""
        return [
            pod
            for replicaset in self.replicasets_of(deployment)
            for pod in self.pods.by_index(OWNER, _api.uid(replicaset))
        ]

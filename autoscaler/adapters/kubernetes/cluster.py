"""The Kubernetes API behind the `Cluster` port.

`workloads()` reads the caches only: every workload annotated `autoscaler.dsec.io/enabled:
"true"` whose bucket Lease this replica leads (`owned`; every one, with a single Lease), its
annotations parsed by the contract (once per distinct content), its serving pods
found by owner, all of it on one `ports.Workload` per service (docs/architecture.md, "The
records of a tick"): the metrics source reads the pods and metric names from it, the ramp
adapter its ramp settings. A record is built again only when the informers report a change to
what it was built from (the controller's own write of the `status` annotation is none: no record
reads it; a write of the `state` annotation gives a record with the new state around the
placement view of the last build), or after the controller's own scale write to it; otherwise
the same object is returned; a service whose bucket moves to or from this replica is built
again or dropped, with what was remembered about it, and while its bucket is led elsewhere
changes to it build nothing. A Deployment with invalid annotations is
skipped, with one `config.invalid` log line and one Warning Event `InvalidConfig` per distinct
set of problems; so is one that a HorizontalPodAutoscaler or a KEDA ScaledObject also scales
(one owner of replicas: the Event names the other). A `state` annotation that cannot be read
(`codec.parse_state`) is treated as absent, with one `state.invalid` log line and one Warning
Event `CorruptState` when first seen.

Scale targets (`contract.targets`): besides Deployments, a StatefulSet, a LeaderWorkerSet or an
Argo Rollout that opts in is a service too, as a HorizontalPodAutoscaler's `scaleTargetRef`
would scale it: its replicas are what its Scale serves (read from the cached object at the
paths its `/scale` subresource serves them from), its serving pods are the pods of its
namespace that the Scale's selector selects (a LeaderWorkerSet's selects one leader per group,
so a replica is a group), and `scale` patches its `scale` subresource. It has no placement tiers
and no warm-up gate: asking for either is an `InvalidConfig` (`targets.unsupported`). A service is
`namespace/name`, so when workloads of two kinds with one name opt in, the first kind in
`targets.KINDS` order is managed and the other gets an `InvalidConfig` Event.

Writes: `scale` patches the workload's `scale` subresource with the resourceVersion its
replicas were read at (a 409 on a moved status is sent again at the new version; on changed
replicas it is raised, to be decided again); `publish` writes the `status` and
`state` annotations in one merge patch that carries the cached resourceVersion (or that of the
controller's own scale write when the cache has not seen it yet; a 409 re-reads
the Deployment and retries), only when their content changed, and posts Events modelled on the
HPA's. A scale-down that the ramp driver drains first is published before its replicas drop: its
`SuccessfulRescale` is posted by the later `scale` that sets them. With the global dry-run
nothing is written at all; a service in `mode: dry-run` gets its status, state and Events but
never a replica change. An instance that is not the leader refuses every write
(`NotLeaderError`), asked again immediately before each request (`_api.write_json`); with
several bucket Leases, "leader" means the leader of the service's bucket. Library
errors leave as `KubeApiError`, an `errors.ActuationError` carrying the HTTP status, and each
failed call is counted through `on_api_error`.

Placement (docs/architecture.md, "The placement ladder" and "Accounting"; `placement`): a service
whose owner requests `nvidia.com/gpu` spans tier Deployments (the owner is `whole`;
`<name>-mig-<profile>` and `<name>-shared` are the controller's). `workloads()` reports replicas and
serving pods summed over the tiers (pods grouped by owner), what the namespace's GPU quota admits
(or, for a model no node can place, its current size, with the reason `no-placement`), and the
core-hour rate of the pods; `scale` distributes the count over the tiers with `core.placement.plan`
and writes each tier's `scale` subresource; `publish` adds the last plan to the status annotation.
The siblings are never managed services themselves.

It decides nothing: replica counts come from the loop, and a failed write is the loop's to retry.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import statistics
import time
from collections.abc import Callable, Collection, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Final

import structlog
from kubernetes_asyncio import client

from autoscaler import clock as clock_
from autoscaler import ports
from autoscaler.adapters.kubernetes import (
    _api,
    annotate,
    caches,
    events,
    nodecache,
    placement,
    scaling,
)
from autoscaler.adapters.kubernetes._api import KubeApiError, NotLeaderError, Obj
from autoscaler.contract import annotations as contract
from autoscaler.contract import codec, targets
from autoscaler.core import cache, model

__all__ = [
    "DRY_RUN_RESCALE",
    "HELD",
    "INVALID",
    "OVERRIDDEN",
    "RESCALED",
    "KubeApiError",
    "KubeCluster",
    "NotLeaderError",
    "is_serving",
    "list_workloads",
    "read_workload",
    "spec_replicas",
    "startup_s",
]

log = structlog.get_logger(__name__)

RESCALED: Final = "SuccessfulRescale"
DRY_RUN_RESCALE: Final = "DryRunRescale"
HELD: Final = "ScaleHeld"
INVALID: Final = "InvalidConfig"
OVERRIDDEN: Final = "ReplicasOverridden"

HOLD_QUIET_S: Final = events.AGGREGATE_INTERVAL_S
"""How long after a `ScaleHeld` Event a return to the same hold (the same reason, at the same
count) posts no second one: a decision that wavers around a threshold goes in and out of a
cooldown or a burst hold, or from one to the other, every few ticks, and each return would be
an Event of its own (its words quote the ratios, so the recorder cannot merge them). The
status annotation says how it holds meanwhile."""

_ParseKey = tuple[str, tuple[tuple[str, str], ...]]


@dataclasses.dataclass(frozen=True, slots=True)
class _Built:
    """One managed service's record and what it was built from, reused while none of that
    changes (`KubeCluster.workloads`)."""

    deployment: Obj
    """The cached workload it was built from: the owner Deployment, or a scale target of
    another `kind`."""
    tiers: frozenset[str]
    """The names of the owner's tier Deployments: a change to any of them or their pods
    rebuilds the record."""
    workload: ports.Workload | None
    """None for a service that is not managed (invalid annotations, another autoscaler)."""
    config: contract.ServiceConfig | None
    view: placement.View | None
    layout: tuple[object, ...] | None
    """The GPU capacity it was placed against (nodes, pods on them, quotas); None when it
    holds no GPU."""
    parse_key: _ParseKey
    state_text: str | None
    """The `state` annotation it was built with, and what that text was read as."""
    state_read: tuple[model.PolicyState | None, int | None] = (None, None)
    problems: tuple[str, ...] = ()
    """The messages of the `InvalidConfig` Event posted for it."""
    kind: targets.TargetKind = targets.DEPLOYMENTS
    selector: targets.Selector | None = None
    """The label selector of its serving pods (a kind other than Deployment, managed)."""


@dataclasses.dataclass(frozen=True, slots=True)
class _Annotated:
    """The controller's own last write of a service's `status` and `state`: what the object
    says from `version` on, while the cache has not seen it."""

    version: str
    status: str
    state: str
    outcome: dict[str, Any]
    """`codec.outcome` of the status written: found again (in the cache, once it has caught
    up), the text is not parsed back to be compared."""


@dataclasses.dataclass(frozen=True, slots=True)
class _Target:
    """A managed service as a write needs it: its record, settings and placement view (None
    for a kind other than Deployment: it has no placement tiers)."""

    workload: ports.Workload
    config: contract.ServiceConfig
    view: placement.View | None
    kind: targets.TargetKind


_WINDOW_KEY: Final = contract.PREFIX + "window"


def _parse_key(namespace: str, notes: Mapping[str, str]) -> _ParseKey:
    """The settings a parse depends on: the namespace and the annotations under the prefix."""
    settings = tuple(
        sorted(
            (k, v)
            for k, v in notes.items()
            if k.startswith(contract.PREFIX) and k not in contract.CONTROLLER_KEYS
        )
    )
    return (namespace, settings)


def _controller(obj: Obj) -> tuple[str, str] | None:
    """The kind and name of the object's controlling owner."""
    for ref in _api.meta(obj).get("ownerReferences") or ():
        if isinstance(ref, dict) and ref.get("controller"):
            return str(ref.get("kind")), str(ref.get("name"))
    return None


def _everything(_: str) -> bool:
    return True


def _key_of(service: model.ServiceId) -> tuple[str, str]:
    """The (namespace, name) of a service's owner Deployment."""
    namespace, _, name = service.partition("/")
    return namespace, name


def _unmanaged(
    deployment: Obj,
    key: _ParseKey,
    problems: tuple[str, ...],
    kind: targets.TargetKind = targets.DEPLOYMENTS,
) -> _Built:
    """The entry of a workload that opts in and is not managed, with the problems said."""
    tiers = frozenset({_api.name(deployment)}) if kind.is_deployment else frozenset()
    return _Built(
        deployment, tiers, None, None, None, None, key, None, problems=problems, kind=kind
    )


def _members(kind: targets.TargetKind, name: str, selector: targets.Selector) -> targets.Selector:
    """What selects every pod of a workload, so that a change to any of them rebuilds its
    record: its Scale's selector, or for a LeaderWorkerSet (whose selector picks the leaders)
    the label all the pods of its groups carry."""
    if kind is not targets.LEADER_WORKER_SETS:
        return selector
    return targets.Selector((targets.Requirement(LWS_NAME_LABEL, "in", frozenset({name})),))


class _Selectors:
    """Pod selectors by workload (namespace, name), indexed by label: a selector is filed
    under each value of its narrowest `in` requirement (`=` is one), which every pod it
    selects carries, so that a pod's labels find the few selectors that may select it rather
    than every one of its namespace (a thousand StatefulSets to a namespace: a thousand
    matches a pod event). A selector with no `in` requirement is tried against every pod of
    its namespace."""

    __slots__ = ("_by_label", "_everywhere", "_selectors")

    def __init__(self) -> None:
        self._selectors: dict[tuple[str, str], targets.Selector] = {}
        self._by_label: dict[tuple[str, str, str], set[tuple[str, str]]] = {}
        """(namespace, label key, value) to the workloads whose selector is filed there."""
        self._everywhere: dict[str, set[tuple[str, str]]] = {}
        """By namespace: the workloads whose selector has no `in` requirement."""

    def __bool__(self) -> bool:
        return bool(self._selectors)

    def put(self, key: tuple[str, str], selector: targets.Selector) -> None:
        """File `selector` as the workload `key`'s (in place of any it had)."""
        if self._selectors.get(key) == selector:
            return
        self.remove(key)
        self._selectors[key] = selector
        for where in self._places(key, selector):
            where.add(key)

    def remove(self, key: tuple[str, str]) -> None:
        selector = self._selectors.pop(key, None)
        if selector is None:
            return
        for where in self._places(key, selector):
            where.discard(key)
        namespace = key[0]
        if not self._everywhere.get(namespace, True):
            del self._everywhere[namespace]
        narrowest = selector.narrowest()
        if narrowest is not None:
            for value in narrowest.values:
                label = (namespace, narrowest.key, value)
                if not self._by_label.get(label, True):
                    del self._by_label[label]

    def _places(
        self, key: tuple[str, str], selector: targets.Selector
    ) -> Iterator[set[tuple[str, str]]]:
        namespace = key[0]
        narrowest = selector.narrowest()
        if narrowest is None:
            yield self._everywhere.setdefault(namespace, set())
            return
        for value in narrowest.values:
            yield self._by_label.setdefault((namespace, narrowest.key, value), set())

    def matching(self, namespace: str, labels: Mapping[str, str]) -> list[tuple[str, str]]:
        """The workloads of `namespace` whose selector selects a pod of these labels."""
        found: set[tuple[str, str]] = set(self._everywhere.get(namespace, ()))
        by_label = self._by_label
        for label, value in labels.items():
            filed = by_label.get((namespace, label, value))
            if filed:
                found.update(filed)
        selectors = self._selectors
        return [key for key in found if selectors[key].matches(labels)]


def _same_layout(a: tuple[object, ...], b: tuple[object, ...]) -> bool:
    """Snapshots by identity (a new one is made on every change), counters by value."""
    return all(x is y or (isinstance(x, int) and x == y) for x, y in zip(a, b, strict=True))


LWS_NAME_LABEL: Final = "leaderworkerset.sigs.k8s.io/name"
"""The label every pod of a LeaderWorkerSet carries: its name."""
WARMING_LABEL: Final = contract.WARMING_LABEL
STABLE_LABEL: Final = contract.STABLE_LABEL
RAMP_LABELS: Final = frozenset({WARMING_LABEL, STABLE_LABEL})
STANDBY_REASON: Final = contract.STANDBY_REASON


def is_gated(template: Obj) -> bool:
    """Whether a pod template opts into the warm-up gate (`targets.is_gated`)."""
    return targets.is_gated(template)


def is_serving(pod: Obj) -> bool:
    """Running, Ready, out of the ramp's warming set and not terminating: the pods that count
    as capacity (docs/architecture.md, "Signals")."""
    metadata = _api.meta(pod)
    if metadata.get("deletionTimestamp"):
        return False
    if (metadata.get("labels") or {}).get(WARMING_LABEL) == "true":
        return False
    if _api.status(pod).get("phase") != "Running":
        return False
    ready = _api.condition(pod, "Ready")
    return ready is not None and ready.get("status") == "True"


def startup_s(pods: list[Obj], *, recent: int) -> float | None:
    """Median time from creation to Ready of the `recent` newest serving pods; None without any.

    Read from the Ready condition's last transition, so a pod that lost and regained readiness
    counts its whole life; the median keeps one such pod from moving the answer much. A pod let
    out of the standby pool counts until its containers were ready: it waited warm, not Ready,
    for as long as the pool kept it.
    """
    samples: list[tuple[float, float]] = []
    for pod in pods:
        created = _api.parse_time(_api.meta(pod).get("creationTimestamp"))
        ready = nodecache.startup_end_s(pod)
        if created is not None and ready is not None and ready >= created:
            samples.append((created, ready - created))
    if not samples:
        return None
    samples.sort(reverse=True)
    return float(statistics.median(duration for _, duration in samples[:recent]))


def spec_replicas(deployment: Obj) -> int:
    replicas = _api.spec(deployment).get("replicas", 1)
    return replicas if isinstance(replicas, int) and not isinstance(replicas, bool) else 1


async def read_workload(
    api: client.ApiClient,
    namespace: str,
    name: str,
    *,
    kinds: Collection[targets.TargetKind] = tuple(targets.KINDS.values()),
    request_timeout_s: float = _api.DEFAULT_REQUEST_TIMEOUT_S,
) -> Obj | None:
    """The workload `namespace/name` the controller would manage (the first of `kinds`, in
    `targets.KINDS` order, that opts in; else the first found), read once (for `autoscaler
    explain`). None when there is none; a kind whose CRD is not installed is none too."""
    calls = _api.Caller(request_timeout_s=request_timeout_s)
    found = []
    for kind in (k for k in targets.KINDS.values() if k in kinds):
        endpoint = scaling.Endpoint.of(api, kind)
        read, args = endpoint.read(name, namespace)
        obj = await calls.call_allowing(
            (404,), endpoint.operation("get"), f"{namespace}/{name}", read, *args
        )
        if obj is None:
            continue
        stamped = {**obj, "apiVersion": kind.api_version, "kind": kind.kind}
        if contract.opted_in(_api.annotations_of(obj)):
            return stamped
        found.append(stamped)
    return found[0] if found else None


LIST_PAGE = 500
"""Objects asked for per list call by `list_workloads`."""


async def list_workloads(
    api: client.ApiClient,
    namespace: str | None,
    *,
    kinds: Collection[targets.TargetKind] = tuple(targets.KINDS.values()),
    request_timeout_s: float = _api.DEFAULT_REQUEST_TIMEOUT_S,
) -> list[Obj]:
    """The Deployments of `namespace` (None: all namespaces), and the objects of the other
    `kinds`, as the API serialises them (stamped with their kind), read once, page by page
    (for `autoscaler list`). A kind whose CRD is not installed (404) has none; any other
    failure is a `KubeApiError`."""
    calls = _api.Caller(request_timeout_s=request_timeout_s)
    target = namespace or "all namespaces"
    found: list[Obj] = []
    for kind in (targets.DEPLOYMENTS, *(k for k in kinds if not k.is_deployment)):
        endpoint = scaling.Endpoint.of(api, kind)
        fn, args = endpoint.list(namespace)
        allowed = (404,) if kind.custom else ()
        token: str | None = None
        while True:
            kwargs: dict[str, Any] = {"limit": LIST_PAGE}
            if token:
                kwargs["_continue"] = token
            page = await calls.call_allowing(
                allowed, endpoint.operation("list"), target, fn, *args, **kwargs
            )
            items = () if page is None else page.get("items") or ()
            stamp = {"apiVersion": kind.api_version, "kind": kind.kind}
            found.extend({**item, **stamp} for item in items if isinstance(item, dict))
            token = None if page is None else (page.get("metadata") or {}).get("continue")
            if not token:
                break
    return found


class KubeCluster:
    """`ports.Cluster` over the caches; see the module docstring."""

    def __init__(
        self,
        api: client.ApiClient,
        *,
        identity: str,
        clock: clock_.Clock | None = None,
        wall_now: Callable[[], float] = time.time,
        namespaces: caches.NamespaceFilter | None = None,
        dry_run: bool = False,
        may_write: _api.Fence = _api.always,
        owned: Callable[[], Callable[[str], bool]] | None = None,
        on_api_error: _api.ErrorCallback = _api.ignore_error,
        recent_pods: int = 5,
        conflict_attempts: int = 4,
        watch_timeout_s: float = 300.0,
        request_timeout_s: float = _api.DEFAULT_REQUEST_TIMEOUT_S,
        rng: random.Random | None = None,
        idle_tier_grace_s: float = placement.DEFAULT_IDLE_GRACE_S,
        core_weights: Mapping[str, float] = placement.DEFAULT_CORE_WEIGHTS,
        core_weight_per_gib: float = placement.DEFAULT_CORE_WEIGHT_PER_GIB,
        on_tiers: placement.TierCallback | None = None,
        on_fallback: placement.FallbackCallback | None = None,
        on_event: events.OutcomeCallback | None = None,
        cache_retention: cache.Retention | None = None,
        cache_weight: int = nodecache.DEFAULT_WEIGHT,
        kinds: Collection[targets.TargetKind] = tuple(targets.KINDS.values()),
    ) -> None:
        """Build the caches and the Event recorder on `api`; `run()` fills and follows them.

        `kinds` are the workloads managed (`contract.targets`): Deployments and the other
        kinds with a `/scale` subresource; the custom ones while their CRD is installed.

        `identity` names this replica in Events (`reportingInstance`). `clock` paces the
        retries of a conflicting write and the watches' backoff; `wall_now` stamps the status
        annotation and Events, and times how long an empty tier Deployment has been idle
        (`idle_tier_grace_s` before it is deleted). `may_write(service)` is asked before every
        write for a service (the bucket Leases' `leads`); `owned()`, asked once per
        `workloads()`, says which services this replica acts on (it leads their bucket): the
        others are skipped, nothing is remembered about them, and the informers' news of their
        Deployments, ReplicaSets and pods builds nothing until their bucket comes here (they
        are then built from the caches); it returns the same function while the same buckets
        are led, and a different one when any moved. `core_weights` are
        core-hours per card-hour by GPU product, `core_weight_per_gib` per GiB of a card the
        table does not name; `on_tiers` and `on_fallback` are told of placements, `on_event` of
        what became of each Event (telemetry). With `cache_retention`, placement is cache-aware
        (`nodecache`): the nodes that ran a model are labelled, the tier Deployments prefer them
        with `cache_weight`, and the start-up is split by cache hit and miss.
        """
        self.clock = clock or clock_.LoopClock()
        self.dry_run = dry_run
        self._wall_now = wall_now
        self._may_write = may_write
        self._owned = owned
        self._on_api_error = on_api_error
        self._recent_pods = recent_pods
        self._rng = rng or random.Random()
        self._calls = _api.Caller(
            fence=may_write, on_error=on_api_error, request_timeout_s=request_timeout_s
        )
        self._conflicts = annotate.ConflictRetry(
            clock=self.clock, rng=self._rng, attempts=max(1, conflict_attempts)
        )
        self._apps = client.AppsV1Api(api)
        self.caches = caches.Caches(
            api,
            clock=self.clock,
            namespaces=namespaces,
            on_api_error=on_api_error,
            watch_timeout_s=watch_timeout_s,
            # A page of a list of pods takes the API server longer than one object.
            request_timeout_s=3 * request_timeout_s,
            rng=self._rng,
            kinds=kinds,
        )
        self._kinds = tuple(k for k in targets.KINDS.values() if k in kinds)
        self._endpoints = {
            kind: scaling.Endpoint.of(api, kind) for kind in (targets.DEPLOYMENTS, *kinds)
        }
        self.events = events.EventRecorder(
            api,
            instance=identity,
            calls=self._calls,
            clock=self.clock,
            wall_now=wall_now,
            dry_run=dry_run,
            on_outcome=on_event,
        )
        self.node_cache: nodecache.NodeCache | None = None
        if cache_retention is not None:
            self.node_cache = nodecache.NodeCache(
                api,
                self.caches,
                retention=cache_retention,
                wall_now=wall_now,
                may_write=lambda service: not dry_run and may_write(service),
                on_api_error=on_api_error,
                request_timeout_s=request_timeout_s,
                recent_pods=recent_pods,
                weight=cache_weight,
            )
        self.placement = placement.Ladder(
            api,
            self.caches,
            self.events,
            wall_now=wall_now,
            may_write=lambda service: not dry_run and may_write(service),
            is_serving=is_serving,
            on_api_error=on_api_error,
            request_timeout_s=request_timeout_s,
            idle_grace_s=idle_tier_grace_s,
            core_weights=core_weights,
            core_weight_per_gib=core_weight_per_gib,
            on_tiers=on_tiers,
            on_fallback=on_fallback,
            warmth=self._warmth if self.node_cache is not None else None,
        )
        self._parsed: dict[_ParseKey, contract.ServiceConfig | contract.Invalid] = {}
        self._built: dict[tuple[str, str], _Built] = {}
        """Every Deployment that opts in, by (namespace, name), and its record."""
        self._owner_of: dict[tuple[str, str], tuple[str, str]] = {}
        """The owner Deployment of each tier Deployment (itself for the owner's own tier)."""
        self._with_siblings: set[tuple[str, str]] = set()
        self._layout: tuple[object, ...] | None = None
        self._managed: list[ports.Workload] = []
        self._elsewhere: dict[tuple[str, str], model.ServiceId] = {}
        """Deployments that opt in but whose bucket another replica leads: not built, and
        their changes not followed (`_follows`) until their bucket comes here."""
        self._owns: Callable[[str], bool] | None = None
        """The last `owned()`: the same function while the buckets led are the same."""
        self._present: set[model.ServiceId] = set()
        self._dirty: set[tuple[str, str]] = set()
        """(namespace, Deployment) whose records the informers have reported a change to."""
        self._restated: set[tuple[str, str]] = set()
        """(namespace, name) of the workloads whose `state` annotation moved, and nothing else
        but their `status`: the publish's own write, on every change of a service's decision.
        Their records are built again around the placement view and pods of the last build."""
        self.caches.deployments.add_handler(self._deployment_changed)
        self.caches.replicasets.add_handler(self._replicaset_changed)
        self.caches.pods.add_handler(self._pod_changed)
        for informer_ in self.caches.workloads.values():
            informer_.add_handler(self._workload_changed)
        self._selected = _Selectors()
        """The pod selectors of the managed workloads other than Deployments: a pod they select
        is their record's."""
        self._shadowed: dict[tuple[str, str], frozenset[tuple[str, str]]] = {}
        """By (namespace, name): the (kind, uid) of the workloads told that another of the
        same name is managed in their stead."""
        for informer_ in (self.caches.hpas, self.caches.scaled_objects):
            informer_.add_handler(self._scaler_changed)
        self._last_set: dict[model.ServiceId, int] = {}
        self._written_version: dict[model.ServiceId, str] = {}
        self._written_replicas: dict[model.ServiceId, int] = {}
        self._scaled: dict[model.ServiceId, int] = {}
        self._holding: dict[model.ServiceId, model.Reason] = {}
        self._announced: set[model.ServiceId] = set()
        self._unannounced: dict[model.ServiceId, tuple[int, str]] = {}
        """Published changes not yet scaled (a drained scale-down): (replicas, reason)."""
        self._annotated: dict[model.ServiceId, _Annotated] = {}
        self._held: dict[model.ServiceId, dict[tuple[model.Reason, int], float]] = {}
        """The holds announced per service within `HOLD_QUIET_S`: (reason, count) to wall time."""

    # -- lifecycle -------------------------------------------------------------------------------

    async def run(self) -> None:
        """Fill and follow the caches and post Events until cancelled."""
        async with asyncio.TaskGroup() as group:
            group.create_task(self.caches.run())
            group.create_task(self.events.run())

    async def tend(self) -> None:
        """Carry out the upkeep of the tier Deployments that the last `workloads()` found
        (template sync, idle deletion, a re-plan) and the node labels of cache-aware placement;
        the loop calls it once per tick."""
        await self.placement.tend(replan=self._replan)
        if self.node_cache is not None and not self.dry_run:
            await self.node_cache.tend()

    @property
    def synced(self) -> bool:
        """Whether every cache has been listed once (for `/readyz`)."""
        return self.caches.synced

    async def wait_synced(self) -> None:
        await self.caches.wait_synced()

    # -- reads -------------------------------------------------------------------------------------

    def workloads(self) -> list[ports.Workload]:
        """The managed services, from the caches; see the module docstring.

        Work is proportional to change: a service's record is built again only when the
        informers have reported a change to its Deployments, ReplicaSets or pods (or, for one
        on GPUs, to the nodes, the pods bound to them or the quotas), or after this controller
        wrote to it. Every other service's record is the object the last call returned.
        """
        dirty, self._dirty = self._dirty, set()
        restated, self._restated = self._restated, set()
        owns = _everything if self._owned is None else self._owned()
        if owns is not self._owns:  # a bucket that moved: its services are built or dropped
            self._owns = owns
            dirty.update(k for k, sid in self._elsewhere.items() if owns(sid))
            dirty.update((w.namespace, w.deployment) for w in self._managed if not owns(w.id))
        layout = self.placement.capacity.layout()
        moved = self._layout is not None and not _same_layout(self._layout, layout)
        self._layout = layout
        touched: dict[tuple[str, str], bool] = {}
        """Each workload to build again, and whether its last placement view still holds."""
        for key in dirty:
            owner = self._owner_of.get(key)
            if owner is not None:
                touched[owner] = False
            touched[key] = False
        if moved:  # the GPU services were placed against capacity that has changed
            for key, entry in self._built.items():
                if entry.layout is not None:
                    touched[key] = False
        for key in restated:
            # Only the owner's own state moved: what its view was built from has not. A tier's
            # state is read by no record: it is any other change to its owner's.
            owner = self._owner_of.get(key)
            if owner != key and owner is not None:
                touched.setdefault(owner, False)
            built = self._built.get(key)
            scaled = owner is None and built is not None and not built.kind.is_deployment
            touched.setdefault(key, owner == key or scaled)
        for key, same_view in touched.items():
            self._update(key, layout, owns, same_view=same_view)
        if touched:
            self._managed = [e.workload for e in self._built.values() if e.workload is not None]
            present = {w.id for w in self._managed}
            if present != self._present:
                if self.node_cache is not None:
                    self.node_cache.forget(present)
                self._forget(present)
                self._present = present
            self._prune_parsed()
        for key in self._with_siblings:
            # Idle sibling Deployments expire with time, not with a change: look every call.
            entry = self._built[key]
            workload, config, view = entry.workload, entry.config, entry.view
            if key not in touched and workload and config and view:
                self._observe(workload.id, entry.deployment, config, view)
        self.placement.end_round()
        return self._managed

    def _update(
        self,
        key: tuple[str, str],
        layout: tuple[object, ...],
        owns: Callable[[str], bool],
        *,
        same_view: bool = False,
    ) -> None:
        """Build again the entry of the workload `key` (namespace, name), or drop it when it is
        gone, no longer opts in, is a placement tier, or another replica leads its bucket; with
        `same_view`, around the placement view and pods of its last build (only its `state`
        and `status` annotations moved since)."""
        namespace, name = key
        found = self._find(namespace, name)
        old = self._built.get(key)
        self._elsewhere.pop(key, None)
        if not found:
            self._shadowed.pop(key, None)
            if old is not None:
                self._drop(key, old)
            return
        kind, deployment = found[0]
        notes = _api.annotations_of(deployment)
        service = model.ServiceId(f"{namespace}/{name}")
        if not owns(service):  # another replica leads its bucket
            self._elsewhere[key] = service
            self._shadowed.pop(key, None)
            if old is not None:
                self._drop(key, old)
            return
        self._shadow(key, kind, found[1:])
        if old is not None and (
            old.kind is not kind or _api.uid(old.deployment) != _api.uid(deployment)
        ):
            self._drop(key, old)  # deleted and created again: a new workload
            old = None
        if kind.is_deployment:
            entry = self._build(service, deployment, notes, old, layout, same_view=same_view)
        else:
            entry = self._build_scaled(
                service, kind, deployment, notes, old, layout, same_view=same_view
            )
            if entry.selector is not None:
                self._selected.put(key, _members(kind, name, entry.selector))
            else:
                self._unselect(key)
        if old is not None:
            for tier in old.tiers - entry.tiers:
                self._owner_of.pop((namespace, tier), None)
        for tier in entry.tiers:
            self._owner_of[namespace, tier] = key
        self._built[key] = entry
        if entry.view is not None and len(entry.view.tiers) > 1:
            self._with_siblings.add(key)
        else:
            self._with_siblings.discard(key)

    def _find(self, namespace: str, name: str) -> list[tuple[targets.TargetKind, Obj]]:
        """The workloads that opt in under this name, in `targets.KINDS` order (never a
        placement tier): the first is the service."""
        found = []
        for kind in self._kinds:
            obj = self.caches.workload(kind, namespace, name)
            if obj is None or not contract.opted_in(_api.annotations_of(obj)):
                continue
            if kind.is_deployment and placement.is_sibling(obj):
                continue
            found.append((kind, obj))
        return found

    def _shadow(
        self,
        key: tuple[str, str],
        managed: targets.TargetKind,
        others: list[tuple[targets.TargetKind, Obj]],
    ) -> None:
        """Tell each other workload of the service's name, once, that it is not managed: the
        service is `namespace/name`, so only one of them can be."""
        told = self._shadowed.pop(key, frozenset())
        now = frozenset((kind.name, _api.uid(obj)) for kind, obj in others)
        if now:
            self._shadowed[key] = now
        namespace, name = key
        for kind, obj in others:
            if (kind.name, _api.uid(obj)) in told:
                continue
            rule = (
                f"the {managed.kind} {namespace}/{name} opts in too and is managed under this "
                f"name (a service is namespace/name); this {kind.kind} is not: rename one or "
                "opt one out"
            )
            invalid = contract.Invalid((contract.Problem(contract.ENABLED_KEY, "true", rule),))
            log.warning(
                "config.invalid",
                service=f"{namespace}/{name}",
                kind=kind.kind,
                problems=[p.message for p in invalid.problems],
            )
            self.events.record(obj, events.WARNING, INVALID, str(invalid))

    def _unselect(self, key: tuple[str, str]) -> None:
        self._selected.remove(key)

    def _drop(self, key: tuple[str, str], old: _Built) -> None:
        del self._built[key]
        self._unselect(key)
        self._with_siblings.discard(key)
        for tier in old.tiers:
            if self._owner_of.get((key[0], tier)) == key:
                del self._owner_of[key[0], tier]

    def _prune_parsed(self) -> None:
        """Forget parses no service uses any more, once they outnumber those in use."""
        if len(self._parsed) <= 64 + 2 * len(self._built):
            return
        used = {entry.parse_key for entry in self._built.values()}
        self._parsed = {k: v for k, v in self._parsed.items() if k in used}

    def _build(
        self,
        service: model.ServiceId,
        deployment: Obj,
        notes: Mapping[str, str],
        old: _Built | None,
        layout: tuple[object, ...],
        *,
        same_view: bool = False,
    ) -> _Built:
        """One service's record from the caches; `old` is its entry before this change. With
        `same_view` (nothing its view is made from has changed) `old`'s view, serving pods and
        start-up time are used again: they would come out the same."""
        namespace, name = _api.namespace(deployment), _api.name(deployment)
        key = _parse_key(namespace, notes)
        config = self._parse(key, notes)
        state_text = notes.get(contract.STATE_KEY)
        said = () if old is None else old.problems
        if isinstance(config, contract.Invalid):
            problems = self._report_invalid(service, deployment, config, said)
            return _unmanaged(deployment, key, problems)
        others = self.caches.other_scalers(namespace, name)
        if others:
            problems = self._report_invalid(service, deployment, _contested(others), said)
            return _unmanaged(deployment, key, problems)
        last = old.workload if same_view and old is not None and old.parse_key == key else None
        if last is not None and old is not None and old.view is not None:
            view, startup, pods = old.view, last.startup_s, last.pods
        else:
            view = self.placement.view(service, deployment, config)
            startup = startup_s(view.serving, recent=self._recent_pods)
            pods = frozenset(_api.name(pod) for pod in view.serving)
        if old is not None and old.state_text == state_text:
            state_read = old.state_read
        else:
            state_read = self._state(service, deployment, state_text)
        state, replicas = state_read
        if replicas is not None:
            self._last_set.setdefault(service, replicas)
        if config.policy.pause is not None and not self._lags(service):
            # Paused: a count set by hand is the one to keep (no re-plan, no override).
            self._last_set[service] = view.replicas
        split = None
        served = nodecache.model_of(deployment, config) if self.node_cache else None
        if self.node_cache is not None and served is not None:
            split = self.node_cache.observe(service, served, pods=view.pods)
        workload = ports.Workload(
            id=service,
            policy=config.policy,
            half_life_s=config.half_life_s,
            replicas=self.placement.reported_replicas(service, view, self._last_set.get(service)),
            serving=len(view.serving),
            startup_s=startup,
            startup_split=split,
            state=state,
            admissible=view.admissible,
            admissible_reason=(
                model.Reason.QUOTA if view.problem is None else model.Reason.NO_PLACEMENT
            ),
            core_rate=view.core_rate,
            project=config.project,
            dry_run=config.mode is contract.Mode.DRY_RUN,
            window_s=config.window_s if _WINDOW_KEY in notes else None,
            namespace=namespace,
            deployment=name,
            pods=pods,
            metrics=config.metrics,
            ramp=self._ramp_target(service, deployment, config),
            placement=view.need,
        )
        self._observe(service, deployment, config, view)
        gpu = view.need is not None or view.core_rate > 0
        return _Built(
            deployment,
            frozenset(_api.name(tier.deployment) for tier in view.tiers),
            workload,
            config,
            view,
            layout if gpu else None,
            key,
            state_text,
            state_read,
        )

    def _build_scaled(
        self,
        service: model.ServiceId,
        kind: targets.TargetKind,
        obj: Obj,
        notes: Mapping[str, str],
        old: _Built | None,
        layout: tuple[object, ...],
        *,
        same_view: bool = False,
    ) -> _Built:
        """The record of a workload other than a Deployment: its replicas as its Scale says,
        its serving pods those its Scale's selector selects; no placement tiers, no ramp. With
        `same_view` (only its `state` and `status` annotations moved since `old`) `old`'s
        serving pods, start-up time and core-hour rate are used again, not the namespace's
        pods scanned by selector: they would come out the same."""
        namespace, name = _api.namespace(obj), _api.name(obj)
        key = _parse_key(namespace, notes)
        config = self._parse(key, notes)
        said = () if old is None else old.problems
        if not isinstance(config, contract.Invalid):
            refused = targets.unsupported(kind, obj, notes)
            others = self.caches.other_scalers(namespace, name, kind)
            if refused:
                config = contract.Invalid(tuple(refused))
            elif others:
                config = _contested(others)
        scale = targets.scale_of(kind, obj)
        try:
            selector = targets.parse_selector(scale.selector)
        except ValueError as e:
            if not isinstance(config, contract.Invalid):
                path = ".".join(kind.selector_path)
                config = contract.Invalid((contract.Problem(path, scale.selector, str(e)),))
        if isinstance(config, contract.Invalid):
            problems = self._report_invalid(service, obj, config, said)
            return _unmanaged(obj, key, problems, kind)
        last = old.workload if same_view and old is not None and old.parse_key == key else None
        if last is not None:
            served, startup, core_rate = last.pods, last.startup_s, last.core_rate
        else:
            pods = self.caches.selected_pods(namespace, selector)
            serving = [pod for pod in pods if is_serving(pod)]
            served = frozenset(_api.name(pod) for pod in serving)
            startup = startup_s(serving, recent=self._recent_pods)
            core_rate = self.placement.capacity.core_rate(self._group_pods(kind, obj, pods))
        state_text = notes.get(contract.STATE_KEY)
        if old is not None and old.state_text == state_text:
            state_read = old.state_read
        else:
            state_read = self._state(service, obj, state_text)
        state, replicas = state_read
        if replicas is not None:
            self._last_set.setdefault(service, replicas)
        lags = self._lags(service)
        if config.policy.pause is not None and not lags:
            self._last_set[service] = scale.spec_replicas
        workload = ports.Workload(
            id=service,
            policy=config.policy,
            half_life_s=config.half_life_s,
            replicas=self._written_replicas[service] if lags else scale.spec_replicas,
            serving=len(served),
            startup_s=startup,
            state=state,
            core_rate=core_rate,
            project=config.project,
            dry_run=config.mode is contract.Mode.DRY_RUN,
            window_s=config.window_s if _WINDOW_KEY in notes else None,
            namespace=namespace,
            deployment=name,
            pods=served,
            metrics=config.metrics,
        )
        return _Built(
            obj,
            frozenset(),
            workload,
            config,
            None,
            layout if core_rate > 0 else None,
            key,
            state_text,
            state_read,
            kind=kind,
            selector=selector,
        )

    def _group_pods(self, kind: targets.TargetKind, obj: Obj, selected: list[Obj]) -> list[Obj]:
        """Every pod of the workload, for accounting: those its selector selects, and a
        LeaderWorkerSet's workers too (its selector selects the leaders only)."""
        if kind is not targets.LEADER_WORKER_SETS:
            return selected
        return self.caches.labelled(_api.namespace(obj), LWS_NAME_LABEL, _api.name(obj))

    def _observe(
        self,
        service: model.ServiceId,
        deployment: Obj,
        config: contract.ServiceConfig,
        view: placement.View,
    ) -> None:
        active = not self.dry_run and config.mode is not contract.Mode.DRY_RUN
        asked = None if config.policy.pause is not None else self._last_set.get(service)
        self.placement.observe(service, deployment, view, asked=asked, active=active)

    def _ramp_target(
        self, service: model.ServiceId, deployment: Obj, config: contract.ServiceConfig
    ) -> ports.RampTarget | None:
        """The service's ramp settings when its pod template opts into the warm-up gate."""
        template = _api.spec(deployment).get("template") or {}
        if not is_gated(template):
            if config.standby.fixed != 0:
                self._refuse_pool(service, deployment)
            return None
        labels = _api.meta(template).get("labels") or {}
        route = ports.RouteTarget(
            service=service,
            namespace=_api.namespace(deployment),
            deployment=_api.name(deployment),
            pod_labels={str(k): str(v) for k, v in labels.items() if k not in RAMP_LABELS},
        )
        return ports.RampTarget(
            service=service,
            route=route,
            traffic=config.traffic,
            warmup=config.warmup,
            config=config.ramp,
            metrics=config.metrics,
            dry_run=self.dry_run or config.mode is contract.Mode.DRY_RUN,
            saved=_api.annotations_of(deployment).get(contract.RAMP_KEY),
            standby=config.standby,
        )

    def _refuse_pool(self, service: model.ServiceId, deployment: Obj) -> None:
        """A standby pool asked for on a template without the warm-up gate: its pods would
        serve as soon as Ready. The service carries on without one."""
        key = contract.STANDBY_KEY
        problem = contract.Problem(
            key,
            _api.annotations_of(deployment).get(key),
            f"needs the warm-up gate in the pod template (readiness gate {contract.WARM_GATE} "
            f"and label {contract.WARMING_LABEL}); the service is scaled without a pool",
        )
        log.warning("config.invalid", service=service, problems=[problem.message])
        self.events.record(deployment, events.WARNING, INVALID, problem.message)

    def _deployment_changed(self, _: str, old: Obj | None, new: Obj | None) -> None:
        """Informer handler: a Deployment is its own record's, and a tier's its owner's too;
        but not the controller's own write of a decision, which no record is built from, and
        a write of its state, which only the state is read again from (`_restated`)."""
        if not self._follows(old, new) or self._decision_written(old, new):
            return
        for obj in (old, new):
            if obj is not None:
                namespace = _api.namespace(obj)
                self._dirty.add((namespace, _api.name(obj)))
                owner = _controller(obj)
                if owner is not None and owner[0] == "Deployment":
                    self._dirty.add((namespace, owner[1]))

    def _workload_changed(self, _: str, old: Obj | None, new: Obj | None) -> None:
        """Informer handler: a StatefulSet, a LeaderWorkerSet or a Rollout is its own record's;
        but not the controller's own write of a decision, and a write of its state, which only
        the state is read again from (`_restated`), as for a Deployment."""
        if not self._follows(old, new) or self._decision_written(old, new):
            return
        for obj in (old, new):
            if obj is not None:
                self._dirty.add((_api.namespace(obj), _api.name(obj)))

    def _follows(self, old: Obj | None, new: Obj | None) -> bool:
        """Whether a change to this workload can matter to a record: not while it is known to
        opt in under a bucket another replica leads (its record is built from the caches
        when its bucket comes here), unless it is gone (so that it is forgotten)."""
        if old is None or new is None or not self._elsewhere:
            return True
        return (_api.namespace(new), _api.name(new)) not in self._elsewhere

    def _decision_written(self, old: Obj | None, new: Obj | None) -> bool:
        """Whether the change is only the controller's write of a decision: its status alone
        (nothing to rebuild) or its state too (the record is `_restated`)."""
        if old is None or new is None:
            return False
        moved = _moved_annotations(old, new)
        if moved is None or not moved <= _DECISION_KEYS:
            return False
        if not moved <= _STATUS_ONLY:
            self._restated.add((_api.namespace(new), _api.name(new)))
        return True

    def _replicaset_changed(self, _: str, old: Obj | None, new: Obj | None) -> None:
        obj = new if new is not None else old
        owner = None if obj is None else _controller(obj)
        if obj is not None and owner is not None and owner[0] == "Deployment":
            self._dirty_unless_elsewhere((_api.namespace(obj), owner[1]))

    def _dirty_unless_elsewhere(self, key: tuple[str, str]) -> None:
        """`key`'s record is to be built again, unless its bucket is led elsewhere: then it is
        built from the caches, pods and all, when the bucket comes here."""
        if key not in self._elsewhere:
            self._dirty.add(key)

    def _pod_changed(self, _: str, old: Obj | None, new: Obj | None) -> None:
        if self._selected:
            for changed in (old, new):
                if changed is not None:
                    labels = _api.meta(changed).get("labels") or {}
                    self._dirty.update(self._selected.matching(_api.namespace(changed), labels))
        obj = new if new is not None else old
        owner = None if obj is None else _controller(obj)
        if obj is None or owner is None or owner[0] != "ReplicaSet":
            return
        namespace = _api.namespace(obj)
        replicaset = self.caches.replicasets.get(namespace, owner[1])
        found = None if replicaset is None else _controller(replicaset)
        if found is not None and found[0] == "Deployment":
            self._dirty_unless_elsewhere((namespace, found[1]))
        else:
            # The ReplicaSet is not cached (yet, or any more): a Deployment's ReplicaSet is
            # named after it, with a hash of the template appended.
            self._dirty_unless_elsewhere((namespace, owner[1].rpartition("-")[0]))

    def _scaler_changed(self, kind: str, old: Obj | None, new: Obj | None) -> None:
        """Informer handler: an HPA or a ScaledObject may take or release a Deployment."""
        del kind
        for obj in (old, new):
            for target in () if obj is None else caches.target_values(obj):
                namespace, _, name = target.partition("@")[0].partition("/")
                self._dirty.add((namespace, name))

    def _forget(self, present: Collection[model.ServiceId]) -> None:
        """Drop what is remembered about services no longer managed."""
        self._last_set = {k: v for k, v in self._last_set.items() if k in present}
        self._written_version = {k: v for k, v in self._written_version.items() if k in present}
        self._written_replicas = {k: v for k, v in self._written_replicas.items() if k in present}
        self._holding = {k: v for k, v in self._holding.items() if k in present}
        self._announced &= set(present)
        self._unannounced = {k: v for k, v in self._unannounced.items() if k in present}
        self._annotated = {k: v for k, v in self._annotated.items() if k in present}
        self._held = {k: v for k, v in self._held.items() if k in present}
        self.placement.forget(present)

    def forget_unless(self, keep: Callable[[model.ServiceId], bool]) -> None:
        """Drop what is remembered about the managed services `keep` refuses: another replica
        acts on them now (their bucket Lease moved), so it would be stale if they came back."""
        kept = {service for service in self._present if keep(service)}
        if kept == self._present:
            return
        self._dirty.update(_key_of(service) for service in self._present - kept)
        self._forget(kept)

    def workload(self, service: model.ServiceId) -> ports.Workload | None:
        """The record the last `workloads()` built for `service`; None when it is not managed."""
        entry = self._built.get(_key_of(service))
        return None if entry is None else entry.workload

    def managed(self) -> list[ports.Workload]:
        """The records the last `workloads()` returned, in its order (for the ramp)."""
        return self._managed

    def may_write(self, service: str) -> bool:
        """Whether this instance may write for `service` now (it leads the service's Lease)."""
        return self._may_write(service)

    @property
    def on_api_error(self) -> _api.ErrorCallback:
        """Told of every failed API call; writers built on this cluster report theirs here."""
        return self._on_api_error

    def _parse(
        self, key: _ParseKey, notes: Mapping[str, str]
    ) -> contract.ServiceConfig | contract.Invalid:
        """The annotations parsed, once per namespace and distinct settings."""
        result = self._parsed.get(key)
        if result is None:
            result = self._parsed[key] = contract.parse(notes, namespace=key[0])
        return result

    def _report_invalid(
        self,
        service: model.ServiceId,
        deployment: Obj,
        config: contract.Invalid,
        said: tuple[str, ...],
    ) -> tuple[str, ...]:
        """Log and post the problems, unless they are those already said for this Deployment."""
        messages = tuple(problem.message for problem in config.problems)
        if said == messages:
            return messages
        log.warning("config.invalid", service=service, problems=list(messages))
        self.events.record(deployment, events.WARNING, INVALID, str(config))
        return messages

    def _state(
        self, service: model.ServiceId, deployment: Obj, text: str | None
    ) -> tuple[model.PolicyState | None, int | None]:
        """The policy state in the `state` annotation and the replicas it says were set; None
        (a new service's) when it is absent or corrupt. A corrupt text gets a log line and a
        `CorruptState` Event when first seen (the entry keeps what it was read as): the next
        publish replaces it."""
        if text is None:
            return (None, None)
        try:
            return codec.parse_state(text)
        except ValueError as e:
            problem = contract.Problem(contract.STATE_KEY, text, str(e))
            log.warning(
                "state.invalid",
                service=service,
                key=contract.STATE_KEY,
                value=contract.quote(text),
                rule=str(e),
            )
            message = f"{problem.message}; ignored, the state is rebuilt as for a new service"
            self.events.record(deployment, events.WARNING, contract.CORRUPT_STATE, message)
            return (None, None)

    # -- writes ------------------------------------------------------------------------------------

    async def scale(self, service: model.ServiceId, replicas: int) -> None:
        """Set the workload's replicas through its `scale` subresource (a merge patch); for a
        Deployment of a GPU service, distribute them over its placement tiers first.

        Raises `placement.UnplaceableError` (an `ActuationError`) for a service that no GPU in
        the cluster could run: it keeps its size.
        """
        target, deployment = self._target(service)
        if self.dry_run or target.config.mode is contract.Mode.DRY_RUN:
            log.info(
                "scale.skipped_dry_run",
                service=service,
                replicas=replicas,
                scope="global" if self.dry_run else "service",
            )
            return
        self._require_leader(service)
        async with self.placement.lock(service):
            # The view `workloads()` built: the informers have reported no change since.
            tiers = target.view
            last = self._last_set.get(service)
            if tiers is None:
                observed = target.workload.replicas
            else:
                observed = self.placement.reported_replicas(service, tiers, last)
            self._check_override(service, deployment, observed, replicas, target.kind)
            placed = replicas
            if tiers is None or tiers.need is None:
                await self._scale_owner(service, target.workload, replicas, target.kind)
            else:
                plan = await self.placement.apply(
                    service,
                    deployment,
                    tiers,
                    replicas,
                    scale_owner=lambda n: self._scale_owner(service, target.workload, n),
                )
                placed = min(replicas, plan.total)
            self._dirty.add((target.workload.namespace, target.workload.deployment))
            self._last_set[service] = replicas
            self._scaled[service] = placed
            self._announce_drained(service, deployment, replicas, placed)

    def _announce_drained(
        self, service: model.ServiceId, deployment: Obj, replicas: int, placed: int
    ) -> None:
        """Post the `SuccessfulRescale` of a published scale-down that the ramp driver carries
        out only now, after draining its victims; any other scale ends the wait for it."""
        waiting = self._unannounced.pop(service, None)
        if waiting is None:
            return
        asked, why = waiting
        if replicas != asked or placed != asked:
            return
        self._scaled.pop(service, None)  # announced here: the next publish must not again
        message = f"New size: {replicas}; reason: {why}"
        self.events.record(deployment, events.NORMAL, RESCALED, message)

    def _check_override(
        self,
        service: model.ServiceId,
        deployment: Obj,
        observed: int,
        replicas: int,
        kind: targets.TargetKind,
    ) -> None:
        last = self._last_set.get(service)
        if last is not None and observed not in (last, replicas) and not self._lags(service):
            log.warning("scale.overridden", service=service, found=observed, set=last)
            message = (
                f"spec.replicas was changed to {observed} outside the autoscaler (it had set "
                f"{last}); the autoscaler manages this {kind.kind} and sets {replicas}"
            )
            self.events.record(deployment, events.WARNING, OVERRIDDEN, message)

    async def _scale_owner(
        self,
        service: model.ServiceId,
        workload: ports.Workload,
        replicas: int,
        kind: targets.TargetKind = targets.DEPLOYMENTS,
    ) -> None:
        """Patch the owner's `scale` with the resourceVersion its replicas were read at.

        A 409 re-reads the Deployment (another kind's `scale`): when only its status moved, the
        patch is sent again at the new version; when its replicas changed (another writer, a
        successor leader), the conflict is raised for the loop to decide again from what is
        there now.
        """
        endpoint = self._endpoints[kind]
        operation = endpoint.operation("patch", scale=True)
        cached = self.caches.workload(kind, workload.namespace, workload.deployment)
        if cached is None:
            raise KubeApiError(operation, f"{service} is not a managed {kind.kind}")
        if self._lags(service):  # the cache has not seen our own last write yet
            version, based_on = self._written_version[service], self._written_replicas[service]
        else:
            version = _api.resource_version(cached)
            based_on = targets.scale_of(kind, cached).spec_replicas
        for attempt in range(1, self._conflicts.attempts + 1):
            body = {"metadata": {"resourceVersion": version}, "spec": {"replicas": replicas}}
            patch = endpoint.patch_scale(workload.deployment, workload.namespace, body)
            try:
                answer = await self._calls.call(
                    operation, service, patch, write=True, service=service
                )
            except KubeApiError as e:
                if e.status != 409 or attempt == self._conflicts.attempts:
                    raise
            else:
                self._written_version[service] = _api.resource_version(answer)
                self._written_replicas[service] = replicas
                return
            current = await self._read(service, workload, kind)
            if spec_replicas(current) != based_on:
                log.info("scale.conflicted", service=service, found=spec_replicas(current))
                raise KubeApiError(
                    operation,
                    f"{operation} {service} failed: replicas changed to "
                    f"{spec_replicas(current)} since they were read as {based_on}",
                    status=409,
                )
            version = _api.resource_version(current)

    async def _replan(self, service: model.ServiceId, desired: int) -> None:
        """Distribute the policy's last total again (the ladder's upkeep, under its lock)."""
        entry = self._built.get(_key_of(service))
        if entry is None or entry.workload is None or entry.config is None:
            return
        if not entry.kind.is_deployment:
            return
        workload, config = entry.workload, entry.config
        deployment = self.caches.deployment(workload.namespace, workload.deployment)
        if deployment is None or config.mode is contract.Mode.DRY_RUN:
            return
        # Upkeep runs beside the ticks, after the caches may have moved: read the tiers afresh.
        tiers = self.placement.view(service, deployment, config)
        if tiers.need is None or tiers.problem is not None:
            return
        await self.placement.apply(
            service,
            deployment,
            tiers,
            desired,
            scale_owner=lambda n: self._scale_owner(service, workload, n),
        )
        self._dirty.add((workload.namespace, workload.deployment))

    async def publish(
        self, service: model.ServiceId, decision: model.Decision, state: model.PolicyState
    ) -> None:
        """Write the status and state annotations when they changed, and post the Events."""
        target, deployment = self._target(service)
        if self.dry_run:
            log.info("publish.skipped_dry_run", service=service, desired=decision.desired)
            return
        self._require_leader(service)
        document = codec.status_document(decision, time_s=self._wall_now())
        placed = self.placement.status_of(service)
        if placed is not None:
            document["placement"] = placed
        if target.workload.startup_split is not None:
            document["startup"] = codec.startup_document(target.workload.startup_split)
        state_text = codec.state_text(state, replicas=self._last_set.get(service))
        await self._annotate(service, deployment, document, state_text, target.kind)
        self._announce(service, target.config, deployment, decision)

    def _warmth(self, owner: Obj) -> tuple[Obj, frozenset[str]] | None:
        """The preferred node affinity term toward the nodes warm for the owner's model, and
        those nodes; None when the owner is not a managed service or names no model."""
        entry = self._built.get((_api.namespace(owner), _api.name(owner)))
        if self.node_cache is None or entry is None or entry.config is None:
            return None
        served = nodecache.model_of(owner, entry.config)
        if served is None:
            return None
        return self.node_cache.preference(served), self.node_cache.warm_nodes(served)

    def _target(self, service: model.ServiceId) -> tuple[_Target, Obj]:
        entry = self._built.get(_key_of(service))
        if entry is not None and entry.workload is not None and entry.config is not None:
            workload, kind = entry.workload, entry.kind
            found = self.caches.workload(kind, workload.namespace, workload.deployment)
            if found is not None and (entry.view is not None or not kind.is_deployment):
                return _Target(workload, entry.config, entry.view, kind), found
        raise KubeApiError("deployments.get", f"{service} is not a managed workload")

    def _require_leader(self, service: model.ServiceId) -> None:
        if not self._may_write(service):
            raise NotLeaderError(
                f"{service}: this instance does not lead its Lease; nothing written"
            )

    def _lags(self, service: model.ServiceId) -> bool:
        """Whether the cache has not yet seen the controller's own last scale write."""
        written = self._written_version.get(service)
        entry = self._built.get(_key_of(service))
        if written is None or entry is None:
            return False
        cached = self.caches.workload(
            entry.kind, _api.namespace(entry.deployment), _api.name(entry.deployment)
        )
        return cached is not None and _older(cached, written)

    async def _annotate(
        self,
        service: model.ServiceId,
        deployment: Obj,
        document: dict[str, object],
        state_text: str,
        kind: targets.TargetKind,
    ) -> None:
        wanted = codec.outcome(document)
        mine = self._annotated.get(service)

        def written(found: Mapping[str, str]) -> bool:
            # As `codec.same_status`, but the state (a string compare) first, and the text of
            # the controller's own last write compared through its outcome, not parsed again.
            if found.get(contract.STATE_KEY) != state_text:
                return False
            text = found.get(contract.STATUS_KEY)
            if mine is not None and text == mine.status:
                return mine.outcome == wanted
            existing = codec.read_status(text)
            return existing is not None and codec.outcome(existing) == wanted

        # Right after its own writes the cache usually lags by them: patching from its version
        # would only earn a 409 and a re-read, and its annotations may be older than the last
        # ones written, so a decision that goes back to what they say would not be written.
        version = self._written_version[service] if self._lags(service) else None
        found = None
        if mine is not None and _older(deployment, mine.version):
            found = {contract.STATUS_KEY: mine.status, contract.STATE_KEY: mine.state}
            if version is None or _older_version(version, mine.version):
                version = mine.version
        status_text = codec.dumps(document)
        answer = await annotate.patch_annotations(
            self._calls,
            self._apps,
            deployment,
            {contract.STATUS_KEY: status_text, contract.STATE_KEY: state_text},
            target=service,
            retry=self._conflicts,
            version=version,
            found=found,
            written=written,
            endpoint=self._endpoints[kind],
        )
        if answer is not None:
            self._annotated[service] = _Annotated(
                _api.resource_version(answer), status_text, state_text, wanted
            )

    async def _read(
        self, service: model.ServiceId, workload: ports.Workload, kind: targets.TargetKind
    ) -> Obj:
        """The Deployment, or another kind's Scale: either has the replicas at spec.replicas."""
        endpoint = self._endpoints[kind]
        if kind.is_deployment:
            read, args = endpoint.read(workload.deployment, workload.namespace)
            return await self._calls.call(endpoint.operation("get"), service, read, *args)
        read, args = endpoint.read_scale(workload.deployment, workload.namespace)
        return await self._calls.call(endpoint.operation("get", scale=True), service, read, *args)

    def _announce(
        self,
        service: model.ServiceId,
        config: contract.ServiceConfig,
        deployment: Obj,
        decision: model.Decision,
    ) -> None:
        scaled = self._scaled.pop(service, None)
        why = (
            f"{decision.reason.value}: {decision.detail}"
            if decision.detail
            else (decision.reason.value)
        )
        if decision.changes:
            self._unannounced.pop(service, None)
        if decision.changes and scaled == decision.desired:
            message = f"New size: {decision.desired}; reason: {why}"
            self.events.record(deployment, events.NORMAL, RESCALED, message)
        elif decision.changes and config.mode is contract.Mode.DRY_RUN:
            message = f"Would set size: {decision.desired} (dry-run); reason: {why}"
            self.events.record(deployment, events.NORMAL, DRY_RUN_RESCALE, message)
        elif decision.changes and not (
            scaled is not None and self._last_set.get(service) == decision.desired
        ):
            # Not asked for yet: the ramp driver drains the victims of a scale-down first and
            # sets the replicas on a later tick; `scale` announces the new size then.
            self._unannounced[service] = (decision.desired, why)
        # The first hold this process publishes for a service may be one that an earlier leader
        # announced already: the status annotation says so.
        first = service not in self._announced
        self._announced.add(service)
        if decision.kind is model.Kind.HOLD:
            now_s = self._wall_now()
            hold = (decision.reason, decision.current)
            held = {
                k: t for k, t in self._held.get(service, {}).items() if now_s - t < HOLD_QUIET_S
            }
            if (
                self._holding.get(service) is not decision.reason
                and not (first and _held_already(deployment, decision))
                and hold not in held
            ):
                message = f"Holding at {decision.current} replicas; reason: {why}"
                self.events.record(deployment, events.NORMAL, HELD, message)
                held[hold] = now_s
            self._held[service] = held
            self._holding[service] = decision.reason
        else:
            self._holding.pop(service, None)


_MOVING_METADATA: Final = frozenset({"resourceVersion", "managedFields", "annotations"})
_STATUS_ONLY: Final = frozenset({contract.STATUS_KEY})
_DECISION_KEYS: Final = frozenset({contract.STATUS_KEY, contract.STATE_KEY})
"""The annotations a publish writes: the controller's own write of its last decision."""


def _moved_annotations(old: Obj, new: Obj) -> frozenset[str] | None:
    """The annotations whose values differ between two versions of a workload (added and
    removed ones too) when nothing else moved but the metadata every write moves; None when
    something else did."""
    if old.keys() != new.keys():
        return None
    if any(old[key] != new[key] for key in old if key != "metadata"):
        return None
    was, now = _api.meta(old), _api.meta(new)
    if any(was.get(k) != now.get(k) for k in was.keys() | now.keys() if k not in _MOVING_METADATA):
        return None
    notes, later = was.get("annotations") or {}, now.get("annotations") or {}
    return frozenset(k for k in notes.keys() | later.keys() if notes.get(k) != later.get(k))


def _older(cached: Obj, version: str) -> bool:
    """Whether the cached object is older than the resourceVersion of a write of ours."""
    return _older_version(_api.resource_version(cached), version)


def _older_version(version: str, than: str) -> bool:
    try:
        # resourceVersions are opaque by contract but etcd's are increasing integers; when
        # they are not, assume the cache is current.
        return int(version) < int(than)
    except ValueError:
        return False


def _contested(others: list[str]) -> contract.Invalid:
    """The problem of a Deployment that another autoscaler scales too."""
    rule = (
        f"another autoscaler scales this Deployment ({', '.join(others)}); two owners of "
        "spec.replicas fight, so this one writes nothing: remove the other or opt out"
    )
    return contract.Invalid((contract.Problem(contract.ENABLED_KEY, "true", rule),))


def _held_already(deployment: Obj, decision: model.Decision) -> bool:
    """Whether the status on the Deployment already announces this hold.

    It does after a restart or a change of leader: the new leader's memory of holds is empty,
    and without this every holding service would get its ScaleHeld Event again.
    """
    status = codec.read_status(_api.annotations_of(deployment).get(contract.STATUS_KEY))
    return status is not None and (
        status.get("kind"),
        status.get("reason"),
        status.get("current"),
    ) == (model.Kind.HOLD.value, decision.reason.value, decision.current)


if TYPE_CHECKING:

    def _implements_the_port(cluster: KubeCluster) -> ports.Cluster:
        return cluster  # mypy checks the structural type here

"""The placement ladder on Kubernetes (docs/architecture.md, "The placement ladder" and
"Accounting"): free GPU capacity from the caches, the tier Deployments, the namespace's GPU quota,
and the GPU time a service's pods hold.

Capacity. Per node, `status.allocatable` of `nvidia.com/gpu`, `nvidia.com/mig-<profile>` and
`nvidia.com/gpu.shared` minus the requests of the non-terminated pods bound to it (`spec.nodeName`,
phase neither Succeeded nor Failed), kept up to date from the pod cache's changes: nothing is
listed per tick, and a node's entry is rebuilt only when that node or its GPU pods change. GPU
Feature Discovery labels give the card (`nvidia.com/gpu.product`, `nvidia.com/gpu.memory` in MiB),
the time-slicing replicas (`nvidia.com/gpu.replicas`) and the MIG slices' memory
(`nvidia.com/mig-<profile>.memory`). A time-shared `nvidia.com/gpu` (replicas > 1, or a product
ending in `-SHARED`) is never offered as a whole card. Cordoned nodes (`spec.unschedulable`), nodes
that are not Ready, nodes labelled `autoscaler.dsec.io/gpu-health: faulty` and nodes the GPU
health guard excludes (`Capacity.exclude`, from `gpuguard`: XID errors, memory full) are not used
for new replicas; `totals` still counts the excluded ones, so a model only they could hold waits
rather than being unsatisfiable. This module reads no metrics.

Quota. The namespace's ResourceQuotas, from their cache: `spec.hard` and `status.used` of the
`requests.nvidia.com/...` keys, the tightest quota of each key winning.

Tiers. The service owner's Deployment is the `whole` tier. `<name>-mig-<profile>` and
`<name>-shared` are siblings the controller creates from the owner's template and owns (an
ownerReference with `controller: true`, so deleting the owner deletes them):

- each container that requests `nvidia.com/gpu` requests one `nvidia.com/mig-<profile>` or
  `nvidia.com/gpu.shared` instead, in its limits and requests alike;
- the owner's node selector and required node affinity are kept, minus the keys that describe
  whole cards (`nvidia.com/gpu.*`, `nvidia.com/mig*`): the planner has chosen by memory already,
  and under time-slicing the product label itself changes. A MIG sibling selects
  `nvidia.com/mig.strategy: mixed`, the label GFD puts on nodes that advertise MIG slices as
  `nvidia.com/mig-<profile>`; a shared sibling needs no label, since only time-sliced nodes
  (`renameByDefault`) advertise `nvidia.com/gpu.shared`;
- selector and pod labels are the owner's plus `autoscaler.dsec.io/tier: <tier>`, so its pods
  still match the owner's Service; the owner's metadata annotations (the `enabled` opt-in among
  them) are not copied: a sibling is never a managed service;
- with cache-aware placement on, the template also prefers the nodes warm for the service's
  model (a preferred node affinity term on `cache.autoscaler.dsec.io/<model key>`, written when
  the sibling is created, when its template is rewritten, and before it grows from 0 replicas,
  never on its own: a template change rolls the sibling's pods);
- `autoscaler.dsec.io/template-hash` records the owner's template it was built from: when the
  owner's template changes, the sibling's is rewritten (a JSON patch guarded by its
  resourceVersion);
- a sibling at 0 replicas without pods for `idle_grace_s` is deleted (guarded by uid and
  resourceVersion, so one scaled up meanwhile stays).

Distribution. `Ladder.apply` asks `core.placement.plan` for a count per tier and writes it:
tiers that grow first (best first, creating siblings as needed), then tiers that shrink (worst
first), the owner through its caller's `scale` path. A replica placed below `whole` earns a
Normal Event `PlacementFallback`; a service whose `model-memory` or `placement` no node in the
cluster can satisfy gets one Warning Event `PlacementUnsatisfiable` and is held at its size.

Upkeep (template sync, idle deletion, and re-planning a service whose plan is not settled: a
move back up the ladder, pods stuck pending, a quota that freed up) is decided by
`core.placement` (`tend_siblings`, `replan`, and `unsatisfiable` for the hold above) from what
`observe` reads in the caches each time the controller reads its workloads, and carried out by
`tend`, which the loop calls once per tick after its own writes: one chore at a time, never
alongside a `scale` of the same service, and none for a service written since it was observed.

This module decides nothing: it reads the caches into core values and carries out what
`core.placement` returns.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, Final

import structlog
from kubernetes_asyncio import client

from autoscaler import errors
from autoscaler.adapters.kubernetes import _api, caches, events
from autoscaler.adapters.kubernetes._api import KubeApiError, Obj
from autoscaler.contract import annotations as contract
from autoscaler.contract import modelid
from autoscaler.core import model
from autoscaler.core import placement as ladder

log = structlog.get_logger(__name__)

TIER_LABEL: Final = "autoscaler.dsec.io/tier"
TEMPLATE_HASH_KEY: Final = "autoscaler.dsec.io/template-hash"
HEALTH_LABEL: Final = "autoscaler.dsec.io/gpu-health"
FAULTY: Final = "faulty"

PRODUCT_LABEL: Final = "nvidia.com/gpu.product"
MEMORY_LABEL: Final = "nvidia.com/gpu.memory"
REPLICAS_LABEL: Final = "nvidia.com/gpu.replicas"
MIG_STRATEGY_LABEL: Final = "nvidia.com/mig.strategy"
SHARED_SUFFIX: Final = "-SHARED"
_WHOLE_CARD_KEYS: Final = ("nvidia.com/gpu.", "nvidia.com/mig")
"""Node label prefixes that describe the owner's whole cards; siblings drop them."""

FALLBACK: Final = "PlacementFallback"
UNSATISFIABLE: Final = "PlacementUnsatisfiable"
LIMITED: Final = "PlacementLimited"
NAME_TAKEN: Final = "PlacementNameTaken"

DEFAULT_IDLE_GRACE_S: Final = 600.0
DEFAULT_CORE_WEIGHTS: Final = ladder.DEFAULT_CORE_WEIGHTS
DEFAULT_CORE_WEIGHT_PER_GIB: Final = ladder.DEFAULT_CORE_WEIGHT_PER_GIB
_TERMINAL: Final = ("Succeeded", "Failed")
_JSON_PATCH: Final = "application/json-patch+json"

TierCallback = Callable[[model.ServiceId, dict[str, int]], None]
"""Told a service's replicas per tier after each write (`Telemetry.tiers`)."""
FallbackCallback = Callable[[model.ServiceId, str, int], None]
"""Told the replicas placed below `whole`, by tier (`Telemetry.fell_back`)."""


class UnplaceableError(errors.ActuationError):
    """The service's `model-memory` or `placement` fits no GPU in the cluster: it keeps its size."""


# -- reading objects ----------------------------------------------------------------------------


def _count(value: object) -> int | None:
    """A whole, non-negative count from a quantity or label ("8"); None when it is not one."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


def is_gpu_resource(name: str) -> bool:
    return name in (ladder.GPU, ladder.GPU_SHARED) or name.startswith(ladder.MIG_RESOURCE_PREFIX)


def gpu_requests(pod_spec: Mapping[str, Any]) -> dict[str, int]:
    """GPU resources the containers of a pod (or pod template) spec request, summed.

    Extended resources cannot be overcommitted, so a container that sets only the limit
    requests as much. A count that is not a whole number is left out.
    """
    total: dict[str, int] = {}
    for container in pod_spec.get("containers") or ():
        if not isinstance(container, dict):
            continue
        resources = container.get("resources") or {}
        wanted = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        for name, amount in wanted.items():
            count = _count(amount)
            if is_gpu_resource(str(name)) and count:
                total[name] = total.get(name, 0) + count
    return total


def _template(deployment: Obj) -> Obj:
    value = _api.spec(deployment).get("template")
    return value if isinstance(value, dict) else {}


def _pod_spec(template: Mapping[str, Any]) -> Obj:
    value = template.get("spec")
    return value if isinstance(value, dict) else {}


def cards_of(owner: Obj) -> int:
    """Whole cards one replica of the owner requests (0: not a GPU workload)."""
    return gpu_requests(_pod_spec(_template(owner))).get(ladder.GPU, 0)


def tier_of(deployment: Obj) -> str:
    """The tier a Deployment serves: its `autoscaler.dsec.io/tier` label, else `whole`."""
    labels = _api.meta(deployment).get("labels") or {}
    tier = labels.get(TIER_LABEL)
    return tier if isinstance(tier, str) and tier else ladder.WHOLE


def is_sibling(deployment: Obj) -> bool:
    """Whether this is a tier Deployment the controller made: a controlling owner and a tier
    label naming a tier below `whole` (`mig-<profile>`, `shared`)."""
    if _api.controller_uid(deployment) is None:
        return False
    tier = tier_of(deployment)
    return ladder.is_tier(tier) and ladder.preference(tier) > 0


def sibling_name(owner_name: str, tier: str) -> str:
    return f"{owner_name}-{tier}"


def template_hash(owner: Obj) -> str:
    """A digest of the owner's pod template: a sibling built from it records this. A cached
    owner's template is trimmed and carries the digest of the whole one
    (`caches.TEMPLATE_DIGEST`)."""
    template = _template(owner)
    digest = template.get(caches.TEMPLATE_DIGEST)
    return digest if isinstance(digest, str) else caches.template_digest(template)


def _bound(pod: Obj) -> str | None:
    node = _api.spec(pod).get("nodeName")
    return node if isinstance(node, str) and node else None


def _terminal(pod: Obj) -> bool:
    return _api.status(pod).get("phase") in _TERMINAL


def is_pending(pod: Obj) -> bool:
    """Not bound to a node yet, and not on its way out."""
    return (
        _bound(pod) is None and not _terminal(pod) and not _api.meta(pod).get("deletionTimestamp")
    )


# -- capacity -----------------------------------------------------------------------------------


def node_capacity(
    node: Obj, used: Mapping[str, int], *, excluded: bool = False
) -> ladder.NodeCapacity | None:
    """What a node has free for GPU pods, given what its pods request; None without GPUs.
    An `excluded` node (GPU health) is marked unusable, as a cordoned one."""
    allocatable = {
        str(name): _count(amount) or 0
        for name, amount in (_api.status(node).get("allocatable") or {}).items()
        if is_gpu_resource(str(name))
    }
    if not any(allocatable.values()):
        return None
    labels = _api.meta(node).get("labels") or {}
    product = str(labels.get(PRODUCT_LABEL) or "")
    replicas = max(1, _count(labels.get(REPLICAS_LABEL)) or 1)
    time_shared = replicas > 1 or product.upper().endswith(SHARED_SUFFIX)

    def free(resource: str) -> int:
        return max(0, allocatable.get(resource, 0) - used.get(resource, 0))

    mig_free: dict[str, int] = {}
    mig_memory: dict[str, int] = {}
    for resource in allocatable:
        profile = resource.removeprefix(ladder.MIG_RESOURCE_PREFIX)
        if profile == resource:
            continue
        try:
            ladder.parse_mig_profile(profile)
        except ValueError:
            continue  # a MIG resource this planner cannot size: not offered
        mig_free[profile] = free(resource)
        memory = _count(labels.get(f"{ladder.MIG_RESOURCE_PREFIX}{profile}.memory"))
        if memory:
            mig_memory[profile] = memory
    return ladder.NodeCapacity(
        name=_api.name(node),
        product=product,
        card_memory_mib=_count(labels.get(MEMORY_LABEL)) or 0,
        whole_free=0 if time_shared else free(ladder.GPU),
        mig_free=mig_free,
        mig_memory_mib=mig_memory,
        shared_free=free(ladder.GPU_SHARED),
        shared_replicas=replicas,
        usable=usable(node) and not excluded,
    )


def usable(node: Obj) -> bool:
    """Schedulable, Ready, and not labelled faulty."""
    if _api.spec(node).get("unschedulable"):
        return False
    if (_api.meta(node).get("labels") or {}).get(HEALTH_LABEL) == FAULTY:
        return False
    ready = _api.condition(node, "Ready")
    return ready is not None and ready.get("status") == "True"


class Capacity:
    """Free GPU capacity per node, followed from the pod and node caches; see the module
    docstring."""

    def __init__(
        self,
        cache: caches.Caches,
        *,
        weights: Mapping[str, float] = ladder.DEFAULT_CORE_WEIGHTS,
        weight_per_gib: float = ladder.DEFAULT_CORE_WEIGHT_PER_GIB,
    ) -> None:
        self._caches = cache
        self.weights = weights
        self.weight_per_gib = weight_per_gib
        self._held: dict[str, tuple[str, dict[str, int]]] = {}
        """Pod (namespace/name) -> (node, GPU requests) of every GPU pod bound to a node."""
        self._used: dict[str, dict[str, int]] = {}
        """Node -> GPU requests of its pods."""
        self._free: dict[str, ladder.NodeCapacity] = {}
        self._total: dict[str, ladder.NodeCapacity] = {}
        self._dirty: set[str] = set()
        self._snapshot: ladder.Snapshot | None = None
        self._totals: ladder.Snapshot | None = None
        self._rates: dict[tuple[str, str], float] = {}
        """(node, resource) -> core-hours per hour of one unit, until the nodes change."""
        self._quotas: dict[str, ladder.Quota | None] = {}
        self._excluded: frozenset[str] = frozenset()
        self.quota_changes = 0
        """Bumped whenever a ResourceQuota changes (readers keep what they derive until then)."""
        cache.pods.add_handler(self._pod_changed)
        cache.nodes.add_handler(self._node_changed)
        cache.quotas.add_handler(self._quota_changed)

    def _pod_changed(self, _: str, old: Obj | None, new: Obj | None) -> None:
        obj = new if new is not None else old
        assert obj is not None
        key = f"{_api.namespace(obj)}/{_api.name(obj)}"
        before = self._held.get(key)
        after: tuple[str, dict[str, int]] | None = None
        if new is not None and not _terminal(new):
            node = _bound(new)
            requested = gpu_requests(_api.spec(new)) if node is not None else {}
            if node is not None and requested:
                after = (node, requested)
        if before == after:
            return
        for held, sign in ((before, -1), (after, 1)):
            if held is None:
                continue
            node, requested = held
            usage = self._used.setdefault(node, {})
            for resource, count in requested.items():
                usage[resource] = usage.get(resource, 0) + sign * count
            self._dirty.add(node)
        if after is None:
            self._held.pop(key, None)
        else:
            self._held[key] = after

    def _node_changed(self, _: str, old: Obj | None, new: Obj | None) -> None:
        obj = new if new is not None else old
        assert obj is not None
        self._dirty.add(_api.name(obj))
        self._rates.clear()

    @property
    def excluded(self) -> frozenset[str]:
        """The nodes whose GPUs the free capacity leaves out (GPU health)."""
        return self._excluded

    def exclude(self, nodes: Iterable[str]) -> None:
        """Leave `nodes`' GPUs out of the free capacity from now on (and only them): plans stop
        placing replicas there. What runs on them stays, and `totals` still counts them, so a
        model that only fits an excluded node waits for it rather than being unsatisfiable."""
        excluded = frozenset(nodes)
        self._dirty.update(excluded ^ self._excluded)
        self._excluded = excluded

    def _quota_changed(self, _: str, old: Obj | None, new: Obj | None) -> None:
        obj = new if new is not None else old
        assert obj is not None
        self._quotas.pop(_api.namespace(obj), None)
        self.quota_changes += 1

    def _refresh(self) -> None:
        if not self._dirty and self._snapshot is not None:
            return
        for name in self._dirty:
            node = self._caches.nodes.get("", name)
            excluded = name in self._excluded
            free = (
                None
                if node is None
                else node_capacity(node, self._used.get(name, {}), excluded=excluded)
            )
            total = None if node is None else node_capacity(node, {})
            if free is None or total is None:
                self._free.pop(name, None)
                self._total.pop(name, None)
            else:
                self._free[name], self._total[name] = free, total
        self._dirty.clear()
        self._snapshot = ladder.Snapshot(tuple(self._free[n] for n in sorted(self._free)))
        self._totals = ladder.Snapshot(tuple(self._total[n] for n in sorted(self._total)))

    def snapshot(self) -> ladder.Snapshot:
        """Free capacity of every GPU node (unusable ones marked so)."""
        self._refresh()
        assert self._snapshot is not None
        return self._snapshot

    def totals(self) -> ladder.Snapshot:
        """Every GPU node as if nothing ran on it: what the cluster could ever offer."""
        self._refresh()
        assert self._totals is not None
        return self._totals

    def layout(self) -> tuple[object, ...]:
        """What every GPU service's view depends on beyond its own objects: the same objects
        (compared by identity) for as long as no node, GPU pod on a node or quota changed."""
        return (self.snapshot(), self.totals(), self.quota_changes)

    def node(self, name: str) -> ladder.NodeCapacity | None:
        self._refresh()
        return self._free.get(name)

    def quota(self, namespace: str) -> ladder.Quota | None:
        """The namespace's GPU quota, the tightest of its ResourceQuotas per resource; None
        when none caps a GPU resource."""
        if namespace not in self._quotas:
            self._quotas[namespace] = self._read_quota(namespace)
        return self._quotas[namespace]

    def _read_quota(self, namespace: str) -> ladder.Quota | None:
        tightest: dict[str, tuple[float, int, int | None]] = {}
        for quota in self._caches.quotas_in(namespace):
            hard = _api.spec(quota).get("hard") or {}
            used = _api.status(quota).get("used") or {}
            for key, amount in hard.items():
                resource = key.removeprefix(ladder.QUOTA_PREFIX)
                if resource == key or not is_gpu_resource(resource):
                    continue
                limit = _count(amount)
                if limit is None:
                    log.warning(
                        "quota.unreadable", namespace=namespace, quota=_api.name(quota), key=key
                    )
                    limit = 0  # a cap we cannot read admits nothing more, never everything
                spent = _count(used.get(key))
                room = 0.0 if spent is None else float(limit - spent)
                if key not in tightest or room < tightest[key][0]:
                    tightest[key] = (room, limit, spent)
        if not tightest:
            return None
        return ladder.Quota(
            hard={key: limit for key, (_, limit, _) in tightest.items()},
            used={key: spent for key, (_, _, spent) in tightest.items() if spent is not None},
        )

    def core_rate(self, pods: Iterable[Obj]) -> float:
        """Core-hours per hour the GPU pods among `pods` that are bound to a node and not
        terminated hold now (docs/architecture.md, "Accounting"): per unit of GPU resource, the
        card's weight by product times the part of a card the unit is."""
        rate = 0.0
        for pod in pods:
            held = self._held.get(f"{_api.namespace(pod)}/{_api.name(pod)}")
            if held is None:
                continue
            node_name, requested = held
            for resource, count in requested.items():
                unit = self._rates.get((node_name, resource))
                if unit is None:
                    unit = self._unit_rate(node_name, resource)
                    self._rates[node_name, resource] = unit
                rate += count * unit
        return rate

    def _unit_rate(self, node_name: str, resource: str) -> float:
        node = self.node(node_name) or ladder.NodeCapacity(node_name, "", 0, 0)
        weight = ladder.core_weight(
            node.product,
            self.weights,
            card_memory_mib=node.card_memory_mib,
            per_gib=self.weight_per_gib,
        )
        return weight * ladder.tier_fraction(_tier_of_resource(resource, node), node)


def _tier_of_resource(resource: str, node: ladder.NodeCapacity) -> str:
    if resource == ladder.GPU_SHARED:
        return ladder.SHARED
    if resource.startswith(ladder.MIG_RESOURCE_PREFIX):
        profile = resource.removeprefix(ladder.MIG_RESOURCE_PREFIX)
        try:
            return ladder.mig_tier(profile)
        except ValueError:
            return ladder.WHOLE
    # A time-shared `nvidia.com/gpu` is a share of a card, not a card.
    return ladder.SHARED if node.shared_replicas > 1 else ladder.WHOLE


# -- tier Deployments ---------------------------------------------------------------------------


def _drop_whole_card_keys(key: object) -> bool:
    return isinstance(key, str) and key.startswith(_WHOLE_CARD_KEYS)


def _node_affinity(affinity: Obj) -> Obj | None:
    """The owner's affinity with whole-card terms removed from its required node affinity."""
    affinity = copy.deepcopy(affinity)
    node = affinity.get("nodeAffinity")
    if not isinstance(node, dict):
        return affinity or None
    required = node.get("requiredDuringSchedulingIgnoredDuringExecution")
    if not isinstance(required, dict):
        return affinity or None
    terms = []
    for term in required.get("nodeSelectorTerms") or ():
        kept = {
            kind: [e for e in term.get(kind) or () if not _drop_whole_card_keys(e.get("key"))]
            for kind in ("matchExpressions", "matchFields")
        }
        kept = {kind: items for kind, items in kept.items() if items}
        if kept:  # an empty term matches nothing: a term left empty goes
            terms.append(kept)
    if terms:
        required["nodeSelectorTerms"] = terms
    else:
        del node["requiredDuringSchedulingIgnoredDuringExecution"]
        if not node:
            del affinity["nodeAffinity"]
    return affinity or None


def sibling_template(owner: Obj, tier: str, *, prefer: Obj | None = None) -> Obj:
    """The owner's pod template, rewritten for `tier` (see the module docstring); `prefer` is
    a preferred node affinity term to add (the nodes warm for the model)."""
    template = copy.deepcopy(_template(owner))
    metadata = template.setdefault("metadata", {})
    metadata["labels"] = {**(metadata.get("labels") or {}), TIER_LABEL: tier}
    spec = template.setdefault("spec", {})
    resource = ladder.resource_of(tier)
    for container in spec.get("containers") or ():
        if not isinstance(container, dict):
            continue
        resources = container.get("resources") or {}
        for part in ("limits", "requests"):
            amounts = resources.get(part)
            if isinstance(amounts, dict) and ladder.GPU in amounts:
                del amounts[ladder.GPU]
                amounts[resource] = "1"
    selector = {
        k: v for k, v in (spec.get("nodeSelector") or {}).items() if not _drop_whole_card_keys(k)
    }
    if ladder.mig_profile(tier) is not None:
        selector[MIG_STRATEGY_LABEL] = "mixed"
    if selector:
        spec["nodeSelector"] = selector
    else:
        spec.pop("nodeSelector", None)
    if isinstance(spec.get("affinity"), dict):
        affinity = _node_affinity(spec["affinity"])
        if affinity:
            spec["affinity"] = affinity
        else:
            del spec["affinity"]
    if prefer is not None:
        modelid.with_preference(template, prefer)
    return template


def sibling(owner: Obj, tier: str, *, replicas: int, prefer: Obj | None = None) -> Obj:
    """A new tier Deployment for `owner` (see the module docstring)."""
    owner_meta, owner_spec = _api.meta(owner), _api.spec(owner)
    selector = copy.deepcopy(owner_spec.get("selector") or {})
    selector["matchLabels"] = {**(selector.get("matchLabels") or {}), TIER_LABEL: tier}
    spec: Obj = {
        "replicas": replicas,
        "selector": selector,
        "template": sibling_template(owner, tier, prefer=prefer),
    }
    for key in ("strategy", "minReadySeconds", "revisionHistoryLimit", "progressDeadlineSeconds"):
        if key in owner_spec:
            spec[key] = copy.deepcopy(owner_spec[key])
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": sibling_name(_api.name(owner), tier),
            "namespace": _api.namespace(owner),
            "labels": {**(owner_meta.get("labels") or {}), TIER_LABEL: tier},
            "annotations": {TEMPLATE_HASH_KEY: template_hash(owner)},
            # No blockOwnerDeletion: setting it needs `update` on the owner's finalizers.
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "name": _api.name(owner),
                    "uid": _api.uid(owner),
                    "controller": True,
                }
            ],
        },
        "spec": spec,
    }


# -- one service across its tiers ---------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Tier:
    """One tier of a service: its Deployment and pods, as the caches show them."""

    name: str
    deployment: Obj
    pods: tuple[Obj, ...]
    serving: tuple[Obj, ...]

    @property
    def replicas(self) -> int:
        value = _api.spec(self.deployment).get("replicas", 1)
        return value if isinstance(value, int) and not isinstance(value, bool) else 1

    def count(self) -> ladder.TierCount:
        pending = sum(1 for pod in self.pods if is_pending(pod))
        replicas = self.replicas
        return ladder.TierCount(replicas, min(len(self.serving), replicas), min(pending, replicas))


@dataclasses.dataclass(frozen=True, slots=True)
class View:
    """One service across its tiers at this tick, for `workloads()`."""

    tiers: tuple[Tier, ...]
    """The owner's first, then its siblings by name."""
    need: ladder.Need | None
    """None when the owner requests no whole GPU: no ladder, the owner alone."""
    admissible: int | None
    core_rate: float
    problem: str | None
    """Why no GPU in the cluster could run the service (it is held at its size)."""

    @property
    def replicas(self) -> int:
        return sum(tier.replicas for tier in self.tiers)

    @property
    def serving(self) -> list[Obj]:
        return [pod for tier in self.tiers for pod in tier.serving]

    @property
    def pods(self) -> list[Obj]:
        return [pod for tier in self.tiers for pod in tier.pods]

    def counts(self) -> dict[str, ladder.TierCount]:
        return {tier.name: tier.count() for tier in self.tiers}

    def specs(self) -> dict[str, int]:
        return {tier.name: tier.replicas for tier in self.tiers}


@dataclasses.dataclass(frozen=True, slots=True)
class _Job:
    """A chore `observe` found for one service, carried out by `tend`."""

    upkeep: ladder.Upkeep
    service: model.ServiceId
    namespace: str
    owner: str

    @property
    def key(self) -> tuple[str, str, str]:
        return self.upkeep.chore.value, self.namespace, self.upkeep.target or self.owner


class Ladder:
    """The placement ladder of every managed service; see the module docstring."""

    def __init__(
        self,
        api: client.ApiClient,
        cache: caches.Caches,
        recorder: events.EventRecorder,
        *,
        wall_now: Callable[[], float],
        may_write: _api.Fence,
        is_serving: Callable[[Obj], bool],
        on_api_error: _api.ErrorCallback = _api.ignore_error,
        request_timeout_s: float = _api.DEFAULT_REQUEST_TIMEOUT_S,
        idle_grace_s: float = DEFAULT_IDLE_GRACE_S,
        headroom_ratio: float = 0.1,
        core_weights: Mapping[str, float] = ladder.DEFAULT_CORE_WEIGHTS,
        core_weight_per_gib: float = ladder.DEFAULT_CORE_WEIGHT_PER_GIB,
        on_tiers: TierCallback | None = None,
        on_fallback: FallbackCallback | None = None,
        warmth: Callable[[Obj], tuple[Obj, frozenset[str]] | None] | None = None,
    ) -> None:
        """`may_write(service)` is asked before every write for a service (the global dry-run
        and the Lease of the service's bucket); `warmth(owner)`, with cache-aware placement,
        gives the preferred node affinity term toward the nodes warm for the owner's model and
        those nodes;
        `is_serving` tells the pods that count as capacity; `idle_grace_s` is how long, by
        `wall_now` (Unix seconds), a sibling stays at 0 replicas without pods before it goes."""
        self._apps = client.AppsV1Api(api)
        self.caches = cache
        self.events = recorder
        self.capacity = Capacity(cache, weights=core_weights, weight_per_gib=core_weight_per_gib)
        self._wall_now = wall_now
        self._may_write = may_write
        self._is_serving = is_serving
        self._calls = _api.Caller(
            fence=may_write, on_error=on_api_error, request_timeout_s=request_timeout_s
        )
        self.idle_grace_s = idle_grace_s
        self.headroom_ratio = headroom_ratio
        self._on_tiers = on_tiers
        self._on_fallback = on_fallback
        self._warmth = warmth
        self._locks: dict[model.ServiceId, asyncio.Lock] = {}
        self._written: dict[model.ServiceId, dict[str, int]] = {}
        self._plans: dict[model.ServiceId, ladder.Plan] = {}
        self._reported: dict[model.ServiceId, dict[str, int]] = {}
        self._problems: dict[model.ServiceId, str] = {}
        self._empty_since: dict[str, float] = {}
        """Sibling uid -> when it was first seen empty (0 replicas, no pods)."""
        self._still_empty: dict[str, float] = {}
        self._jobs: dict[tuple[str, str, str], _Job] = {}
        self._verdicts_for: ladder.Snapshot | None = None
        self._verdicts: dict[ladder.Need, str | None] = {}
        self._headroom_for: tuple[ladder.Snapshot, int] | None = None
        self._headroom: dict[tuple[ladder.Need, str, tuple[tuple[str, int], ...]], int | None] = {}
        self._cards: dict[tuple[str, str], int] = {}
        self._cards_next: dict[tuple[str, str], int] = {}

    # -- reads -----------------------------------------------------------------------------------

    def need(self, owner: Obj, config: contract.ServiceConfig) -> ladder.Need | None:
        """What one replica needs, or None when the owner requests no whole GPU."""
        key = (_api.uid(owner), _api.resource_version(owner))
        cards = self._cards.get(key)
        if cards is None:
            cards = cards_of(owner)
        self._cards_next[key] = cards
        if cards <= 0:
            return None
        return ladder.Need(
            memory_mib=config.model_memory_mib,
            mode=config.placement,
            headroom_ratio=self.headroom_ratio,
            cards=cards,
        )

    def tiers(self, owner: Obj) -> list[Tier]:
        """The owner's tier and its siblings', with their pods grouped by owner."""
        found = [owner]
        found += sorted((d for d in self.caches.siblings_of(owner) if is_sibling(d)), key=_api.name)
        result = []
        for deployment in found:
            pods = tuple(self.caches.pods_of(deployment))
            serving = tuple(pod for pod in pods if self._is_serving(pod))
            result.append(Tier(tier_of(deployment), deployment, pods, serving))
        return result

    def view(self, service: model.ServiceId, owner: Obj, config: contract.ServiceConfig) -> View:
        """The service across its tiers, from the caches."""
        tiers = tuple(self.tiers(owner))
        need = self.need(owner, config)
        rate = self.capacity.core_rate(p for tier in tiers for p in tier.pods)
        if need is None:
            return View(tiers, None, None, rate, None)
        problem = self._unsatisfiable(need)
        counts = {tier.name: tier.count() for tier in tiers}
        total = sum(c.replicas for c in counts.values())
        if problem is not None:
            return View(tiers, need, total, rate, problem)
        headroom = self._admissible_headroom(need, _api.namespace(owner), counts)
        return View(tiers, need, None if headroom is None else total + headroom, rate, None)

    def _admissible_headroom(
        self, need: ladder.Need, namespace: str, counts: Mapping[str, ladder.TierCount]
    ) -> int | None:
        """How many replicas beyond those there are the namespace's quota admits (None: no cap).

        `core.placement.admissible` is the replicas there are plus what each tier's quota and
        room admit, and that part depends on the tiers and their pending pods only: it is
        computed once per distinct need, namespace and shape, until nodes or quotas change.
        """
        quota = self.capacity.quota(namespace)
        if quota is None:
            return None
        layout = (self.capacity.snapshot(), self.capacity.quota_changes)
        if (
            self._headroom_for is None
            or layout[0] is not self._headroom_for[0]
            or (layout[1] != self._headroom_for[1])
        ):
            self._headroom_for, self._headroom = layout, {}
        shape = tuple(sorted((tier, count.pending) for tier, count in counts.items()))
        key = (need, namespace, shape)
        if key not in self._headroom:
            cap = ladder.admissible(need, layout[0], counts, quota)
            total = sum(c.replicas for c in counts.values())
            self._headroom[key] = None if cap is None else cap - total
        return self._headroom[key]

    def _unsatisfiable(self, need: ladder.Need) -> str | None:
        # Judged once per distinct need and cluster layout, not once per service and tick.
        totals = self.capacity.totals()
        if totals is not self._verdicts_for:
            self._verdicts_for, self._verdicts = totals, {}
        if need not in self._verdicts:
            self._verdicts[need] = ladder.unsatisfiable(need, totals)
        return self._verdicts[need]

    def reported_replicas(self, service: model.ServiceId, view: View, asked: int | None) -> int:
        """The replicas to report to the policy (`core.placement.reported_replicas`)."""
        written = self._written.get(service)
        return ladder.reported_replicas(view.specs(), written=written, asked=asked)

    def plan_of(self, service: model.ServiceId) -> ladder.Plan | None:
        """The last plan written for the service."""
        return self._plans.get(service)

    def status_of(self, service: model.ServiceId) -> dict[str, Any] | None:
        """The service's placement for its status annotation: why it cannot be placed, or the
        last plan written; None for a service without either."""
        problem = self._problems.get(service)
        if problem is not None:
            return {"problem": problem}
        plan = self._plans.get(service)
        if plan is None:
            return None
        found: dict[str, Any] = {
            "tiers": dict(plan.replicas),
            "unplaced": plan.unplaced,
            "admissible": plan.admissible,
            "reason": plan.reason,
        }
        if self._warmth is not None:
            found["warm"] = plan.warm
        return found

    # -- what each tick finds ------------------------------------------------------------------

    def observe(
        self,
        service: model.ServiceId,
        owner: Obj,
        view: View,
        *,
        asked: int | None,
        active: bool,
    ) -> None:
        """Note what the service needs done (Events, sibling upkeep, a re-plan); `active` is
        False for a service in dry-run, whose tiers are left alone."""
        self._report_problem(service, owner, view.problem)
        self._report_tiers(service, view)
        if not active:
            return
        namespace, name = _api.namespace(owner), _api.name(owner)
        chores, empty = ladder.tend_siblings(
            self._siblings(owner, view),
            empty_since=self._empty_since,
            now_s=self._wall_now(),
            idle_grace_s=self.idle_grace_s,
        )
        self._still_empty.update(empty)
        placeable = view.need is not None and view.problem is None
        if placeable and asked is not None:
            assert view.need is not None
            again = ladder.replan(
                view.need,
                self.capacity.snapshot(),
                view.counts(),
                asked=asked,
                quota=self.capacity.quota(namespace),
                written=self._written.get(service),
            )
            if again is not None:
                chores.append(again)
        for chore in chores:
            job = _Job(chore, service, namespace, name)
            self._jobs.setdefault(job.key, job)

    @staticmethod
    def _siblings(owner: Obj, view: View) -> list[ladder.Sibling]:
        digest = template_hash(owner) if len(view.tiers) > 1 else ""
        return [
            ladder.Sibling(
                uid=_api.uid(tier.deployment),
                name=_api.name(tier.deployment),
                replicas=tier.replicas,
                pods=len(tier.pods),
                template_current=_api.annotations_of(tier.deployment).get(TEMPLATE_HASH_KEY)
                == digest,
            )
            for tier in view.tiers[1:]
        ]

    def forget(self, present: Iterable[model.ServiceId]) -> None:
        """Drop what is remembered about services no longer managed."""
        keep = set(present)
        for memory in (self._written, self._plans, self._reported, self._problems, self._locks):
            for service in [s for s in memory if s not in keep]:
                del memory[service]

    def end_round(self) -> None:
        """Close a round of `observe` (one per `workloads()`): what it found is `tend`'s to do."""
        self._empty_since, self._still_empty = self._still_empty, {}
        self._cards, self._cards_next = self._cards_next, {}

    def _report_problem(self, service: model.ServiceId, owner: Obj, problem: str | None) -> None:
        if problem is None:
            self._problems.pop(service, None)
            return
        if self._problems.get(service) == problem:
            return
        self._problems[service] = problem
        log.warning("placement.unsatisfiable", service=service, problem=problem)
        message = f"{problem}; the service stays at its current size, nothing else is affected"
        self.events.record(owner, events.WARNING, UNSATISFIABLE, message)

    def _report_tiers(self, service: model.ServiceId, view: View) -> None:
        if self._on_tiers is None:
            return
        specs = view.specs()
        if self._reported.get(service) != specs:
            self._reported[service] = specs
            self._on_tiers(service, dict(specs))

    # -- writes --------------------------------------------------------------------------------

    def lock(self, service: model.ServiceId) -> asyncio.Lock:
        """Held while a service's tiers are written: a `scale` and the upkeep never overlap."""
        return self._locks.setdefault(service, asyncio.Lock())

    async def apply(
        self,
        service: model.ServiceId,
        owner: Obj,
        view: View,
        desired: int,
        *,
        scale_owner: Callable[[int], Awaitable[None]],
    ) -> ladder.Plan:
        """Distribute `desired` replicas over the tiers and write the counts that change.

        The owner is scaled through `scale_owner`. Raises `UnplaceableError` when nothing in the
        cluster could run the service, `KubeApiError` when a write fails (the tiers written
        before it stay; the next plan starts from them).
        """
        # What `observe` found for this service was judged before this write: `tend` would
        # act on a picture this write changes (the next round finds what is still needed).
        self._jobs = {key: job for key, job in self._jobs.items() if job.service != service}
        if view.problem is not None:
            raise UnplaceableError(f"{service}: {view.problem}; kept at {view.replicas} replicas")
        assert view.need is not None
        counts = view.counts()
        quota = self.capacity.quota(_api.namespace(owner))
        warmth = self._warmth(owner) if self._warmth is not None else None
        warm = warmth[1] if warmth is not None else frozenset()
        plan = ladder.plan(view.need, self.capacity.snapshot(), counts, desired, quota, warm=warm)
        existing = {tier.name: tier.deployment for tier in view.tiers}
        specs = view.specs()
        changes = {t: n for t, n in plan.replicas.items() if specs.get(t, 0) != n}
        growing = sorted((t for t in changes if changes[t] > specs.get(t, 0)), key=_rank)
        shrinking = sorted((t for t in changes if t not in growing), key=_rank, reverse=True)
        for tier in (*growing, *shrinking):
            replicas = changes[tier]
            if tier == ladder.WHOLE:
                await scale_owner(replicas)
            elif tier in existing:
                if tier in growing:
                    await self._prefer_warm(service, owner, existing[tier])
                await self._scale(service, existing[tier], replicas)
            elif replicas > 0:
                await self._create(service, owner, tier, replicas)
        self._written[service] = dict(plan.replicas)
        self._plans[service] = plan
        log.info(
            "placement.planned",
            service=service,
            desired=desired,
            tiers=dict(plan.replicas),
            unplaced=plan.unplaced,
            reason=plan.reason,
        )
        self._announce(service, owner, plan, specs, desired)
        return plan

    def _announce(
        self,
        service: model.ServiceId,
        owner: Obj,
        plan: ladder.Plan,
        before: Mapping[str, int],
        desired: int,
    ) -> None:
        fallen = {
            t: n - before.get(t, 0)
            for t, n in plan.replicas.items()
            if t != ladder.WHOLE and n > before.get(t, 0)
        }
        if fallen:
            for tier, count in fallen.items():
                if self._on_fallback is not None:
                    self._on_fallback(service, tier, count)
            placed = ", ".join(f"{n} on {t}" for t, n in sorted(fallen.items(), key=_rank_item))
            message = f"Placed {placed} below whole cards; reason: {plan.reason}"
            self.events.record(owner, events.NORMAL, FALLBACK, message)
        if plan.total < desired:
            message = f"Asked for {desired} replicas, placed {plan.total}; reason: {plan.reason}"
            self.events.record(owner, events.WARNING, LIMITED, message)

    async def _scale(self, service: model.ServiceId, deployment: Obj, replicas: int) -> None:
        await self._calls.call(
            "deployments/scale.patch",
            f"{service} ({_api.name(deployment)})",
            self._apps.patch_namespaced_deployment_scale,
            _api.name(deployment),
            _api.namespace(deployment),
            {"spec": {"replicas": replicas}},
            write=True,
            service=service,
            _content_type=_api.MERGE_PATCH,
        )

    async def _create(self, service: model.ServiceId, owner: Obj, tier: str, replicas: int) -> None:
        namespace, name = _api.namespace(owner), sibling_name(_api.name(owner), tier)
        taken = self.caches.deployment(namespace, name)
        if taken is not None and _api.controller_uid(taken) != _api.uid(owner):
            message = (
                f"Deployment {name} exists and is not this service's {tier} tier; the "
                f"{tier} tier is not used"
            )
            self.events.record(owner, events.WARNING, NAME_TAKEN, message)
            raise KubeApiError("deployments.create", f"{service}: {message}", status=409)
        prefer = self._prefer(owner)
        whole = await self._whole(service, owner)
        await self._calls.call(
            "deployments.create",
            f"{service} ({name})",
            self._apps.create_namespaced_deployment,
            namespace,
            sibling(whole, tier, replicas=replicas, prefer=prefer),
            write=True,
            service=service,
        )
        log.info("tier.created", service=service, deployment=name, replicas=replicas)

    async def _whole(self, service: model.ServiceId, owner: Obj) -> Obj:
        """The owner Deployment as the API server has it now: the cache keeps a trimmed copy
        (`caches.DEPLOYMENT_FIELDS`), and a tier is made from the whole template."""
        name = _api.name(owner)
        return await self._calls.call(
            "deployments.get",
            f"{service} ({name})",
            self._apps.read_namespaced_deployment,
            name,
            _api.namespace(owner),
        )

    def _prefer(self, owner: Obj) -> Obj | None:
        warmth = self._warmth(owner) if self._warmth is not None else None
        return warmth[0] if warmth is not None else None

    # -- upkeep ----------------------------------------------------------------------------------

    async def tend(self, *, replan: Callable[[model.ServiceId, int], Awaitable[None]]) -> None:
        """Carry out the chores the last round of `observe` found, one at a time.

        `replan(service, desired)` distributes the policy's total again (the cluster's own path
        to `apply`, which keeps the owner's bookkeeping), under the service's lock. A failed
        chore is logged and found again by a later `observe`; nothing is written while this
        instance may not write.
        """
        jobs, self._jobs = list(self._jobs.values()), {}
        for job in jobs:
            if not self._may_write(job.service):
                continue
            try:
                async with self.lock(job.service):
                    chore = job.upkeep.chore
                    if chore is ladder.Chore.SYNC:
                        await self._sync(job)
                    elif chore is ladder.Chore.DELETE:
                        await self._delete(job)
                    else:
                        await replan(job.service, job.upkeep.desired)
            except errors.ActuationError as e:
                log.warning(
                    "tier.upkeep_failed",
                    service=job.service,
                    job=job.upkeep.chore.value,
                    error=str(e),
                )

    async def _sync(self, job: _Job) -> None:
        owner = self.caches.deployment(job.namespace, job.owner)
        current = self.caches.deployment(job.namespace, job.upkeep.target)
        if owner is None or current is None or _api.controller_uid(current) != _api.uid(owner):
            return
        if _api.annotations_of(current).get(TEMPLATE_HASH_KEY) == template_hash(owner):
            return
        await self._rewrite(job.service, owner, current)

    async def _rewrite(self, service: model.ServiceId, owner: Obj, current: Obj) -> None:
        """Rewrite a tier Deployment's template from the owner's, guarded by its
        resourceVersion."""
        prefer = self._prefer(owner)
        owner = await self._whole(service, owner)
        digest = template_hash(owner)
        tier = tier_of(current)
        notes = {**_api.annotations_of(current), TEMPLATE_HASH_KEY: digest}
        body = [
            {
                "op": "test",
                "path": "/metadata/resourceVersion",
                "value": _api.resource_version(current),
            },
            {
                "op": "replace",
                "path": "/spec/template",
                "value": sibling_template(owner, tier, prefer=prefer),
            },
            {"op": "add", "path": "/metadata/annotations", "value": notes},
        ]
        name = _api.name(current)
        await self._calls.call(
            "deployments.patch",
            f"{service} ({name})",
            self._apps.patch_namespaced_deployment,
            name,
            _api.namespace(current),
            body,
            write=True,
            service=service,
            _content_type=_JSON_PATCH,
        )
        log.info("tier.synced", service=service, deployment=name, template=digest)

    async def _prefer_warm(self, service: model.ServiceId, owner: Obj, current: Obj) -> None:
        """A tier Deployment at 0 replicas whose template does not prefer the nodes warm for
        the model gets the term before it grows: with no pod of it running, the rewrite rolls
        nothing."""
        prefer = self._prefer(owner)
        if prefer is None or _api.spec(current).get("replicas") != 0:
            return
        label = prefer["preference"]["matchExpressions"][0]["key"]
        if not modelid.prefers(_template(current), label):
            await self._rewrite(service, owner, current)

    async def _delete(self, job: _Job) -> None:
        current = self.caches.deployment(job.namespace, job.upkeep.target)
        if current is None or not is_sibling(current):
            return
        if _api.spec(current).get("replicas") != 0 or self.caches.pods_of(current):
            return
        body = {
            "preconditions": {
                "uid": _api.uid(current),
                "resourceVersion": _api.resource_version(current),
            }
        }
        deleted = await self._calls.call_allowing(
            (404,),
            "deployments.delete",
            f"{job.service} ({job.upkeep.target})",
            self._apps.delete_namespaced_deployment,
            job.upkeep.target,
            job.namespace,
            body=body,
            write=True,
            service=job.service,
        )
        if deleted is None:  # gone already
            return
        self._empty_since.pop(_api.uid(current), None)
        log.info("tier.deleted", service=job.service, deployment=job.upkeep.target)


def _rank(tier: str) -> tuple[int, str]:
    return ladder.preference(tier), tier


def _rank_item(item: tuple[str, int]) -> tuple[int, str]:
    return _rank(item[0])


def pods_by_tier(view: View) -> Sequence[tuple[str, Obj]]:
    """Every pod of a service with the tier it runs on (for the ramp's `PodInfo.tier`)."""
    return [(tier.name, pod) for tier in view.tiers for pod in tier.pods]

"""The caches the controller reads: Deployments, ReplicaSets, Pods, Nodes and ResourceQuotas,
the other scalable workloads (StatefulSets, LeaderWorkerSets, Argo Rollouts: the kinds of
`contract.targets` the controller is set to manage), and the other autoscalers' objects
(HorizontalPodAutoscalers, KEDA ScaledObjects), by list+watch.

Pods are indexed by their controlling ReplicaSet and ReplicaSets by their controlling Deployment
(ownerReferences, by uid), so `pods_of` groups pods by owner rather than by label selector: sibling
Deployments whose labels overlap (docs/architecture.md, "The placement ladder") never count each
other's pods. Deployments are indexed by their controlling owner too (a placement tier's sibling by
the service owner's Deployment, `siblings_of`), ResourceQuotas by namespace (`quotas_in`), pods by
namespace too (`pods_in`: a workload other than a Deployment finds its pods by its Scale's label
selector), and HPAs and ScaledObjects by the workload they scale (`other_scalers`). ScaledObjects,
LeaderWorkerSets and Rollouts are CRDs that may not be installed: their caches are optional (a 404
reads as none, with one log line, tried again later). The workloads other than Deployments are
stamped with their `kind` and `apiVersion` (a list's items carry neither), for the Events that name
them. Pods that carry the `autoscaler.dsec.io/warm` readiness gate with the condition not True and
their containers ready are indexed too (`closed_gates`): each tick looks at those only. Namespaced
kinds are watched in all namespaces, or in each namespace of an include list; an exclude list drops
objects as they arrive. Stored objects are trimmed of what no reader needs (managed fields, pod
templates of ReplicaSets, node image lists) to keep memory flat; pods, ReplicaSets and
Deployments, the most numerous, keep only the fields the controller reads (`POD_FIELDS`,
`REPLICASET_FIELDS`, `DEPLOYMENT_FIELDS`), their strings that repeat across objects shared. A
Deployment's pod template is kept in part, with the digest of the whole one; what needs the
whole template reads the Deployment from the API.

It must not write to the API, nor decide which Deployments are managed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import hashlib
import json
import random
import sys
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping
from typing import Any, Final, TypeAlias

from kubernetes_asyncio import client

from autoscaler import clock as clock_
from autoscaler.adapters.kubernetes import _api, informer, scaling
from autoscaler.adapters.kubernetes._api import Obj
from autoscaler.contract import annotations as contract
from autoscaler.contract import targets

OWNER: Final = "owner"
"""Index of objects by the uid of their controlling owner."""
NAMESPACE: Final = "namespace"
"""Index of objects by their namespace."""
LABEL: Final = "label"
"""Index of pods by `namespace/key=value` of each of their labels: the candidates of a selector
(`selected_pods`), not a scan of the namespace."""
CLOSED_GATE: Final = "closed-gate"
"""Index of the pods waiting on a closed `warm` readiness gate with their containers ready."""
_CLOSED: Final = "closed"

TARGET: Final = "target"
"""Index of autoscaler objects by the `namespace/name` of the Deployment they scale."""

LAST_APPLIED: Final = "kubectl.kubernetes.io/last-applied-configuration"

KEDA_GROUP: Final = "keda.sh"
KEDA_VERSION: Final = "v1alpha1"
SCALED_OBJECTS: Final = "scaledobjects"
CRD_RETRY_S: Final = 300.0
"""How often a cache of a custom resource lists again while its CRD is not installed."""


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


def label_values(obj: Obj) -> Iterable[str]:
    namespace = _api.namespace(obj)
    labels = _api.meta(obj).get("labels") or {}
    return [f"{namespace}/{key}={value}" for key, value in labels.items()]


def closed_gate_values(pod: Obj) -> Iterable[str]:
    """`closed` for a live pod that carries the `warm` readiness gate, whose condition is not
    True, and whose containers are ready (`ContainersReady`)."""
    gates = _api.spec(pod).get("readinessGates")
    if not gates or _api.meta(pod).get("deletionTimestamp"):
        return ()
    if not any(isinstance(g, dict) and g.get("conditionType") == contract.WARM_GATE for g in gates):
        return ()
    if (_api.condition(pod, contract.WARM_GATE) or {}).get("status") == "True":
        return ()
    if (_api.condition(pod, "ContainersReady") or {}).get("status") != "True":
        return ()
    return (_CLOSED,)


_KIND_BY_REF: Final = {(kind.group, kind.kind): kind for kind in targets.KINDS.values()}


def target_value(namespace: str, name: str, kind: targets.TargetKind) -> str:
    """The `TARGET` index value of a workload: `namespace/name`, and `@Kind` but for a
    Deployment."""
    return f"{namespace}/{name}" if kind.is_deployment else f"{namespace}/{name}@{kind.kind}"


def target_values(obj: Obj) -> Iterable[str]:
    """The workload an HPA or a ScaledObject scales (`scaleTargetRef`; KEDA's kind defaults to
    Deployment) as `target_value` names it; nothing for a kind the controller cannot scale."""
    ref = _api.spec(obj).get("scaleTargetRef")
    if not isinstance(ref, dict):
        return ()
    name, kind = ref.get("name"), ref.get("kind", "Deployment")
    group = str(ref.get("apiVersion", "apps/v1")).partition("/")[0]
    target = _KIND_BY_REF.get((group, str(kind)))
    if not isinstance(name, str) or target is None:
        return ()
    return (target_value(_api.namespace(obj), name, target),)


DELETION_COST: Final = "controller.kubernetes.io/pod-deletion-cost"
"""The one annotation of a pod the controller reads (the ramp's reclaim marks its pods with it)."""


class Leaf(enum.Enum):
    """How `pick` keeps a value it does not walk into."""

    KEEP = "keep"
    """As it is."""
    SHARED = "shared"
    """Its strings made one copy for all objects (`sys.intern`): a dict's keys and values,
    a list's items, a string itself."""


Shape: TypeAlias = Mapping[str, "Shape | Leaf"]
"""The fields of an object that are kept: a key's value is kept as its `Leaf` says, or, when
it is a shape itself, walked into (a dict) or each of its items walked into (a list of dicts)."""

KEEP: Final = Leaf.KEEP
SHARED: Final = Leaf.SHARED

_OWNER_REFERENCES: Final[Shape] = {
    "controller": KEEP,
    "kind": SHARED,
    "name": SHARED,
    "uid": SHARED,
}
_CONDITIONS: Final[Shape] = {
    "type": SHARED,
    "status": SHARED,
    "reason": SHARED,
    "message": KEEP,
    "lastTransitionTime": SHARED,
}

POD_FIELDS: Final[Shape] = {
    "metadata": {
        "name": KEEP,
        "namespace": SHARED,
        "uid": KEEP,
        "resourceVersion": KEEP,
        "creationTimestamp": SHARED,
        "deletionTimestamp": SHARED,
        "labels": SHARED,
        "annotations": {DELETION_COST: SHARED},
        "ownerReferences": _OWNER_REFERENCES,
    },
    "spec": {
        "nodeName": SHARED,
        "containers": {
            "ports": {"containerPort": KEEP},
            "resources": {"limits": SHARED, "requests": SHARED},
        },
        "readinessGates": {"conditionType": SHARED},
    },
    "status": {"phase": SHARED, "podIP": KEEP, "conditions": _CONDITIONS},
}
"""What a cached pod keeps: what the readers of pods read (the indexes here, `cluster`'s
serving and start-up times, `placement`'s binding and GPU requests, `ramp`'s `pod_info`, gates
and reclaim marks, `nodecache`'s warm nodes), each field once named here. A field read
elsewhere must be added here: the tests compare every reader's answer on trimmed and whole
pods."""

REPLICASET_FIELDS: Final[Shape] = {
    "metadata": {
        "name": KEEP,
        "namespace": SHARED,
        "uid": KEEP,
        "resourceVersion": KEEP,
        "ownerReferences": _OWNER_REFERENCES,
    },
}
"""What a cached ReplicaSet keeps: its identity and its controlling Deployment, all that is read
of it (`pods_of`, the records' dirty marks, the ramp's owner chain)."""


TEMPLATE_DIGEST: Final = "autoscaler.dsec.io/template-digest"
"""The key under which a cached Deployment's trimmed pod template carries `template_digest` of
the whole template it was trimmed from (no pod template field has this name)."""

_TEMPLATE_FIELDS: Final[Shape] = {
    "metadata": {"labels": SHARED},
    "spec": {
        "containers": {
            "name": SHARED,
            "image": SHARED,
            "command": KEEP,
            "args": KEEP,
            "env": {"name": SHARED, "value": KEEP},
            "resources": {"limits": SHARED, "requests": SHARED},
        },
        "readinessGates": {"conditionType": SHARED},
        "affinity": KEEP,
    },
}

DEPLOYMENT_FIELDS: Final[Shape] = {
    "metadata": {
        "name": KEEP,
        "namespace": SHARED,
        "uid": KEEP,
        "resourceVersion": KEEP,
        "deletionTimestamp": SHARED,
        "labels": SHARED,
        "annotations": KEEP,
        "ownerReferences": _OWNER_REFERENCES,
    },
    "spec": {"replicas": KEEP, "selector": SHARED, "template": _TEMPLATE_FIELDS},
    "status": {"replicas": KEEP},
}
"""What a cached Deployment keeps: its identity, labels, annotations (but kubectl's last
applied configuration) and controlling owner, its replicas and selector, and of its pod
template what the records read (`placement`'s GPU requests and warm-node preference, the
warm-up gate and its labels in `cluster`, the model's identity in `nodecache`: each
container's name, image, command, args, literal environment values and resources), with
the digest of the whole template (`TEMPLATE_DIGEST`, when a part of it is left out) that the
tier Deployments are compared against. The rare writes that copy the whole template (a tier
Deployment created or rewritten, `placement`) read the owner from the API then. A field read
elsewhere must be added here: the tests compare every reader's answer on trimmed and whole
Deployments."""


def template_digest(template: Mapping[str, Any]) -> str:
    """A digest of a whole pod template (the tier Deployments record their owner's)."""
    text = json.dumps(template, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def pick(obj: Mapping[str, Any], shape: Shape) -> Obj:
    """The fields of `obj` that `shape` names (those present), walked into as it says; a value
    of another type than the shape expects is kept as it is, for its reader to judge. The keys
    are the shape's own strings, one copy for all objects."""
    out: Obj = {}
    get = obj.get
    for key, want in shape.items():
        value = get(key, _MISSING)
        if value is _MISSING:
            continue
        if want is KEEP:
            out[key] = value
        elif want is SHARED:
            out[key] = _intern(value) if value.__class__ is str else _shared(value)
        elif value.__class__ is dict:
            out[key] = pick(value, want)
        elif value.__class__ is list:
            out[key] = [pick(item, want) if item.__class__ is dict else item for item in value]
        else:
            out[key] = value
    return out


_MISSING: Final = object()
_intern: Final = sys.intern


def _shared(value: Any) -> Any:
    kind = value.__class__
    if kind is str:
        return _intern(value)
    if kind is dict:
        return {
            (_intern(k) if k.__class__ is str else k): (
                _intern(v) if v.__class__ is str else _shared(v)
            )
            for k, v in value.items()
        }
    if kind is list:
        return [_shared(item) for item in value]
    return value


def trim_pod(obj: Obj) -> Obj:
    """A pod as `POD_FIELDS` keeps it."""
    return pick(obj, POD_FIELDS)


def _trim_meta(obj: Obj) -> Obj:
    metadata = dict(_api.meta(obj))
    metadata.pop("managedFields", None)
    notes = metadata.get("annotations")
    if isinstance(notes, dict) and LAST_APPLIED in notes:
        metadata["annotations"] = {k: v for k, v in notes.items() if k != LAST_APPLIED}
    return {**obj, "metadata": metadata}


def trim_deployment(obj: Obj) -> Obj:
    """A Deployment as `DEPLOYMENT_FIELDS` keeps it, its template stamped with the digest of
    the whole one (`TEMPLATE_DIGEST`) when a part of it is left out: a template kept whole is
    its own digest's source."""
    trimmed = pick(obj, DEPLOYMENT_FIELDS)
    metadata = _api.meta(trimmed)
    notes = metadata.get("annotations")
    if isinstance(notes, dict):  # the keys shared, and the values short enough to repeat
        metadata["annotations"] = {
            (_intern(k) if k.__class__ is str else k): (
                _intern(v) if v.__class__ is str and len(v) <= informer.SHARED_MAX_CHARS else v
            )
            for k, v in notes.items()
            if k != LAST_APPLIED
        }
    template = _api.spec(obj).get("template")
    kept = _api.spec(trimmed).get("template")
    if isinstance(template, dict) and isinstance(kept, dict) and kept != template:
        kept[TEMPLATE_DIGEST] = template_digest(template)
    return trimmed


def stamp(kind: targets.TargetKind) -> Callable[[Obj], Obj]:
    """The transform of a workload cache: trimmed, and stamped with its kind."""

    def transform(obj: Obj) -> Obj:
        return {**_trim_meta(obj), "apiVersion": kind.api_version, "kind": kind.kind}

    return transform


def trim_replicaset(obj: Obj) -> Obj:
    """A ReplicaSet as `REPLICASET_FIELDS` keeps it: its pod template, size and status are never
    read."""
    return pick(obj, REPLICASET_FIELDS)


def trim_node(obj: Obj) -> Obj:
    """A Node without its image list, by far its largest part."""
    trimmed = _trim_meta(obj)
    trimmed["status"] = {k: v for k, v in _api.status(obj).items() if k != "images"}
    return trimmed


class Caches:
    """The informers, built on one API client; see the module docstring."""

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
        kinds: Collection[targets.TargetKind] = tuple(targets.KINDS.values()),
    ) -> None:
        """`kinds` are the workloads watched besides Deployments (which are always: the
        placement tiers are Deployments)."""
        self.namespaces = namespaces or NamespaceFilter()
        apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
        autoscaling, custom = client.AutoscalingV2Api(api), client.CustomObjectsApi(api)
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
            transform=trim_deployment,
            transform_shares=True,
            indexers={OWNER: owner_values},
            **common,
        )
        self.replicasets = informer.Informer(
            "replicasets",
            sources(apps.list_replica_set_for_all_namespaces, apps.list_namespaced_replica_set),
            keep=keep,
            transform=trim_replicaset,
            transform_shares=True,
            indexers={OWNER: owner_values},
            **common,
        )
        self.pods = informer.Informer(
            "pods",
            sources(core.list_pod_for_all_namespaces, core.list_namespaced_pod),
            keep=keep,
            transform=trim_pod,
            transform_shares=True,
            indexers={
                OWNER: owner_values,
                CLOSED_GATE: closed_gate_values,
                NAMESPACE: namespace_values,
                LABEL: label_values,
            },
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

        self.hpas = informer.Informer(
            "horizontalpodautoscalers",
            sources(
                autoscaling.list_horizontal_pod_autoscaler_for_all_namespaces,
                autoscaling.list_namespaced_horizontal_pod_autoscaler,
            ),
            keep=keep,
            transform=_trim_meta,
            indexers={TARGET: target_values},
            **common,
        )
        keda = (KEDA_GROUP, KEDA_VERSION)
        self.scaled_objects = informer.Informer(
            SCALED_OBJECTS,
            [informer.Source(custom.list_cluster_custom_object, (*keda, SCALED_OBJECTS))]
            if watched is None
            else [
                informer.Source(
                    custom.list_namespaced_custom_object,
                    (*keda, ns, SCALED_OBJECTS),
                    namespace=ns,
                )
                for ns in watched
            ],
            keep=keep,
            transform=_trim_meta,
            indexers={TARGET: target_values},
            optional=True,
            absent_retry_s=CRD_RETRY_S,
            **common,
        )

        self.workloads: dict[targets.TargetKind, informer.Informer] = {}
        """The caches of the workload kinds other than Deployments."""
        for kind in kinds:
            if kind.is_deployment:
                continue
            endpoint = scaling.Endpoint(kind, apps=apps, custom=custom)
            scopes: list[str | None] = [None] if watched is None else list(watched)
            listed = [informer.Source(*endpoint.list(ns), namespace=ns) for ns in scopes]
            self.workloads[kind] = informer.Informer(
                kind.resource if kind.custom else kind.plural,
                listed,
                keep=keep,
                transform=stamp(kind),
                optional=kind.custom,
                absent_retry_s=CRD_RETRY_S,
                **common,
            )

    @property
    def informers(self) -> tuple[informer.Informer, ...]:
        return (
            self.deployments,
            self.replicasets,
            self.pods,
            self.nodes,
            self.quotas,
            self.hpas,
            self.scaled_objects,
            *self.workloads.values(),
        )

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

    def workload(self, kind: targets.TargetKind, namespace: str, name: str) -> Obj | None:
        """A cached workload of `kind` (a Deployment, or one of the kinds watched)."""
        if kind.is_deployment:
            return self.deployments.get(namespace, name)
        cache = self.workloads.get(kind)
        return None if cache is None else cache.get(namespace, name)

    def pods_in(self, namespace: str) -> list[Obj]:
        return self.pods.by_index(NAMESPACE, namespace)

    def labelled(self, namespace: str, key: str, value: str) -> list[Obj]:
        """The pods of `namespace` labelled `key=value`."""
        return self.pods.by_index(LABEL, f"{namespace}/{key}={value}")

    def selected_pods(self, namespace: str, selector: targets.Selector) -> list[Obj]:
        """The pods of `namespace` that `selector` selects: those labelled as one of its `in`
        requirements asks (the one of fewest values), filtered by the whole selector; the
        namespace's pods when it has none."""
        narrow = selector.narrowest()
        if narrow is not None:
            candidates = [
                pod
                for value in sorted(narrow.values)
                for pod in self.labelled(namespace, narrow.key, value)
            ]
        else:
            candidates = self.pods_in(namespace)
        return [pod for pod in candidates if selector.matches(_api.meta(pod).get("labels") or {})]

    def other_scalers(
        self, namespace: str, name: str, kind: targets.TargetKind = targets.DEPLOYMENTS
    ) -> list[str]:
        """The HPAs and ScaledObjects that scale the workload, as `Kind namespace/name`."""
        target = target_value(namespace, name, kind)
        return sorted(
            f"{kind} {_api.namespace(obj)}/{_api.name(obj)}"
            for kind, cache in (
                ("HorizontalPodAutoscaler", self.hpas),
                ("ScaledObject", self.scaled_objects),
            )
            for obj in cache.by_index(TARGET, target)
        )

    def quotas_in(self, namespace: str) -> list[Obj]:
        return self.quotas.by_index(NAMESPACE, namespace)

    def replicasets_of(self, deployment: Obj) -> list[Obj]:
        return self.replicasets.by_index(OWNER, _api.uid(deployment))

    def closed_gates(self) -> list[Obj]:
        """The pods `closed_gate_values` indexes: gated, not warm, containers ready."""
        return self.pods.by_index(CLOSED_GATE, _CLOSED)

    def pods_of(self, deployment: Obj) -> list[Obj]:
        """The pods a Deployment owns through its ReplicaSets, whatever their labels."""
        return [
            pod
            for replicaset in self.replicasets_of(deployment)
            for pod in self.pods.by_index(OWNER, _api.uid(replicaset))
        ]

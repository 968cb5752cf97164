"""Fake Deployment, ReplicaSet, StatefulSet and LeaderWorkerSet controllers, scheduler, garbage
collector and kubelet.

An API server runs no controllers, so a Deployment's replicas never become pods on its own.
`FakeCluster.reconcile()` runs each of these once, in order, and a test steps it explicitly:

1. garbage collection: Deployments (a controller's own siblings), ReplicaSets and pods whose
   controlling owner is gone are deleted;
2. Deployment controller: one ReplicaSet per pod template (`NAME-HASH`, labelled with
   `pod-template-hash`) scaled to `spec.replicas`; ReplicaSets of older templates go to 0 at
   once (as the Recreate strategy; rolling updates are not modelled);
3. ReplicaSet controller: creates pods from the template (`generateName`, labels, annotations,
   spec, ownerReferences), or deletes the surplus in the order of the real controller: unscheduled,
   Pending, not ready, lower `controller.kubernetes.io/pod-deletion-cost`, newer. A pod that a
   namespace's ResourceQuota would not admit (its `hard` limits on `requests.<resource>`,
   `<resource>` for cpu and memory, `pods`, `count/pods`) is not created, as the API server refuses
   it; `refused` counts them. The StatefulSet controller (and the Argo Rollout one, when a test has
   registered `rollouts.argoproj.io`, with the Rollout's `status.selector`): pods `NAME-0` ..
   `NAME-(replicas-1)` from the template, owned by it (higher ordinals deleted first on a scale-
   down; no ordered start-up); and, when a test has registered the
   `leaderworkersets.leaderworkerset.x-k8s.io` custom resource, a LeaderWorkerSet controller: per
   group `i`, a leader pod `NAME-i` and `size - 1` workers `NAME-i-j`, labelled
   `leaderworkerset.sigs.k8s.io/name`, `group-index` and `worker-index` (0 for the leader), owned
   by the LeaderWorkerSet itself (the real one goes through StatefulSets); all write their status
   (`replicas`, `readyReplicas`; a LeaderWorkerSet's `hpaPodSelector`, which selects the leaders);
4. scheduler: binds each unscheduled pod to the node that is Ready, schedulable, matches
   `nodeSelector` and required node affinity, tolerates its NoSchedule taints, and has the
   allocatable room (`nvidia.com/gpu`, MIG slices, cpu, memory, pods) left by the pods already
   bound; of those, the one whose labels match the most weight of the pod's preferred node
   affinity terms, the first by name among equals; otherwise PodScheduled=False,
   Unschedulable, and Pending;
5. kubelet: a bound Pending pod starts (Running, Initialized, ContainersReady=False); its
   containers become ready `ready_after_s` simulated seconds later (never on the pass that
   started them); it is Ready only while ContainersReady and every `spec.readinessGates`
   condition are True;
6. status: ReplicaSet and Deployment `replicas`, `readyReplicas`, `availableReplicas` (after
   `minReadySeconds`), `updatedReplicas`, `observedGeneration` (a StatefulSet's and a
   LeaderWorkerSet's as said above); ResourceQuota `hard` and `used`
   (as the quota controller computes them from the namespace's non-terminal pods).

Readiness timing is the test's: the default `ready_after_s`, a pod template annotation
`fake.kubelet/ready-after-s`, or `set_ready_after()` per pod (`math.inf`: never ready, which
also takes a ready pod out of service). Time is a `FakeClock` that only the test advances.
A started pod gets a `status.podIP` of its own in 10.0.0.0/16, or the address in its template
annotation `fake.kubelet/pod-ip` (127.0.0.1, for a test whose code under test calls the pod).

Writes go through the emulator's store in-process, as the control plane writes to etcd: they
bump resourceVersions and reach watches, but stay out of the request log, which records only
what the code under test asks for. Nothing here sleeps or runs in the background.
"""

import asyncio
import datetime
import decimal
import hashlib
import json
import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

from . import patching, selectors
from .store import ApiError, Obj, Store, format_time

PODS = "v1/pods"
NODES = "v1/nodes"
DEPLOYMENTS = "apps/v1/deployments"
REPLICASETS = "apps/v1/replicasets"
STATEFULSETS = "apps/v1/statefulsets"
LWS_GROUP = "leaderworkerset.x-k8s.io"
LEADER_WORKER_SETS = f"{LWS_GROUP}/v1/leaderworkersets"
LWS_NAME = "leaderworkerset.sigs.k8s.io/name"
LWS_GROUP_INDEX = "leaderworkerset.sigs.k8s.io/group-index"
LWS_WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"
ROLLOUTS = "argoproj.io/v1alpha1/rollouts"
QUOTAS = "v1/resourcequotas"

GPU = "nvidia.com/gpu"
POD_TEMPLATE_HASH = "pod-template-hash"
DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
READY_AFTER = "fake.kubelet/ready-after-s"
POD_IP = "fake.kubelet/pod-ip"
EPOCH = datetime.datetime(2025, 1, 1, tzinfo=datetime.UTC)

_CONTAINERS_NOT_READY = ("False", "ContainersNotReady", None)
_HASH_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_AFFINITY_OPERATORS = {
    "In": "in",
    "NotIn": "notin",
    "Exists": "exists",
    "DoesNotExist": "!exists",
    "Gt": "gt",
    "Lt": "lt",
}


class FakeClock:
    """Simulated seconds that move only when a test advances them."""

    def __init__(self, start_s: float = 0.0) -> None:
        self.now_s = start_s

    def now(self) -> float:
        return self.now_s

    def advance(self, seconds: float) -> None:
        self.now_s += seconds

    def datetime(self) -> datetime.datetime:
        return EPOCH + datetime.timedelta(seconds=self.now_s)


def _meta(obj: Mapping[str, Any]) -> dict[str, Any]:
    return obj.get("metadata") or {}


def _key(obj: Mapping[str, Any]) -> tuple[str | None, str]:
    return (_meta(obj).get("namespace"), _meta(obj)["name"])


def _condition(obj: Mapping[str, Any], kind: str) -> dict[str, Any] | None:
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind:
            return dict(condition)
    return None


def is_ready(pod: Mapping[str, Any]) -> bool:
    return (_condition(pod, "Ready") or {}).get("status") == "True"


def _controller_uid(obj: Mapping[str, Any]) -> str | None:
    for owner in _meta(obj).get("ownerReferences") or []:
        if owner.get("controller"):
            return str(owner.get("uid"))
    return None


def _owner_reference(owner: Obj, kind: str, api_version: str = "apps/v1") -> dict[str, Any]:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": _meta(owner)["name"],
        "uid": _meta(owner)["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def template_hash(template: Mapping[str, Any]) -> str:
    """A stable name-safe hash of a pod template, as the `pod-template-hash` label."""
    digest = int(hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest(), 16)
    chars = []
    for _ in range(10):
        digest, index = divmod(digest, len(_HASH_ALPHABET))
        chars.append(_HASH_ALPHABET[index])
    return "".join(chars)


_QUANTITY_RE = re.compile(
    r"([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?"
)
_QUANTITY_SUFFIXES: dict[str | None, decimal.Decimal] = {
    None: decimal.Decimal(1),
    **{f"{p}i": decimal.Decimal(1024) ** (n + 1) for n, p in enumerate("KMGTPE")},
    **{p: decimal.Decimal(1000) ** (n + 1) for n, p in enumerate("kMGTPE")},
    **{p: decimal.Decimal(1000) ** -(n + 1) for n, p in enumerate("mun")},
}


def parse_quantity(value: str | float) -> decimal.Decimal:
    """A Kubernetes resource quantity ("8", "500m", "16Gi") as a number."""
    match = _QUANTITY_RE.fullmatch(str(value).strip())
    if not match:
        raise ValueError(f"invalid quantity: {value!r}")
    number, suffix = match.groups()
    return decimal.Decimal(number) * _QUANTITY_SUFFIXES[suffix]


def pod_requests(pod: Mapping[str, Any]) -> dict[str, decimal.Decimal]:
    """Summed container requests; a resource with only a limit requests its limit."""
    total: dict[str, decimal.Decimal] = {}
    for container in (pod.get("spec") or {}).get("containers") or []:
        resources = container.get("resources") or {}
        wanted = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        for name, amount in wanted.items():
            total[name] = total.get(name, decimal.Decimal(0)) + parse_quantity(amount)
    return total


class FakeCluster:
    """The controllers and kubelet a real cluster runs, stepped by `reconcile()`."""

    def __init__(
        self, store: Store, *, clock: FakeClock | None = None, ready_after_s: float = 0.0
    ) -> None:
        self.store = store
        self.clock = clock if clock is not None else FakeClock()
        self.ready_after_s = ready_after_s
        self._ready_after: dict[tuple[str | None, str], float] = {}
        self._started_s: dict[str, float] = {}  # pod uid -> when its containers started
        self._ready_since_s: dict[str, float] = {}  # pod uid -> when it last became Ready
        self._pod_ips = 0
        self.refused = 0
        """Pods the ReplicaSet controller could not create because a ResourceQuota refused them."""

    # -- test controls -------------------------------------------------------------------------

    def set_ready_after(self, namespace: str, name: str, seconds: float) -> None:
        """Containers of this pod become ready `seconds` after they start (inf: never)."""
        self._ready_after[namespace, name] = seconds

    def add_node(
        self,
        name: str,
        *,
        gpus: int = 0,
        allocatable: Mapping[str, str] | None = None,
        labels: Mapping[str, str] | None = None,
        taints: Iterable[Mapping[str, str]] = (),
    ) -> Obj:
        """Register a Ready node, with `gpus` whole `nvidia.com/gpu` devices allocatable."""
        resources = {"cpu": "64", "memory": "256Gi", "pods": "110", **(allocatable or {})}
        if gpus:
            resources[GPU] = str(gpus)
        node = {
            "metadata": {
                "name": name,
                "labels": {"kubernetes.io/hostname": name, **(labels or {})},
            },
            "spec": {"taints": [dict(taint) for taint in taints]},
            "status": {
                "capacity": dict(resources),
                "allocatable": dict(resources),
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
            },
        }
        return self.store.create(NODES, node)

    async def reconcile(self) -> None:
        """Run every controller once; see the module docstring for the order."""
        self._collect_garbage()
        for deployment in self.store.list_objects(DEPLOYMENTS):
            self._sync_deployment(deployment)
        for replicaset in self.store.list_objects(REPLICASETS):
            self._sync_replicaset(replicaset)
        for statefulset in self.store.list_objects(STATEFULSETS):
            self._sync_statefulset(statefulset)
        for rollout in self._served(ROLLOUTS):
            self._sync_statefulset(rollout, "Rollout", "argoproj.io/v1alpha1")
        for lws in self._leader_worker_sets():
            self._sync_leader_worker_set(lws)
        self._schedule()
        pods = self.store.list_objects(PODS)
        for pod in pods:
            self._run_pod(pod)
        live = {_meta(pod)["uid"] for pod in pods}
        for bookkeeping in (self._started_s, self._ready_since_s):
            for uid in bookkeeping.keys() - live:
                del bookkeeping[uid]
        for replicaset in self.store.list_objects(REPLICASETS):
            self._update_replicaset_status(replicaset)
        for deployment in self.store.list_objects(DEPLOYMENTS):
            self._update_deployment_status(deployment)
        for statefulset in self.store.list_objects(STATEFULSETS):
            self._update_statefulset_status(statefulset)
        for rollout in self._served(ROLLOUTS):
            self._update_rollout_status(rollout)
        for lws in self._leader_worker_sets():
            self._update_leader_worker_set_status(lws)
        for quota in self.store.list_objects(QUOTAS):
            self._update_quota_status(quota)
        await asyncio.sleep(0)  # let open watches deliver what changed

    async def settle(self, *, max_rounds: int = 10) -> int:
        """Reconcile until a pass changes nothing (without advancing the clock); the passes run."""
        for rounds in range(1, max_rounds + 1):
            before = self.store.resource_version
            await self.reconcile()
            if self.store.resource_version == before:
                return rounds
        raise AssertionError(f"the fake cluster did not settle in {max_rounds} passes")

    # -- controllers ---------------------------------------------------------------------------

    def _collect_garbage(self) -> None:
        live = {
            _meta(obj)["uid"]
            for ref in (DEPLOYMENTS, REPLICASETS, STATEFULSETS)
            for obj in self.store.list_objects(ref)
        }
        live.update(
            _meta(obj)["uid"] for ref in (ROLLOUTS, LEADER_WORKER_SETS) for obj in self._served(ref)
        )
        for ref in (DEPLOYMENTS, REPLICASETS, PODS):
            for obj in self.store.list_objects(ref):
                owner = _controller_uid(obj)
                if owner is not None and owner not in live:
                    self._delete(ref, obj)

    def _owned(self, ref: str, owner: Obj) -> list[Obj]:
        uid, namespace = _meta(owner)["uid"], _meta(owner).get("namespace")
        return [
            obj
            for obj in self.store.list_objects(ref, namespace)
            if _controller_uid(obj) == uid and not _meta(obj).get("deletionTimestamp")
        ]

    def _sync_deployment(self, deployment: Obj) -> None:
        meta, spec = _meta(deployment), deployment.get("spec") or {}
        template = spec.get("template") or {}
        pod_hash = template_hash(template)
        replicas = int(spec.get("replicas", 1))
        owned = self._owned(REPLICASETS, deployment)
        current = [
            rs for rs in owned if _meta(rs).get("labels", {}).get(POD_TEMPLATE_HASH) == pod_hash
        ]
        for old in owned:
            if old not in current:
                self._scale_replicaset(old, 0)
        if current:
            self._scale_replicaset(current[0], replicas)
            return
        labels = {**(_meta(template).get("labels") or {}), POD_TEMPLATE_HASH: pod_hash}
        selector = dict(spec.get("selector") or {})
        selector["matchLabels"] = {
            **(selector.get("matchLabels") or {}),
            POD_TEMPLATE_HASH: pod_hash,
        }
        revision = 1 + max(
            (
                int(_meta(rs).get("annotations", {}).get("deployment.kubernetes.io/revision", 0))
                for rs in owned
            ),
            default=0,
        )
        replicaset = {
            "metadata": {
                "name": f"{meta['name']}-{pod_hash}",
                "namespace": meta.get("namespace"),
                "labels": labels,
                "annotations": {
                    "deployment.kubernetes.io/revision": str(revision),
                    "deployment.kubernetes.io/desired-replicas": str(replicas),
                },
                "ownerReferences": [_owner_reference(deployment, "Deployment")],
            },
            "spec": {
                "replicas": replicas,
                "minReadySeconds": spec.get("minReadySeconds", 0),
                "selector": selector,
                "template": {**template, "metadata": {**_meta(template), "labels": labels}},
            },
        }
        self.store.create(REPLICASETS, replicaset)

    def _scale_replicaset(self, replicaset: Obj, replicas: int) -> None:
        if (replicaset.get("spec") or {}).get("replicas") != replicas:
            self.store.patch(
                REPLICASETS,
                _meta(replicaset).get("namespace"),
                _meta(replicaset)["name"],
                {"spec": {"replicas": replicas}},
                content_type=patching.MERGE,
            )

    def _sync_replicaset(self, replicaset: Obj) -> None:
        pods = self._owned(PODS, replicaset)
        wanted = int((replicaset.get("spec") or {}).get("replicas", 1))
        if len(pods) > wanted:
            for pod in sorted(pods, key=self._deletion_rank)[: len(pods) - wanted]:
                self._delete(PODS, pod)
        template = (replicaset.get("spec") or {}).get("template") or {}
        meta = _meta(replicaset)
        for _ in range(wanted - len(pods)):
            pod = {
                "metadata": {
                    "generateName": f"{meta['name']}-",
                    "namespace": meta.get("namespace"),
                    "labels": dict(_meta(template).get("labels") or {}),
                    "annotations": dict(_meta(template).get("annotations") or {}),
                    "ownerReferences": [_owner_reference(replicaset, "ReplicaSet")],
                },
                "spec": dict(template.get("spec") or {}),
            }
            if self._quota_refuses(meta.get("namespace"), pod):
                self.refused += 1
                continue
            self.store.create(PODS, pod)

    def _create_pod(self, pod: Obj) -> None:
        """Create a pod of a fixed name, unless a quota refuses it or its namesake is still
        terminating (it is created on a later pass)."""
        if self._quota_refuses(_meta(pod).get("namespace"), pod):
            self.refused += 1
            return
        try:
            self.store.create(PODS, pod)
        except ApiError as e:
            if e.status != 409:
                raise

    @staticmethod
    def _pod_from(
        template: Mapping[str, Any],
        name: str,
        namespace: str | None,
        owner: dict[str, Any],
        labels: Mapping[str, str] | None = None,
    ) -> Obj:
        return {
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": {**(_meta(template).get("labels") or {}), **(labels or {})},
                "annotations": dict(_meta(template).get("annotations") or {}),
                "ownerReferences": [owner],
            },
            "spec": dict(template.get("spec") or {}),
        }

    def _sync_statefulset(
        self, statefulset: Obj, kind: str = "StatefulSet", api_version: str = "apps/v1"
    ) -> None:
        meta, spec = _meta(statefulset), statefulset.get("spec") or {}
        wanted = int(spec.get("replicas", 1))
        pods = {_meta(pod)["name"]: pod for pod in self._owned(PODS, statefulset)}
        names = [f"{meta['name']}-{i}" for i in range(wanted)]
        for name in sorted(pods.keys() - set(names), reverse=True):
            self._delete(PODS, pods[name])
        owner = _owner_reference(statefulset, kind, api_version)
        template = spec.get("template") or {}
        for name in names:
            if name not in pods:
                self._create_pod(self._pod_from(template, name, meta.get("namespace"), owner))

    def _served(self, ref: str) -> list[Obj]:
        """The objects of a custom resource `group/version/plural`, when a test has registered
        it (its CRD installed); none otherwise."""
        group, _, plural = ref.split("/")
        served = any((t.group, t.plural) == (group, plural) for t in self.store.resource_types())
        return self.store.list_objects(ref) if served else []

    def _leader_worker_sets(self) -> list[Obj]:
        return self._served(LEADER_WORKER_SETS)

    def _sync_leader_worker_set(self, lws: Obj) -> None:
        meta, spec = _meta(lws), lws.get("spec") or {}
        groups = int(spec.get("replicas", 1))
        shape = spec.get("leaderWorkerTemplate") or {}
        size = int(shape.get("size", 1))
        worker = shape.get("workerTemplate") or {}
        leader = shape.get("leaderTemplate") or worker
        pods = {_meta(pod)["name"]: pod for pod in self._owned(PODS, lws)}
        wanted: dict[str, tuple[Mapping[str, Any], dict[str, str]]] = {}
        for i in range(groups):
            for j in range(size):
                name = f"{meta['name']}-{i}" if j == 0 else f"{meta['name']}-{i}-{j}"
                labels = {LWS_NAME: meta["name"], LWS_GROUP_INDEX: str(i), LWS_WORKER_INDEX: str(j)}
                wanted[name] = (leader if j == 0 else worker, labels)
        for name in sorted(pods.keys() - wanted.keys(), reverse=True):
            self._delete(PODS, pods[name])
        owner = _owner_reference(lws, "LeaderWorkerSet", f"{LWS_GROUP}/v1")
        for name, (template, labels) in wanted.items():
            if name not in pods:
                pod = self._pod_from(template, name, meta.get("namespace"), owner, labels)
                self._create_pod(pod)

    def _deletion_rank(self, pod: Obj) -> tuple[Any, ...]:
        """Sort key: the pods a ReplicaSet deletes first come first."""
        phase_rank = {"Pending": 0, "Unknown": 1, "Running": 2}.get(
            (pod.get("status") or {}).get("phase", ""), 0
        )
        try:
            cost = int(_meta(pod).get("annotations", {}).get(DELETION_COST, 0))
        except ValueError:
            cost = 0
        return (
            bool((pod.get("spec") or {}).get("nodeName")),
            phase_rank,
            is_ready(pod),
            cost,
            -self.store.creation_order(pod),
        )

    def _delete(self, ref: str, obj: Obj) -> None:
        namespace, name = _key(obj)
        try:
            self.store.delete(ref, namespace, name)
        except ApiError as e:
            if e.status != 404:
                raise

    # -- quota -------------------------------------------------------------------------------

    def _quota_used(self, namespace: str | None, keys: Iterable[str]) -> dict[str, decimal.Decimal]:
        """What the namespace's non-terminal pods use, under the quota's names for `keys`."""
        pods = [
            pod
            for pod in self.store.list_objects(PODS, namespace)
            if (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        ]
        used: dict[str, decimal.Decimal] = {}
        for key in keys:
            if key in ("pods", "count/pods"):
                used[key] = decimal.Decimal(len(pods))
                continue
            resource = key.removeprefix("requests.")
            used[key] = sum(
                (pod_requests(pod).get(resource, decimal.Decimal(0)) for pod in pods),
                decimal.Decimal(0),
            )
        return used

    def _quota_refuses(self, namespace: str | None, pod: Obj) -> bool:
        wanted = pod_requests(pod)
        for quota in self.store.list_objects(QUOTAS, namespace):
            hard = (quota.get("spec") or {}).get("hard") or {}
            used = self._quota_used(namespace, hard)
            for key, limit in hard.items():
                if key in ("pods", "count/pods"):
                    extra = decimal.Decimal(1)
                else:
                    extra = wanted.get(key.removeprefix("requests."), decimal.Decimal(0))
                if extra and used[key] + extra > parse_quantity(limit):
                    return True
        return False

    def _update_quota_status(self, quota: Obj) -> None:
        hard = dict((quota.get("spec") or {}).get("hard") or {})
        used = self._quota_used(_meta(quota).get("namespace"), hard)
        status = {"hard": hard, "used": {key: _format_quantity(n) for key, n in used.items()}}
        if quota.get("status") != status:
            namespace, name = _key(quota)
            self.store.replace(
                QUOTAS, namespace, name, {**quota, "status": status}, subresource="status"
            )

    # -- scheduler -----------------------------------------------------------------------------

    def _schedule(self) -> None:
        nodes = self.store.list_objects(NODES)
        used: dict[str, dict[str, decimal.Decimal]] = {_meta(node)["name"]: {} for node in nodes}
        pods = self.store.list_objects(PODS)
        for pod in pods:
            node_name = (pod.get("spec") or {}).get("nodeName")
            if node_name in used and (pod.get("status") or {}).get("phase") not in (
                "Succeeded",
                "Failed",
            ):
                self._add_usage(used[node_name], pod)
        for pod in pods:
            if (pod.get("spec") or {}).get("nodeName") or _meta(pod).get("deletionTimestamp"):
                continue
            fitting = [n for n in nodes if self._fits(n, pod, used[_meta(n)["name"]])]
            if fitting:
                node = max(fitting, key=lambda n: self._preference(pod, n))  # first among equals
                self._bind(pod, node)
                self._add_usage(used[_meta(node)["name"]], pod)
            else:
                message = f"0/{len(nodes)} nodes are available"
                self._set_conditions(pod, {"PodScheduled": ("False", "Unschedulable", message)})

    @staticmethod
    def _add_usage(usage: dict[str, decimal.Decimal], pod: Obj) -> None:
        for name, amount in pod_requests(pod).items():
            usage[name] = usage.get(name, decimal.Decimal(0)) + amount
        usage["pods"] = usage.get("pods", decimal.Decimal(0)) + 1

    def _fits(self, node: Obj, pod: Obj, used: Mapping[str, decimal.Decimal]) -> bool:
        spec, node_spec = pod.get("spec") or {}, node.get("spec") or {}
        labels = _meta(node).get("labels") or {}
        if (
            node_spec.get("unschedulable")
            or (_condition(node, "Ready") or {}).get("status") != "True"
        ):
            return False
        if any(labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
            return False
        if not self._affinity_matches(spec, labels):
            return False
        tolerations = spec.get("tolerations") or []
        for taint in node_spec.get("taints") or []:
            if taint.get("effect") in ("NoSchedule", "NoExecute") and not any(
                _tolerates(toleration, taint) for toleration in tolerations
            ):
                return False
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        wanted = {**pod_requests(pod), "pods": decimal.Decimal(1)}
        for name, amount in wanted.items():
            if amount <= 0:
                continue
            if name not in allocatable:
                if "/" in name:  # an extended resource (a GPU, a MIG slice) the node lacks
                    return False
                continue
            if used.get(name, decimal.Decimal(0)) + amount > parse_quantity(allocatable[name]):
                return False
        return True

    @staticmethod
    def _preference(pod: Obj, node: Obj) -> int:
        """The weight of the pod's preferred node affinity terms the node's labels match."""
        affinity = ((pod.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {}
        labels = _meta(node).get("labels") or {}
        return sum(
            int(term.get("weight", 0))
            for term in affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or []
            if all(
                selectors.Requirement(
                    expression["key"],
                    _AFFINITY_OPERATORS[expression["operator"]],
                    frozenset(expression.get("values") or ()),
                ).matches(labels)
                for expression in (term.get("preference") or {}).get("matchExpressions") or []
            )
        )

    @staticmethod
    def _affinity_matches(spec: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
        required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        ) or {}
        terms = required.get("nodeSelectorTerms") or []
        if not terms:
            return True
        return any(
            all(
                selectors.Requirement(
                    expression["key"],
                    _AFFINITY_OPERATORS[expression["operator"]],
                    frozenset(expression.get("values") or ()),
                ).matches(labels)
                for expression in term.get("matchExpressions") or []
            )
            for term in terms
        )

    def _bind(self, pod: Obj, node: Obj) -> None:
        namespace, name = _key(pod)
        node_name = _meta(node)["name"]
        self.store.patch(
            PODS, namespace, name, {"spec": {"nodeName": node_name}}, content_type=patching.MERGE
        )
        self._set_conditions(pod, {"PodScheduled": ("True", None, None)})

    # -- kubelet -------------------------------------------------------------------------------

    def _run_pod(self, pod: Obj) -> None:
        meta, spec, status = _meta(pod), pod.get("spec") or {}, pod.get("status") or {}
        if not spec.get("nodeName") or meta.get("deletionTimestamp"):
            return
        uid, now_s = meta["uid"], self.clock.now()
        if status.get("phase", "Pending") == "Pending":
            self._start(pod)
            self._started_s[uid] = now_s
            return
        if status.get("phase") != "Running":
            return
        started_s = self._started_s.setdefault(uid, now_s)
        containers_ready = now_s >= started_s + self._ready_delay(pod)
        gates = [gate.get("conditionType") for gate in spec.get("readinessGates") or []]
        gates_ready = all((_condition(pod, gate) or {}).get("status") == "True" for gate in gates)
        ready = containers_ready and gates_ready
        if ready and not is_ready(pod):
            self._ready_since_s[uid] = now_s
        elif not ready:
            self._ready_since_s.pop(uid, None)
        reason = (
            None
            if ready
            else ("ContainersNotReady" if not containers_ready else "ReadinessGatesNotReady")
        )
        changes = {
            "ContainersReady": ("True", None, None) if containers_ready else _CONTAINERS_NOT_READY,
            "Ready": ("True" if ready else "False", reason, None),
        }
        container_statuses = [
            {**container_status, "ready": containers_ready}
            for container_status in status.get("containerStatuses") or []
        ]
        self._set_conditions(pod, changes, extra={"containerStatuses": container_statuses})

    def _ready_delay(self, pod: Obj) -> float:
        namespace, name = _key(pod)
        if (namespace, name) in self._ready_after:
            return self._ready_after[namespace, name]
        annotation = (_meta(pod).get("annotations") or {}).get(READY_AFTER)
        return float(annotation) if annotation is not None else self.ready_after_s

    def _start(self, pod: Obj) -> None:
        started = format_time(self.clock.datetime())
        containers = (pod.get("spec") or {}).get("containers") or []
        self._pod_ips += 1
        pod_ip = (_meta(pod).get("annotations") or {}).get(POD_IP)
        extra = {
            "phase": "Running",
            "startTime": started,
            "podIP": pod_ip or f"10.0.{self._pod_ips // 250}.{self._pod_ips % 250 + 1}",
            "containerStatuses": [
                {
                    "name": container.get("name"),
                    "image": container.get("image", ""),
                    "imageID": "",
                    "ready": False,
                    "started": True,
                    "restartCount": 0,
                    "state": {"running": {"startedAt": started}},
                }
                for container in containers
            ],
        }
        changes = {
            "Initialized": ("True", None, None),
            "ContainersReady": _CONTAINERS_NOT_READY,
            "Ready": _CONTAINERS_NOT_READY,
        }
        self._set_conditions(pod, changes, extra=extra)

    def _set_conditions(
        self,
        pod: Obj,
        changes: Mapping[str, tuple[str, str | None, str | None]],
        *,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        """Strategic-merge pod conditions by type: other writers' conditions are left alone."""
        now = format_time(self.clock.datetime())
        conditions = []
        for kind, (status, reason, message) in changes.items():
            old = _condition(pod, kind)
            if old is not None and (old.get("status"), old.get("reason"), old.get("message")) == (
                status,
                reason,
                message,
            ):
                continue
            unchanged = old is not None and old.get("status") == status
            transition = (
                old.get("lastTransitionTime", now) if old is not None and unchanged else now
            )
            conditions.append(
                {
                    "type": kind,
                    "status": status,
                    "reason": reason,
                    "message": message,
                    "lastTransitionTime": transition,
                }
            )
        patch: dict[str, Any] = dict(extra or {})
        if conditions:
            patch["conditions"] = conditions
        if patch:
            namespace, name = _key(pod)
            self.store.patch(PODS, namespace, name, {"status": patch}, subresource="status")

    # -- status --------------------------------------------------------------------------------

    def _counts(self, pods: list[Obj], min_ready_s: float) -> dict[str, int]:
        now_s = self.clock.now()
        ready = [pod for pod in pods if is_ready(pod)]
        available = [
            pod
            for pod in ready
            if now_s - self._ready_since_s.get(_meta(pod)["uid"], -math.inf) >= min_ready_s
        ]
        return {
            "replicas": len(pods),
            "readyReplicas": len(ready),
            "availableReplicas": len(available),
        }

    def _update_replicaset_status(self, replicaset: Obj) -> None:
        pods = self._owned(PODS, replicaset)
        counts = self._counts(pods, (replicaset.get("spec") or {}).get("minReadySeconds", 0))
        status = {
            **counts,
            "fullyLabeledReplicas": len(pods),
            "observedGeneration": _meta(replicaset).get("generation", 1),
        }
        self._write_status(REPLICASETS, replicaset, status, keep="replicas")

    def _update_deployment_status(self, deployment: Obj) -> None:
        spec = deployment.get("spec") or {}
        pod_hash = template_hash(spec.get("template") or {})
        pods, updated = [], 0
        for replicaset in self._owned(REPLICASETS, deployment):
            owned = self._owned(PODS, replicaset)
            pods += owned
            if _meta(replicaset).get("labels", {}).get(POD_TEMPLATE_HASH) == pod_hash:
                updated = len(owned)
        counts = self._counts(pods, spec.get("minReadySeconds", 0))
        desired = int(spec.get("replicas", 1))
        available = counts["availableReplicas"] >= desired
        condition = {
            "type": "Available",
            "status": "True" if available else "False",
            "reason": "MinimumReplicasAvailable" if available else "MinimumReplicasUnavailable",
        }
        status = {
            **counts,
            "updatedReplicas": updated,
            "unavailableReplicas": max(desired - counts["availableReplicas"], 0),
            "observedGeneration": _meta(deployment).get("generation", 1),
            "conditions": [condition],
        }
        self._write_status(DEPLOYMENTS, deployment, status)

    def _update_statefulset_status(self, statefulset: Obj) -> None:
        counts = self._counts(self._owned(PODS, statefulset), 0)
        status = {
            **counts,
            "currentReplicas": counts["replicas"],
            "observedGeneration": _meta(statefulset).get("generation", 1),
        }
        self._write_status(STATEFULSETS, statefulset, status, keep="replicas")

    def _update_rollout_status(self, rollout: Obj) -> None:
        counts = self._counts(self._owned(PODS, rollout), 0)
        selector = selectors.format_label_selector((rollout.get("spec") or {}).get("selector"))
        status = {**counts, "selector": selector}
        self._write_status(ROLLOUTS, rollout, status, keep="replicas")

    def _update_leader_worker_set_status(self, lws: Obj) -> None:
        name = _meta(lws)["name"]
        groups: dict[str, list[Obj]] = {}
        for pod in self._owned(PODS, lws):
            groups.setdefault(_meta(pod)["labels"][LWS_GROUP_INDEX], []).append(pod)
        size = int(((lws.get("spec") or {}).get("leaderWorkerTemplate") or {}).get("size", 1))
        ready = sum(1 for pods in groups.values() if len(pods) == size and all(map(is_ready, pods)))
        status = {
            "replicas": len(groups),
            "readyReplicas": ready,
            "hpaPodSelector": f"{LWS_NAME}={name},{LWS_WORKER_INDEX}=0",
        }
        self._write_status(LEADER_WORKER_SETS, lws, status, keep="replicas")

    def _write_status(self, ref: str, obj: Obj, status: dict[str, Any], *, keep: str = "") -> None:
        # Counts are `omitempty` in the API types: a zero is absent (None in the client).
        status = {key: value for key, value in status.items() if value != 0 or key == keep}
        if obj.get("status") != status:  # the store drops no-op writes too; this saves the copy
            namespace, name = _key(obj)
            self.store.replace(
                ref, namespace, name, {**obj, "status": status}, subresource="status"
            )


def _format_quantity(amount: decimal.Decimal) -> str:
    return str(int(amount)) if amount == amount.to_integral_value() else str(amount.normalize())


def _tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    if toleration.get("effect") and toleration.get("effect") != taint.get("effect"):
        return False
    if toleration.get("operator") == "Exists":
        return not toleration.get("key") or toleration.get("key") == taint.get("key")
    return toleration.get("key") == taint.get("key") and toleration.get("value", "") == taint.get(
        "value", ""
    )

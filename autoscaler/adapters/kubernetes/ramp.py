"""The Kubernetes side of the warm-up gate and the traffic ramp (docs/architecture.md,
"The warm-up gate and the traffic ramp"): `ports.RampCluster`.

Built on a `KubeCluster`: its caches, Event recorder, leader and dry-run checks and error count,
and the records its last `workloads()` built. The gated services among them are those whose
record has ramp settings (`Workload.ramp`): their pod template carries the
`autoscaler.dsec.io/warm` readiness gate or the `warming` label (docs/architecture.md, "The
warm-up gate and the traffic ramp"). Any other service has nothing
to gate, ramp or drain (no pod of it ever leaves the Service's endpoints before it is deleted), so
its scale writes go straight through. Reads come from the caches. A service's pods are those of its
Deployment and of its placement-tier siblings (Deployments in its namespace whose controlling owner
it is; docs/architecture.md, "The placement ladder"), found by owner, never by label selector; a
pod's tier is its `autoscaler.dsec.io/tier` label (`whole` without one).

Writes, each only when the cache shows it would change something:
- `set_warm`: the readiness-gate condition `autoscaler.dsec.io/warm`, a strategic-merge patch
  of `pods/status` that merges by condition type, so the kubelet's conditions stay;
- `set_labels`: the `warming` and `stable` labels (a merge patch; null removes);
- `mark_victim`: the lowest `controller.kubernetes.io/pod-deletion-cost`;
- `reclaim`: mark, then delete, with the cached uid as precondition (a pod already gone is
  reclaimed already);
- `save_ramp`: the Deployment annotation `autoscaler.dsec.io/ramp`, carrying the cached
  resourceVersion; a 409 re-reads the Deployment and retries.
A write names a service and touches only that service's pods. It is skipped in dry-run (the
controller's, or the service's `mode: dry-run`), refused by a follower (`NotLeaderError`), and
a library error leaves as `KubeApiError` with the HTTP status, counted through the cluster's
`on_api_error`.

Gates no ramp answers for (`core.gates`, `ports.Gates`): `closed_gates` reads the pods the
caches index as gated, not warm and with their containers ready, in every watched namespace,
and finds each one's service by owner (pod, ReplicaSet, Deployment, and a placement tier's
owner); a pod whose owners are not all in the caches yet is left for a later tick, so a new
ReplicaSet of a ramping service is never taken for an unmanaged one. `open_gate` sets the
condition True on `pods/status` as `set_warm` does, but also in dry-run: a gate nobody opens
stalls the Deployment's rollouts, so opening it is the one write a dry-run controller makes
(a follower still refuses it). A pod opened is not reported again while the cache lags behind
that write. `announce` posts the `GateOpened` Event, in dry-run too.

It decides nothing: which pod is warm, which weight and which victim are the ramp driver's,
and which gates open is `core.gates`'s.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Collection, Iterator
from typing import TYPE_CHECKING, Final

import structlog
from kubernetes_asyncio import client

from autoscaler import clock as clock_
from autoscaler import ports
from autoscaler.adapters.kubernetes import _api, annotate, caches, cluster, events, placement
from autoscaler.adapters.kubernetes._api import KubeApiError, NotLeaderError, Obj
from autoscaler.contract import annotations as contract
from autoscaler.contract import codec
from autoscaler.core import gates, model
from autoscaler.core.ramp import pool

__all__ = [
    "DELETION_COST",
    "LOWEST_DELETION_COST",
    "TIER_LABEL",
    "WARM_CONDITION",
    "KubeApiError",
    "KubeRamp",
    "NotLeaderError",
    "first_port",
    "is_gated",
    "pod_info",
]

log = structlog.get_logger(__name__)

WARM_CONDITION: Final = contract.WARM_GATE
"""The pod condition behind the readiness gate of the same name."""
WARM_REASON: Final = "WarmupPassed"
COLD_REASON: Final = "NotWarm"
OPENED_REASON: Final = "GateOpened"
"""The warm condition's reason when the gate was opened without a ramp (`core.gates`)."""
TIER_LABEL: Final = placement.TIER_LABEL
WHOLE_TIER: Final = "whole"
RAMP_LABELS: Final = cluster.RAMP_LABELS
DELETION_COST: Final = caches.DELETION_COST
LOWEST_DELETION_COST: Final = str(-(2**31))
"""The lowest cost the annotation takes (an int32): the ReplicaSet removes this pod first."""
STRATEGIC_MERGE_PATCH: Final = "application/strategic-merge-patch+json"


def _warm_reason(warm: bool, message: str) -> str:
    """The warm condition's reason: warmed up, let out of the standby pool, or not warm."""
    if not warm:
        return COLD_REASON
    return cluster.STANDBY_REASON if message == pool.PROMOTED else WARM_REASON


def pod_info(pod: Obj, *, offset_s: float = 0.0) -> ports.PodInfo:
    """A cached pod as the ramp sees it; `offset_s` moves Unix times onto the loop's clock."""
    metadata = _api.meta(pod)
    labels = metadata.get("labels") or {}
    created = _api.parse_time(metadata.get("creationTimestamp"))
    ip = _api.status(pod).get("podIP")
    return ports.PodInfo(
        name=_api.name(pod),
        created_s=math.nan if created is None else created + offset_s,
        ip=ip if isinstance(ip, str) and ip else None,
        running=_api.status(pod).get("phase") == "Running" and _is_true(pod, "ContainersReady"),
        warm=_is_true(pod, WARM_CONDITION),
        warming=labels.get(cluster.WARMING_LABEL) == "true",
        stable=labels.get(cluster.STABLE_LABEL) == "true",
        terminating=bool(metadata.get("deletionTimestamp")),
        tier=str(labels.get(TIER_LABEL) or WHOLE_TIER),
        port=first_port(pod),
    )


is_gated = cluster.is_gated


def first_port(pod: Obj) -> int | None:
    """The first container port in the pod's spec: the warm-up probe's port by default."""
    for container in _api.spec(pod).get("containers") or ():
        for port in (container.get("ports") or ()) if isinstance(container, dict) else ():
            number = port.get("containerPort") if isinstance(port, dict) else None
            if isinstance(number, int) and not isinstance(number, bool):
                return number
    return None


def _owner(obj: Obj, kind: str, get: Callable[[str, str], Obj | None]) -> Obj | None:
    """The cached controlling owner of `kind`, when its uid matches the reference."""
    for ref in _api.meta(obj).get("ownerReferences") or ():
        if isinstance(ref, dict) and ref.get("controller") and ref.get("kind") == kind:
            owner = get(_api.namespace(obj), str(ref.get("name")))
            return owner if owner is not None and _api.uid(owner) == ref.get("uid") else None
    return None


def _controller_kind(obj: Obj) -> str | None:
    for ref in _api.meta(obj).get("ownerReferences") or ():
        if isinstance(ref, dict) and ref.get("controller"):
            return str(ref.get("kind"))
    return None


def _older(pod: Obj, version: str) -> bool:
    """Whether the cached pod predates the write that returned `version`."""
    try:
        # resourceVersions are opaque by contract but etcd's are increasing integers; when they
        # are not, trust the cache.
        return int(_api.resource_version(pod)) < int(version)
    except ValueError:
        return False


def _is_true(pod: Obj, kind: str) -> bool:
    return (_api.condition(pod, kind) or {}).get("status") == "True"


class KubeRamp:
    """`ports.RampCluster` on a `KubeCluster`'s caches; see the module docstring."""

    def __init__(
        self,
        api: client.ApiClient,
        kube: cluster.KubeCluster,
        *,
        clock: clock_.Clock | None = None,
        wall_now: Callable[[], float] = time.time,
        conflict_attempts: int = 4,
        request_timeout_s: float = _api.DEFAULT_REQUEST_TIMEOUT_S,
        rng: random.Random | None = None,
    ) -> None:
        """Write through `api`, read `kube`'s caches.

        `clock` is the loop's: pods' creation times are given on it. None means the loop runs
        on Unix time (`WallClock`, as in production), and times are passed through unchanged.
        `wall_now` stamps the warm condition's transitions; retries of a conflicting annotation
        write wait on `kube.clock`.
        """
        self._kube = kube
        self._caches = kube.caches
        self._core = client.CoreV1Api(api)
        self._apps = client.AppsV1Api(api)
        self._clock = clock
        self._wall_now = wall_now
        self._calls = _api.Caller(
            fence=kube.may_write, on_error=kube.on_api_error, request_timeout_s=request_timeout_s
        )
        self._conflicts = annotate.ConflictRetry(
            clock=kube.clock, rng=rng or random.Random(), attempts=max(1, conflict_attempts)
        )
        self._saved: dict[model.ServiceId, tuple[str, str]] = {}
        """The ramp text last written per service, with the resourceVersion of that write."""
        self._opened: dict[tuple[str, str], str] = {}
        """Pods whose gate `open_gate` opened, with the resourceVersion of that write."""

    # -- reads -------------------------------------------------------------------------------------

    def ramp_targets(self) -> list[ports.RampTarget]:
        """The ramp settings of the gated services the last `workloads()` found (the records'
        `Workload.ramp`, which the loop hands the driver)."""
        return [w.ramp for w in self._kube.managed() if w.ramp is not None]

    def pods(self, service: model.ServiceId) -> list[ports.PodInfo]:
        """Every pod of the service, in every placement tier, from the caches; by name."""
        found = self._find(service)
        if found is None:
            return []
        offset_s = 0.0 if self._clock is None else self._clock.now() - self._wall_now()
        pods = [pod_info(pod, offset_s=offset_s) for pod in self._pods_of(found[1])]
        return sorted(pods, key=lambda pod: pod.name)

    def _find(self, service: model.ServiceId) -> tuple[ports.Workload, Obj] | None:
        """The service's record from the last `workloads()`, and its Deployment in the cache."""
        workload = self._kube.workload(service)
        if workload is None:
            return None
        deployment = self._caches.deployment(workload.namespace, workload.deployment)
        return None if deployment is None else (workload, deployment)

    def _tiers(self, owner: Obj) -> Iterator[Obj]:
        """The owner's Deployment and its placement-tier siblings."""
        yield owner
        namespace = _api.namespace(owner)
        for sibling in self._caches.siblings_of(owner):
            if _api.namespace(sibling) == namespace:  # an owner never spans namespaces
                yield sibling

    def _pods_of(self, owner: Obj) -> Iterator[Obj]:
        for deployment in self._tiers(owner):
            yield from self._caches.pods_of(deployment)

    # -- writes ------------------------------------------------------------------------------------

    async def set_warm(self, service: model.ServiceId, pod: str, warm: bool, message: str) -> None:
        """Set the readiness-gate condition on `pods/status`, merged by condition type."""
        operation = "pods/status.patch"
        managed, target = self._pod(service, pod, operation)
        if not self._may_write(service, managed, operation, pod):
            return
        status = "True" if warm else "False"
        current = _api.condition(target, WARM_CONDITION)
        if current is not None and (current.get("status"), current.get("message")) == (
            status,
            message,
        ):
            return
        transition = (
            current.get("lastTransitionTime")
            if current is not None and current.get("status") == status
            else None
        ) or codec.format_time(self._wall_now())
        condition = {
            "type": WARM_CONDITION,
            "status": status,
            "reason": _warm_reason(warm, message),
            "message": message,
            "lastTransitionTime": transition,
        }
        await self._calls.call(
            operation,
            f"{managed.namespace}/{pod}",
            self._core.patch_namespaced_pod_status,
            pod,
            managed.namespace,
            {"status": {"conditions": [condition]}},
            _content_type=STRATEGIC_MERGE_PATCH,
            write=True,
            service=service,
        )

    async def set_labels(
        self, service: model.ServiceId, pod: str, *, warming: bool, stable: bool
    ) -> None:
        """Set or remove the `warming` and `stable` labels (a merge patch; null removes)."""
        operation = "pods.patch"
        managed, target = self._pod(service, pod, operation)
        if not self._may_write(service, managed, operation, pod):
            return
        wanted = {cluster.WARMING_LABEL: warming, cluster.STABLE_LABEL: stable}
        labels = _api.meta(target).get("labels") or {}
        if all((labels.get(key) == "true") == value for key, value in wanted.items()):
            return
        patch = {key: "true" if value else None for key, value in wanted.items()}
        await self._calls.call(
            operation,
            f"{managed.namespace}/{pod}",
            self._core.patch_namespaced_pod,
            pod,
            managed.namespace,
            {"metadata": {"labels": patch}},
            _content_type=_api.MERGE_PATCH,
            write=True,
            service=service,
        )

    async def mark_victim(self, service: model.ServiceId, pod: str) -> None:
        """Give the pod the lowest pod-deletion-cost: its ReplicaSet's next scale-down takes it."""
        operation = "pods.patch"
        managed, target = self._pod(service, pod, operation)
        if self._may_write(service, managed, operation, pod):
            await self._mark(service, managed.namespace, target)

    async def reclaim(self, service: model.ServiceId, pod: str) -> None:
        """Mark the pod as the first victim and delete it; its ReplicaSet makes a fresh one.

        A pod that is gone already (from the cache, or a 404 or a changed uid from the API) has
        been reclaimed: nothing is raised.
        """
        operation = "pods.delete"
        try:
            managed, target = self._pod(service, pod, operation)
        except KubeApiError as e:
            if e.status != 404:
                raise
            log.info("ramp.reclaim_gone", service=service, pod=pod)
            return
        if not self._may_write(service, managed, operation, pod):
            return
        try:
            await self._mark(service, managed.namespace, target)
            await self._calls.call(
                operation,
                f"{managed.namespace}/{pod}",
                self._core.delete_namespaced_pod,
                pod,
                managed.namespace,
                body={"preconditions": {"uid": _api.uid(target)}},
                write=True,
                service=service,
            )
        except KubeApiError as e:
            # 409: the precondition failed, so the pod of that uid is gone (another took its
            # name); 404: gone already.
            if e.status not in (404, 409):
                raise
            log.info("ramp.reclaim_gone", service=service, pod=pod, status=e.status)

    async def _mark(self, service: model.ServiceId, namespace: str, pod: Obj) -> None:
        if _api.annotations_of(pod).get(DELETION_COST) == LOWEST_DELETION_COST:
            return
        name = _api.name(pod)
        await self._calls.call(
            "pods.patch",
            f"{namespace}/{name}",
            self._core.patch_namespaced_pod,
            name,
            namespace,
            {"metadata": {"annotations": {DELETION_COST: LOWEST_DELETION_COST}}},
            _content_type=_api.MERGE_PATCH,
            write=True,
            service=service,
        )

    async def save_ramp(self, service: model.ServiceId, text: str) -> None:
        """Persist the ramp state on the Deployment, when it differs from what is there."""
        operation = "deployments.patch"
        found = self._find(service)
        if found is None:
            raise KubeApiError(operation, f"{service} is not a managed Deployment")
        managed, current = found
        if not self._may_write(service, managed, operation, managed.deployment):
            return
        if self._saved_already(service, current, text):
            return
        answer = await annotate.patch_annotations(
            self._calls,
            self._apps,
            current,
            {contract.RAMP_KEY: text},
            target=service,
            retry=self._conflicts,
        )
        if answer is not None:
            self._saved[service] = (text, _api.resource_version(answer))

    def _saved_already(self, service: model.ServiceId, cached: Obj, text: str) -> bool:
        """Whether `text` is on the Deployment, or was written by a save the cache lags behind."""
        if _api.annotations_of(cached).get(contract.RAMP_KEY) == text:
            return True
        saved = self._saved.get(service)
        if saved is None or saved[0] != text:
            return False
        try:
            # resourceVersions are opaque by contract but etcd's are increasing integers; when
            # they are not, trust the cache.
            return int(_api.resource_version(cached)) < int(saved[1])
        except ValueError:
            return False

    def record(self, service: model.ServiceId, type_: str, reason: str, message: str) -> None:
        """Queue a Kubernetes Event on the service's Deployment (dropped for an unknown one)."""
        if type_ not in (events.NORMAL, events.WARNING):
            raise ValueError(f"an Event's type is Normal or Warning, not {type_!r}")
        found = self._find(service)
        if found is None:
            log.warning("ramp.event_dropped", service=service, reason=reason)
            return
        self._kube.events.record(found[1], type_, reason, message)

    # -- gates no ramp answers for (ports.Gates) ------------------------------------------------

    def closed_gates(self) -> list[gates.ClosedGate]:
        """The gated pods with their containers ready and `warm` not True, each with who
        answers for it; see the module docstring."""
        found = []
        waiting: dict[tuple[str, str], str] = {}
        ramped = {t.service for t in self.ramp_targets() if not t.dry_run}
        for pod in self._caches.closed_gates():
            namespace, name = _api.namespace(pod), _api.name(pod)
            opened = self._opened.get((namespace, name))
            if opened is not None and _older(pod, opened):
                waiting[namespace, name] = opened
                continue
            owner = self._service_of(pod)
            if owner is None:
                continue
            custody = self._custody(owner, ramped)
            if custody is not None:
                found.append(gates.ClosedGate(namespace, _api.name(owner), name, custody))
        self._opened = waiting
        return found

    def _service_of(self, pod: Obj) -> Obj | None:
        """The Deployment whose service the pod serves, from the caches; None when an owner on
        the way is not cached (or the pod is not a Deployment's)."""
        namespace = _api.namespace(pod)
        replicaset = _owner(pod, "ReplicaSet", self._caches.replicasets.get)
        if replicaset is None:
            return None
        deployment = _owner(replicaset, "Deployment", self._caches.deployments.get)
        if deployment is None or _api.namespace(deployment) != namespace:
            return None
        if _controller_kind(deployment) != "Deployment":
            return deployment
        # A placement tier's pods are its owner's, as `_tiers` finds them.
        return _owner(deployment, "Deployment", self._caches.deployments.get)

    def _custody(
        self, deployment: Obj, ramped: Collection[model.ServiceId]
    ) -> gates.Custody | None:
        """Who answers for the gates of this Deployment's pods; None when it is not known yet
        (opted in and valid, but not seen by the last `workloads()`)."""
        namespace, name = _api.namespace(deployment), _api.name(deployment)
        service = model.ServiceId(f"{namespace}/{name}")
        managed = self._kube.workload(service)
        if self._kube.dry_run:
            return gates.Custody.DRY_RUN
        if managed is not None:
            if managed.dry_run:
                return gates.Custody.SERVICE_DRY_RUN
            return gates.Custody.RAMP if service in ramped else gates.Custody.NOT_GATED
        notes = _api.annotations_of(deployment)
        if not contract.opted_in(notes):
            return gates.Custody.NOT_MANAGED
        if isinstance(contract.parse(notes, namespace=namespace), contract.Invalid):
            return gates.Custody.INVALID
        return None

    async def open_gate(self, gate: gates.ClosedGate, message: str) -> None:
        """Set the pod's `warm` condition True, in dry-run too; `NotLeaderError` on a follower."""
        operation = "pods/status.patch"
        service = f"{gate.namespace}/{gate.deployment}"
        if not self._kube.may_write(service):
            raise NotLeaderError(
                f"{gate.namespace}/{gate.pod}: this instance does not lead the Lease of {service}"
            )
        condition = {
            "type": WARM_CONDITION,
            "status": "True",
            "reason": OPENED_REASON,
            "message": message,
            "lastTransitionTime": codec.format_time(self._wall_now()),
        }
        answer = await self._calls.call(
            operation,
            f"{gate.namespace}/{gate.pod}",
            self._core.patch_namespaced_pod_status,
            gate.pod,
            gate.namespace,
            {"status": {"conditions": [condition]}},
            _content_type=STRATEGIC_MERGE_PATCH,
            write=True,
            service=service,
        )
        self._opened[gate.namespace, gate.pod] = _api.resource_version(answer)

    def announce(self, opening: gates.Opening) -> None:
        """Queue the `GateOpened` Event on the Deployment, in dry-run too."""
        deployment = self._caches.deployment(opening.namespace, opening.deployment)
        if deployment is None:
            log.warning("gate.event_dropped", namespace=opening.namespace, name=opening.deployment)
            return
        self._kube.events.record(
            deployment, events.NORMAL, gates.REASON, opening.message, despite_dry_run=True
        )

    # -- write plumbing ----------------------------------------------------------------------------

    def _pod(
        self, service: model.ServiceId, pod: str, operation: str
    ) -> tuple[ports.Workload, Obj]:
        """The service and one of its pods from the caches; a `KubeApiError` for any other pod."""
        found = self._find(service)
        if found is None:
            raise KubeApiError(operation, f"{service} is not a managed Deployment")
        managed, owner = found
        cached = self._caches.pods.get(managed.namespace, pod)
        if cached is None:
            raise KubeApiError(
                operation, f"{operation} {managed.namespace}/{pod}: no such pod", status=404
            )
        if _api.controller_uid(cached) not in self._replicasets(owner):
            raise KubeApiError(
                operation,
                f"{operation} {managed.namespace}/{pod} refused: not a pod of {service}",
            )
        return managed, cached

    def _replicasets(self, owner: Obj) -> Collection[str]:
        return {
            _api.uid(replicaset)
            for deployment in self._tiers(owner)
            for replicaset in self._caches.replicasets_of(deployment)
        }

    def _dry_run(self, managed: ports.Workload) -> bool:
        return self._kube.dry_run or managed.dry_run

    def _may_write(
        self, service: model.ServiceId, managed: ports.Workload, operation: str, name: str
    ) -> bool:
        """False in dry-run (logged); `NotLeaderError` on a follower; True otherwise."""
        if self._dry_run(managed):
            log.info(
                "ramp.write_skipped_dry_run",
                service=service,
                operation=operation,
                object=name,
                scope="global" if self._kube.dry_run else "service",
            )
            return False
        if not self._kube.may_write(service):
            raise NotLeaderError(
                f"{service}: this instance does not lead its Lease; nothing written"
            )
        return True


if TYPE_CHECKING:

    def _implements_the_ports(ramp: KubeRamp) -> tuple[ports.RampCluster, ports.Gates]:
        return ramp, ramp  # mypy checks both structural types here

"""The Kubernetes side of the warm-up gate and the traffic ramp (docs/architecture.md,
"The warm-up gate and the traffic ramp"): `ports.RampCluster`.

Built on a `KubeCluster`: its caches, Event recorder, leader and dry-run checks and error count,
and the services its last `workloads()` found. The ramp targets are the gated ones among them:
those whose pod template carries the `autoscaler.dsec.io/warm` readiness gate or the `warming`
label (docs/architecture.md, "The warm-up gate and the traffic ramp"). Any other service has nothing
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
from typing import TYPE_CHECKING, Any, Final

import structlog
from kubernetes_asyncio import client
from kubernetes_asyncio.client import ApiException

import autoscaler.annotations as contract
from autoscaler import clock as clock_
from autoscaler import ports
from autoscaler.adapters.kubernetes import _api, cluster, events, informer, placement
from autoscaler.adapters.kubernetes._api import KubeApiError, NotLeaderError, Obj
from autoscaler.core import gates, model

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
RAMP_LABELS: Final = frozenset({cluster.WARMING_LABEL, cluster.STABLE_LABEL})
DELETION_COST: Final = "controller.kubernetes.io/pod-deletion-cost"
LOWEST_DELETION_COST: Final = str(-(2**31))
"""The lowest cost the annotation takes (an int32): the ReplicaSet removes this pod first."""
STRATEGIC_MERGE_PATCH: Final = "application/strategic-merge-patch+json"

_Managed = cluster._Managed
"""A service as `KubeCluster.workloads()` last saw it: namespace, Deployment name, config."""


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


def is_gated(template: Obj) -> bool:
    """Whether a pod template opts into the warm-up gate: the `warm` readiness gate, or the
    `warming` label its new pods start with."""
    labels = _api.meta(template).get("labels") or {}
    if labels.get(cluster.WARMING_LABEL) == "true":
        return True
    gates = _api.spec(template).get("readinessGates") or ()
    return any(isinstance(g, dict) and g.get("conditionType") == WARM_CONDITION for g in gates)


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
        self._conflict_attempts = max(1, conflict_attempts)
        self._request_timeout_s = request_timeout_s
        self._rng = rng or random.Random()
        self._conflict_backoff = informer.Backoff(initial_s=0.05, max_s=1.0)
        self._saved: dict[model.ServiceId, tuple[str, str]] = {}
        """The ramp text last written per service, with the resourceVersion of that write."""
        self._opened: dict[tuple[str, str], str] = {}
        """Pods whose gate `open_gate` opened, with the resourceVersion of that write."""

    # -- reads -------------------------------------------------------------------------------------

    def ramp_targets(self) -> list[ports.RampTarget]:
        """The gated services the last `workloads()` found, with their ramp settings."""
        targets = []
        for service in self._kube.managed_services():
            found = self._find(service)
            if found is None:
                continue
            managed, deployment = found
            template = _api.spec(deployment).get("template") or {}
            labels = _api.meta(template).get("labels") or {}
            if not is_gated(template):
                continue
            route = ports.RouteTarget(
                service=service,
                namespace=managed.namespace,
                deployment=managed.name,
                pod_labels={str(k): str(v) for k, v in labels.items() if k not in RAMP_LABELS},
            )
            targets.append(
                ports.RampTarget(
                    service=service,
                    route=route,
                    traffic=managed.config.traffic,
                    warmup=managed.config.warmup,
                    metrics=managed.config.metrics,
                    dry_run=self._dry_run(managed),
                    saved=_api.annotations_of(deployment).get(contract.RAMP_KEY),
                )
            )
        return targets

    def pods(self, service: model.ServiceId) -> list[ports.PodInfo]:
        """Every pod of the service, in every placement tier, from the caches; by name."""
        found = self._find(service)
        if found is None:
            return []
        offset_s = 0.0 if self._clock is None else self._clock.now() - self._wall_now()
        pods = [pod_info(pod, offset_s=offset_s) for pod in self._pods_of(found[1])]
        return sorted(pods, key=lambda pod: pod.name)

    def _find(self, service: model.ServiceId) -> tuple[_Managed, Obj] | None:
        """The service as the last `workloads()` saw it, and its Deployment in the cache."""
        managed = self._kube.managed(service)
        if managed is None:
            return None
        deployment = self._caches.deployment(managed.namespace, managed.name)
        return None if deployment is None else (managed, deployment)

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
        ) or _api.format_time(self._wall_now())
        condition = {
            "type": WARM_CONDITION,
            "status": status,
            "reason": WARM_REASON if warm else COLD_REASON,
            "message": message,
            "lastTransitionTime": transition,
        }
        await self._call(
            operation,
            f"{managed.namespace}/{pod}",
            self._core.patch_namespaced_pod_status,
            pod,
            managed.namespace,
            {"status": {"conditions": [condition]}},
            _content_type=STRATEGIC_MERGE_PATCH,
            writes_for=service,
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
        await self._call(
            operation,
            f"{managed.namespace}/{pod}",
            self._core.patch_namespaced_pod,
            pod,
            managed.namespace,
            {"metadata": {"labels": patch}},
            _content_type=_api.MERGE_PATCH,
            writes_for=service,
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
            await self._call(
                operation,
                f"{managed.namespace}/{pod}",
                self._core.delete_namespaced_pod,
                pod,
                managed.namespace,
                body={"preconditions": {"uid": _api.uid(target)}},
                writes_for=service,
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
        await self._call(
            "pods.patch",
            f"{namespace}/{name}",
            self._core.patch_namespaced_pod,
            name,
            namespace,
            {"metadata": {"annotations": {DELETION_COST: LOWEST_DELETION_COST}}},
            _content_type=_api.MERGE_PATCH,
            writes_for=service,
        )

    async def save_ramp(self, service: model.ServiceId, text: str) -> None:
        """Persist the ramp state on the Deployment, when it differs from what is there."""
        operation = "deployments.patch"
        found = self._find(service)
        if found is None:
            raise KubeApiError(operation, f"{service} is not a managed Deployment")
        managed, current = found
        if not self._may_write(service, managed, operation, managed.name):
            return
        if self._saved_already(service, current, text):
            return
        version = _api.resource_version(current)
        for attempt in range(1, self._conflict_attempts + 1):
            if _api.annotations_of(current).get(contract.RAMP_KEY) == text:
                return
            body = {
                "metadata": {"resourceVersion": version, "annotations": {contract.RAMP_KEY: text}}
            }
            try:
                answer = await _api.write_json(
                    self._kube.may_write,
                    service,
                    self._apps.patch_namespaced_deployment,
                    managed.name,
                    managed.namespace,
                    body,
                    _content_type=_api.MERGE_PATCH,
                    request_timeout_s=self._request_timeout_s,
                )
            except ApiException as e:
                self._kube.on_api_error(operation)
                if e.status != 409 or attempt == self._conflict_attempts:
                    raise _api.failure(operation, service, e) from e
            except (*_api.TRANSPORT_ERRORS, ValueError) as e:
                self._kube.on_api_error(operation)
                raise _api.failure(operation, service, e) from e
            else:
                self._saved[service] = (text, _api.resource_version(answer))
                return
            log.info("ramp.save_conflicted", service=service, attempt=attempt)
            await self._kube.clock.sleep(self._conflict_backoff.delay_s(attempt, self._rng))
            current = await self._call(
                "deployments.get",
                service,
                self._apps.read_namespaced_deployment,
                managed.name,
                managed.namespace,
                writes_for=None,
            )
            version = _api.resource_version(current)

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
        managed = self._kube.managed(service)
        if self._kube.dry_run:
            return gates.Custody.DRY_RUN
        if managed is not None:
            if managed.config.mode is contract.Mode.DRY_RUN:
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
            "lastTransitionTime": _api.format_time(self._wall_now()),
        }
        answer = await self._call(
            operation,
            f"{gate.namespace}/{gate.pod}",
            self._core.patch_namespaced_pod_status,
            gate.pod,
            gate.namespace,
            {"status": {"conditions": [condition]}},
            _content_type=STRATEGIC_MERGE_PATCH,
            writes_for=service,
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

    def _pod(self, service: model.ServiceId, pod: str, operation: str) -> tuple[_Managed, Obj]:
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

    def _dry_run(self, managed: _Managed) -> bool:
        return self._kube.dry_run or managed.config.mode is contract.Mode.DRY_RUN

    def _may_write(
        self, service: model.ServiceId, managed: _Managed, operation: str, name: str
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

    async def _call(
        self,
        operation: str,
        target: str,
        fn: Any,
        *args: Any,
        writes_for: str | None,
        **kwargs: Any,
    ) -> Obj:
        """The answer's JSON; a write (`writes_for` names its service; None for a read) is
        fenced by the Lease of that service's bucket (`_api.write_json`)."""
        try:
            if writes_for is not None:
                return await _api.write_json(
                    self._kube.may_write,
                    writes_for,
                    fn,
                    *args,
                    request_timeout_s=self._request_timeout_s,
                    **kwargs,
                )
            return await _api.call_json(
                fn, *args, request_timeout_s=self._request_timeout_s, **kwargs
            )
        except (ApiException, *_api.TRANSPORT_ERRORS, ValueError) as e:
            self._kube.on_api_error(operation)
            raise _api.failure(operation, target, e) from e


if TYPE_CHECKING:

    def _implements_the_ports(ramp: KubeRamp) -> tuple[ports.RampCluster, ports.Gates]:
        return ramp, ramp  # mypy checks both structural types here

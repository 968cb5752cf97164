"""The Kubernetes API behind the `Cluster` port and the Prometheus adapter's `PodIndex`.

`workloads()` reads the caches only: every Deployment annotated `autoscaler.dsec.io/enabled:
"true"` whose bucket Lease this replica leads (`owned`; every one, with a single Lease), its
annotations parsed by the contract (once per distinct content), its serving pods found by
owner. A Deployment with invalid annotations is skipped, with one `config.invalid`
log line and one Warning Event `InvalidConfig` per distinct set of problems; so is one that a
HorizontalPodAutoscaler or a KEDA ScaledObject also scales (one owner of replicas: the Event
names the other). A `state`
annotation that cannot be read (`codec.parse_state`) is treated as absent, with one
`state.invalid` log line and one Warning Event `CorruptState` when first seen.

Writes: `scale` patches the Deployment's `scale` subresource with the resourceVersion its
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
from collections.abc import Callable, Collection, Mapping
from typing import TYPE_CHECKING, Any, Final

import structlog
from kubernetes_asyncio import client
from kubernetes_asyncio.client import ApiException

import autoscaler.annotations as contract
from autoscaler import clock as clock_
from autoscaler import ports
from autoscaler.adapters import prometheus
from autoscaler.adapters.kubernetes import _api, caches, codec, events, informer, placement
from autoscaler.adapters.kubernetes._api import KubeApiError, NotLeaderError, Obj
from autoscaler.core import model

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
    "read_deployment",
    "spec_replicas",
    "startup_s",
]

log = structlog.get_logger(__name__)

RESCALED: Final = "SuccessfulRescale"
DRY_RUN_RESCALE: Final = "DryRunRescale"
HELD: Final = "ScaleHeld"
INVALID: Final = "InvalidConfig"
OVERRIDDEN: Final = "ReplicasOverridden"

_ParseKey = tuple[str, tuple[tuple[str, str], ...]]


@dataclasses.dataclass(frozen=True, slots=True)
class _Managed:
    """One managed service as the last `workloads()` saw it."""

    namespace: str
    name: str
    config: contract.ServiceConfig
    serving: frozenset[str]


WARMING_LABEL: Final = contract.WARMING_LABEL
STABLE_LABEL: Final = contract.STABLE_LABEL


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
    counts its whole life; the median keeps one such pod from moving the answer much.
    """
    samples: list[tuple[float, float]] = []
    for pod in pods:
        created = _api.parse_time(_api.meta(pod).get("creationTimestamp"))
        ready = _api.parse_time((_api.condition(pod, "Ready") or {}).get("lastTransitionTime"))
        if created is not None and ready is not None and ready >= created:
            samples.append((created, ready - created))
    if not samples:
        return None
    samples.sort(reverse=True)
    return float(statistics.median(duration for _, duration in samples[:recent]))


def spec_replicas(deployment: Obj) -> int:
    replicas = _api.spec(deployment).get("replicas", 1)
    return replicas if isinstance(replicas, int) and not isinstance(replicas, bool) else 1


async def read_deployment(
    api: client.ApiClient,
    namespace: str,
    name: str,
    *,
    request_timeout_s: float = _api.DEFAULT_REQUEST_TIMEOUT_S,
) -> Obj | None:
    """One Deployment as the API serialises it, read once (for `autoscaler explain`).

    None when it does not exist; any other failure is a `KubeApiError` with the HTTP status.
    """
    operation = "deployments.get"
    try:
        return await _api.call_json(
            client.AppsV1Api(api).read_namespaced_deployment,
            name,
            namespace,
            request_timeout_s=request_timeout_s,
        )
    except ApiException as e:
        if e.status == 404:
            return None
        raise _api.failure(operation, f"{namespace}/{name}", e) from e
    except (*_api.TRANSPORT_ERRORS, ValueError) as e:
        raise _api.failure(operation, f"{namespace}/{name}", e) from e


LIST_PAGE = 500
"""Deployments asked for per list call by `list_deployments`."""


async def list_deployments(
    api: client.ApiClient,
    namespace: str | None,
    *,
    request_timeout_s: float = _api.DEFAULT_REQUEST_TIMEOUT_S,
) -> list[Obj]:
    """The Deployments of `namespace` (None: all namespaces) as the API serialises them, read
    once, page by page (for `autoscaler list`); a failure is a `KubeApiError`."""
    apps = client.AppsV1Api(api)
    operation = "deployments.list"
    target = namespace or "all namespaces"
    found: list[Obj] = []
    token: str | None = None
    while True:
        kwargs: dict[str, Any] = {"limit": LIST_PAGE}
        if token:
            kwargs["_continue"] = token
        try:
            if namespace is None:
                page = await _api.call_json(
                    apps.list_deployment_for_all_namespaces,
                    request_timeout_s=request_timeout_s,
                    **kwargs,
                )
            else:
                page = await _api.call_json(
                    apps.list_namespaced_deployment,
                    namespace,
                    request_timeout_s=request_timeout_s,
                    **kwargs,
                )
        except (ApiException, *_api.TRANSPORT_ERRORS, ValueError) as e:
            raise _api.failure(operation, target, e) from e
        items = page.get("items")
        found.extend(item for item in items or () if isinstance(item, dict))
        token = (page.get("metadata") or {}).get("continue")
        if not token:
            return found


class KubeCluster:
    """`ports.Cluster` and `prometheus.PodIndex` over the caches; see the module docstring."""

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
        on_tiers: placement.TierCallback | None = None,
        on_fallback: placement.FallbackCallback | None = None,
    ) -> None:
        """Build the caches and the Event recorder on `api`; `run()` fills and follows them.

        `identity` names this replica in Events (`reportingInstance`). `clock` paces the
        retries of a conflicting write and the watches' backoff; `wall_now` stamps the status
        annotation and Events, and times how long an empty tier Deployment has been idle
        (`idle_tier_grace_s` before it is deleted). `may_write(service)` is asked before every
        write for a service (the bucket Leases' `leads`); `owned()`, asked once per
        `workloads()`, says which services this replica acts on (it leads their bucket): the
        others are skipped, and nothing is remembered about them. `core_weights` are core-hours
        per card-hour by GPU product; `on_tiers` and `on_fallback` are told of placements
        (telemetry).
        """
        self.clock = clock or clock_.LoopClock()
        self.dry_run = dry_run
        self._wall_now = wall_now
        self._may_write = may_write
        self._owned = owned or (lambda: _everything)
        self._on_api_error = on_api_error
        self._recent_pods = recent_pods
        self._conflict_attempts = max(1, conflict_attempts)
        self._request_timeout_s = request_timeout_s
        self._rng = rng or random.Random()
        self._conflict_backoff = informer.Backoff(initial_s=0.05, max_s=1.0)
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
        )
        self.events = events.EventRecorder(
            api,
            instance=identity,
            wall_now=wall_now,
            may_write=may_write,
            dry_run=dry_run,
            on_api_error=on_api_error,
            request_timeout_s=request_timeout_s,
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
            on_tiers=on_tiers,
            on_fallback=on_fallback,
        )
        self._parsed: dict[_ParseKey, contract.ServiceConfig | contract.Invalid] = {}
        self._states: dict[str, tuple[model.PolicyState | None, int | None]] = {}
        self._invalid: dict[str, tuple[str, ...]] = {}
        self._managed: dict[model.ServiceId, _Managed] = {}
        self._last_set: dict[model.ServiceId, int] = {}
        self._written_version: dict[model.ServiceId, str] = {}
        self._written_replicas: dict[model.ServiceId, int] = {}
        self._scaled: dict[model.ServiceId, int] = {}
        self._holding: dict[model.ServiceId, model.Reason] = {}
        self._announced: set[model.ServiceId] = set()
        self._unannounced: dict[model.ServiceId, tuple[int, str]] = {}
        """Published changes not yet scaled (a drained scale-down): (replicas, reason)."""

    # -- lifecycle -------------------------------------------------------------------------------

    async def run(self) -> None:
        """Fill and follow the caches, post Events and keep the tier Deployments until
        cancelled."""
        async with asyncio.TaskGroup() as group:
            group.create_task(self.caches.run())
            group.create_task(self.events.run())
            group.create_task(self.placement.run(replan=self._replan))

    @property
    def synced(self) -> bool:
        """Whether every cache has been listed once (for `/readyz`)."""
        return self.caches.synced

    async def wait_synced(self) -> None:
        await self.caches.wait_synced()

    # -- reads -------------------------------------------------------------------------------------

    def workloads(self) -> list[ports.Workload]:
        """The managed services, from the caches; see the module docstring."""
        parsed: dict[_ParseKey, contract.ServiceConfig | contract.Invalid] = {}
        states: dict[str, tuple[model.PolicyState | None, int | None]] = {}
        invalid: dict[str, tuple[str, ...]] = {}
        managed: dict[model.ServiceId, _Managed] = {}
        found: list[ports.Workload] = []
        owns = self._owned()
        for deployment in self.caches.deployments.items():
            notes = _api.annotations_of(deployment)
            if not contract.opted_in(notes) or placement.is_sibling(deployment):
                continue
            namespace, name = _api.namespace(deployment), _api.name(deployment)
            service = model.ServiceId(f"{namespace}/{name}")
            if not owns(service):  # another replica leads its bucket
                continue
            config = self._parse(namespace, notes, parsed)
            if isinstance(config, contract.Invalid):
                self._report_invalid(service, deployment, config, invalid)
                continue
            others = self.caches.other_scalers(namespace, name)
            if others:
                self._report_invalid(service, deployment, _contested(others), invalid)
                continue
            tiers = self.placement.view(service, deployment, config)
            serving = tiers.serving
            state = self._state(service, deployment, notes.get(contract.STATE_KEY), states)
            asked = self._last_set.get(service)
            managed[service] = _Managed(
                namespace,
                name,
                config,
                frozenset(_api.name(pod) for pod in serving),
            )
            found.append(
                ports.Workload(
                    id=service,
                    policy=config.policy,
                    half_life_s=config.half_life_s,
                    replicas=self.placement.reported_replicas(service, tiers, asked),
                    serving=len(serving),
                    startup_s=startup_s(serving, recent=self._recent_pods),
                    state=state,
                    admissible=tiers.admissible,
                    admissible_reason=(
                        model.Reason.QUOTA if tiers.problem is None else model.Reason.NO_PLACEMENT
                    ),
                    core_rate=tiers.core_rate,
                    project=config.project,
                )
            )
            active = not self.dry_run and config.mode is not contract.Mode.DRY_RUN
            if config.policy.pause is not None:
                # Paused: a count set by hand is the one to keep (no re-plan, no override).
                asked = None
                if not self._lags(service):
                    self._last_set[service] = tiers.replicas
            self.placement.observe(service, deployment, tiers, asked=asked, active=active)
        self._parsed, self._states, self._invalid, self._managed = parsed, states, invalid, managed
        self._forget(managed.keys())
        self.placement.wake()
        return found

    def _forget(self, present: Collection[model.ServiceId]) -> None:
        """Drop what is remembered about services no longer managed."""
        self._last_set = {k: v for k, v in self._last_set.items() if k in present}
        self._written_version = {k: v for k, v in self._written_version.items() if k in present}
        self._written_replicas = {k: v for k, v in self._written_replicas.items() if k in present}
        self._holding = {k: v for k, v in self._holding.items() if k in present}
        self._announced &= set(present)
        self._unannounced = {k: v for k, v in self._unannounced.items() if k in present}
        self.placement.forget(present)

    def forget_unless(self, keep: Callable[[model.ServiceId], bool]) -> None:
        """Drop what is remembered about the managed services `keep` refuses: another replica
        acts on them now (their bucket Lease moved), so it would be stale if they came back."""
        self._forget([service for service in self._managed if keep(service)])

    def serving_pods(self, service: model.ServiceId) -> prometheus.ServingPods | None:
        """The serving pods the last `workloads()` found for `service` (`PodIndex`)."""
        managed = self._managed.get(service)
        if managed is None:
            return None
        return prometheus.ServingPods(managed.namespace, managed.serving, managed.config.metrics)

    def managed_services(self) -> list[model.ServiceId]:
        """The services the last `workloads()` found, in its order (for the ramp)."""
        return list(self._managed)

    def managed(self, service: model.ServiceId) -> _Managed | None:
        """Namespace, Deployment name and config of a service the last `workloads()` found."""
        return self._managed.get(service)

    def may_write(self, service: str) -> bool:
        """Whether this instance may write for `service` now (it leads the service's Lease)."""
        return self._may_write(service)

    @property
    def on_api_error(self) -> _api.ErrorCallback:
        """Told of every failed API call; writers built on this cluster report theirs here."""
        return self._on_api_error

    def _parse(
        self,
        namespace: str,
        notes: Mapping[str, str],
        parsed: dict[_ParseKey, contract.ServiceConfig | contract.Invalid],
    ) -> contract.ServiceConfig | contract.Invalid:
        settings = tuple(
            sorted(
                (k, v)
                for k, v in notes.items()
                if k.startswith(contract.PREFIX) and k not in contract.CONTROLLER_KEYS
            )
        )
        key = (namespace, settings)
        result = parsed.get(key) or self._parsed.get(key)
        if result is None:
            result = contract.parse(notes, namespace=namespace)
        parsed[key] = result
        return result

    def _report_invalid(
        self,
        service: model.ServiceId,
        deployment: Obj,
        config: contract.Invalid,
        invalid: dict[str, tuple[str, ...]],
    ) -> None:
        uid = _api.uid(deployment)
        messages = tuple(problem.message for problem in config.problems)
        invalid[uid] = messages
        if self._invalid.get(uid) == messages:
            return
        log.warning("config.invalid", service=service, problems=list(messages))
        self.events.record(deployment, events.WARNING, INVALID, str(config))

    def _state(
        self,
        service: model.ServiceId,
        deployment: Obj,
        text: str | None,
        states: dict[str, tuple[model.PolicyState | None, int | None]],
    ) -> model.PolicyState | None:
        """The policy state in the `state` annotation; None (a new service's) when it is absent
        or corrupt. A corrupt text gets a log line and a `CorruptState` Event once, when first
        seen: the next publish replaces it."""
        if text is None:
            return None
        known = states.get(text) or self._states.get(text)
        if known is None:
            try:
                known = codec.parse_state(text)
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
                known = (None, None)
        states[text] = known
        state, replicas = known
        if replicas is not None:
            self._last_set.setdefault(service, replicas)
        return state

    # -- writes ------------------------------------------------------------------------------------

    async def scale(self, service: model.ServiceId, replicas: int) -> None:
        """Set the Deployment's replicas through its `scale` subresource (a merge patch); for a
        GPU service, distribute them over its placement tiers first.

        Raises `placement.UnplaceableError` (an `ActuationError`) for a service that no GPU in
        the cluster could run: it keeps its size.
        """
        managed, deployment = self._target(service)
        if self.dry_run or managed.config.mode is contract.Mode.DRY_RUN:
            log.info(
                "scale.skipped_dry_run",
                service=service,
                replicas=replicas,
                scope="global" if self.dry_run else "service",
            )
            return
        self._require_leader(service)
        async with self.placement.lock(service):
            tiers = self.placement.view(service, deployment, managed.config)
            last = self._last_set.get(service)
            observed = self.placement.reported_replicas(service, tiers, last)
            self._check_override(service, deployment, observed, replicas)
            placed = replicas
            if tiers.need is None:
                await self._scale_owner(service, managed, replicas)
            else:
                plan = await self.placement.apply(
                    service,
                    deployment,
                    tiers,
                    replicas,
                    scale_owner=lambda n: self._scale_owner(service, managed, n),
                )
                placed = min(replicas, plan.total)
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
        self, service: model.ServiceId, deployment: Obj, observed: int, replicas: int
    ) -> None:
        last = self._last_set.get(service)
        if last is not None and observed not in (last, replicas) and not self._lags(service):
            log.warning("scale.overridden", service=service, found=observed, set=last)
            message = (
                f"spec.replicas was changed to {observed} outside the autoscaler (it had set "
                f"{last}); the autoscaler manages this Deployment and sets {replicas}"
            )
            self.events.record(deployment, events.WARNING, OVERRIDDEN, message)

    async def _scale_owner(
        self, service: model.ServiceId, managed: _Managed, replicas: int
    ) -> None:
        """Patch the owner's `scale` with the resourceVersion its replicas were read at.

        A 409 re-reads the Deployment: when only its status moved, the patch is sent again at
        the new version; when its replicas changed (another writer, a successor leader), the
        conflict is raised for the loop to decide again from what is there now.
        """
        operation = "deployments/scale.patch"
        cached = self.caches.deployment(managed.namespace, managed.name)
        if cached is None:
            raise KubeApiError(operation, f"{service} is not a managed Deployment")
        if self._lags(service):  # the cache has not seen our own last write yet
            version, based_on = self._written_version[service], self._written_replicas[service]
        else:
            version, based_on = _api.resource_version(cached), spec_replicas(cached)
        for attempt in range(1, self._conflict_attempts + 1):
            body = {"metadata": {"resourceVersion": version}, "spec": {"replicas": replicas}}
            try:
                answer = await _api.write_json(
                    self._may_write,
                    service,
                    self._apps.patch_namespaced_deployment_scale,
                    managed.name,
                    managed.namespace,
                    body,
                    _content_type=_api.MERGE_PATCH,
                    request_timeout_s=self._request_timeout_s,
                )
            except ApiException as e:
                self._on_api_error(operation)
                if e.status != 409 or attempt == self._conflict_attempts:
                    raise _api.failure(operation, service, e) from e
            except (*_api.TRANSPORT_ERRORS, ValueError) as e:
                self._on_api_error(operation)
                raise _api.failure(operation, service, e) from e
            else:
                self._written_version[service] = _api.resource_version(answer)
                self._written_replicas[service] = replicas
                return
            current = await self._read(service, managed)
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
        managed = self._managed.get(service)
        deployment = (
            None if managed is None else self.caches.deployment(managed.namespace, managed.name)
        )
        if managed is None or deployment is None or managed.config.mode is contract.Mode.DRY_RUN:
            return
        tiers = self.placement.view(service, deployment, managed.config)
        if tiers.need is None or tiers.problem is not None:
            return
        await self.placement.apply(
            service,
            deployment,
            tiers,
            desired,
            scale_owner=lambda n: self._scale_owner(service, managed, n),
        )

    async def publish(
        self, service: model.ServiceId, decision: model.Decision, state: model.PolicyState
    ) -> None:
        """Write the status and state annotations when they changed, and post the Events."""
        managed, deployment = self._target(service)
        if self.dry_run:
            log.info("publish.skipped_dry_run", service=service, desired=decision.desired)
            return
        self._require_leader(service)
        document = codec.status_document(decision, time_s=self._wall_now())
        placed = self.placement.status_of(service)
        if placed is not None:
            document["placement"] = placed
        state_text = codec.state_text(state, replicas=self._last_set.get(service))
        await self._annotate(service, managed, deployment, document, state_text)
        self._announce(service, managed, deployment, decision)

    def _target(self, service: model.ServiceId) -> tuple[_Managed, Obj]:
        managed = self._managed.get(service)
        deployment = (
            None if managed is None else self.caches.deployment(managed.namespace, managed.name)
        )
        if managed is None or deployment is None:
            raise KubeApiError("deployments.get", f"{service} is not a managed Deployment")
        return managed, deployment

    def _require_leader(self, service: model.ServiceId) -> None:
        if not self._may_write(service):
            raise NotLeaderError(
                f"{service}: this instance does not lead its Lease; nothing written"
            )

    def _lags(self, service: model.ServiceId) -> bool:
        """Whether the cache has not yet seen the controller's own last scale write."""
        written = self._written_version.get(service)
        deployment = self._managed.get(service)
        if written is None or deployment is None:
            return False
        cached = self.caches.deployment(deployment.namespace, deployment.name)
        try:
            # resourceVersions are opaque by contract but etcd's are increasing integers;
            # when they are not, assume the cache is current.
            return cached is not None and int(_api.resource_version(cached)) < int(written)
        except ValueError:
            return False

    async def _annotate(
        self,
        service: model.ServiceId,
        managed: _Managed,
        deployment: Obj,
        document: dict[str, object],
        state_text: str,
    ) -> None:
        operation = "deployments.patch"
        current = deployment
        # Right after its own scale write the cache usually lags by that write: patching from
        # its version would only earn a 409 and a re-read.
        version = (
            self._written_version[service]
            if self._lags(service)
            else _api.resource_version(current)
        )
        for attempt in range(1, self._conflict_attempts + 1):
            notes = _api.annotations_of(current)
            if (
                codec.same_status(notes.get(contract.STATUS_KEY), document)
                and notes.get(contract.STATE_KEY) == state_text
            ):
                return
            body = {
                "metadata": {
                    "resourceVersion": version,
                    "annotations": {
                        contract.STATUS_KEY: codec.dumps(document),
                        contract.STATE_KEY: state_text,
                    },
                }
            }
            try:
                await _api.write_json(
                    self._may_write,
                    service,
                    self._apps.patch_namespaced_deployment,
                    managed.name,
                    managed.namespace,
                    body,
                    _content_type=_api.MERGE_PATCH,
                    request_timeout_s=self._request_timeout_s,
                )
                return
            except ApiException as e:
                self._on_api_error(operation)
                if e.status != 409 or attempt == self._conflict_attempts:
                    raise _api.failure(operation, service, e) from e
            except (*_api.TRANSPORT_ERRORS, ValueError) as e:
                self._on_api_error(operation)
                raise _api.failure(operation, service, e) from e
            log.info("publish.conflicted", service=service, attempt=attempt)
            await self.clock.sleep(self._conflict_backoff.delay_s(attempt, self._rng))
            current = await self._read(service, managed)
            version = _api.resource_version(current)

    async def _read(self, service: model.ServiceId, managed: _Managed) -> Obj:
        operation = "deployments.get"
        try:
            return await _api.call_json(
                self._apps.read_namespaced_deployment,
                managed.name,
                managed.namespace,
                request_timeout_s=self._request_timeout_s,
            )
        except (ApiException, *_api.TRANSPORT_ERRORS, ValueError) as e:
            self._on_api_error(operation)
            raise _api.failure(operation, service, e) from e

    def _announce(
        self,
        service: model.ServiceId,
        managed: _Managed,
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
        elif decision.changes and managed.config.mode is contract.Mode.DRY_RUN:
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
            if self._holding.get(service) is not decision.reason and not (
                first and _held_already(deployment, decision)
            ):
                message = f"Holding at {decision.current} replicas; reason: {why}"
                self.events.record(deployment, events.NORMAL, HELD, message)
            self._holding[service] = decision.reason
        else:
            self._holding.pop(service, None)


def _everything(_: str) -> bool:
    return True


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

    def _implements_the_ports(cluster: KubeCluster) -> tuple[ports.Cluster, prometheus.PodIndex]:
        return cluster, cluster  # mypy checks both structural types here

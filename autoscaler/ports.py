"""What the loop talks to, as Protocols. Adapters (real systems) and `sim` (the virtual cluster)
implement them; the loop never names a concrete one.

Ports carry the project's own values, never library types. Reads from caches are plain methods;
anything that waits on the network is a coroutine.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from autoscaler import metricnames
from autoscaler.contract import annotations as contract
from autoscaler.core import cache, forecast, gates, model, placement, policy, standby
from autoscaler.core.ramp import RampConfig


@dataclass(frozen=True, slots=True)
class Workload:
    """One managed service as the cluster sees it at this tick: everything the loop, the metrics
    source and the ramp driver need about it, parsed once from its annotations
    (docs/architecture.md, "The records of a tick").

    An adapter may hand out the same object on later ticks while nothing it was built from has
    changed: it holds nothing that depends on the time.
    """

    id: model.ServiceId
    policy: model.PolicyConfig
    half_life_s: float
    """Smoothing half-life for this service's signals; `inf` for a plain window mean."""
    replicas: int
    """Replicas asked for (the Deployment's spec)."""
    serving: int
    """Pods warm and in the stable traffic set."""
    startup_s: float | None = None
    """Recently observed time from pod creation to serving."""
    startup_split: cache.StartupSplit | None = None
    """The observed start-up of recent pods that started on a node warm for the model (a cache
    hit) and on a cold one; None without cache-aware placement (docs/architecture.md,
    "Cache-aware placement")."""
    state: model.PolicyState | None = None
    """Policy state persisted on the object, for resuming after a restart."""
    admissible: int | None = None
    """The most replicas the cluster would admit (the namespace's GPU ResourceQuota, over every
    placement tier); None when nothing caps it. The policy never asks for more
    (docs/architecture.md, "The placement ladder")."""
    admissible_reason: model.Reason = model.Reason.QUOTA
    """What sets `admissible`: `QUOTA`, or `NO_PLACEMENT` when no node can place the model and
    the service is held at its size."""
    core_rate: float = 0.0
    """GPU core-hours per hour the service's pods hold now, for accounting (docs/architecture.md,
    "Accounting")."""
    project: str = ""
    """The accounting label (`autoscaler.dsec.io/project`, the namespace by default)."""
    dry_run: bool = False
    """`mode: dry-run`: decided and published, its replicas and pods never written."""
    window_s: float | None = None
    """How much history the smoothing sees for this service (its `window` annotation); None
    for the loop's own window."""
    namespace: str = ""
    """Where the service's Deployment and pods live; the Prometheus queries fix it."""
    deployment: str = ""
    """The owner Deployment's name, or that of the StatefulSet, LeaderWorkerSet or Rollout the
    service is (the kinds of `contract.targets`)."""
    pods: frozenset[str] = frozenset()
    """The serving pods' names (`serving` of them): the only ones whose series count."""
    metrics: metricnames.MetricNames | None = None
    """The names of the service's metrics (its server's preset or `custom`); None reads none."""
    ramp: RampTarget | None = None
    """The warm-up gate and traffic ramp settings when its pod template opts into the gate."""
    placement: placement.Need | None = None
    """What one replica needs of the placement ladder (its `placement` and `model-memory`
    annotations, the whole GPUs its pods request); None when they request none."""


def rebuilt_rows(before: Sequence[Workload], after: Sequence[Workload]) -> list[int]:
    """The rows of `after` whose record is not the very object `before` held there: a record is
    rebuilt only when what it reads changed, so the rest can be reused as they were (the two
    sequences are of one length)."""
    return list(itertools.compress(itertools.count(), map(operator.is_not, before, after)))


class Cluster(Protocol):
    def workloads(self) -> Sequence[Workload]:
        """The managed services, from caches: never a list call per tick."""
        ...

    async def scale(self, service: model.ServiceId, replicas: int) -> None:
        """Set the replica count; raises `ActuationError` when it cannot."""
        ...

    async def publish(
        self, service: model.ServiceId, decision: model.Decision, state: model.PolicyState
    ) -> None:
        """Make a decision visible (status, events, persisted state); called only on change."""
        ...


class MetricsSource(Protocol):
    async def sample(self, workloads: Sequence[Workload], now_s: float) -> npt.NDArray[np.float64]:
        """One sample per workload and signal: shape (len(workloads), len(model.Signal)).

        NaN marks a missing or stale value; a source that cannot answer at all raises
        `ObservationError`. Never zero for "no data".
        """
        ...


class HistorySource(Protocol):
    async def load_history(
        self, workloads: Sequence[Workload], now_s: float, *, span_s: float, step_s: float
    ) -> Mapping[model.ServiceId, forecast.History]:
        """Each workload's LOAD over the last `span_s` before `now_s`, one mean per `step_s`
        (NaN where unknown; only the past, never `now_s` or later). A service with no history
        at all may be absent. Raises `ObservationError` when the source cannot answer. Called
        rarely (`ForecastConfig.refresh_s`), never once per tick."""
        ...


class Policy(Protocol):
    def decide(
        self,
        workload: Workload,
        observation: model.Observation,
        state: model.PolicyState,
    ) -> tuple[model.Decision, model.PolicyState]: ...


class CorePolicy:
    """The project's policy (`core.policy.decide`) behind the `Policy` port."""

    def decide(
        self,
        workload: Workload,
        observation: model.Observation,
        state: model.PolicyState,
    ) -> tuple[model.Decision, model.PolicyState]:
        return policy.decide(workload.policy, observation, state)


# -- The warm-up gate and the traffic ramp (docs/architecture.md) ----------------------------------


@dataclass(frozen=True, slots=True)
class PodInfo:
    """One pod of a managed service (any placement tier), as the ramp sees it."""

    name: str
    created_s: float
    """Creation time on the loop's clock."""
    ip: str | None
    running: bool
    """Phase Running with every container ready: up, whether or not it is warm."""
    warm: bool
    """The readiness-gate condition `autoscaler.dsec.io/warm` is True."""
    warming: bool
    """Labelled `autoscaler.dsec.io/warming: "true"` (every new pod is, from the template)."""
    stable: bool
    """Labelled `autoscaler.dsec.io/stable: "true"` (added on promotion)."""
    terminating: bool
    tier: str = "whole"
    """Placement tier: `whole`, `mig-<profile>` or `shared` (docs/architecture.md,
    "The placement ladder")."""
    in_flight: float = float("nan")
    """Queued plus running requests, when the metrics say (NaN when unknown)."""
    port: int | None = None
    """The first container port: where the warm-up probe goes when `warmup-port` is unset."""


@dataclass(frozen=True, slots=True)
class RouteTarget:
    """What a router needs to split one service's traffic between stable and warming pods."""

    service: model.ServiceId
    namespace: str
    deployment: str
    pod_labels: Mapping[str, str]
    """The owner's pod-template labels (without the ramp's own labels)."""


class TrafficRouter(Protocol):
    """One mesh's weight API (Istio, Gateway API, SMI, or none)."""

    async def ensure(self, target: RouteTarget) -> None:
        """Create what is absent (subsets, Services, route) with all traffic on stable; touch
        nothing of the owner's own routes. Idempotent."""
        ...

    async def set_weights(self, target: RouteTarget, warming_pct: int) -> None:
        """Route `warming_pct` percent to the warming set and the rest to the stable set."""
        ...

    async def settled(self, target: RouteTarget) -> bool:
        """Whether the last weights written are in effect (Gateway API: `Accepted` at the
        current `observedGeneration`)."""
        ...

    async def release(self, target: RouteTarget) -> None:
        """Remove what `ensure` created (the service left the ramp or the controller)."""
        ...


@dataclass(frozen=True, slots=True)
class GroupHealth:
    """Health of a set of pods over the gate's window, from the servers' own metrics."""

    requests: float
    """Requests completed in the window (the gate needs a minimum)."""
    error_rate: float
    """Failed / all requests; NaN without requests."""
    p95_s: float
    """P95 latency in seconds from the latency histogram; NaN when unknown."""


class HealthSource(Protocol):
    async def health(
        self,
        namespace: str,
        metrics: metricnames.MetricNames,
        warming: Collection[str],
        stable: Collection[str],
        window_s: float,
    ) -> tuple[GroupHealth, GroupHealth]:
        """(warming, stable) health over the last `window_s`; raises `ObservationError`."""
        ...

    async def in_flight(
        self, namespace: str, metrics: metricnames.MetricNames, pods: Collection[str]
    ) -> Mapping[str, float]:
        """Queued plus running requests per pod, for draining; a pod without data is absent."""
        ...


@dataclass(frozen=True, slots=True)
class ProbeResult:
    ok: int
    failed: int
    latencies_s: tuple[float, ...]
    """Latency of each answered probe."""


class WarmupProber(Protocol):
    async def probe(
        self, ip: str, port: int, path: str, requests: int, timeout_s: float
    ) -> ProbeResult:
        """Send `requests` probe requests to one pod's warm-up endpoint, one after another."""
        ...


NO_POOL = standby.PoolConfig(cap=0, fixed=0)
"""A service without a warm standby pool."""


@dataclass(frozen=True, slots=True)
class RampTarget:
    """One managed service whose new pods pass the warm-up gate and the traffic ramp."""

    service: model.ServiceId
    route: RouteTarget
    traffic: contract.TrafficConfig
    warmup: contract.WarmupConfig
    config: RampConfig
    """`traffic` and `warmup` as the core takes them (`annotations.ramp_config`)."""
    metrics: metricnames.MetricNames
    dry_run: bool
    """`mode: dry-run` (or the controller's dry-run): decide and log, write nothing."""
    saved: str | None
    """The ramp state persisted on the Deployment (`autoscaler.dsec.io/ramp`), if any."""
    standby: standby.PoolConfig = NO_POOL
    """The warm standby pool (`standby-replicas`): none, a fixed count, or sized by the loop."""


class RampCluster(Protocol):
    """The pod-level writes the ramp and the drain need, on the same caches as `Cluster`."""

    def pods(self, service: model.ServiceId) -> Sequence[PodInfo]:
        """Every pod of the service, in every placement tier, from the caches."""
        ...

    async def set_warm(self, service: model.ServiceId, pod: str, warm: bool, message: str) -> None:
        """Set the readiness-gate condition on `pods/status` (merged by condition type)."""
        ...

    async def set_labels(
        self, service: model.ServiceId, pod: str, *, warming: bool, stable: bool
    ) -> None:
        """Set or remove the `warming` and `stable` labels."""
        ...

    async def mark_victim(self, service: model.ServiceId, pod: str) -> None:
        """Give the pod the lowest `controller.kubernetes.io/pod-deletion-cost`, so the next
        scale-down of its ReplicaSet removes it first."""
        ...

    async def reclaim(self, service: model.ServiceId, pod: str) -> None:
        """Delete a pod that failed its warm-up or a gate; its ReplicaSet makes a fresh one."""
        ...

    async def save_ramp(self, service: model.ServiceId, text: str) -> None:
        """Persist the ramp state on the Deployment (only when it changed)."""
        ...

    def record(self, service: model.ServiceId, type_: str, reason: str, message: str) -> None:
        """Queue a Kubernetes Event (`Normal` or `Warning`) on the service's Deployment."""
        ...


class Gates(Protocol):
    """The warm-up gates no ramp answers for, and how to open them (`core.gates`)."""

    def closed_gates(self) -> Sequence[gates.ClosedGate]:
        """The gated pods whose containers are ready and whose `warm` condition is not True,
        in every watched namespace, each with who answers for it."""
        ...

    async def open_gate(self, gate: gates.ClosedGate, message: str) -> None:
        """Set the pod's `warm` condition True; written even in dry-run (the one write a
        dry-run controller makes), refused by a follower."""
        ...

    def announce(self, opening: gates.Opening) -> None:
        """Queue the Normal Event `GateOpened` on the Deployment (posted even in dry-run)."""
        ...


class Ramps(Protocol):
    """The ramp driver as the loop sees it: it takes scale writes and runs once per tick."""

    def standby(self, workload: Workload) -> model.Standby:
        """The standby pool as it stands (`size` as last asked for, no `why`): its `replicas`
        are part of `workload.replicas`, and the serving replicas the policy sees the rest."""
        ...

    async def scale(
        self, workload: Workload, replicas: int, current: int, *, standby: int | None = None
    ) -> None:
        """Scale the serving replicas up at once, or down only after draining the victims
        (over later ticks), with `standby` pool replicas on top (the pool's size unchanged
        when None)."""
        ...

    async def reconcile(
        self,
        now_s: float,
        workloads: Sequence[Workload],
        *,
        standby: Mapping[model.ServiceId, int] | None = None,
    ) -> None:
        """Advance the warm-up, ramp and drain of every service whose record has ramp settings
        (`Workload.ramp`) by one tick, resizing each pool named in `standby` to its size."""
        ...

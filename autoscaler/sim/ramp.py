"""The warm-up gate and the traffic ramp on the virtual cluster (docs/architecture.md,
"The warm-up gate and the traffic ramp"): the ports the ramp driver needs, implemented on the
simulator.

- `SimRampCluster` (`ports.RampCluster`): the gated services' pods (every placement tier) as
  `ports.PodInfo`; the readiness-gate condition, the ramp labels and the deletion cost written
  on the virtual cluster; reclaims (the replica controller makes a fresh pod); the persisted
  ramp text; Events.
- `SimRouter` (`ports.TrafficRouter`): one mesh's warming weight per service, which the world
  reads to split the arrivals. The `none` router keeps none (the gate alone): every ready pod
  then shares the traffic, as behind a plain Service.
- `SimHealth` (`ports.HealthSource`): per-pod requests, failures and latencies as the traffic
  model produced them, kept for `history_s`; in-flight requests from the queues.
- `SimProber` (`ports.WarmupProber`): answers warm-up probes with the pod's own latency: slower
  by `cold_factor` for `warmup_s` after the model is loaded, slower still for a slow pod, failing
  at a failing pod's error ratio; jittered by a generator seeded with the run's seed.

Writes take effect at once: the next simulated second routes with them, so `settled` is always
true. Probes take no simulated time. Pods answer on made-up addresses (`pod_ip`) once they hold a
GPU; a probe to anything else is refused.

Nothing here moves time or decides anything; it must not import the real adapters or any
Kubernetes or Prometheus client.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter, deque
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from autoscaler import errors, metricnames, ports
from autoscaler.contract import annotations as contract
from autoscaler.core import model
from autoscaler.sim import cluster as cluster_
from autoscaler.sim import traffic as traffic_
from autoscaler.sim.params import PodFault

Now = Callable[[], float]

LOWEST_DELETION_COST = -(2**31)
"""The lowest `controller.kubernetes.io/pod-deletion-cost` (an int32)."""
PROBE_JITTER_SIGMA = 0.05
"""Log-normal spread of one probe's latency around the pod's service time."""
HISTORY_S = 900
"""Seconds of per-pod traffic `SimHealth` keeps: longer than any gate's window."""

_RUNNING = frozenset({cluster_.Phase.WARMING, cluster_.Phase.SERVING})


def pod_ip(pod: cluster_.Pod) -> str | None:
    """The pod's address: one per pod, from its serial; None until it holds a GPU."""
    if pod.node is None:
        return None
    serial = pod.serial
    return f"10.{(serial >> 16) & 255}.{(serial >> 8) & 255}.{serial & 255}"


@dataclass(frozen=True, slots=True)
class PodModel:
    """How one service's pods behave: the capacity model and the faults, by pod ordinal."""

    capacity_rps: float
    service_time_s: float
    warmup_s: float = 0.0
    cold_factor: float = 1.0
    faults: Mapping[int, PodFault] = field(default_factory=dict)
    """Faults by `Pod.ordinal`."""

    def fault(self, pod: cluster_.Pod) -> PodFault | None:
        return self.faults.get(pod.ordinal)

    def server(self, pod: cluster_.Pod) -> traffic_.Server:
        """The pod as the traffic model serves with it: mu times its placement tier's speed,
        divided by a slow fault's factor."""
        rate = self.capacity_rps * pod.speed
        fault = self.faults.get(pod.ordinal)
        if fault is None:
            return traffic_.Server(pod.name, rate, self.service_time_s)
        return traffic_.Server(
            pod.name,
            rate / fault.slow_factor,
            self.service_time_s * fault.slow_factor,
            fault.error_ratio,
        )


@dataclass(frozen=True, slots=True)
class RecordedEvent:
    """A Kubernetes Event the driver raised, as `SimRampCluster.record` keeps it."""

    at_s: float
    service: model.ServiceId
    type: str
    reason: str
    message: str


class SimRampCluster:
    """`ports.RampCluster` on a `SimCluster`: only the services added with `add` are ramped."""

    def __init__(self, cluster: cluster_.SimCluster) -> None:
        self._cluster = cluster
        self._targets: set[model.ServiceId] = set()
        self._saved: dict[model.ServiceId, str] = {}
        self.events: list[RecordedEvent] = []
        self.reclaimed: Counter[model.ServiceId] = Counter()
        """Pods reclaimed per service."""
        self.saves = 0
        """How many times a ramp state was persisted."""

    def add(self, target: ports.RampTarget) -> None:
        if target.service in self._targets:
            raise ValueError(f"service {target.service} already has a ramp")
        self._cluster.set_ramp(target.service, target)  # KeyError for a service it lacks
        self._targets.add(target.service)

    def has(self, service: model.ServiceId) -> bool:
        return service in self._targets

    def saved(self, service: model.ServiceId) -> str | None:
        return self._saved.get(service)

    # -- the port ---------------------------------------------------------------------------

    def ramp_targets(self) -> Sequence[ports.RampTarget]:
        return [w.ramp for w in self._cluster.workloads() if w.ramp is not None]

    def pods(self, service: model.ServiceId) -> Sequence[ports.PodInfo]:
        return [
            ports.PodInfo(
                name=pod.name,
                created_s=pod.created_s,
                ip=pod_ip(pod),
                running=pod.phase in _RUNNING,
                warm=pod.warm,
                warming=pod.warming,
                stable=pod.stable,
                terminating=False,
                tier=pod.tier,
            )
            for pod in self._cluster.pods(service)
        ]

    async def set_warm(self, service: model.ServiceId, pod: str, warm: bool, message: str) -> None:
        self._cluster.set_pod(self._known(service), pod, warm=warm)

    async def set_labels(
        self, service: model.ServiceId, pod: str, *, warming: bool, stable: bool
    ) -> None:
        self._cluster.set_pod(self._known(service), pod, warming=warming, stable=stable)

    async def mark_victim(self, service: model.ServiceId, pod: str) -> None:
        self._cluster.set_pod(self._known(service), pod, deletion_cost=LOWEST_DELETION_COST)

    async def reclaim(self, service: model.ServiceId, pod: str) -> None:
        self._cluster.delete_pod(self._known(service), pod)
        self.reclaimed[service] += 1

    async def save_ramp(self, service: model.ServiceId, text: str) -> None:
        self._known(service)
        if self._saved.get(service) != text:
            self._saved[service] = text
            self.saves += 1
            # As the annotation on a Deployment: the service's next record carries it.
            ramp = self._cluster.service(service).spec.ramp
            if ramp is not None:
                self._cluster.set_ramp(service, dataclasses.replace(ramp, saved=text))

    def record(self, service: model.ServiceId, type_: str, reason: str, message: str) -> None:
        if type_ not in ("Normal", "Warning"):
            raise ValueError(f"an Event is Normal or Warning, not {type_!r}")
        self.events.append(RecordedEvent(self._cluster.now_s, service, type_, reason, message))

    def _known(self, service: model.ServiceId) -> model.ServiceId:
        if service not in self._targets:
            raise errors.ActuationError(f"no ramped service {service}")
        return service


class SimRouter:
    """`ports.TrafficRouter` for one mesh: the warming weight of each ensured service.

    `splits` is False for the `none` router, which has no subsets: `warming_pct` is then always
    None and the world routes to every ready pod alike.
    """

    def __init__(self, name: str, *, splits: bool = True) -> None:
        self.name = name
        self.splits = splits
        self._weights: dict[model.ServiceId, int] = {}
        self.writes: list[tuple[float, model.ServiceId, int]] = []
        """Every `set_weights`: (time, service, warming percent), time from `now`."""
        self.now: Now = lambda: math.nan

    def warming_pct(self, service: model.ServiceId) -> int | None:
        """The warming weight in effect; None when traffic is not split (no route ensured, or
        the `none` router)."""
        if not self.splits:
            return None
        return self._weights.get(service)

    def writes_for(self, service: model.ServiceId) -> int:
        return sum(1 for _, s, _ in self.writes if s == service)

    async def ensure(self, target: ports.RouteTarget) -> None:
        self._weights.setdefault(target.service, 0)

    async def set_weights(self, target: ports.RouteTarget, warming_pct: int) -> None:
        if not 0 <= warming_pct <= 100:
            raise ValueError(f"warming_pct must be within [0, 100], got {warming_pct}")
        if target.service not in self._weights:
            raise errors.ActuationError(f"no {self.name} route for {target.service}: ensure it")
        self._weights[target.service] = warming_pct
        self.writes.append((self.now(), target.service, warming_pct))

    async def settled(self, target: ports.RouteTarget) -> bool:
        return True

    async def release(self, target: ports.RouteTarget) -> None:
        self._weights.pop(target.service, None)


def routers(now: Now) -> dict[contract.TrafficRouter, SimRouter]:
    """One simulated router per router the driver knows (the `traffic-router` values)."""
    made = {
        kind: SimRouter(kind.value, splits=kind is not contract.TrafficRouter.NONE)
        for kind in contract.TrafficRouter
    }
    for router in made.values():
        router.now = now
    return made


class _Record:
    """One simulated second of one service, as `SimHealth` keeps it."""

    __slots__ = ("groups", "queues", "t")

    def __init__(
        self, t: int, groups: tuple[traffic_.ServerGroupSecond, ...], queues: tuple[float, float]
    ) -> None:
        self.t = t
        self.groups = groups
        self.queues = queues


class SimHealth:
    """`ports.HealthSource` from what the traffic model did, second by second.

    The world calls `record` after each simulated second of a service modelled per pod. A
    window of `window_s` at time T covers the seconds [T - window_s, T). `switch_off` makes it
    raise `ObservationError` for a time range, as when Prometheus is down. As with real metrics,
    a server without a latency histogram has no P95 and one without an error counter no error
    rate: NaN, never zero.
    """

    def __init__(
        self, cluster: cluster_.SimCluster, now: Now, *, history_s: int = HISTORY_S
    ) -> None:
        self._cluster = cluster
        self._now = now
        self._history_s = history_s
        self._records: dict[model.ServiceId, deque[_Record]] = {}
        self._outages: list[tuple[float, float]] = []

    def record(self, t: int, service: model.ServiceId, second: traffic_.SplitSecond) -> None:
        records = self._records.get(service)
        if records is None:
            records = self._records[service] = deque(maxlen=self._history_s)
        records.append(_Record(t, second.groups, second.queues))

    def switch_off(self, start_s: float, end_s: float) -> None:
        """Raise `ObservationError` for queries at times in [start_s, end_s)."""
        self._outages.append((start_s, end_s))

    async def health(
        self,
        namespace: str,
        metrics: metricnames.MetricNames,
        warming: Collection[str],
        stable: Collection[str],
        window_s: float,
    ) -> tuple[ports.GroupHealth, ports.GroupHealth]:
        if not (math.isfinite(window_s) and window_s > 0):
            raise ValueError(f"window_s must be finite and > 0, got {window_s}")
        now_s = self._checked_now()
        since = now_s - window_s - 1e-9
        sums = [_GroupSums(frozenset(warming)), _GroupSums(frozenset(stable))]
        for service, records in self._records.items():
            if _namespace(service) != namespace:
                continue
            for record in reversed(records):
                if record.t < since:
                    break
                if record.t >= now_s:
                    continue
                for group in record.groups:
                    for sums_ in sums:
                        sums_.add(group)
        return sums[0].health(metrics), sums[1].health(metrics)

    async def in_flight(
        self, namespace: str, metrics: metricnames.MetricNames, pods: Collection[str]
    ) -> Mapping[str, float]:
        """Waiting plus running requests of each running pod asked for: its share of its set's
        queue after the last second, and what it took in the last seconds that has not had its
        service time yet."""
        now_s = self._checked_now()
        if metrics.queue is None:
            return {}
        wanted = set(pods)
        found: dict[str, float] = {}
        for service, records in self._records.items():
            if _namespace(service) != namespace:
                continue
            for pod in self._cluster.pods(service):
                if pod.name in wanted and pod.phase in _RUNNING:
                    found[pod.name] = 0.0
            for record in reversed(records):
                age_s = now_s - (record.t + 1)
                if age_s < 0:
                    continue
                set_served = [0.0, 0.0]
                for group in record.groups:
                    set_served[group.warming_set] += group.served
                for group in record.groups:
                    # Taken uniformly over the second, each runs for the service time.
                    running = min(1.0, max(0.0, group.running_per_served - age_s))
                    for name, share in group.shares.items():
                        if name not in found:
                            continue
                        served = group.served * share
                        found[name] += served * running
                        if age_s < 1.0 and set_served[group.warming_set] > 0:
                            queued = record.queues[group.warming_set]
                            found[name] += queued * served / set_served[group.warming_set]
        return found

    def _checked_now(self) -> float:
        now_s = self._now()
        for start_s, end_s in self._outages:
            if start_s <= now_s < end_s:
                raise errors.ObservationError(
                    f"simulated metrics outage from {start_s:g}s to {end_s:g}s"
                )
        return now_s


class _GroupSums:
    __slots__ = ("chunks", "failed", "names", "requests")

    def __init__(self, names: frozenset[str]) -> None:
        self.names = names
        self.requests = 0.0
        self.failed = 0.0
        self.chunks: list[traffic_.Chunk] = []

    def add(self, group: traffic_.ServerGroupSecond) -> None:
        share = sum(s for name, s in group.shares.items() if name in self.names)
        if not share > 0:
            return
        self.requests += group.served * share
        self.failed += group.failed * share
        self.chunks.extend(
            traffic_.Chunk(c.mass * share, c.first_s, c.last_s) for c in group.latencies
        )

    def health(self, metrics: metricnames.MetricNames) -> ports.GroupHealth:
        if not self.requests > 0:
            return ports.GroupHealth(0.0, math.nan, math.nan)
        error_rate = self.failed / self.requests if metrics.errors is not None else math.nan
        p95 = math.nan
        if metrics.latency is not None:
            p95 = traffic_.wait_quantile(self.chunks, 0.95)
        return ports.GroupHealth(self.requests, error_rate, p95)


def _namespace(service: model.ServiceId) -> str:
    return service.partition("/")[0] if "/" in service else "default"


class SimProber:
    """`ports.WarmupProber` on the virtual cluster's pods.

    A probe to an address no running pod has is refused (every request fails). A running pod
    answers each request in its service time, times `cold_factor` while it is cold (the first
    `warmup_s` after its model loaded, unless it has served before), times a log-normal
    jitter; it fails a request at its fault's error ratio; an answer slower than `timeout_s`
    counts as failed. Draws come from one generator, two per request, so a run repeats exactly
    for its seed.
    """

    def __init__(
        self,
        cluster: cluster_.SimCluster,
        models: Mapping[model.ServiceId, PodModel],
        *,
        seed: int = 0,
    ) -> None:
        self._cluster = cluster
        self._models = models
        # A stream of its own: probing must not shift the cluster's start-up delays.
        self._rng = np.random.default_rng([seed, 0x9E37])
        self.probes = 0

    async def probe(
        self, ip: str, port: int, path: str, requests: int, timeout_s: float
    ) -> ports.ProbeResult:
        if requests < 0:
            raise ValueError(f"requests must be >= 0, got {requests}")
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        self.probes += requests
        found = self._find(ip)
        if found is None:
            return ports.ProbeResult(ok=0, failed=requests, latencies_s=())
        pod, pod_model = found
        fault = pod_model.fault(pod)
        base_s = pod_model.service_time_s * (fault.slow_factor if fault else 1.0)
        assert pod.running_at_s is not None  # a running pod has loaded its model
        # A pod that already served (one running before the start) is past its warm-up.
        fresh = pod.serving_at_s is None
        if fresh and self._cluster.now_s < pod.running_at_s + pod_model.warmup_s:
            base_s *= pod_model.cold_factor
        error_ratio = fault.error_ratio if fault else 0.0
        jitter = self._rng.lognormal(0.0, PROBE_JITTER_SIGMA, requests)
        failing = self._rng.random(requests) < error_ratio
        latencies = tuple(
            float(base_s * j) for j, bad in zip(jitter, failing, strict=True) if not bad
        )
        answered = tuple(s for s in latencies if s <= timeout_s)
        return ports.ProbeResult(
            ok=len(answered), failed=requests - len(answered), latencies_s=answered
        )

    def _find(self, ip: str) -> tuple[cluster_.Pod, PodModel] | None:
        for service, pod_model in self._models.items():
            for pod in self._cluster.pods(service):
                if pod.phase in _RUNNING and pod_ip(pod) == ip:
                    return pod, pod_model
        return None

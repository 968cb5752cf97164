"""The virtual cluster behind the `ports.Cluster` port: GPU nodes, pods and their life cycle.

`scale` turns a desired count into pods. A new pod waits for a free GPU (pending), loads the
model (starting, for a delay drawn from a log-normal at creation), warms up (warming) and then
serves. Scale-down removes pods in a fixed victim order (`victim_order`). Pods that hold a GPU
(starting, warming, serving) are what the cluster pays for: `gpu_seconds` integrates them.

Time moves only through `advance`; the cluster never reads a clock and never sleeps. It must
not model traffic or metrics (`traffic` and `metrics` do, driven by `world`).
"""

from __future__ import annotations

import enum
import heapq
import itertools
import math
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from autoscaler import errors, ports
from autoscaler.core import model

# How many recent start-ups the observed start-up time averages over.
_STARTUPS_REMEMBERED = 10
# How many published decisions each service keeps for inspection.
_DECISIONS_REMEMBERED = 1000
# Transitions due within this of the new time are applied (float rounding of the clock).
_EPS = 1e-9


class Phase(enum.IntEnum):
    """Where a pod is in its life. The value is its rank in the scale-down victim order."""

    PENDING = 0
    """Created, waiting for a free GPU: costs nothing, serves nothing."""
    STARTING = 1
    """Holds a GPU and loads the model."""
    WARMING = 2
    """Model loaded, answering warm-up probes; not in the traffic set yet."""
    SERVING = 3
    """Warm and in the stable traffic set: the only phase that counts as capacity."""


HOLDS_GPU = frozenset({Phase.STARTING, Phase.WARMING, Phase.SERVING})


@dataclass(frozen=True, slots=True)
class Lifecycle:
    """How long a pod takes from getting its GPU to serving. Times in seconds."""

    startup_s: float = 60.0
    """Median start-up delay (GPU assigned to model loaded)."""
    startup_sigma: float = 0.2
    """Log-normal sigma of the start-up delay; 0 for a fixed delay."""
    warmup_s: float = 5.0

    def __post_init__(self) -> None:
        for name in ("startup_s", "startup_sigma", "warmup_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be finite and >= 0")


@dataclass(frozen=True, slots=True)
class ServiceSpec:
    """A managed service: what `workloads()` reports besides its counts."""

    id: model.ServiceId
    policy: model.PolicyConfig
    half_life_s: float = 30.0
    lifecycle: Lifecycle = field(default_factory=Lifecycle)


@dataclass(slots=True, eq=False)
class Pod:
    """One replica. Mutable: the cluster moves it through its phases; read it, never write it."""

    name: str
    serial: int
    """Creation order across the cluster."""
    service: model.ServiceId
    created_s: float
    startup_delay_s: float
    """Drawn at creation, so the k-th pod gets the same delay whatever the policy did."""
    phase: Phase = Phase.PENDING
    node: int | None = None
    gpu_at_s: float | None = None
    serving_at_s: float | None = None
    removed: bool = False


@dataclass(frozen=True, slots=True)
class NodeView:
    name: str
    gpus: int
    used: int


@dataclass(slots=True)
class _Node:
    name: str
    gpus: int
    used: int = 0


@dataclass(frozen=True, slots=True)
class PhaseCounts:
    pending: int
    starting: int
    warming: int
    serving: int

    @property
    def holding_gpu(self) -> int:
        return self.starting + self.warming + self.serving


class ServiceState:
    """One service's pods and counters. Owned by `SimCluster`; read it, never write it."""

    __slots__ = (
        "_workload",
        "counts",
        "decision",
        "decisions",
        "desired",
        "gpu_s",
        "gpu_since_s",
        "pods",
        "published",
        "scale_events",
        "spec",
        "startups_s",
    )

    def __init__(self, spec: ServiceSpec, now_s: float) -> None:
        self.spec = spec
        self.desired = 0
        self.pods: list[Pod] = []
        self.counts = [0, 0, 0, 0]
        """Pods per `Phase`, indexed by its value."""
        self.startups_s: deque[float] = deque(maxlen=_STARTUPS_REMEMBERED)
        self.gpu_s = 0.0
        self.gpu_since_s = now_s
        self.scale_events: list[tuple[float, int, int]] = []
        self.decision: tuple[model.Decision, model.PolicyState] | None = None
        self.decisions: deque[tuple[float, model.Decision]] = deque(maxlen=_DECISIONS_REMEMBERED)
        self.published = 0
        self._workload: ports.Workload | None = None

    @property
    def serving(self) -> int:
        return self.counts[Phase.SERVING]

    @property
    def holding_gpu(self) -> int:
        c = self.counts
        return c[Phase.STARTING] + c[Phase.WARMING] + c[Phase.SERVING]

    @property
    def startup_s(self) -> float | None:
        """Mean creation-to-serving time of the recent pods; None until one is seen."""
        return sum(self.startups_s) / len(self.startups_s) if self.startups_s else None

    def workload(self) -> ports.Workload:
        if self._workload is None:
            spec = self.spec
            self._workload = ports.Workload(
                id=spec.id,
                policy=spec.policy,
                half_life_s=spec.half_life_s,
                replicas=self.desired,
                serving=self.serving,
                startup_s=self.startup_s,
            )
        return self._workload

    def changed(self) -> None:
        self._workload = None


def victim_order(pods: Iterable[Pod]) -> list[Pod]:
    """The order scale-down removes pods in: pending, then starting, then warming, then
    serving; the newest first within each phase, so the least invested pod goes first."""
    return sorted(pods, key=lambda p: (p.phase, -p.created_s, -p.serial))


class SimCluster:
    """A cluster of GPU nodes running the managed services' pods (`ports.Cluster`).

    `gpus` is the cluster's GPU count (one per replica), spread over nodes of `gpus_per_node`;
    None means never short of GPUs (nodes appear as they are needed). Start-up delays come from
    one generator seeded with `seed`, drawn in pod creation order.
    """

    def __init__(
        self,
        *,
        gpus: int | None = None,
        gpus_per_node: int = 8,
        seed: int = 0,
        start_s: float = 0.0,
    ) -> None:
        if gpus_per_node < 1:
            raise ValueError("gpus_per_node must be >= 1")
        if gpus is not None and gpus < 0:
            raise ValueError("gpus must be >= 0")
        self._gpus_per_node = gpus_per_node
        self._unlimited = gpus is None
        self._nodes: list[_Node] = []
        if gpus is not None:
            for i in range(math.ceil(gpus / gpus_per_node)):
                self._nodes.append(
                    _Node(f"gpu-node-{i}", min(gpus_per_node, gpus - i * gpus_per_node))
                )
        self._first_free = 0
        self._rng = np.random.default_rng(seed)
        self._now_s = start_s
        self._services: dict[model.ServiceId, ServiceState] = {}
        self._workloads: tuple[ports.Workload, ...] | None = None
        self._waiting: deque[Pod] = deque()
        self._transitions: list[tuple[float, int, Pod]] = []
        self._serials = itertools.count()

    # -- the port ---------------------------------------------------------------------------

    def workloads(self) -> Sequence[ports.Workload]:
        if self._workloads is None:
            self._workloads = tuple(s.workload() for s in self._services.values())
        return self._workloads

    async def scale(self, service: model.ServiceId, replicas: int) -> None:
        self.set_replicas(service, replicas)

    async def publish(
        self, service: model.ServiceId, decision: model.Decision, state: model.PolicyState
    ) -> None:
        svc = self._service(service)
        svc.decision = (decision, state)
        svc.decisions.append((self._now_s, decision))
        svc.published += 1

    # -- set-up and inspection --------------------------------------------------------------

    @property
    def now_s(self) -> float:
        return self._now_s

    def add_service(self, spec: ServiceSpec, *, replicas: int = 0) -> ServiceState:
        """Manage a new service with `replicas` pods already serving (GPUs permitting: pods
        that find no free GPU start pending and go through the whole life cycle)."""
        if spec.id in self._services:
            raise ValueError(f"service {spec.id} already exists")
        if replicas < 0:
            raise ValueError("replicas must be >= 0")
        svc = ServiceState(spec, self._now_s)
        self._services[spec.id] = svc
        self._workloads = None
        svc.desired = replicas
        for _ in range(replicas):
            pod = self._new_pod(svc)
            node = self._free_node()
            if node is None:
                self._waiting.append(pod)
                continue
            self._set_phase(svc, pod, Phase.SERVING)
            pod.node = node
            pod.gpu_at_s = pod.serving_at_s = self._now_s
        return svc

    def service(self, service: model.ServiceId) -> ServiceState:
        return self._service(service)

    def services(self) -> tuple[ServiceState, ...]:
        return tuple(self._services.values())

    def counts(self, service: model.ServiceId) -> PhaseCounts:
        c = self._service(service).counts
        return PhaseCounts(*c)

    def pods(self, service: model.ServiceId) -> tuple[Pod, ...]:
        return tuple(self._service(service).pods)

    def nodes(self) -> tuple[NodeView, ...]:
        return tuple(NodeView(n.name, n.gpus, n.used) for n in self._nodes)

    def gpu_seconds(self, service: model.ServiceId | None = None) -> float:
        """GPU time spent so far by pods holding a GPU, of one service or all of them."""
        chosen = self._services.values() if service is None else [self._service(service)]
        return sum(s.gpu_s + s.holding_gpu * (self._now_s - s.gpu_since_s) for s in chosen)

    def set_replicas(self, service: model.ServiceId, replicas: int) -> None:
        """Set the desired count at once: create pods, or remove them in victim order."""
        try:
            svc = self._services[service]
        except KeyError:
            raise errors.ActuationError(f"no such service: {service}") from None
        if replicas < 0:
            raise errors.ActuationError(f"replicas must be >= 0, got {replicas}")
        if replicas == svc.desired:
            return
        svc.scale_events.append((self._now_s, svc.desired, replicas))
        self._accrue(svc)
        if replicas > svc.desired:
            for _ in range(replicas - svc.desired):
                self._waiting.append(self._new_pod(svc))
        else:
            for pod in victim_order(svc.pods)[: svc.desired - replicas]:
                self._remove(svc, pod)
        svc.desired = replicas
        self._assign_gpus()
        self._changed(svc)

    def advance(self, dt_s: float) -> None:
        """Move the pods' clock forward by `dt_s`, applying every phase change now due."""
        if dt_s < 0:
            raise ValueError("time does not go backwards")
        self._now_s += dt_s
        due = self._now_s + _EPS
        transitions = self._transitions
        while transitions and transitions[0][0] <= due:
            at_s, _, pod = heapq.heappop(transitions)
            if pod.removed:
                continue
            svc = self._services[pod.service]
            if pod.phase is Phase.STARTING:
                self._set_phase(svc, pod, Phase.WARMING)
                self._schedule(at_s + svc.spec.lifecycle.warmup_s, pod)
            elif pod.phase is Phase.WARMING:
                self._set_phase(svc, pod, Phase.SERVING)
                pod.serving_at_s = at_s
                svc.startups_s.append(at_s - pod.created_s)
            self._changed(svc)

    # -- internals --------------------------------------------------------------------------

    def _service(self, service: model.ServiceId) -> ServiceState:
        try:
            return self._services[service]
        except KeyError:
            raise KeyError(f"no such service: {service}") from None

    def _new_pod(self, svc: ServiceState) -> Pod:
        serial = next(self._serials)
        life = svc.spec.lifecycle
        delay = life.startup_s
        if life.startup_sigma > 0 and life.startup_s > 0:
            delay = float(self._rng.lognormal(math.log(life.startup_s), life.startup_sigma))
        pod = Pod(
            name=f"{svc.spec.id.replace('/', '-')}-{serial}",
            serial=serial,
            service=svc.spec.id,
            created_s=self._now_s,
            startup_delay_s=delay,
        )
        svc.pods.append(pod)
        svc.counts[Phase.PENDING] += 1
        return pod

    def _set_phase(self, svc: ServiceState, pod: Pod, phase: Phase) -> None:
        svc.counts[pod.phase] -= 1
        svc.counts[phase] += 1
        pod.phase = phase

    def _schedule(self, at_s: float, pod: Pod) -> None:
        heapq.heappush(self._transitions, (at_s, pod.serial, pod))

    def _remove(self, svc: ServiceState, pod: Pod) -> None:
        pod.removed = True
        svc.pods.remove(pod)
        svc.counts[pod.phase] -= 1
        if pod.node is None:
            self._waiting.remove(pod)
            return
        self._nodes[pod.node].used -= 1
        self._first_free = min(self._first_free, pod.node)

    def _assign_gpus(self) -> None:
        """Give free GPUs to pending pods, oldest first across all services."""
        while self._waiting:
            node = self._free_node()
            if node is None:
                return
            pod = self._waiting.popleft()
            svc = self._services[pod.service]
            self._accrue(svc)
            pod.node = node
            pod.gpu_at_s = self._now_s
            self._set_phase(svc, pod, Phase.STARTING)
            self._schedule(self._now_s + pod.startup_delay_s, pod)
            self._changed(svc)

    def _free_node(self) -> int | None:
        """Take one GPU on the first node with room; None when the cluster is full."""
        nodes = self._nodes
        for i in range(self._first_free, len(nodes)):
            if nodes[i].used < nodes[i].gpus:
                nodes[i].used += 1
                self._first_free = i
                return i
        self._first_free = len(nodes)
        if not self._unlimited:
            return None
        nodes.append(_Node(f"gpu-node-{len(nodes)}", self._gpus_per_node, used=1))
        return len(nodes) - 1

    def _accrue(self, svc: ServiceState) -> None:
        """Bank the GPU time of the current holders before their number changes."""
        svc.gpu_s += svc.holding_gpu * (self._now_s - svc.gpu_since_s)
        svc.gpu_since_s = self._now_s

    def _changed(self, svc: ServiceState) -> None:
        svc.changed()
        self._workloads = None

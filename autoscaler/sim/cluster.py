"""The virtual cluster behind the `ports.Cluster` port: GPU nodes, pods and their life cycle.

`scale` turns a desired count into pods. A new pod waits for a free GPU (pending), loads the
model (starting, for a delay drawn from a log-normal at creation), warms up (warming) and then
serves. Scale-down removes pods in a fixed victim order (`victim_order`). Pods that hold a GPU
(starting, warming, serving) are what the cluster pays for: `gpu_seconds` integrates them.

A service whose lifecycle is `gated` has the warm-up gate and the traffic ramp
(docs/architecture.md, "The warm-up gate and the traffic ramp"): a started pod stays warming
(running, not warm, labelled `warming`) until the ramp driver marks it warm and promotes it
(`set_pod`); it serves once warm, labelled `stable` and no longer `warming`. `delete_pod` reclaims a
pod, and the service's replica controller makes a fresh one.

On a cluster described by GPU tier (`nodes`), a service with a placement `need` has its pods
placed by the placement ladder (`core.placement.plan`; docs/architecture.md,
"The placement ladder"): each pod belongs to a tier (`whole`, `mig-<profile>`, `shared`), waits for
a free slot of that tier and serves at that tier's speed, a part of a whole card's. The plan is made
again at every `scale` and every `advance`, so replicas move up the ladder and pods stuck pending
move down as capacity frees. `core_seconds` weighs GPU time by card product and the part of a card
held (docs/architecture.md, "Accounting").

With a node cache (`cache`, docs/simulator.md, "Node caches"), every node keeps the weights of
the models that ran on it, least recently used out first when they no longer fit: a pod whose
node holds its model starts in the warm start-up, else in the cold one. Where a new pod goes is
the placement's choice: `spread` (a random node with a free GPU, as a scheduler that knows
nothing of the caches) or `cache-aware` (a node holding the model first). Other tenants' models
start on the nodes now and then and take their room in the caches.

A service may keep a standby pool (`set_standby`): pods that start and warm like any other
but then wait, serving nothing, outside the service's replicas and counts. A scale-up promotes
them first (the ready ones serve after `promote_s`, the ramp), and the pool refills behind
them with new pods. Their GPU time is part of the service's and is also counted apart.

Time moves only through `advance`; the cluster never reads a clock and never sleeps. It must
not model traffic or metrics (`traffic` and `metrics` do, driven by `world`).
"""

from __future__ import annotations

import dataclasses
import enum
import heapq
import itertools
import math
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from autoscaler import errors, ports
from autoscaler.core import model, placement, victims
from autoscaler.sim.params import CacheConfig, NodeSpec

# How many recent start-ups the observed start-up time averages over.
_STARTUPS_REMEMBERED = 10
# How many published decisions each service keeps for inspection.
_DECISIONS_REMEMBERED = 1000
# Transitions due within this of the new time are applied (float rounding of the clock).
_EPS = 1e-9


class Phase(enum.IntEnum):
    """Where a pod is in its life, in the order of `victims.Stage`."""

    PENDING = 0
    """Created, waiting for a free GPU: costs nothing, serves nothing."""
    STARTING = 1
    """Holds a GPU and loads the model."""
    WARMING = 2
    """Model loaded, answering warm-up probes; not in the traffic set yet. With the ramp, also
    a warm pod that is still being ramped (labelled `warming`)."""
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
    gated: bool = False
    """The warm-up gate and the ramp decide when a started pod serves (`SimCluster.set_pod`);
    without, it serves `warmup_s` after starting."""

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
    need: placement.Need | None = None
    """Placement on a cluster described by tier: its pods go where `core.placement.plan` puts
    them. None: every pod waits for a whole card, first come first served."""
    ramp: ports.RampTarget | None = None
    """The warm-up gate and traffic ramp, when the service has them (`set_ramp`)."""
    window_s: float | None = None
    """Its smoothing window; None for the loop's."""


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
    ordinal: int = 0
    """Creation order within its service."""
    running_at_s: float | None = None
    """When its model was loaded (it left STARTING)."""
    warm: bool = False
    """The readiness-gate condition `autoscaler.dsec.io/warm`."""
    warming: bool = False
    """Labelled `autoscaler.dsec.io/warming` (every new pod of a gated service)."""
    stable: bool = False
    """Labelled `autoscaler.dsec.io/stable`."""
    deletion_cost: int = 0
    """`controller.kubernetes.io/pod-deletion-cost`: the lowest goes first within a phase."""
    tier: str = placement.WHOLE
    """Placement tier (docs/architecture.md, "The placement ladder"): the kind of GPU slot it waits
    for or holds."""
    slot: int | None = None
    """Which time-sliced card of its node it shares (shared tier only)."""
    speed: float = 1.0
    """Its throughput as a ratio of a whole card's mu (set when it gets its slot)."""
    core_rate: float = 1.0
    """Core-hours per hour it costs while it holds its slot (set when it gets it)."""
    cache_hit: bool | None = None
    """Whether its node's cache held its model when it got its GPU (None: no cache model, or
    no GPU yet)."""
    loaded: bool = False
    """Its model is in its node's memory (it left STARTING and has not been removed)."""
    standby: bool = False
    """In the service's standby pool, not one of its replicas."""
    ready: bool = False
    """A standby pod that has started and warmed: promoted, it serves after the ramp alone."""


@dataclass(frozen=True, slots=True)
class NodeView:
    name: str
    gpus: int
    used: int


@dataclass(slots=True)
class _Node:
    name: str
    gpus: int
    """Whole cards."""
    used: int = 0
    product: str = ""
    card_memory_mib: int = 0
    weight: float = placement.UNKNOWN_CORE_WEIGHT
    """Core-hours per card-hour of its product."""
    mig_free: dict[str, int] = field(default_factory=dict)
    shared_replicas: int = 1
    shared_free: list[int] = field(default_factory=list)
    """Free shares per time-sliced card."""
    shared_free_mib: list[int] = field(default_factory=list)
    """Free memory per time-sliced card."""
    cache: dict[str, float] = field(default_factory=dict)
    """Models whose weights the node's cache holds, by when they were last used, oldest first."""
    loaded: dict[str, int] = field(default_factory=dict)
    """Pods per model with the model loaded on this node now (their model is never evicted)."""


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
        "admissible",
        "cache_hits",
        "cache_misses",
        "core_rate",
        "core_s",
        "counts",
        "created",
        "decision",
        "decisions",
        "desired",
        "gpu_s",
        "gpu_since_s",
        "pending_s",
        "plan",
        "pods",
        "promoted",
        "published",
        "scale_events",
        "serving_speed",
        "spec",
        "standby",
        "standby_counts",
        "standby_peak",
        "standby_s",
        "standby_target",
        "startups_s",
        "tier_s",
    )

    def __init__(self, spec: ServiceSpec, now_s: float) -> None:
        self.spec = spec
        self.desired = 0
        self.pods: list[Pod] = []
        self.counts = [0, 0, 0, 0]
        """Pods per `Phase`, indexed by its value."""
        self.created = 0
        """Pods created so far (the next pod's `ordinal`)."""
        self.startups_s: deque[float] = deque(maxlen=_STARTUPS_REMEMBERED)
        self.gpu_s = 0.0
        self.gpu_since_s = now_s
        self.scale_events: list[tuple[float, int, int]] = []
        self.decision: tuple[model.Decision, model.PolicyState] | None = None
        self.decisions: deque[tuple[float, model.Decision]] = deque(maxlen=_DECISIONS_REMEMBERED)
        self.published = 0
        self._workload: ports.Workload | None = None
        self.serving_speed = 0.0
        """Sum of the serving pods' speeds: serving capacity in whole cards' worth."""
        self.core_rate = 0.0
        """Core-hours per hour of the pods holding a slot now."""
        self.core_s = 0.0
        self.pending_s = 0.0
        """Pod-seconds spent pending so far (banked up to `gpu_since_s`)."""
        self.tier_s: dict[str, float] = {}
        """Pod-seconds spent holding a slot, per tier (banked up to `gpu_since_s`)."""
        self.plan: placement.Plan | None = None
        """The last placement plan (services with a `need` only)."""
        self.admissible: int | None = None
        self.standby: list[Pod] = []
        """The standby pool's pods (not in `pods`, not in `counts`)."""
        self.standby_counts = [0, 0, 0, 0]
        """Standby pods per `Phase`."""
        self.standby_target = 0
        self.standby_peak = 0
        """The most pods the standby pool has held at once."""
        self.standby_s = 0.0
        """GPU-seconds of standby pods (banked up to `gpu_since_s`)."""
        self.promoted = 0
        """Standby pods promoted to replicas so far."""
        self.cache_hits = 0
        self.cache_misses = 0
        """Pods that got a GPU on a node whose cache held their model, and that did not."""

    @property
    def standby_holding(self) -> int:
        """Standby pods holding a GPU."""
        c = self.standby_counts
        return c[Phase.STARTING] + c[Phase.WARMING] + c[Phase.SERVING]

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
        """The service's record, the same object until something about it changes."""
        if self._workload is None:
            spec = self.spec
            namespace, _, deployment = spec.id.rpartition("/")
            self._workload = ports.Workload(
                id=spec.id,
                policy=spec.policy,
                half_life_s=spec.half_life_s,
                replicas=self.desired,
                serving=self.serving,
                startup_s=self.startup_s,
                admissible=self.admissible,
                core_rate=self.core_rate,
                window_s=spec.window_s,
                namespace=namespace,
                deployment=deployment,
                pods=frozenset(p.name for p in self.pods if p.phase is Phase.SERVING),
                ramp=spec.ramp,
                placement=spec.need,
            )
        return self._workload

    def changed(self) -> None:
        self._workload = None


_STAGES = {
    Phase.PENDING: victims.Stage.PENDING,
    Phase.STARTING: victims.Stage.STARTING,
    Phase.WARMING: victims.Stage.WARMING,
    Phase.SERVING: victims.Stage.SERVING,
}


def victim_order(pods: Iterable[Pod]) -> list[Pod]:
    """The order scale-down removes pods in (`core.victims`): pending, then starting, then
    warming, then serving; within each phase the lowest pod-deletion-cost first (as a
    ReplicaSet does), then the newest, so the least invested pod goes first."""
    return victims.order(pods, _candidate)


def _candidate(pod: Pod) -> victims.Candidate:
    return victims.Candidate(
        pod.name,
        stage=_STAGES[pod.phase],
        tier=pod.tier,
        deletion_cost=pod.deletion_cost,
        created_s=pod.created_s,
        serial=pod.serial,
    )


class SimCluster:
    """A cluster of GPU nodes running the managed services' pods (`ports.Cluster`).

    `gpus` is the cluster's GPU count (one per replica), spread over nodes of `gpus_per_node`;
    None means never short of GPUs (nodes appear as they are needed). Start-up delays come from
    one generator seeded with `seed`, drawn in pod creation order.

    `nodes` describes the cluster by GPU tier instead (whole cards, MIG slices, time-sliced
    cards), for services with a placement `need`; `quota` is the namespace's GPU ResourceQuota
    (`hard` by quota key), and `tier_speeds` a replica's throughput per tier as a ratio of a
    whole card's (`SimParams.tier_speeds`; by default the part of the card it holds).
    """

    def __init__(
        self,
        *,
        gpus: int | None = None,
        gpus_per_node: int = 8,
        seed: int = 0,
        start_s: float = 0.0,
        nodes: Sequence[NodeSpec] = (),
        quota: Mapping[str, int] | None = None,
        tier_speeds: Mapping[str, float] | None = None,
        cache: CacheConfig | None = None,
        promote_s: float = 0.0,
    ) -> None:
        if gpus_per_node < 1:
            raise ValueError("gpus_per_node must be >= 1")
        if gpus is not None and gpus < 0:
            raise ValueError("gpus must be >= 0")
        if nodes and gpus is not None:
            raise ValueError("give either nodes or gpus, not both")
        if cache is not None and gpus is None:
            raise ValueError("the node cache model needs a fixed cluster (gpus)")
        self._cache = cache
        self._promote_s = promote_s
        # Placement and the other tenants draw from their own generator, so the start-up
        # delays (drawn from `seed` in creation order) are the same whatever they do.
        self._place_rng = np.random.default_rng([seed, 17])
        self._tenant_rng = np.random.default_rng([seed, 18])
        self._next_tenant_s = math.inf
        self.evictions = 0
        """Models evicted from a node's cache to make room, so far."""
        self._gpus_per_node = gpus_per_node
        self._unlimited = gpus is None and not nodes
        self._tiered = bool(nodes)
        self._quota = dict(quota or {})
        self._tier_speeds = dict(tier_speeds or {})
        self._placed: list[ServiceState] = []
        """Services with a placement `need`, planned at every `advance`."""
        self._nodes: list[_Node] = [n for spec in nodes for n in _nodes_of(spec)]
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
        if cache is not None and cache.other_models and cache.other_loads_per_node_hour > 0:
            self._next_tenant_s = start_s + self._tenant_gap_s()

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
        if spec.need is not None and not self._tiered:
            raise ValueError("a placement need asks for a cluster described by tier (nodes)")
        svc = ServiceState(spec, self._now_s)
        self._services[spec.id] = svc
        self._workloads = None
        svc.desired = replicas
        tiers = [placement.WHOLE] * replicas
        if spec.need is not None:
            self._placed.append(svc)
            first = placement.plan(spec.need, self.snapshot(), {}, replicas, self._quota_now())
            tiers = [t for t, n in first.replicas.items() for _ in range(n)]
        for tier in tiers:
            pod = self._new_pod(svc)
            pod.tier = tier
            if not self._take_slot(svc, pod):
                self._waiting.append(pod)
                continue
            self._set_phase(svc, pod, Phase.SERVING)
            pod.gpu_at_s = pod.serving_at_s = pod.running_at_s = self._now_s
            pod.warm = pod.stable = True
            pod.warming = False
            self._loaded(pod, self._now_s)
        return svc

    def service(self, service: model.ServiceId) -> ServiceState:
        return self._service(service)

    def set_ramp(self, service: model.ServiceId, ramp: ports.RampTarget) -> None:
        """Give a service the warm-up gate and traffic ramp (or new ramp settings, or a new
        saved state): its record carries them from the next `workloads()` on."""
        svc = self._service(service)
        svc.spec = dataclasses.replace(svc.spec, ramp=ramp)
        svc.changed()
        self._workloads = None

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
        return sum(
            s.gpu_s + (s.holding_gpu + s.standby_holding) * (self._now_s - s.gpu_since_s)
            for s in chosen
        )

    def standby_seconds(self, service: model.ServiceId) -> float:
        """GPU time spent so far by the service's standby pods (part of `gpu_seconds`)."""
        svc = self._service(service)
        return svc.standby_s + svc.standby_holding * (self._now_s - svc.gpu_since_s)

    def set_standby(self, service: model.ServiceId, pods: int) -> None:
        """Keep `pods` in the service's standby pool: new ones start now; surplus ones go,
        those not ready first."""
        svc = self._service(service)
        if pods < 0:
            raise ValueError(f"standby pods must be >= 0, got {pods}")
        svc.standby_target = pods
        self._fill_standby(svc)
        svc.standby_peak = max(svc.standby_peak, len(svc.standby))

    def cached_nodes(self, service: model.ServiceId) -> tuple[str, ...]:
        """The nodes whose cache holds the service's model now."""
        return tuple(n.name for n in self._nodes if self._cache_holds(n, self._model_of(service)))

    def core_seconds(self, service: model.ServiceId | None = None) -> float:
        """GPU time weighted by card product and card fraction (docs/architecture.md,
        "Accounting"), in core-seconds: the sum over pods holding a slot of
        `core_weight x tier_fraction x time`."""
        chosen = self._services.values() if service is None else [self._service(service)]
        return sum(
            s.core_s + (s.core_rate + s.standby_holding) * (self._now_s - s.gpu_since_s)
            for s in chosen
        )

    def pending_seconds(self, service: model.ServiceId) -> float:
        """Pod-seconds the service's pods spent pending (waiting for a slot) so far."""
        svc = self._service(service)
        return svc.pending_s + svc.counts[Phase.PENDING] * (self._now_s - svc.gpu_since_s)

    def tier_seconds(self, service: model.ServiceId) -> dict[str, float]:
        """Pod-seconds spent holding a slot so far, per placement tier."""
        svc = self._service(service)
        totals = dict(svc.tier_s)
        for tier, holding in self._holding_by_tier(svc).items():
            totals[tier] = totals.get(tier, 0.0) + holding * (self._now_s - svc.gpu_since_s)
        return totals

    def snapshot(self) -> placement.Snapshot:
        """Free GPU capacity by tier, as the Kubernetes adapter would read it from its caches.

        A time-sliced card is listed on its own (`<node>/gpu<i>`), so its free memory is its
        own and not the best card's of its node.
        """
        caps: list[placement.NodeCapacity] = []
        for node in self._nodes:
            caps.append(
                placement.NodeCapacity(
                    name=node.name,
                    product=node.product,
                    card_memory_mib=node.card_memory_mib,
                    whole_free=node.gpus - node.used,
                    mig_free=dict(node.mig_free),
                )
            )
            for i, (free, free_mib) in enumerate(
                zip(node.shared_free, node.shared_free_mib, strict=True)
            ):
                caps.append(
                    placement.NodeCapacity(
                        name=f"{node.name}/gpu{i}",
                        product=node.product,
                        card_memory_mib=node.card_memory_mib,
                        whole_free=0,
                        shared_free=free,
                        shared_replicas=node.shared_replicas,
                        shared_free_memory_mib=max(0, free_mib),
                    )
                )
        return placement.Snapshot(tuple(caps))

    def tier_counts(self, service: model.ServiceId) -> dict[str, placement.TierCount]:
        """The service's pods per placement tier: asked for, serving, pending."""
        counts: dict[str, list[int]] = {}
        for pod in self._service(service).pods:
            c = counts.setdefault(pod.tier, [0, 0, 0])
            c[0] += 1
            c[1] += pod.phase is Phase.SERVING
            c[2] += pod.phase is Phase.PENDING
        return {tier: placement.TierCount(*c) for tier, c in counts.items()}

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
        if svc.spec.need is not None:
            svc.desired = replicas
            self._replan(svc)
            self._changed(svc)
            return
        if replicas > svc.desired:
            wanted = replicas - svc.desired
            for pod in self._promotable(svc)[:wanted]:
                self._promote(svc, pod)
                wanted -= 1
            for _ in range(wanted):
                self._waiting.append(self._new_pod(svc))
        else:
            for pod in victim_order(svc.pods)[: svc.desired - replicas]:
                self._remove(svc, pod)
        svc.desired = replicas
        self._fill_standby(svc)
        self._assign_gpus()
        self._changed(svc)

    def pod(self, service: model.ServiceId, name: str) -> Pod:
        """A live pod of the service by name; `ActuationError` when there is none (as the API
        answers 404)."""
        svc = self._services.get(service)
        if svc is None:
            raise errors.ActuationError(f"no such service: {service}")
        for pod in svc.pods:
            if pod.name == name:
                return pod
        raise errors.ActuationError(f"no pod {name} in {service}")

    def set_pod(
        self,
        service: model.ServiceId,
        name: str,
        *,
        warm: bool | None = None,
        warming: bool | None = None,
        stable: bool | None = None,
        deletion_cost: int | None = None,
    ) -> None:
        """Change a pod's readiness-gate condition, ramp labels or deletion cost (None keeps
        one). A gated pod that is running serves exactly while warm, `stable` and not
        `warming` (docs/architecture.md, "Signals")."""
        pod = self.pod(service, name)
        svc = self._services[service]
        if warm is not None:
            pod.warm = warm
        if warming is not None:
            pod.warming = warming
        if stable is not None:
            pod.stable = stable
        if deletion_cost is not None:
            pod.deletion_cost = deletion_cost
        if not svc.spec.lifecycle.gated or pod.phase not in (Phase.WARMING, Phase.SERVING):
            return
        serves = pod.warm and pod.stable and not pod.warming
        if serves and pod.phase is Phase.WARMING:
            self._set_phase(svc, pod, Phase.SERVING)
            if pod.serving_at_s is None:
                pod.serving_at_s = self._now_s
                svc.startups_s.append(self._now_s - pod.created_s)
            self._changed(svc)
        elif not serves and pod.phase is Phase.SERVING:
            self._set_phase(svc, pod, Phase.WARMING)
            self._changed(svc)

    def delete_pod(self, service: model.ServiceId, name: str) -> Pod:
        """Delete one pod; the service's replica controller creates a fresh one at once (a new
        start-up delay, a new ordinal). Returns the new pod."""
        pod = self.pod(service, name)
        svc = self._services[service]
        self._accrue(svc)
        self._remove(svc, pod)
        fresh = self._new_pod(svc)
        fresh.tier = pod.tier
        self._waiting.append(fresh)
        self._assign_gpus()
        self._changed(svc)
        return fresh

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
                pod.running_at_s = at_s
                self._loaded(pod, at_s)
                if not svc.spec.lifecycle.gated:
                    self._schedule(at_s + svc.spec.lifecycle.warmup_s, pod)
            elif pod.standby:
                pod.ready = True
            elif pod.phase is Phase.WARMING:
                self._set_phase(svc, pod, Phase.SERVING)
                pod.serving_at_s = at_s
                # A promoted standby pod measures no start-up: it waited for the scale-up.
                if not pod.ready:
                    svc.startups_s.append(at_s - pod.created_s)
            self._changed(svc)
        while self._next_tenant_s <= due:
            self._tenant_load(self._next_tenant_s)
            self._next_tenant_s += self._tenant_gap_s()
        for placed in self._placed:
            self._replan(placed)

    # -- internals --------------------------------------------------------------------------

    def _service(self, service: model.ServiceId) -> ServiceState:
        try:
            return self._services[service]
        except KeyError:
            raise KeyError(f"no such service: {service}") from None

    def _new_pod(self, svc: ServiceState, *, standby: bool = False) -> Pod:
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
            ordinal=svc.created,
            warming=life.gated,
            standby=standby,
        )
        svc.created += 1
        if standby:
            svc.standby.append(pod)
            svc.standby_counts[Phase.PENDING] += 1
        else:
            svc.pods.append(pod)
            svc.counts[Phase.PENDING] += 1
        return pod

    def _set_phase(self, svc: ServiceState, pod: Pod, phase: Phase) -> None:
        before = pod.phase
        if pod.standby:
            svc.standby_counts[before] -= 1
            svc.standby_counts[phase] += 1
            pod.phase = phase
            return
        svc.counts[before] -= 1
        svc.counts[phase] += 1
        pod.phase = phase
        # With none left, the sums are reset: no float residue from fractional speeds.
        if (before is Phase.SERVING) != (phase is Phase.SERVING):
            speed = pod.speed if phase is Phase.SERVING else -pod.speed
            svc.serving_speed = svc.serving_speed + speed if svc.serving else 0.0
        if (before in HOLDS_GPU) != (phase in HOLDS_GPU):
            rate = pod.core_rate if phase in HOLDS_GPU else -pod.core_rate
            svc.core_rate = svc.core_rate + rate if svc.holding_gpu else 0.0

    def _schedule(self, at_s: float, pod: Pod) -> None:
        heapq.heappush(self._transitions, (at_s, pod.serial, pod))

    def _remove(self, svc: ServiceState, pod: Pod) -> None:
        pod.removed = True
        if pod.loaded and pod.node is not None:
            self._unloaded(pod)
        if pod.standby:
            svc.standby.remove(pod)
            svc.standby_counts[pod.phase] -= 1
        else:
            svc.pods.remove(pod)
            svc.counts[pod.phase] -= 1
            if pod.phase is Phase.SERVING:
                svc.serving_speed = svc.serving_speed - pod.speed if svc.serving else 0.0
            if pod.phase in HOLDS_GPU:
                svc.core_rate = svc.core_rate - pod.core_rate if svc.holding_gpu else 0.0
        if pod.node is None:
            self._waiting.remove(pod)
            return
        node = self._nodes[pod.node]
        if pod.tier == placement.WHOLE:
            node.used -= 1
            self._first_free = min(self._first_free, pod.node)
        elif pod.tier == placement.SHARED:
            assert pod.slot is not None
            node.shared_free[pod.slot] += 1
            node.shared_free_mib[pod.slot] += _memory_mib(svc) or 0
        else:
            profile = pod.tier[len(placement.MIG_PREFIX) :]
            node.mig_free[profile] += 1

    def _assign_gpus(self) -> None:
        """Give free GPUs to pending pods, oldest first across all services."""
        if self._tiered:
            self._assign_slots()
            return
        while self._waiting:
            pod = self._waiting[0]
            node = self._free_node() if self._cache is None else self._cache_node(pod.service)
            if node is None:
                return
            self._waiting.popleft()
            svc = self._services[pod.service]
            self._accrue(svc)
            pod.node = node
            pod.gpu_at_s = self._now_s
            if self._cache is not None:
                self._start_from_cache(svc, pod, self._nodes[node])
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
        elapsed = self._now_s - svc.gpu_since_s
        standby = svc.standby_holding
        svc.gpu_s += (svc.holding_gpu + standby) * elapsed
        svc.core_s += (svc.core_rate + standby) * elapsed
        svc.standby_s += standby * elapsed
        svc.pending_s += svc.counts[Phase.PENDING] * elapsed
        if svc.spec.need is not None and elapsed > 0:
            for tier, holding in self._holding_by_tier(svc).items():
                svc.tier_s[tier] = svc.tier_s.get(tier, 0.0) + holding * elapsed
        svc.gpu_since_s = self._now_s

    # -- the standby pool -------------------------------------------------------------------

    def _promotable(self, svc: ServiceState) -> list[Pod]:
        """Standby pods in the order a scale-up takes them: the furthest along first."""
        return sorted(svc.standby, key=lambda p: (not p.ready, -p.phase, p.serial))

    def _promote(self, svc: ServiceState, pod: Pod) -> None:
        """Make a standby pod one of the service's replicas: a ready one serves after the
        ramp (`promote_s`), one still on its way carries on from where it is."""
        svc.standby.remove(pod)
        svc.standby_counts[pod.phase] -= 1
        pod.standby = False
        svc.pods.append(pod)
        svc.counts[pod.phase] += 1
        if pod.phase in HOLDS_GPU:
            svc.core_rate += pod.core_rate
        svc.promoted += 1
        if pod.ready:
            self._schedule(self._now_s + self._promote_s, pod)

    def _fill_standby(self, svc: ServiceState) -> None:
        """Bring the standby pool to its target: new pods, or the least advanced ones out."""
        have = len(svc.standby)
        if have == svc.standby_target:
            return
        self._accrue(svc)
        if have < svc.standby_target:
            for _ in range(svc.standby_target - have):
                self._waiting.append(self._new_pod(svc, standby=True))
            self._assign_gpus()
        else:
            for pod in self._promotable(svc)[svc.standby_target :]:
                self._remove(svc, pod)

    # -- node caches (docs/simulator.md, "Node caches") --------------------------------------

    def _model_of(self, service: model.ServiceId) -> str:
        return str(service)

    def _cache_holds(self, node: _Node, name: str) -> bool:
        """Whether the node's cache holds the model now (retention permitting)."""
        cache = self._cache
        if cache is None or name not in node.cache:
            return False
        if node.loaded.get(name, 0) > 0 or cache.retention_s is None:
            return True
        return self._now_s - node.cache[name] <= cache.retention_s + _EPS

    def _cache_node(self, service: model.ServiceId, *, aware: bool = True) -> int | None:
        """The node a new pod of the service gets a GPU on, by the cache placement (`aware`
        False: spread, whatever it is); None when every GPU is taken."""
        assert self._cache is not None
        free = [i for i, n in enumerate(self._nodes) if n.used < n.gpus]
        if not free:
            return None
        if aware and self._cache.placement == "cache-aware":
            name = self._model_of(service)
            warm = [i for i in free if self._cache_holds(self._nodes[i], name)]
            free = warm or free
        chosen = free[int(self._place_rng.integers(len(free)))]
        self._nodes[chosen].used += 1
        return chosen

    def _start_from_cache(self, svc: ServiceState, pod: Pod, node: _Node) -> None:
        """A warm start-up where the node holds the model, the cold one (as drawn) else."""
        assert self._cache is not None
        life = svc.spec.lifecycle
        pod.cache_hit = self._cache_holds(node, self._model_of(svc.spec.id))
        if pod.cache_hit:
            svc.cache_hits += 1
            # The same draw, scaled to the warm median (a cold start of 0 stays 0).
            if life.startup_s > 0:
                pod.startup_delay_s *= self._cache.warm_startup_s / life.startup_s
        else:
            svc.cache_misses += 1

    def _loaded(self, pod: Pod, at_s: float) -> None:
        """The pod's model is in its node's memory: cached there from now on."""
        if self._cache is None or pod.node is None:
            return
        node = self._nodes[pod.node]
        name = self._model_of(pod.service)
        pod.loaded = True
        node.loaded[name] = node.loaded.get(name, 0) + 1
        self._cache_put(node, name, at_s)

    def _unloaded(self, pod: Pod) -> None:
        node = self._nodes[pod.node] if pod.node is not None else None
        if node is None:
            return
        name = self._model_of(pod.service)
        node.loaded[name] -= 1
        pod.loaded = False
        # Its last use: the least recently used entries are the first to go.
        if node.cache.pop(name, None) is not None:
            node.cache[name] = self._now_s

    def _cache_put(self, node: _Node, name: str, at_s: float) -> None:
        """Put (or refresh) a model in the node's cache, evicting the least recently used ones
        that no pod there runs until it fits."""
        assert self._cache is not None
        node.cache.pop(name, None)
        size = self._cache.model_size_gib
        if size > self._cache.node_cache_gib + _EPS:
            return
        node.cache[name] = at_s
        while len(node.cache) * size > self._cache.node_cache_gib + _EPS:
            victim = next((m for m in node.cache if m != name and node.loaded.get(m, 0) == 0), None)
            if victim is None:
                return
            del node.cache[victim]
            self.evictions += 1

    def _tenant_gap_s(self) -> float:
        assert self._cache is not None
        rate_per_s = self._cache.other_loads_per_node_hour * len(self._nodes) / 3600.0
        return float(self._tenant_rng.exponential(1.0 / rate_per_s))

    def _tenant_load(self, at_s: float) -> None:
        """One of the other tenants' models starts on a node: it takes its room in the cache."""
        assert self._cache is not None
        node = self._nodes[int(self._tenant_rng.integers(len(self._nodes)))]
        other = int(self._tenant_rng.integers(self._cache.other_models))
        self._cache_put(node, f"other-model-{other}", at_s)

    # -- placement (docs/architecture.md, "The placement ladder") ---------------------------

    def _replan(self, svc: ServiceState) -> None:
        """Bring the service's pods per tier to what the placement plan says now."""
        need = svc.spec.need
        assert need is not None
        current = self.tier_counts(svc.spec.id)
        plan = placement.plan(need, self.snapshot(), current, svc.desired, self._quota_now())
        changed = plan.admissible != svc.admissible
        svc.plan, svc.admissible = plan, plan.admissible
        accrued = False
        for tier, target in plan.replicas.items():
            have = [p for p in svc.pods if p.tier == tier]
            if target == len(have):
                continue
            if not accrued:
                self._accrue(svc)
                accrued = True
            for pod in victim_order(have)[: max(0, len(have) - target)]:
                self._remove(svc, pod)
            for _ in range(target - len(have)):
                pod = self._new_pod(svc)
                pod.tier = tier
                self._waiting.append(pod)
        if accrued:
            self._assign_gpus()
        if accrued or changed:
            self._changed(svc)

    def _quota_now(self) -> placement.Quota | None:
        """The namespace's GPU quota, its usage counted from every pod (pending ones too)."""
        if not self._quota:
            return None
        used = dict.fromkeys(self._quota, 0)
        for svc in self._services.values():
            cards = 1 if svc.spec.need is None else svc.spec.need.cards
            for pod in svc.pods:
                key = placement.QUOTA_PREFIX + placement.resource_of(pod.tier)
                if key in used:
                    used[key] += cards if pod.tier == placement.WHOLE else 1
        return placement.Quota(hard=self._quota, used=used)

    def _assign_slots(self) -> None:
        """Give each pending pod a free slot of its tier, oldest first; the ones that find
        none keep waiting (a pod waiting for a slice never blocks one waiting for a card)."""
        waiting: deque[Pod] = deque()
        for pod in self._waiting:
            svc = self._services[pod.service]
            if not self._take_slot(svc, pod):
                waiting.append(pod)
                continue
            self._accrue(svc)
            pod.gpu_at_s = self._now_s
            self._set_phase(svc, pod, Phase.STARTING)
            self._schedule(self._now_s + pod.startup_delay_s, pod)
            self._changed(svc)
        self._waiting = waiting

    def _take_slot(self, svc: ServiceState, pod: Pod) -> bool:
        """Bind the pod to a free slot of its tier, with its speed and core rate; False when
        its tier has none free."""
        if pod.tier == placement.WHOLE and self._cache is not None:
            # Only `add_service` comes here on this cluster: the opening pods have been
            # running for a while, placed as the scheduler spreads pods, whatever the placement.
            pod.node = self._cache_node(svc.spec.id, aware=False)
        elif pod.tier == placement.WHOLE:
            pod.node = self._free_node()
        elif pod.tier == placement.SHARED:
            pod.node, pod.slot = self._free_share(_memory_mib(svc))
        else:
            pod.node = self._free_slice(pod.tier[len(placement.MIG_PREFIX) :])
        if pod.node is None:
            return False
        if self._tiered:
            node = self._nodes[pod.node]
            fraction = placement.tier_fraction(pod.tier, _capacity_of(node))
            pod.core_rate = node.weight * fraction
            pod.speed = self._speed_of(pod.tier, fraction)
        return True

    def _speed_of(self, tier: str, fraction: float) -> float:
        if tier == placement.WHOLE:
            return 1.0
        speeds = self._tier_speeds
        if tier in speeds:
            return speeds[tier]
        if tier.startswith(placement.MIG_PREFIX) and "mig" in speeds:
            return speeds["mig"]
        return fraction

    def _free_slice(self, profile: str) -> int | None:
        for i, node in enumerate(self._nodes):
            if node.mig_free.get(profile, 0) > 0:
                node.mig_free[profile] -= 1
                return i
        return None

    def _free_share(self, memory_mib: int | None) -> tuple[int | None, int | None]:
        """The time-sliced card with a free share and the most free memory that holds the
        model (first such card on a tie); (None, None) when there is none."""
        if memory_mib is None:
            return None, None
        best: tuple[int, int, int] | None = None
        for i, node in enumerate(self._nodes):
            for card, (free, free_mib) in enumerate(
                zip(node.shared_free, node.shared_free_mib, strict=True)
            ):
                if free > 0 and free_mib >= memory_mib and (best is None or free_mib > best[0]):
                    best = (free_mib, i, card)
        if best is None:
            return None, None
        _, i, card = best
        self._nodes[i].shared_free[card] -= 1
        self._nodes[i].shared_free_mib[card] -= memory_mib
        return i, card

    def _holding_by_tier(self, svc: ServiceState) -> dict[str, int]:
        holding: dict[str, int] = {}
        for pod in svc.pods:
            if pod.phase in HOLDS_GPU:
                holding[pod.tier] = holding.get(pod.tier, 0) + 1
        return holding

    def _changed(self, svc: ServiceState) -> None:
        svc.changed()
        self._workloads = None


def _nodes_of(spec: NodeSpec) -> list[_Node]:
    weight = placement.core_weight(spec.product, card_memory_mib=spec.card_memory_mib)
    return [
        _Node(
            name=f"{spec.name}-{i}",
            gpus=spec.whole,
            product=spec.product,
            card_memory_mib=spec.card_memory_mib,
            weight=weight,
            mig_free=dict(spec.mig),
            shared_replicas=spec.shared_replicas,
            shared_free=[spec.shared_replicas - spec.shared_taken] * spec.shared_cards,
            shared_free_mib=[spec.card_memory_mib - spec.shared_used_mib] * spec.shared_cards,
        )
        for i in range(spec.count)
    ]


def _capacity_of(node: _Node) -> placement.NodeCapacity:
    """The node as `core.placement` reads a card's product and its sharing."""
    return placement.NodeCapacity(
        node.name, node.product, node.card_memory_mib, 0, shared_replicas=node.shared_replicas
    )


def _memory_mib(svc: ServiceState) -> int | None:
    return None if svc.spec.need is None else svc.spec.need.memory_mib

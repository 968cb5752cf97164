"""The simulator's inputs and outputs: one `SimParams` in, one `SimResult` out.

Every policy in a comparison runs on the same `SimParams` (capacity model, trace, seed); all of
it is written into `summary.json` so a result can be reproduced.

With `ramp` set, new pods pass the warm-up gate and the traffic ramp (docs/architecture.md,
"The warm-up gate and the traffic ramp") run by the ramp driver; `faults` make chosen pods slow or
failing (the bad-pod scenario). Without either, a run is exactly the plain model: pods serve once
warm, every replica alike. With `tokens` set, replicas serve tokens rather than requests (the
token mode, `sim.tokens`: continuous batching, prefill and decode rates, a KV-cache budget, a
TTFT SLO); without, the request model serves, unchanged.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from autoscaler.sim.tokens import TokenConfig

TIMESERIES_COLUMNS = (
    "t_s",
    "arrivals",
    "served",
    "dropped",
    "replicas_desired",
    "replicas_total",
    "replicas_serving",
    "capacity_rps",
    "p95_latency_s",
    "gpu_cost",
    "slo_misses",
)
"""Columns of `timeseries.csv`, one row per simulated second (docs/simulator.md). `gpu_cost` is the
GPU-hours spent in that second by pods holding a GPU (starting, warming or serving);
`slo_misses` the requests of that second served too late, dropped, failed or rejected."""

SUMMARY_KEYS = frozenset(
    {
        "requests",
        "served",
        "dropped",
        "queued_at_end",
        "slo_misses",
        "slo_miss_pct",
        "p95_latency_s",
        "gpu_hours",
        "core_hours",
        "pending_replica_s",
        "scale_events",
        "mean_replicas",
        "max_replicas_seen",
        "simulated_s",
        "params",
    }
)
"""Keys of `summary.json`: the run's totals, and `params`, everything it was run with.
`core_hours` weighs the GPU time by card product and the part of a card each pod holds
(docs/architecture.md, "Accounting"; 1 per card-hour for a card the weight table does not name, so
it equals `gpu_hours` on the plain model); `pending_replica_s` adds up the seconds pods spent
pending."""

RAMP_SUMMARY_KEYS = frozenset({"failed", "rejected", "ramp"})
"""Keys `summary.json` adds when pods differ (`SimParams.ramp` or `faults` set): `failed`,
requests answered with an error (a failing pod's, and `rejected`); `rejected`, requests routed
to a traffic set with no ready pod; `ramp`, what the gate and the ramp did (None without one).
A failed or rejected request also counts as an SLO miss."""

PLACEMENT_SUMMARY_KEYS = frozenset({"placement"})
"""Keys `summary.json` adds on a cluster described by tier (`SimParams.nodes`): `placement`,
pod-seconds holding a slot per tier (`tier_replica_s`) and the last plan's reason."""

COLD_START_SUMMARY_KEYS = frozenset({"cold_start"})
"""Keys `summary.json` adds with the node cache model or a standby pool (`SimParams.cache`,
`SimParams.standby`): `cold_start`, the start-ups that found the model in their node's cache
and those that did not, the hit ratio, the cache evictions, the standby pods promoted and the
standby GPU-hours (part of `gpu_hours`, counted apart)."""

TOKEN_SUMMARY_KEYS = frozenset({"tokens"})
"""Keys `summary.json` adds in token mode (`SimParams.tokens`): `tokens`, the prompt and
generation tokens served and the whole run's p95 TTFT (`p95_latency_s` is the TTFT too, and
`slo_misses` counts requests over the TTFT SLO)."""

RAMP_ROUTERS = ("none", "istio", "gateway-api", "smi")
"""The traffic routers a simulated ramp can use (the `traffic-router` annotation's values)."""


@dataclass(frozen=True, slots=True)
class PodFault:
    """A pod that misbehaves from the moment its model is loaded (the bad-pod scenario)."""

    pod: int
    """Which pod: its place among the pods created after the start (0 is the first new one).
    A pod that replaces a reclaimed one is a new pod: it behaves normally unless a fault names
    its place too."""
    slow_factor: float = 1.0
    """Its service time is multiplied, and its throughput divided, by this (>= 1)."""
    error_ratio: float = 0.0
    """Share of its requests, warm-up probes included, that fail (in [0, 1])."""

    def __post_init__(self) -> None:
        if self.pod < 0:
            raise ValueError(f"fault pod must be >= 0, got {self.pod}")
        if not (math.isfinite(self.slow_factor) and self.slow_factor >= 1):
            raise ValueError(f"fault slow_factor must be finite and >= 1, got {self.slow_factor}")
        if not 0 <= self.error_ratio <= 1:
            raise ValueError(f"fault error_ratio must be within [0, 1], got {self.error_ratio}")


CACHE_PLACEMENTS = ("spread", "cache-aware")
"""`CacheConfig.placement`: a free GPU on any node, the scheduler's pick with no knowledge of
the caches (`spread`: a node drawn at random among those with a free GPU), or a node whose cache
holds the model first (`cache-aware`: the preferred node affinity of the controller's pods)."""


@dataclass(frozen=True, slots=True)
class CacheConfig:
    """Nodes with a local cache of model weights (docs/simulator.md, "Node caches"): a pod that
    starts on a node whose cache holds its model loads it in `warm_startup_s`, else in
    `SimParams.startup_s` (the cold start), both with the same log-normal spread."""

    node_cache_gib: float = 64.0
    """Weights one node's cache holds; the least recently used model not running there goes
    first when a new one does not fit."""
    model_size_gib: float = 16.0
    """The weights of every simulated model (the service's and the other tenants')."""
    warm_startup_s: float = 8.0
    """Median start-up of a pod whose node has the model cached."""
    retention_s: float | None = None
    """A model not used on a node for this long is no longer cached there; None: only
    eviction removes it."""
    placement: str = "spread"
    """Which free GPU a new pod gets (`CACHE_PLACEMENTS`)."""
    other_models: int = 0
    """Other tenants' models that share the nodes: each load of one fills a node's cache and may
    evict the service's model (their pods hold no GPU the service could use)."""
    other_loads_per_node_hour: float = 0.0
    """How often, per node and hour, one of the other models starts on a node (a Poisson
    process, drawn from its own seed)."""

    def __post_init__(self) -> None:
        for name in ("node_cache_gib", "model_size_gib", "warm_startup_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"cache {name} must be finite and >= 0, got {value}")
        if self.model_size_gib <= 0:
            raise ValueError("cache model_size_gib must be > 0")
        if self.retention_s is not None and not self.retention_s > 0:
            raise ValueError(f"cache retention_s must be > 0, got {self.retention_s}")
        if self.placement not in CACHE_PLACEMENTS:
            raise ValueError(
                f"unknown cache placement {self.placement!r}; known: {', '.join(CACHE_PLACEMENTS)}"
            )
        if self.other_models < 0 or not self.other_loads_per_node_hour >= 0:
            raise ValueError("cache other_models and other_loads_per_node_hour must be >= 0")


@dataclass(frozen=True, slots=True)
class StandbyConfig:
    """A warm standby pool (docs/simulator.md, "The standby pool"): pods started and warmed
    that serve nothing until a scale-up promotes them. Sized by `core.standby`: `fixed` pods,
    or automatically from how far the load outran what the replicas were sized for within one
    start-up, never above `cap`."""

    fixed: int | None = None
    """A fixed pool; None: the automatic size."""
    cap: int = 4
    quantile: float = 0.95
    min_history_s: float = 900.0
    horizon_s: float = 3600.0
    promote_s: float = 10.0
    """From promotion to serving: the traffic ramp a promoted pod still passes."""

    def __post_init__(self) -> None:
        if self.fixed is not None and self.fixed < 0:
            raise ValueError(f"standby fixed must be >= 0, got {self.fixed}")
        if self.cap < 0:
            raise ValueError(f"standby cap must be >= 0, got {self.cap}")
        if not (math.isfinite(self.promote_s) and self.promote_s >= 0):
            raise ValueError(f"standby promote_s must be finite and >= 0, got {self.promote_s}")


PLACEMENTS = ("whole", "ladder")
"""`SimParams.placement`: every pod on a whole card, or the placement ladder (docs/architecture.md,
"The placement ladder")."""


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """A group of identical GPU nodes of a simulated cluster, counting what is free for the
    simulated services (other tenants' pods are not simulated: their slices and shares are
    simply not offered)."""

    name: str
    product: str = ""
    """GFD `nvidia.com/gpu.product`; it picks the core-hour weight (docs/architecture.md,
    "Accounting")."""
    card_memory_mib: int = 0
    """GFD `nvidia.com/gpu.memory`; 0 when unknown (no MIG or shared placement then)."""
    whole: int = 0
    """Whole cards (`nvidia.com/gpu`) per node."""
    mig: tuple[tuple[str, int], ...] = ()
    """MIG slices per node: (profile, count), e.g. (("3g.40gb", 4),)."""
    shared_cards: int = 0
    """Time-sliced cards (`nvidia.com/gpu.shared`) per node."""
    shared_replicas: int = 4
    """Shares per time-sliced card."""
    shared_taken: int = 0
    """Shares of each time-sliced card other tenants hold."""
    shared_used_mib: int = 0
    """Memory of each time-sliced card other tenants use."""
    count: int = 1
    """Identical nodes in the group (named `<name>-0`, `<name>-1`, ...)."""

    def __post_init__(self) -> None:
        numbers = (self.card_memory_mib, self.whole, self.shared_cards, self.shared_taken)
        if any(n < 0 for n in (*numbers, self.shared_used_mib, *(n for _, n in self.mig))):
            raise ValueError(f"node {self.name}: counts and memory must be >= 0")
        if self.count < 1 or self.shared_replicas < 1:
            raise ValueError(f"node {self.name}: count and shared_replicas must be >= 1")
        if self.shared_taken > self.shared_replicas:
            raise ValueError(f"node {self.name}: shared_taken exceeds shared_replicas")
        if self.shared_used_mib > self.card_memory_mib and self.shared_cards:
            raise ValueError(f"node {self.name}: shared_used_mib exceeds the card memory")


GIB = 1024
FRAGMENTED = (
    NodeSpec("a100", "NVIDIA-A100-SXM4-40GB", 40 * GIB, whole=8, count=3),
    NodeSpec("a800-mig", "NVIDIA-A800-SXM4-80GB", 80 * GIB, mig=(("3g.40gb", 8),)),
    NodeSpec(
        "rtx4090-shared",
        "NVIDIA-GeForce-RTX-4090-SHARED",
        24 * GIB,
        shared_cards=8,
        shared_replicas=4,
        shared_taken=2,
        shared_used_mib=16 * GIB,
        count=2,
    ),
)
"""A fragmented cluster: 24 whole A100-40GB cards, one A800-80GB node with 8 3g.40gb MIG slices
free (four of its cards split in two), and two nodes of 8 time-sliced RTX 4090s with 8 GiB and
two of four shares free on each card. A 6 GiB model fits 48 replicas down the ladder: 24 on
whole cards, 8 on slices, and one share per RTX 4090 (8 GiB free holds one copy)."""

CLUSTERS: dict[str, tuple[NodeSpec, ...]] = {"fragmented": FRAGMENTED}
"""Named cluster descriptions (`autoscaler simulate --cluster NAME`)."""


@dataclass(frozen=True, slots=True)
class SimParams:
    """A simulation run. Times in seconds, rates in requests per second."""

    policy: str = "default"
    """Policy name: `seed` (the plain rule of docs/architecture.md, "The replica count") or
    `default` (ours)."""
    rate_scale: float = 1.0
    """Multiplies every trace count (fluid arrivals: fractions are kept)."""
    min_replicas: int = 2
    max_replicas: int = 64
    initial_replicas: int | None = None
    """Replicas (already serving) at t=0; None means enough for the trace's first minute."""
    seed: int = 0

    # Capacity model (docs/simulator.md).
    replica_capacity_rps: float = 1.0
    """mu: requests per second one serving replica completes at most."""
    target_utilisation: float = 0.75
    """Load target per replica as a fraction of mu."""
    target_queue_per_replica: float | None = 2.0
    """Saturation target (waiting requests per serving replica); None to leave it unused."""
    service_time_s: float = 2.0
    """Latency of a request that does not wait."""
    slo_latency_s: float = 5.0
    """A request whose latency exceeds this misses the SLO."""
    queue_timeout_s: float = 60.0
    """A request still waiting after this is dropped (and misses the SLO)."""

    # Pod life cycle.
    startup_s: float = 60.0
    """Median time from pod creation to the model loaded (pending excluded)."""
    startup_sigma: float = 0.2
    """Log-normal spread of the start-up time (0 for a fixed delay)."""
    warmup_s: float = 5.0
    """Time a started pod spends warming (probe requests) before it serves."""
    gpus: int | None = None
    """GPUs in the cluster, one per replica; None means never short of GPUs."""
    gpus_per_node: int = 8

    # What Prometheus would give.
    scrape_interval_s: float = 5.0
    rate_window_s: float = 30.0

    # Smoothing (docs/architecture.md, "Smoothing").
    half_life_s: float = 30.0

    # The warm-up gate and the traffic ramp (docs/architecture.md,
    # "The warm-up gate and the traffic ramp"), as the annotations would set them.
    ramp: str | None = None
    """Traffic router of the ramp (one of `RAMP_ROUTERS`); None: no gate and no ramp, a pod
    serves its full share `warmup_s` after its model is loaded."""
    ramp_steps_pct: tuple[int, ...] = (10, 30, 50, 100)
    ramp_step_interval_s: float = 30.0
    ramp_max_error_rate: float = 0.01
    ramp_max_p95_latency_s: float | None = None
    ramp_max_p95_ratio: float = 1.2
    warmup_requests: int = 3
    warmup_deadline_s: float = 600.0
    cold_factor: float = 3.0
    """With the ramp, a pod answers `cold_factor` times slower for its first `warmup_s` after
    the model is loaded (the first requests compile and fill caches): its warm-up probes show
    it, and the gate waits for them to come back to normal."""
    faults: tuple[PodFault, ...] = ()
    """Pods that are slow or failing; see `PodFault`."""

    # GPU placement (docs/architecture.md, "The placement ladder" and "Accounting").
    nodes: tuple[NodeSpec, ...] = ()
    """The cluster's GPU nodes, by tier (instead of `gpus`); empty: the plain model, `gpus`
    whole cards and nothing else, where `placement` changes nothing."""
    placement: str = "whole"
    """`whole`: every pod waits for a whole card; `ladder`: `core.placement.plan` places pods
    on whole cards, MIG slices or shares (the `placement: auto` annotation)."""
    model_memory_mib: int | None = None
    """The `model-memory` annotation; None: unknown, so the ladder keeps to whole cards."""
    tier_speeds: tuple[tuple[str, float], ...] = ()
    """Throughput of one replica per tier (`shared`, `mig-3g.40gb`, or `mig` for every
    profile) as a ratio of a whole card's mu. A tier not named serves in proportion to the part
    of the card it holds (`core.placement.tier_fraction`: a 3g slice 3/7, a four-way share
    1/4); the service time is the same on every tier, only the rate differs."""
    gpu_quota: tuple[tuple[str, int], ...] = ()
    """The namespace's ResourceQuota `hard` entries, e.g. (("requests.nvidia.com/gpu", 8),);
    used is counted from the simulated pods."""

    # The server model (docs/simulator.md, "Token mode").
    tokens: TokenConfig | None = None
    """None: the request model (`replica_capacity_rps`, `service_time_s`, `slo_latency_s`).
    Set: the token mode, a replica's prefill and decode rates, KV-cache budget and the TTFT SLO
    (its `queue_timeout_s` replaces this one's); the run needs each second's prompt and output
    tokens. `replica_capacity_rps` still sizes the opening replicas and the policies' request
    targets, as an operator's request-rate target would."""

    # Cold starts (docs/simulator.md, "Node caches" and "The standby pool").
    cache: CacheConfig | None = None
    """Nodes with a model-weights cache: a start-up is warm or cold by where the pod lands
    (needs `gpus`, a fixed set of nodes). None: every start-up is `startup_s`, as before."""
    standby: StandbyConfig | None = None
    """A warm standby pool beside the service's replicas; None: no pool."""

    def __post_init__(self) -> None:
        if self.cache is not None and (self.gpus is None or self.nodes):
            raise ValueError("the node cache model needs a fixed cluster of whole cards (gpus)")
        if self.standby is not None and (self.ramp is not None or self.nodes):
            raise ValueError("the standby pool is modelled without the ramp and the tiered nodes")
        if self.tokens is not None and self.detailed:
            raise ValueError("the token mode models every replica alike: no ramp, no faults")
        if self.placement not in PLACEMENTS:
            raise ValueError(
                f"unknown placement {self.placement!r}; known: {', '.join(PLACEMENTS)}"
            )
        if self.nodes and self.gpus is not None:
            raise ValueError("give either nodes or gpus, not both")
        if self.model_memory_mib is not None and self.model_memory_mib <= 0:
            raise ValueError(f"model_memory_mib must be > 0, got {self.model_memory_mib}")
        if any(not (math.isfinite(v) and v > 0) for _, v in self.tier_speeds):
            raise ValueError(f"tier_speeds must be > 0: {self.tier_speeds}")
        if any(v < 0 for _, v in self.gpu_quota):
            raise ValueError(f"gpu_quota must be >= 0: {self.gpu_quota}")
        if self.ramp is not None and self.ramp not in RAMP_ROUTERS:
            raise ValueError(f"unknown ramp router {self.ramp!r}; known: {', '.join(RAMP_ROUTERS)}")
        steps = self.ramp_steps_pct
        if not steps or steps[-1] != 100 or any(not 0 < s <= 100 for s in steps):
            raise ValueError(f"ramp_steps_pct must be within (0, 100] and end at 100: {steps}")
        if any(b <= a for a, b in itertools.pairwise(steps)):
            raise ValueError(f"ramp_steps_pct must increase: {steps}")
        if not (math.isfinite(self.cold_factor) and self.cold_factor >= 1):
            raise ValueError(f"cold_factor must be finite and >= 1, got {self.cold_factor}")
        if len({f.pod for f in self.faults}) != len(self.faults):
            raise ValueError("two faults name the same pod")

    @property
    def detailed(self) -> bool:
        """Whether pods can differ (a ramp or faults), so traffic is modelled per pod."""
        return self.ramp is not None or bool(self.faults)

    @property
    def target_load_per_replica(self) -> float:
        return self.target_utilisation * self.replica_capacity_rps

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(slots=True)
class SimResult:
    params: SimParams
    timeseries: dict[str, npt.NDArray[np.float64]]
    """One array per `TIMESERIES_COLUMNS` entry, all the same length."""
    scale_events: list[tuple[float, int, int]] = field(default_factory=list)
    """(t_s, replicas before, replicas after) for every change of the desired count."""
    summary: dict[str, Any] = field(default_factory=dict)
    """One value per `SUMMARY_KEYS` entry."""


def rate_scale_for_mean_replicas(
    arrivals: npt.NDArray[np.float64], mean_replicas: float, params: SimParams
) -> float:
    """The rate scale at which the trace's mean load needs `mean_replicas` at the load target."""
    mean = float(np.mean(arrivals)) if len(arrivals) else 0.0
    if not (mean > 0 and math.isfinite(mean)):
        raise ValueError("the trace has no arrivals to scale")
    return mean_replicas * params.target_load_per_replica / mean

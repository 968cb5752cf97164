"""The controller's own surface for SREs: Prometheus metrics, `/metrics`, `/healthz`, `/readyz`.

Metrics live in a registry owned by a `Telemetry` value (never the global default registry), so
tests and several controller instances in one process do not collide. The loop does not know
about any of this: the wiring feeds each `TickReport` in.

The series labelled by service are rendered when Prometheus scrapes, not written per tick: a
tick keeps a reference to its report and its workloads and updates only what accumulates (the
decision counter when an outcome changes, core-hours), and the `_PerService` collector turns the
last tick into series on each scrape. A tick over 10,000 services would otherwise set some 90,000
labelled children, most to the value they already had, for a scrape every 15 s or more to read.
What the ramp driver and the placement ladder report between ticks is kept per service too.
Everything kept for a service goes when a tick no longer decides for it (deleted, no longer opted
in) or this replica's term of leadership ends, so the exposition does not grow with every service
that ever came and went.

It must not decide anything, nor touch the cluster.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

import prometheus_client as prom
from aiohttp import web
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from autoscaler import loop as loop_
from autoscaler import ports
from autoscaler.core import model

TICK_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
SERVICE_LABELS: Final = ("namespace", "service")
"""The first labels of every per-service family."""

_Outcome = tuple[model.Kind, model.Reason]
_REPLICA_STATES: Final = ("desired", "current", "serving", "min", "max")


_Rendered = GaugeMetricFamily | CounterMetricFamily


@dataclass(frozen=True, slots=True)
class Family:
    """A family labelled by service: `namespace`, `service`, then `labels`."""

    kind: type[GaugeMetricFamily] | type[CounterMetricFamily]
    name: str
    documentation: str
    labels: tuple[str, ...] = ()

    def new(self) -> _Rendered:
        return self.kind(self.name, self.documentation, labels=[*SERVICE_LABELS, *self.labels])


_Gauge, _Counter = GaugeMetricFamily, CounterMetricFamily
DECISIONS = Family(
    _Counter,
    "autoscaler_decisions",
    "Decisions that changed a service's outcome, by service, kind and reason.",
    ("kind", "reason"),
)
LAST_DECISION = Family(
    _Gauge,
    "autoscaler_service_decision",
    "1 for each service, labelled with the kind and reason of its last decision.",
    ("kind", "reason"),
)
SERVICE_HOLDING = Family(
    _Gauge,
    "autoscaler_service_holding",
    "1 while a service holds, 0 otherwise; `reason` is its last decision's reason.",
    ("reason",),
)
GPU_TARGET = Family(
    _Gauge,
    "autoscaler_target_gpu_utilization_percent",
    "The service's target GPU utilisation (its target-gpu-utilization), in percent.",
)
REPLICAS = Family(
    _Gauge,
    "autoscaler_replicas",
    "Replica counts per service: desired (decided), current (asked for), serving (warm).",
    ("state",),
)
SIGNAL = Family(
    _Gauge,
    "autoscaler_signal",
    "Smoothed service-wide signal value (rps, waiting requests) the decision used.",
    ("signal",),
)
SIGNAL_TARGET = Family(
    _Gauge,
    "autoscaler_signal_target",
    "Service-wide target for the signal: per-replica target x serving replicas.",
    ("signal",),
)
COOLDOWN = Family(
    _Gauge,
    "autoscaler_cooldown_remaining_seconds",
    "Seconds until the cooldown that blocks a wanted change ends (0 when none).",
)
MISSING = Family(
    _Gauge,
    "autoscaler_metrics_missing",
    "1 while a service holds because its metrics are missing or stale.",
)
PAUSED = Family(
    _Gauge,
    "autoscaler_paused",
    "1 while the service owner pauses autoscaling (annotation paused or paused-replicas).",
)
CORE_HOURS = Family(
    _Counter,
    "autoscaler_gpu_core_hours",
    "GPU core-hours used per service, weighted by card product (see docs/architecture.md).",
    ("project",),
)
# The traffic ramp (docs/architecture.md, "The warm-up gate and the traffic ramp").
RAMP_STEP = Family(
    _Gauge,
    "autoscaler_ramp_step_percent",
    "The ramp step the service's warming pods are at (0 when none is ramping).",
)
RAMP_WEIGHT = Family(
    _Gauge,
    "autoscaler_ramp_warming_weight_percent",
    "Percent of the service's traffic routed to its warming pods.",
)
RAMP_HELD = Family(
    _Gauge,
    "autoscaler_ramp_held",
    "1 while a service's ramp is held after repeated failed health gates.",
)
RAMP_ROLLBACKS = Family(
    _Counter,
    "autoscaler_ramp_rollbacks",
    "Ramps rolled back because the warming pods failed a health gate or warm-up.",
)
RAMP_PROMOTIONS = Family(
    _Counter,
    "autoscaler_ramp_promotions",
    "Ramps that reached 100 % and promoted their pods to the stable set.",
)
# The placement ladder (docs/architecture.md, "The placement ladder").
TIER_REPLICAS = Family(
    _Gauge,
    "autoscaler_tier_replicas",
    "Replicas asked for per placement tier (whole, mig-<profile>, shared).",
    ("tier",),
)
FALLBACKS = Family(
    _Counter,
    "autoscaler_placement_fallbacks",
    "Replicas placed below the whole-card tier because whole cards ran out, by tier.",
    ("tier",),
)
HOLDING = Family(
    _Gauge,
    "autoscaler_holding_services",
    "Services whose wanted change is blocked this tick, by reason.",
)
"""Not labelled by service (only by `reason`), but counted from the last tick as the rest."""

PER_SERVICE: Final = (
    DECISIONS,
    LAST_DECISION,
    SERVICE_HOLDING,
    GPU_TARGET,
    REPLICAS,
    SIGNAL,
    SIGNAL_TARGET,
    COOLDOWN,
    MISSING,
    PAUSED,
    CORE_HOURS,
    RAMP_STEP,
    RAMP_WEIGHT,
    RAMP_HELD,
    RAMP_ROLLBACKS,
    RAMP_PROMOTIONS,
    TIER_REPLICAS,
    FALLBACKS,
)
"""Every family labelled by service."""


@dataclass(frozen=True, slots=True)
class _Ramp:
    step_pct: float
    warming_pct: float
    held: bool


class _Service:
    """What a service accumulates across ticks, and what reached it between ticks."""

    __slots__ = ("core_hours", "decisions", "fallbacks", "promotions", "ramp", "rollbacks", "tiers")

    def __init__(self) -> None:
        self.decisions: dict[_Outcome, int] = {}
        self.core_hours: dict[str, float] = {}
        self.ramp: _Ramp | None = None
        self.rollbacks = 0
        self.promotions = 0
        self.tiers: dict[str, int] = {}
        self.fallbacks: dict[str, int] = {}


class _PerService(Collector):
    """The per-service series, rendered from the last tick and the kept counters on a scrape."""

    def __init__(self) -> None:
        self.report: loop_.TickReport | None = None
        self.workloads: Sequence[ports.Workload] = ()
        self.services: dict[model.ServiceId, _Service] = {}
        self.seen: dict[model.ServiceId, _Outcome] = {}
        """Each service's last outcome: a change is counted once in `DECISIONS`."""

    def service(self, service: model.ServiceId) -> _Service:
        found = self.services.get(service)
        if found is None:
            found = self.services[service] = _Service()
        return found

    def forget(self) -> None:
        self.report, self.workloads = None, ()
        self.services.clear()
        self.seen.clear()

    def describe(self) -> Iterable[Metric]:
        return [family.new() for family in (*PER_SERVICE, HOLDING)]

    def collect(self) -> Iterable[Metric]:
        # What the last tick left, taken at once: a scrape served from another thread then
        # renders one tick, whatever the loop does meanwhile.
        report, workloads, services = self.report, self.workloads, dict(self.services)
        out = {family: family.new() for family in PER_SERVICE}
        holding: dict[str, int] = dict.fromkeys((reason.value for reason in model.Reason), 0)
        decided: set[model.ServiceId] = set()
        if report is not None:
            for workload in workloads:
                decision = report.decisions.get(workload.id)
                if decision is not None:
                    decided.add(workload.id)
                    _render_tick(out, workload, decision, now_s=report.now_s)
                    if decision.kind is model.Kind.HOLD:
                        holding[decision.reason.value] += 1
        for service, kept in services.items():
            _render_kept(out, service, kept, decided=service in decided)
        for service in decided - services.keys():
            _render_kept(out, service, _Service(), decided=True)
        yield from out.values()
        holds = GaugeMetricFamily(HOLDING.name, HOLDING.documentation, labels=["reason"])
        for reason, count in holding.items():
            holds.add_metric([reason], count)
        yield holds


def _render_tick(
    out: Mapping[Family, _Rendered],
    workload: ports.Workload,
    decision: model.Decision,
    *,
    now_s: float,
) -> None:
    """The series of one service's decision in the last tick."""
    namespace, name = _labels(workload.id)
    policy = workload.policy
    kind, reason = decision.kind.value, decision.reason.value
    out[LAST_DECISION].add_metric([namespace, name, kind, reason], 1.0)
    holding = float(decision.kind is model.Kind.HOLD)
    out[SERVICE_HOLDING].add_metric([namespace, name, reason], holding)
    replicas = (
        decision.desired,
        decision.current,
        workload.serving,
        policy.min_replicas,
        policy.max_replicas,
    )
    family = out[REPLICAS]
    for state, count in zip(_REPLICA_STATES, replicas, strict=True):
        family.add_metric([namespace, name, state], count)
    missing = float(decision.reason is model.Reason.MISSING_DATA)
    out[MISSING].add_metric([namespace, name], missing)
    out[PAUSED].add_metric([namespace, name], float(policy.pause is not None))
    if policy.target_gpu_utilization_pct is not None:
        out[GPU_TARGET].add_metric([namespace, name], policy.target_gpu_utilization_pct)
    remaining = 0.0
    if decision.cooldown_until_s is not None:
        remaining = max(0.0, decision.cooldown_until_s - now_s)
    out[COOLDOWN].add_metric([namespace, name], remaining)
    for signal, vote in decision.contributions.items():
        label = signal.name.lower()
        target = policy.target(signal)
        if math.isfinite(vote.estimate):
            out[SIGNAL].add_metric([namespace, name, label], vote.estimate)
        if target is not None:
            out[SIGNAL_TARGET].add_metric([namespace, name, label], target * workload.serving)


def _render_kept(
    out: Mapping[Family, _Rendered], service: model.ServiceId, kept: _Service, *, decided: bool
) -> None:
    """The series a service accumulated, and its ramp's: from its first tick, every managed
    service has them, so dashboards and alerts read 0 rather than nothing."""
    ids = _labels(service)
    add = _adder(out)
    for (kind, reason), count in kept.decisions.items():
        add(DECISIONS, ids, count, kind.value, reason.value)
    for project, hours in kept.core_hours.items():
        add(CORE_HOURS, ids, hours, project)
    if kept.ramp is not None or decided:
        ramp = kept.ramp or _Ramp(0.0, 0.0, held=False)
        add(RAMP_STEP, ids, ramp.step_pct)
        add(RAMP_WEIGHT, ids, ramp.warming_pct)
        add(RAMP_HELD, ids, float(ramp.held))
    if kept.rollbacks or decided:
        add(RAMP_ROLLBACKS, ids, kept.rollbacks)
    if kept.promotions or decided:
        add(RAMP_PROMOTIONS, ids, kept.promotions)
    for tier, count in kept.tiers.items():
        add(TIER_REPLICAS, ids, count, tier)
    for tier, count in kept.fallbacks.items():
        add(FALLBACKS, ids, count, tier)


def _adder(out: Mapping[Family, _Rendered]) -> Callable[..., None]:
    def add(family: Family, ids: tuple[str, str], value: float, *labels: str) -> None:
        metric = out[family]
        assert isinstance(metric, GaugeMetricFamily | CounterMetricFamily)
        metric.add_metric([*ids, *labels], value)

    return add


class Telemetry:
    def __init__(self, registry: prom.CollectorRegistry | None = None) -> None:
        self.registry = registry or prom.CollectorRegistry()
        r = self.registry
        self.per_service: tuple[Family, ...] = PER_SERVICE
        """Every family labelled by service, rendered at scrape time from the last tick."""
        self._services = _PerService()
        r.register(self._services)
        self.tick = prom.Histogram(
            "autoscaler_tick_duration_seconds",
            "Wall time of one control-loop tick over every managed service.",
            buckets=TICK_BUCKETS_S,
            registry=r,
        )
        self.last_tick = prom.Gauge(
            "autoscaler_last_tick_timestamp_seconds",
            "Unix time of the last completed tick (for loop-stalled alerts).",
            registry=r,
        )
        self.services = prom.Gauge(
            "autoscaler_managed_services", "Services the loop manages.", registry=r
        )
        self.api_errors = prom.Counter(
            "autoscaler_kubernetes_api_errors",
            "Failed Kubernetes API calls, by operation.",
            ["operation"],
            registry=r,
        )
        self.query_errors = prom.Counter(
            "autoscaler_metrics_query_errors",
            "Failed or unusable metrics queries.",
            registry=r,
        )
        self.leader = prom.Gauge(
            "autoscaler_leader", "1 when this instance holds the leader lease.", registry=r
        )

    def observe_tick(
        self,
        report: loop_.TickReport,
        workloads: Sequence[ports.Workload],
        *,
        duration_s: float,
        wall_time_s: float,
        tick_s: float = 1.0,
    ) -> None:
        """Record one tick: its duration, and the decisions and workloads the next scrape renders.

        `tick_s` is the time the tick stands for: core-hours accrue the services' current rate
        over it. What was kept for every service this tick did not decide for is dropped."""
        self.tick.observe(duration_s)
        self.last_tick.set(wall_time_s)
        if report.metrics_error is not None:
            self.query_errors.inc()
        kept = self._services
        seen = kept.seen
        decisions = report.decisions
        present: set[model.ServiceId] = set()
        for workload in workloads:
            service = workload.id
            decision = decisions.get(service)
            if decision is None:
                continue
            present.add(service)
            outcome = (decision.kind, decision.reason)
            if seen.get(service) != outcome:
                seen[service] = outcome
                counts = kept.service(service).decisions
                counts[outcome] = counts.get(outcome, 0) + 1
            if workload.core_rate > 0 and tick_s > 0:
                project = workload.project or _labels(service)[0]
                hours = kept.service(service).core_hours
                hours[project] = hours.get(project, 0.0) + workload.core_rate * tick_s / 3600.0
        kept.report, kept.workloads = report, workloads
        self.services.set(len(present))
        for gone in seen.keys() - present:
            del seen[gone]
        for gone in kept.services.keys() - present:
            del kept.services[gone]

    def forget_services(self) -> None:
        """Remove every per-service series: this replica no longer decides for any service
        (its term of leadership ended), so what it last exported would only be stale."""
        self._services.forget()
        self.services.set(0)

    def ramp(
        self, service: model.ServiceId, *, step_pct: float, warming_pct: float, held: bool
    ) -> None:
        """Where a service's ramp is (called by the ramp driver whenever it acts)."""
        self._services.service(service).ramp = _Ramp(step_pct, warming_pct, held)

    def rolled_back(self, service: model.ServiceId) -> None:
        self._services.service(service).rollbacks += 1

    def promoted(self, service: model.ServiceId) -> None:
        self._services.service(service).promotions += 1

    def tiers(self, service: model.ServiceId, replicas: dict[str, int]) -> None:
        """Replicas asked for per placement tier; tiers absent from `replicas` are dropped."""
        self._services.service(service).tiers = dict(replicas)

    def fell_back(self, service: model.ServiceId, tier: str, replicas: int) -> None:
        """`replicas` new replicas went to `tier` because better tiers had no room."""
        fallbacks = self._services.service(service).fallbacks
        fallbacks[tier] = fallbacks.get(tier, 0) + replicas

    def exposition(self) -> bytes:
        return prom.generate_latest(self.registry)


def _labels(service: model.ServiceId) -> tuple[str, str]:
    namespace, _, name = service.partition("/")
    return namespace, name


def http_app(telemetry: Telemetry, *, ready: Callable[[], bool]) -> web.Application:
    """`/metrics` (text exposition), `/healthz` (the process answers), `/readyz` (`ready()`)."""

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(body=telemetry.exposition(), content_type="text/plain", charset="utf-8")

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def readyz(_: web.Request) -> web.Response:
        if ready():
            return web.Response(text="ready\n")
        return web.Response(text="not ready\n", status=503)

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    return app

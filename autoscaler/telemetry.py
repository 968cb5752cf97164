"""The controller's own surface for SREs: Prometheus metrics, `/metrics`, `/healthz`, `/readyz`.

Metrics live in a registry owned by a `Telemetry` value (never the global default registry), so
tests and several controller instances in one process do not collide. The loop does not know
about any of this: the wiring feeds each `TickReport` in.

The series labelled by service are rendered when Prometheus scrapes, not written per tick: a
tick keeps a reference to its report and its workloads and updates only what accumulates (the
decision counter when an outcome changes, core-hours), and the `_PerService` collector turns the
last tick into series on each scrape. A tick over 10,000 services would otherwise set some 90,000
labelled children, most to the value they already had, for a scrape every 15 s or more to read.
The loop's decisions come as arrays (`loop.Decisions`): only the outcomes that moved since the
last tick are compared one by one.
What the ramp driver and the placement ladder report between ticks is kept per service too.
`/metrics` writes these series to the text format itself (prometheus_client's writer spends
seconds on 200,000 samples), from a thread, so a scrape does not hold up the loop.
Everything kept for a service goes when a tick no longer decides for it (deleted, no longer opted
in) or this replica's term of leadership ends, so the exposition does not grow with every service
that ever came and went.

It must not decide anything, nor touch the cluster.
"""

from __future__ import annotations

import asyncio
import enum
import itertools
import math
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Protocol, TypeVar

import numpy as np
import numpy.typing as npt
import prometheus_client as prom
from aiohttp import web
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from autoscaler import loop as loop_
from autoscaler import ports
from autoscaler.core import batch, model

TICK_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
SERVICE_LABELS: Final = ("namespace", "service")
"""The first labels of every per-service family."""

_Outcome = tuple[model.Kind, model.Reason]
_S = TypeVar("_S", bound="_Sink")
_REPLICA_STATES: Final = ("desired", "current", "serving", "min", "max")


@dataclass(frozen=True, slots=True)
class Family:
    """A family labelled by service: `namespace`, `service`, then `labels`."""

    kind: type[GaugeMetricFamily] | type[CounterMetricFamily]
    name: str
    documentation: str
    labels: tuple[str, ...] = ()
    by_service: bool = True

    @property
    def label_names(self) -> tuple[str, ...]:
        return (*SERVICE_LABELS, *self.labels) if self.by_service else self.labels

    def new(self) -> GaugeMetricFamily | CounterMetricFamily:
        return self.kind(self.name, self.documentation, labels=list(self.label_names))

    def header(self) -> str:
        """The family's HELP and TYPE lines in the text exposition format 0.0.4."""
        counter = self.kind is CounterMetricFamily
        # As prometheus_client writes 0.0.4: a counter's lines name it with its `_total`.
        name, kind = (f"{self.name}_total", "counter") if counter else (self.name, "gauge")
        documentation = self.documentation.replace("\\", r"\\").replace("\n", r"\n")
        return f"# HELP {name} {documentation}\n# TYPE {name} {kind}\n"


class _Sink(Protocol):
    def add_metric(self, labels: Sequence[str], value: float) -> None: ...


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
    "Service-wide target for the signal: per-replica target x serving replicas (a latency "
    "percentile's target as set).",
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
# The warm standby pool (docs/operations.md, "The warm standby pool").
STANDBY = Family(
    _Gauge,
    "autoscaler_standby_replicas",
    "The warm standby pool per service: size (asked for now), replicas (in the Deployment's "
    "count) and waiting (warm pods with no traffic).",
    ("state",),
)
STANDBY_CORE_HOURS = Family(
    _Counter,
    "autoscaler_standby_gpu_core_hours",
    "GPU core-hours of the pods waiting in the standby pool, each weighing the service's mean "
    "per replica; part of autoscaler_gpu_core_hours.",
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
# Cache-aware placement (docs/architecture.md, "Cache-aware placement").
STARTUP = Family(
    _Gauge,
    "autoscaler_pod_startup_seconds",
    "Median observed time from creation to Ready of the service's recent pods, by cache: hit "
    "(the node was warm for the model when the pod was created), miss, or all serving pods.",
    ("cache",),
)
STARTS = Family(
    _Counter,
    "autoscaler_pod_starts",
    "Pod start-ups of the service observed since the controller started, by cache hit or miss.",
    ("cache",),
)
HOLDING = Family(
    _Gauge,
    "autoscaler_holding_services",
    "Services whose wanted change is blocked this tick, by reason.",
    ("reason",),
    by_service=False,
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
    STANDBY,
    STANDBY_CORE_HOURS,
    RAMP_STEP,
    RAMP_WEIGHT,
    RAMP_HELD,
    RAMP_ROLLBACKS,
    RAMP_PROMOTIONS,
    TIER_REPLICAS,
    FALLBACKS,
    STARTUP,
    STARTS,
)
"""Every family labelled by service."""


@dataclass(frozen=True, slots=True)
class _Ramp:
    step_pct: float
    warming_pct: float
    held: bool


class _Service:
    """What a service accumulates across ticks, and what reached it between ticks."""

    __slots__ = (
        "core_hours",
        "decisions",
        "fallbacks",
        "promotions",
        "ramp",
        "rollbacks",
        "standby_hours",
        "tiers",
    )

    def __init__(self) -> None:
        self.decisions: dict[_Outcome, int] = {}
        self.core_hours: dict[str, float] = {}
        self.standby_hours: dict[str, float] = {}
        self.ramp: _Ramp | None = None
        self.rollbacks = 0
        self.promotions = 0
        self.tiers: dict[str, int] = {}
        self.fallbacks: dict[str, int] = {}


@dataclass(frozen=True, slots=True)
class _LastOutcomes:
    layout: Mapping[model.ServiceId, int]
    """The tick's place of each service (`Decisions.index`): the same object while the
    records stay the same services in the same order."""
    kind: npt.NDArray[np.int8]
    reason: npt.NDArray[np.int8]


@dataclass(frozen=True, slots=True, eq=False)
class _Accrual:
    """Core-hours accruing as arrays over the ticks of one layout (`Decisions.index`: the same
    services in the same order), rather than service by service every tick.

    Row `i` is the service of `workloads[i]`: `hours[i]` is its count for its project
    `projects[i]`, what it had kept for that project before included, and `accrued[i]` says
    whether it has one (kept, or accrued since). Each tick makes a new value (no array is
    changed once set), so a scrape from another thread reads one tick's. The counts go into
    the services' `core_hours` when the layout or a row's project changes (`_settle`).
    """

    layout: Mapping[model.ServiceId, int]
    workloads: Sequence[ports.Workload]
    projects: list[str]
    rates: npt.NDArray[np.float64]
    hours: npt.NDArray[np.float64]
    accrued: npt.NDArray[np.bool_]

    def live(self) -> dict[model.ServiceId, tuple[str, float]]:
        """Each service's project and count where it has one."""
        rows = np.flatnonzero(self.accrued).tolist()
        hours = self.hours[rows].tolist()
        workloads, projects = self.workloads, self.projects
        return {
            workloads[row].id: (projects[row], count)
            for row, count in zip(rows, hours, strict=True)
        }


def _project(workload: ports.Workload) -> str:
    return workload.project or _labels(workload.id)[0]


class _PerService(Collector):
    """The per-service series, rendered from the last tick and the kept counters on a scrape."""

    def __init__(self) -> None:
        self.tick: tuple[loop_.TickReport, Sequence[ports.Workload]] | None = None
        """The last tick's report and workloads, set as one value (a scrape reads them both)."""
        self.services: dict[model.ServiceId, _Service] = {}
        self.seen: dict[model.ServiceId, _Outcome] = {}
        """Each service's last outcome: a change is counted once in `DECISIONS`."""
        self.last: _LastOutcomes | None = None
        """The last tick's outcomes as arrays, when it came as `loop.Decisions`: those of the
        next tick that did not move are in `seen` already."""
        self.accrual: _Accrual | None = None
        """Core-hours accruing since the layout of the ticks last changed, when they come as
        `loop.Decisions`; a service's count there stands for the one in its `core_hours`."""

    def service(self, service: model.ServiceId) -> _Service:
        found = self.services.get(service)
        if found is None:
            found = self.services[service] = _Service()
        return found

    def forget(self) -> None:
        self.tick = None
        self.services.clear()
        self.seen.clear()
        self.last = None
        self.accrual = None

    def settle(self) -> None:
        """Put what accrued as arrays into the services' `core_hours`, and end the accrual."""
        accrual = self.accrual
        if accrual is None:
            return
        for service, (project, hours) in accrual.live().items():
            self.service(service).core_hours[project] = hours
        self.accrual = None

    def accrue(
        self,
        layout: Mapping[model.ServiceId, int],
        workloads: Sequence[ports.Workload],
        tick_s: float,
    ) -> None:
        """Each service's current rate over `tick_s` added to its project's core-hours, as
        arrays; only the records that changed since the last tick are read one by one."""
        last = self.accrual
        count = len(workloads)
        if last is None or last.layout is not layout or len(last.workloads) != count:
            self.settle()
            projects = [_project(w) for w in workloads]
            rates = np.fromiter((w.core_rate for w in workloads), np.float64, count)
            hours = np.zeros(count)
            accrued = np.zeros(count, dtype=np.bool_)
            for row, (workload, project) in enumerate(zip(workloads, projects, strict=True)):
                # Every service with a rate is kept, as when it accrued one by one.
                service = workload.id
                found = self.services.get(service) if rates[row] <= 0 else self.service(service)
                kept = None if found is None else found.core_hours.get(project)
                if kept is not None:
                    hours[row], accrued[row] = kept, True
        else:
            projects, rates, hours, accrued = last.projects, last.rates, last.hours, last.accrued
            changed = ports.rebuilt_rows(last.workloads, workloads)
            if changed:
                projects, rates, hours, accrued = (
                    list(projects),
                    rates.copy(),
                    hours.copy(),
                    accrued.copy(),
                )
                for row in changed:
                    workload = workloads[row]
                    rates[row] = workload.core_rate
                    if not workload.core_rate <= 0:
                        self.service(workload.id)
                    project = _project(workload)
                    if project == projects[row]:
                        continue
                    # The row's count goes to its old project; the new one's is taken up.
                    found = self.service(workload.id)
                    if accrued[row]:
                        found.core_hours[projects[row]] = float(hours[row])
                    kept = found.core_hours.get(project)
                    projects[row] = project
                    hours[row], accrued[row] = (0.0, False) if kept is None else (kept, True)
        # As `hours.get(project, 0.0) + rate * tick_s / 3600.0` for every rate not <= 0.
        accruing = ~(rates <= 0)
        hours = np.where(accruing, hours + rates * tick_s / 3600.0, hours)
        # A copy: the records may come in a list that changes in place.
        records = tuple(workloads)
        self.accrual = _Accrual(layout, records, projects, rates, hours, accrued | accruing)

    def describe(self) -> Iterable[Metric]:
        return [family.new() for family in (*PER_SERVICE, HOLDING)]

    def collect(self) -> Iterable[Metric]:
        metrics = self._fill(lambda family: family.new())
        return [metric for metric in metrics.values() if isinstance(metric, Metric)]

    def text(self) -> Iterator[str]:
        """The same series as `collect`, straight to the text exposition format: at 10,000
        services prometheus_client's own writer spends seconds on them, and a sink called
        per sample most of a second. Each line is one `%` of its family's template for its
        label values other than the service's (`_Templates`) with the service's quoted
        namespace and name and the value's text; the families' lines are gathered in lists,
        a service's series in the order `_render_tick` and `_render_kept` add them."""
        tick, services, accrual = self.tick, dict(self.services), self.accrual
        live = {} if accrual is None else accrual.live()
        lines: dict[Family, list[str]] = {family: [] for family in (*PER_SERVICE, HOLDING)}
        holding: dict[str, int] = dict.fromkeys((reason.value for reason in model.Reason), 0)
        decided: set[model.ServiceId] = set()
        names: dict[model.ServiceId, tuple[str, str]] = {}
        if tick is not None:
            report, workloads = tick
            decided = _text_tick(lines, report, workloads, names, holding)
        _text_kept(lines, services, live, decided, names)
        templates = _TEMPLATES[HOLDING]
        lines[HOLDING].extend(
            templates[(reason,)] % _count(count) for reason, count in holding.items()
        )
        for family in list(lines):
            # Each family's lines go once joined: the whole text is not held twice.
            yield family.header() + "".join(lines.pop(family))

    def _fill(self, sink: Callable[[Family], _S]) -> dict[Family, _S]:
        """A `sink` per family, given every series now: the last tick's, and what was kept."""
        # What the last tick left, taken at once: a scrape served from another thread then
        # renders one tick, whatever the loop does meanwhile.
        tick, services, accrual = self.tick, dict(self.services), self.accrual
        live = {} if accrual is None else accrual.live()
        out = {family: sink(family) for family in (*PER_SERVICE, HOLDING)}
        holding: dict[str, int] = dict.fromkeys((reason.value for reason in model.Reason), 0)
        decided: set[model.ServiceId] = set()
        if tick is not None:
            report, workloads = tick
            for workload in workloads:
                decision = loop_.brief(report.decisions, workload.id)
                if decision is not None:
                    decided.add(workload.id)
                    votes = loop_.estimates(report.decisions, workload.id)
                    _render_tick(out, workload, decision, votes, now_s=report.now_s)
                    if decision.kind is model.Kind.HOLD:
                        holding[decision.reason.value] += 1
        for service, kept in services.items():
            _render_kept(out, service, kept, live.get(service), decided=service in decided)
        for service in decided - services.keys():
            _render_kept(out, service, _Service(), live.get(service), decided=True)
        for reason, count in holding.items():
            out[HOLDING].add_metric([reason], count)
        return out


def _render_tick(
    out: Mapping[Family, _Sink],
    workload: ports.Workload,
    decision: loop_.Brief,
    votes: Iterable[tuple[model.Signal, float]],
    *,
    now_s: float,
) -> None:
    """The series of one service's decision in the last tick (`votes`: each vote's estimate)."""
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
    pool = decision.standby
    if pool is not None:
        family = out[STANDBY]
        for state, count in (("size", pool.size), ("replicas", pool.replicas)):
            family.add_metric([namespace, name, state], count)
        family.add_metric([namespace, name, "waiting"], pool.waiting)
    for signal, estimate in votes:
        label = signal.name.lower()
        target = policy.target(signal)
        if math.isfinite(estimate):
            out[SIGNAL].add_metric([namespace, name, label], estimate)
        if target is not None:
            # A latency percentile's target is the service's own, not one per replica.
            per = 1 if signal in model.LATENCY_SIGNALS else workload.serving
            out[SIGNAL_TARGET].add_metric([namespace, name, label], target * per)
    if workload.startup_s is not None:
        out[STARTUP].add_metric([namespace, name, "all"], workload.startup_s)
    split = workload.startup_split
    if split is not None:
        for label, seconds, count in (
            ("hit", split.hit_s, split.started_hits),
            ("miss", split.miss_s, split.started_misses),
        ):
            if seconds is not None:
                out[STARTUP].add_metric([namespace, name, label], seconds)
            out[STARTS].add_metric([namespace, name, label], count)


def _core_hours(kept: _Service, live: tuple[str, float] | None) -> list[tuple[str, float]]:
    """A service's core-hours by project: those kept, and the one accruing as arrays (a copy,
    taken at once: the loop may add to them while another thread scrapes)."""
    if live is None:
        return list(kept.core_hours.items())
    hours = dict(kept.core_hours)
    hours[live[0]] = live[1]
    return list(hours.items())


def _render_kept(
    out: Mapping[Family, _Sink],
    service: model.ServiceId,
    kept: _Service,
    live: tuple[str, float] | None,
    *,
    decided: bool,
) -> None:
    """The series a service accumulated, and its ramp's: from its first tick, every managed
    service has them, so dashboards and alerts read 0 rather than nothing. `live`: its
    project and core-hours accruing as arrays, if any."""
    namespace, name = _labels(service)
    # Copies, taken at once: the loop may add to them while another thread scrapes.
    for (kind, reason), count in list(kept.decisions.items()):
        out[DECISIONS].add_metric([namespace, name, kind.value, reason.value], count)
    for project, hours in _core_hours(kept, live):
        out[CORE_HOURS].add_metric([namespace, name, project], hours)
    for project, hours in list(kept.standby_hours.items()):
        out[STANDBY_CORE_HOURS].add_metric([namespace, name, project], hours)
    if kept.ramp is not None or decided:
        ramp = kept.ramp or _Ramp(0.0, 0.0, held=False)
        out[RAMP_STEP].add_metric([namespace, name], ramp.step_pct)
        out[RAMP_WEIGHT].add_metric([namespace, name], ramp.warming_pct)
        out[RAMP_HELD].add_metric([namespace, name], float(ramp.held))
    if kept.rollbacks or decided:
        out[RAMP_ROLLBACKS].add_metric([namespace, name], kept.rollbacks)
    if kept.promotions or decided:
        out[RAMP_PROMOTIONS].add_metric([namespace, name], kept.promotions)
    for tier, count in list(kept.tiers.items()):
        out[TIER_REPLICAS].add_metric([namespace, name, tier], count)
    for tier, count in list(kept.fallbacks.items()):
        out[FALLBACKS].add_metric([namespace, name, tier], count)


_Part = str | enum.Enum
"""A label value other than the service's, as a template is asked for it: a `Signal` is named
as `_render_tick` names it, another enumeration by its value."""


class _Templates(dict[tuple[_Part, ...], str]):
    """One family's line templates, by its label values other than the service's: a `%`
    format of the service's quoted namespace and name (for a family by service) and the
    value's text, as prometheus_client writes the line (labels sorted by name, quoted)."""

    __slots__ = ("_family",)
    _KEPT: Final = 1024
    """Templates kept at most (label values such as projects and tiers are the cluster's)."""

    def __init__(self, family: Family) -> None:
        super().__init__()
        self._family = family

    def __missing__(self, parts: tuple[_Part, ...]) -> str:
        family = self._family
        names = family.label_names
        values = [_escape(_part(part)).replace("%", "%%") for part in parts]
        if family.by_service:
            values = ["%s", "%s", *values]
        # Labels sorted by name, as prometheus_client writes them.
        matchers = ",".join(
            f'{name}="{value}"' for name, value in sorted(zip(names, values, strict=True))
        )
        sample = family.name.replace("%", "%%")
        sample += "_total" if family.kind is CounterMetricFamily else ""
        if len(self) >= self._KEPT:
            self.clear()
        found = self[parts] = sample + "{" + matchers + "} %s\n"
        return found


_TEMPLATES: Final = {family: _Templates(family) for family in (*PER_SERVICE, HOLDING)}


def _part(part: _Part) -> str:
    if isinstance(part, model.Signal):
        return part.name.lower()
    return str(part.value) if isinstance(part, enum.Enum) else part


def _text_tick(
    lines: Mapping[Family, list[str]],
    report: loop_.TickReport,
    workloads: Sequence[ports.Workload],
    names: dict[model.ServiceId, tuple[str, str]],
    holding: dict[str, int],
) -> set[model.ServiceId]:
    """`_render_tick`'s lines of every service the last tick decided for, written in the text
    format; returns those services, their quoted names in `names` and how many hold by
    reason added to `holding`."""
    decided: set[model.ServiceId] = set()
    decisions, now_s = report.decisions, report.now_s
    briefs = decisions.briefs() if isinstance(decisions, loop_.Decisions) else None
    t = _TEMPLATES
    last_t, holding_t, signal_t, target_t = (
        t[LAST_DECISION],
        t[SERVICE_HOLDING],
        t[SIGNAL],
        t[SIGNAL_TARGET],
    )
    replicas_t = [t[REPLICAS][(state,)] for state in _REPLICA_STATES]
    missing_t, paused_t, gpu_t, cooldown_t = (
        t[f][()] for f in (MISSING, PAUSED, GPU_TARGET, COOLDOWN)
    )
    size_t, pooled_t, waiting_t = (
        t[STANDBY][(state,)] for state in ("size", "replicas", "waiting")
    )
    all_t, hit_t, miss_t = (t[STARTUP][(cache,)] for cache in ("all", "hit", "miss"))
    hits_t, misses_t = (t[STARTS][(cache,)] for cache in ("hit", "miss"))
    last, holds, replicas, missing, paused, gpu, cooldown, standby, signals, targets = (
        lines[f].append
        for f in (
            LAST_DECISION,
            SERVICE_HOLDING,
            REPLICAS,
            MISSING,
            PAUSED,
            GPU_TARGET,
            COOLDOWN,
            STANDBY,
            SIGNAL,
            SIGNAL_TARGET,
        )
    )
    startup, starts = lines[STARTUP].append, lines[STARTS].append
    hold_kind, missing_data, latency = (
        model.Kind.HOLD,
        model.Reason.MISSING_DATA,
        model.LATENCY_SIGNALS,
    )
    for workload in workloads:
        service = workload.id
        decision = briefs.get(service) if briefs is not None else loop_.brief(decisions, service)
        if decision is None:
            continue
        decided.add(service)
        ns, name = names[service] = _quoted(service)
        policy = workload.policy
        kind, reason = decision.kind, decision.reason
        last(last_t[kind, reason] % (ns, name, "1.0"))
        if kind is hold_kind:
            holding[reason.value] += 1
            holds(holding_t[(reason,)] % (ns, name, "1.0"))
        else:
            holds(holding_t[(reason,)] % (ns, name, "0.0"))
        counts = (
            decision.desired,
            decision.current,
            workload.serving,
            policy.min_replicas,
            policy.max_replicas,
        )
        for template, count in zip(replicas_t, counts, strict=True):
            replicas(template % (ns, name, _count(count)))
        missing(missing_t % (ns, name, "1.0" if reason is missing_data else "0.0"))
        paused(paused_t % (ns, name, "0.0" if policy.pause is None else "1.0"))
        if policy.target_gpu_utilization_pct is not None:
            gpu(gpu_t % (ns, name, _number(policy.target_gpu_utilization_pct)))
        until = decision.cooldown_until_s
        remaining = "0.0" if until is None or not until > now_s else _number(until - now_s)
        cooldown(cooldown_t % (ns, name, remaining))
        pool = decision.standby
        if pool is not None:
            standby(size_t % (ns, name, _count(pool.size)))
            standby(pooled_t % (ns, name, _count(pool.replicas)))
            standby(waiting_t % (ns, name, _count(pool.waiting)))
        for signal, estimate in loop_.estimates(decisions, service):
            target = policy.target(signal)
            if math.isfinite(estimate):
                signals(signal_t[(signal,)] % (ns, name, _number(estimate)))
            if target is not None:
                # A latency percentile's target is the service's own, not one per replica.
                per = 1 if signal in latency else workload.serving
                targets(target_t[(signal,)] % (ns, name, _number(target * per)))
        if workload.startup_s is not None:
            startup(all_t % (ns, name, _number(workload.startup_s)))
        split = workload.startup_split
        if split is not None:
            if split.hit_s is not None:
                startup(hit_t % (ns, name, _number(split.hit_s)))
            starts(hits_t % (ns, name, _count(split.started_hits)))
            if split.miss_s is not None:
                startup(miss_t % (ns, name, _number(split.miss_s)))
            starts(misses_t % (ns, name, _count(split.started_misses)))
    return decided


def _text_kept(
    lines: Mapping[Family, list[str]],
    services: Mapping[model.ServiceId, _Service],
    live: Mapping[model.ServiceId, tuple[str, float]],
    decided: set[model.ServiceId],
    names: Mapping[model.ServiceId, tuple[str, str]],
) -> None:
    """`_render_kept`'s lines of every service, in the same order, written in the text format."""
    t = _TEMPLATES
    decisions_t, hours_t, standby_t, tiers_t, fallbacks_t = (
        t[f] for f in (DECISIONS, CORE_HOURS, STANDBY_CORE_HOURS, TIER_REPLICAS, FALLBACKS)
    )
    step_t, weight_t, held_t, rollbacks_t, promotions_t = (
        t[f][()] for f in (RAMP_STEP, RAMP_WEIGHT, RAMP_HELD, RAMP_ROLLBACKS, RAMP_PROMOTIONS)
    )
    decisions, hours, standby, tiers, fallbacks = (
        lines[f] for f in (DECISIONS, CORE_HOURS, STANDBY_CORE_HOURS, TIER_REPLICAS, FALLBACKS)
    )
    step, weight, held, rollbacks, promotions = (
        lines[f].append
        for f in (RAMP_STEP, RAMP_WEIGHT, RAMP_HELD, RAMP_ROLLBACKS, RAMP_PROMOTIONS)
    )
    none = _Service()
    still = _Ramp(0.0, 0.0, held=False)
    every = itertools.chain(
        ((service, kept, service in decided) for service, kept in services.items()),
        ((service, none, True) for service in decided - services.keys()),
    )
    for service, kept, is_decided in every:
        ns, name = names.get(service) or _quoted(service)
        # Copies, taken at once: the loop may add to them while another thread scrapes.
        decisions.extend(
            [
                decisions_t[outcome] % (ns, name, _count(n))
                for outcome, n in list(kept.decisions.items())
            ]
        )
        hours.extend(
            [
                hours_t[(p,)] % (ns, name, _number(h))
                for p, h in _core_hours(kept, live.get(service))
            ]
        )
        standby.extend(
            [standby_t[(p,)] % (ns, name, _number(h)) for p, h in list(kept.standby_hours.items())]
        )
        if kept.ramp is not None or is_decided:
            ramp = kept.ramp or still
            step(step_t % (ns, name, _number(ramp.step_pct)))
            weight(weight_t % (ns, name, _number(ramp.warming_pct)))
            held(held_t % (ns, name, "1.0" if ramp.held else "0.0"))
        if kept.rollbacks or is_decided:
            rollbacks(rollbacks_t % (ns, name, _count(kept.rollbacks)))
        if kept.promotions or is_decided:
            promotions(promotions_t % (ns, name, _count(kept.promotions)))
        tiers.extend(
            [tiers_t[(tier,)] % (ns, name, _count(n)) for tier, n in list(kept.tiers.items())]
        )
        fallbacks.extend(
            [
                fallbacks_t[(tier,)] % (ns, name, _count(n))
                for tier, n in list(kept.fallbacks.items())
            ]
        )


def _quoted(service: model.ServiceId) -> tuple[str, str]:
    """The service's namespace and name as label values of the text format."""
    namespace, _, name = service.partition("/")
    return _escape(namespace), _escape(name)


class Telemetry:
    def __init__(self, registry: prom.CollectorRegistry | None = None) -> None:
        self.registry = registry or prom.CollectorRegistry()
        """Every series: what `collect` and `get_sample_value` read."""
        self.per_service: tuple[Family, ...] = PER_SERVICE
        """Every family labelled by service, rendered at scrape time from the last tick."""
        self._services = _PerService()
        # The series not rendered from the last tick; `exposition` writes them through
        # prometheus_client and the rest through `_PerService.text`.
        self._plain = r = prom.CollectorRegistry(auto_describe=True)
        self.registry.register(_Merged(self._plain))
        self.registry.register(self._services)
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
        self.events = prom.Counter(
            "autoscaler_kubernetes_events",
            "Kubernetes Events recorded, by what became of them: queued, merged (into one waiting),"
            " aggregated (combined with similar ones), rate_limited, dropped (too many waiting);"
            " and of the queued: created, patched (a repeat's count), failed, unsent.",
            ["outcome"],
            registry=r,
        )
        self.query_errors = prom.Counter(
            "autoscaler_metrics_query_errors",
            "Failed or unusable metrics queries.",
            registry=r,
        )
        self.leader = prom.Gauge(
            "autoscaler_leader",
            "1 when this instance leads at least one bucket Lease (the leader Lease, with one).",
            registry=r,
        )
        self.buckets_led = prom.Gauge(
            "autoscaler_lease_buckets_led",
            "Bucket Leases this instance leads: the share of the services it acts on.",
            registry=r,
        )
        self.bucket_leader = prom.Gauge(
            "autoscaler_lease_bucket_leader",
            "1 for each bucket Lease this instance leads, 0 for the others.",
            ["lease"],
            registry=r,
        )
        self.gpu_excluded = prom.Gauge(
            "autoscaler_gpu_node_excluded",
            "1 while a node's GPUs are left out of placement, by node and reason (xid_errors,"
            " memory_full; see docs/operations.md, GPU health).",
            ["node", "reason"],
            registry=r,
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
        decisions = report.decisions
        if isinstance(decisions, loop_.Decisions) and decisions.workloads is workloads:
            self._observe_codes(decisions, tick_s)
            kept.tick = (report, workloads)
            return
        kept.last = None
        kept.settle()
        seen = kept.seen
        present: set[model.ServiceId] = set()
        for workload in workloads:
            service = workload.id
            decision = loop_.brief(decisions, service)
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
                pool = decision.standby
                if pool is not None and pool.waiting and workload.replicas > 0:
                    # The pool's share of the rate: its pods weigh the service's mean.
                    share = min(1.0, pool.waiting / workload.replicas)
                    held = kept.service(service).standby_hours
                    added = workload.core_rate * share * tick_s / 3600.0
                    held[project] = held.get(project, 0.0) + added
        kept.tick = (report, workloads)
        self.services.set(len(present))
        for gone in seen.keys() - present:
            del seen[gone]
        for gone in kept.services.keys() - present:
            del kept.services[gone]

    def _observe_codes(self, decisions: loop_.Decisions, tick_s: float) -> None:
        """`observe_tick` on a tick's decisions as arrays (`Decisions.codes`): an outcome is
        looked at one by one only when it moved since the last tick, which this one follows
        (the same records, in the same order); every service's core-hours accrue."""
        kept = self._services
        seen, workloads, index = kept.seen, decisions.workloads, decisions.index
        codes = decisions.codes()
        last = kept.last
        if last is not None and last.layout is index:
            moved = (codes.kind != last.kind) | (codes.reason != last.reason)
            looked: Iterable[int] = np.flatnonzero(moved).tolist()
        else:
            looked = range(len(workloads))
        kinds, reasons = codes.kind, codes.reason
        for i in looked:
            service = workloads[i].id
            outcome = (batch.KINDS[kinds[i]], batch.REASONS[reasons[i]])
            if seen.get(service) != outcome:
                seen[service] = outcome
                counts = kept.service(service).decisions
                counts[outcome] = counts.get(outcome, 0) + 1
        kept.last = _LastOutcomes(index, codes.kind, codes.reason)
        if tick_s > 0:
            kept.accrue(index, workloads, tick_s)
            waiting = codes.pools[:, 2]
            pooled = np.flatnonzero(waiting > 0).tolist() if len(waiting) else []
            for i, pool_waiting in zip(pooled, waiting[pooled].tolist(), strict=True):
                workload = workloads[i]
                rate = workload.core_rate
                if rate <= 0 or workload.replicas <= 0:
                    continue
                # The pool's share of the rate: its pods weigh the service's mean.
                project = _project(workload)
                share = min(1.0, pool_waiting / workload.replicas)
                held = kept.service(workload.id).standby_hours
                added = rate * share * tick_s / 3600.0
                held[project] = held.get(project, 0.0) + added
        self.services.set(len(workloads))
        for gone in seen.keys() - index.keys():
            del seen[gone]
        for gone in kept.services.keys() - index.keys():
            del kept.services[gone]

    def led(self, names: Sequence[str], led: Collection[int]) -> None:
        """Which of the bucket Leases `names` this instance leads now (their indices)."""
        self.leader.set(1 if led else 0)
        self.buckets_led.set(len(led))
        for index, name in enumerate(names):
            self.bucket_leader.labels(name).set(1 if index in led else 0)

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

    def gpu_exclusions(self, excluded: Mapping[str, Iterable[str]]) -> None:
        """The nodes whose GPUs placement leaves out now, with their reasons: every other
        (node, reason) series goes."""
        self.gpu_excluded.clear()
        for node, reasons in excluded.items():
            for reason in reasons:
                self.gpu_excluded.labels(node, reason).set(1)

    def exposition(self) -> bytes:
        """`/metrics` in the text format 0.0.4. Safe to call from another thread than the
        loop's: the per-service series are taken from one tick."""
        # Encoded a family at a time, for the same reason.
        return b"".join(
            [prom.generate_latest(self._plain), *map(str.encode, self._services.text())]
        )


class _Merged(Collector):
    """Another registry's series as one collector of this one."""

    def __init__(self, registry: prom.CollectorRegistry) -> None:
        self._registry = registry

    def describe(self) -> Iterable[Metric]:
        return list(self._registry.collect())

    def collect(self) -> Iterable[Metric]:
        return self._registry.collect()


_WHOLE_NUMBERS: dict[float, str] = {}
"""The text of whole sample values written so far (at most `_WHOLE_NUMBERS_KEPT`): the counts
and flags most series carry repeat from service to service."""
_WHOLE_NUMBERS_KEPT: Final = 4096


def _number(value: float) -> str:
    """A sample value as prometheus_client writes it."""
    if value == 0:  # 0.0 and -0.0 are equal keys, but written apart
        return "-0.0" if math.copysign(1.0, value) < 0 else "0.0"
    found = _WHOLE_NUMBERS.get(value)
    if found is not None:
        return found
    text = str(floatToGoString(value))  # type: ignore[no-untyped-call]
    if float(value).is_integer() and len(_WHOLE_NUMBERS) < _WHOLE_NUMBERS_KEPT:
        _WHOLE_NUMBERS[value] = text
    return text


_COUNTS: Final = tuple(str(floatToGoString(float(n))) for n in range(1024))  # type: ignore[no-untyped-call]
"""The text of the counts most series carry (replicas, decisions, starts)."""


def _count(count: int) -> str:
    """A count as prometheus_client writes it."""
    return _COUNTS[count] if 0 <= count < len(_COUNTS) else _number(count)


def _escape(value: str) -> str:
    """A label value as the text format quotes it."""
    if "\\" in value or "\n" in value or '"' in value:
        return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
    return value


def _labels(service: model.ServiceId) -> tuple[str, str]:
    namespace, _, name = service.partition("/")
    return namespace, name


def http_app(
    telemetry: Telemetry, *, ready: Callable[[], bool], detail: Callable[[], str] = lambda: ""
) -> web.Application:
    """`/metrics` (text exposition), `/healthz` (the process answers), `/readyz` (`ready()`);
    both health answers end with `detail()` (the buckets led)."""

    async def metrics(_: web.Request) -> web.Response:
        # Off the loop: at 10,000 services the text takes long enough to delay a tick.
        body = await asyncio.to_thread(telemetry.exposition)
        return web.Response(body=body, content_type="text/plain", charset="utf-8")

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok\n" + detail())

    async def readyz(_: web.Request) -> web.Response:
        if ready():
            return web.Response(text="ready\n" + detail())
        return web.Response(text="not ready\n" + detail(), status=503)

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    return app

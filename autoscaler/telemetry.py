"""The controller's own surface for SREs: Prometheus metrics, `/metrics`, `/healthz`, `/readyz`.

Metrics live in a registry owned by a `Telemetry` value (never the global default registry), so
tests and several controller instances in one process do not collide. The loop does not know
about any of this: the wiring feeds each `TickReport` in.

Every family labelled by service is declared through `Telemetry._per_service` and every series
of one is made through `Telemetry._child`, which remembers it: when a service goes (deleted,
no longer opted in, or this replica's term of leadership ended) `_drop` removes all of them, so
the exposition does not grow with every service that ever came and went.

It must not decide anything, nor touch the cluster.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Final, TypeVar

import prometheus_client as prom
from aiohttp import web
from prometheus_client.metrics import MetricWrapperBase

from autoscaler import loop as loop_
from autoscaler import ports
from autoscaler.core import model

TICK_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
SERVICE_LABELS: Final = ("namespace", "service")
"""The first labels of every per-service family."""

_Family = MetricWrapperBase
F = TypeVar("F", bound=MetricWrapperBase)


class Telemetry:
    def __init__(self, registry: prom.CollectorRegistry | None = None) -> None:
        self.registry = registry or prom.CollectorRegistry()
        r = self.registry
        self.per_service: list[_Family] = []
        """Every family labelled by service, declared through `_per_service`: what `_drop`
        removes when a service goes."""
        self._children: dict[model.ServiceId, set[tuple[_Family, tuple[str, ...]]]] = {}
        """Per service, each series any write created (a family and its label values)."""
        self.decisions = self._per_service(
            prom.Counter,
            "autoscaler_decisions",
            "Decisions that changed a service's outcome, by service, kind and reason.",
            "kind",
            "reason",
        )
        self.last_decision = self._per_service(
            prom.Gauge,
            "autoscaler_service_decision",
            "1 for each service, labelled with the kind and reason of its last decision.",
            "kind",
            "reason",
        )
        self.service_holding = self._per_service(
            prom.Gauge,
            "autoscaler_service_holding",
            "1 while a service holds, 0 otherwise; `reason` is its last decision's reason.",
            "reason",
        )
        self.gpu_target = self._per_service(
            prom.Gauge,
            "autoscaler_target_gpu_utilization_percent",
            "The service's target GPU utilisation (its target-gpu-utilization), in percent.",
        )
        self.holds = prom.Gauge(
            "autoscaler_holding_services",
            "Services whose wanted change is blocked this tick, by reason.",
            ["reason"],
            registry=r,
        )
        self.replicas = self._per_service(
            prom.Gauge,
            "autoscaler_replicas",
            "Replica counts per service: desired (decided), current (asked for), serving (warm).",
            "state",
        )
        self.signal = self._per_service(
            prom.Gauge,
            "autoscaler_signal",
            "Smoothed service-wide signal value (rps, waiting requests) the decision used.",
            "signal",
        )
        self.target = self._per_service(
            prom.Gauge,
            "autoscaler_signal_target",
            "Service-wide target for the signal: per-replica target x serving replicas.",
            "signal",
        )
        self.cooldown_until = self._per_service(
            prom.Gauge,
            "autoscaler_cooldown_remaining_seconds",
            "Seconds until the cooldown that blocks a wanted change ends (0 when none).",
        )
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
        self.missing = self._per_service(
            prom.Gauge,
            "autoscaler_metrics_missing",
            "1 while a service holds because its metrics are missing or stale.",
        )
        self.paused = self._per_service(
            prom.Gauge,
            "autoscaler_paused",
            "1 while the service owner pauses autoscaling (annotation paused or paused-replicas).",
        )
        self.core_hours = self._per_service(
            prom.Counter,
            "autoscaler_gpu_core_hours",
            "GPU core-hours used per service, weighted by card product (see docs/architecture.md).",
            "project",
        )
        # The traffic ramp (docs/architecture.md, "The warm-up gate and the traffic ramp").
        self.ramp_step = self._per_service(
            prom.Gauge,
            "autoscaler_ramp_step_percent",
            "The ramp step the service's warming pods are at (0 when none is ramping).",
        )
        self.ramp_weight = self._per_service(
            prom.Gauge,
            "autoscaler_ramp_warming_weight_percent",
            "Percent of the service's traffic routed to its warming pods.",
        )
        self.ramp_held = self._per_service(
            prom.Gauge,
            "autoscaler_ramp_held",
            "1 while a service's ramp is held after repeated failed health gates.",
        )
        self.ramp_rollbacks = self._per_service(
            prom.Counter,
            "autoscaler_ramp_rollbacks",
            "Ramps rolled back because the warming pods failed a health gate or warm-up.",
        )
        self.ramp_promotions = self._per_service(
            prom.Counter,
            "autoscaler_ramp_promotions",
            "Ramps that reached 100 % and promoted their pods to the stable set.",
        )
        # The placement ladder (docs/architecture.md, "The placement ladder").
        self.tier_replicas = self._per_service(
            prom.Gauge,
            "autoscaler_tier_replicas",
            "Replicas asked for per placement tier (whole, mig-<profile>, shared).",
            "tier",
        )
        self.fallbacks = self._per_service(
            prom.Counter,
            "autoscaler_placement_fallbacks",
            "Replicas placed below the whole-card tier because whole cards ran out, by tier.",
            "tier",
        )
        self._seen: dict[model.ServiceId, tuple[model.Kind, model.Reason]] = {}
        self._ticked: set[model.ServiceId] = set()
        self._tiers: dict[model.ServiceId, set[str]] = {}

    def _per_service(self, kind: type[F], name: str, documentation: str, *labels: str) -> F:
        """A family labelled `namespace`, `service` and then `labels`, known to `_drop`."""
        family = kind(name, documentation, [*SERVICE_LABELS, *labels], registry=self.registry)
        self.per_service.append(family)
        return family

    def _child(self, family: F, service: model.ServiceId, *labels: str) -> F:
        """`family`'s series for `service` (and `labels`), remembered so `_drop` removes it.

        Every per-service write goes through here: a series made any other way would outlive
        its service."""
        values = (*_labels(service), *labels)
        self._children.setdefault(service, set()).add((family, values))
        return family.labels(*values)

    def observe_tick(
        self,
        report: loop_.TickReport,
        workloads: Iterable[ports.Workload],
        *,
        duration_s: float,
        wall_time_s: float,
        tick_s: float = 1.0,
    ) -> None:
        """Record one tick: its duration, the decisions, and each service's gauges.

        `tick_s` is the time the tick stands for: core-hours accrue the services' current rate
        over it. The series of every service this tick did not decide for are removed."""
        self.tick.observe(duration_s)
        self.last_tick.set(wall_time_s)
        if report.metrics_error is not None:
            self.query_errors.inc()
        holds: dict[str, int] = {reason.value: 0 for reason in model.Reason}
        present: set[model.ServiceId] = set()
        for workload in workloads:
            decision = report.decisions.get(workload.id)
            if decision is None:
                continue
            service = workload.id
            present.add(service)
            outcome = (decision.kind, decision.reason)
            if (last := self._seen.get(service)) != outcome:
                self._seen[service] = outcome
                self._child(self.decisions, service, *(o.value for o in outcome)).inc()
                self._last_decision(service, last, outcome)
            if decision.kind is model.Kind.HOLD:
                holds[decision.reason.value] += 1
            replicas = {
                "desired": decision.desired,
                "current": decision.current,
                "serving": workload.serving,
                "min": workload.policy.min_replicas,
                "max": workload.policy.max_replicas,
            }
            for state, count in replicas.items():
                self._child(self.replicas, service, state).set(count)
            missing = decision.reason is model.Reason.MISSING_DATA
            self._child(self.missing, service).set(missing)
            self._child(self.paused, service).set(workload.policy.pause is not None)
            gpu_target = workload.policy.target_gpu_utilization_pct
            if gpu_target is None:
                self._forget(self.gpu_target, service)
            else:
                self._child(self.gpu_target, service).set(gpu_target)
            if service not in self._ticked:
                # Every managed service has its ramp series from its first tick, so dashboards
                # and alerts read 0 rather than nothing.
                for family in (
                    self.ramp_step,
                    self.ramp_weight,
                    self.ramp_held,
                    self.ramp_rollbacks,
                    self.ramp_promotions,
                ):
                    self._child(family, service)
            if workload.core_rate > 0 and tick_s > 0:
                project = workload.project or _labels(service)[0]
                self._child(self.core_hours, service, project).inc(
                    workload.core_rate * tick_s / 3600.0
                )
            remaining = 0.0
            if decision.cooldown_until_s is not None:
                remaining = max(0.0, decision.cooldown_until_s - report.now_s)
            self._child(self.cooldown_until, service).set(remaining)
            for signal, vote in decision.contributions.items():
                label = signal.name.lower()
                target = workload.policy.target(signal)
                if math.isfinite(vote.estimate):
                    self._child(self.signal, service, label).set(vote.estimate)
                if target is not None:
                    self._child(self.target, service, label).set(target * workload.serving)
        for reason, count in holds.items():
            self.holds.labels(reason).set(count)
        self.services.set(len(present))
        self._ticked = present
        self._drop(self._children.keys() - present)

    def led(self, names: Sequence[str], led: Collection[int]) -> None:
        """Which of the bucket Leases `names` this instance leads now (their indices)."""
        self.leader.set(1 if led else 0)
        self.buckets_led.set(len(led))
        for index, name in enumerate(names):
            self.bucket_leader.labels(name).set(1 if index in led else 0)

    def forget_services(self) -> None:
        """Remove every per-service series: this replica no longer decides for any service
        (its term of leadership ended), so what it last exported would only be stale."""
        self._ticked = set()
        self._drop(set(self._children))
        self.services.set(0)
        for reason in model.Reason:
            self.holds.labels(reason.value).set(0)

    def _last_decision(
        self,
        service: model.ServiceId,
        last: tuple[model.Kind, model.Reason] | None,
        outcome: tuple[model.Kind, model.Reason],
    ) -> None:
        """One `service_decision` and one `service_holding` series per service: the last one's."""
        if last is not None:
            self._forget(self.last_decision, service, last[0].value, last[1].value)
            self._forget(self.service_holding, service, last[1].value)
        kind, reason = outcome
        self._child(self.last_decision, service, kind.value, reason.value).set(1)
        self._child(self.service_holding, service, reason.value).set(kind is model.Kind.HOLD)

    def _forget(self, family: _Family, service: model.ServiceId, *labels: str) -> None:
        """Remove one series of `service` (one `_child` made) while the service stays."""
        values = (*_labels(service), *labels)
        self._children.get(service, set()).discard((family, values))
        with contextlib.suppress(KeyError):
            family.remove(*values)

    def _drop(self, gone: Iterable[model.ServiceId]) -> None:
        """Remove the series of services no longer managed, so dashboards do not show ghosts
        and the exposition does not grow with every service that ever came and went."""
        for service in gone:
            self._seen.pop(service, None)
            self._tiers.pop(service, None)
            for family, values in self._children.pop(service, ()):
                with contextlib.suppress(KeyError):
                    family.remove(*values)

    def ramp(
        self, service: model.ServiceId, *, step_pct: float, warming_pct: float, held: bool
    ) -> None:
        """Where a service's ramp is (called by the ramp driver whenever it acts)."""
        self._child(self.ramp_step, service).set(step_pct)
        self._child(self.ramp_weight, service).set(warming_pct)
        self._child(self.ramp_held, service).set(held)

    def rolled_back(self, service: model.ServiceId) -> None:
        self._child(self.ramp_rollbacks, service).inc()

    def promoted(self, service: model.ServiceId) -> None:
        self._child(self.ramp_promotions, service).inc()

    def tiers(self, service: model.ServiceId, replicas: dict[str, int]) -> None:
        """Replicas asked for per placement tier; tiers absent from `replicas` are dropped."""
        for tier in self._tiers.get(service, set()) - replicas.keys():
            self._forget(self.tier_replicas, service, tier)
        for tier, count in replicas.items():
            self._child(self.tier_replicas, service, tier).set(count)
        self._tiers[service] = set(replicas)

    def fell_back(self, service: model.ServiceId, tier: str, replicas: int) -> None:
        """`replicas` new replicas went to `tier` because better tiers had no room."""
        self._child(self.fallbacks, service, tier).inc(replicas)

    def exposition(self) -> bytes:
        return prom.generate_latest(self.registry)


def _labels(service: model.ServiceId) -> tuple[str, str]:
    namespace, _, name = service.partition("/")
    return namespace, name


def http_app(
    telemetry: Telemetry, *, ready: Callable[[], bool], detail: Callable[[], str] = lambda: ""
) -> web.Application:
    """`/metrics` (text exposition), `/healthz` (the process answers), `/readyz` (`ready()`);
    both health answers end with `detail()` (the buckets led)."""

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(body=telemetry.exposition(), content_type="text/plain", charset="utf-8")

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

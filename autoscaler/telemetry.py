"""The controller's own surface for SREs: Prometheus metrics, `/metrics`, `/healthz`, `/readyz`.

Metrics live in a registry owned by a `Telemetry` value (never the global default registry), so
tests and several controller instances in one process do not collide. The loop does not know
about any of this: the wiring feeds each `TickReport` in.

It must not decide anything, nor touch the cluster.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterable

import prometheus_client as prom
from aiohttp import web

from autoscaler import loop as loop_
from autoscaler import ports
from autoscaler.core import model

TICK_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class Telemetry:
    def __init__(self, registry: prom.CollectorRegistry | None = None) -> None:
        self.registry = registry or prom.CollectorRegistry()
        r = self.registry
        self.decisions = prom.Counter(
            "autoscaler_decisions",
            "Decisions that changed a service's outcome, by kind and reason.",
            ["kind", "reason"],
            registry=r,
        )
        self.holds = prom.Gauge(
            "autoscaler_holding_services",
            "Services whose wanted change is blocked this tick, by reason.",
            ["reason"],
            registry=r,
        )
        self.replicas = prom.Gauge(
            "autoscaler_replicas",
            "Replica counts per service: desired (decided), current (asked for), serving (warm).",
            ["namespace", "service", "state"],
            registry=r,
        )
        self.signal = prom.Gauge(
            "autoscaler_signal",
            "Smoothed service-wide signal value (rps, waiting requests) the decision used.",
            ["namespace", "service", "signal"],
            registry=r,
        )
        self.target = prom.Gauge(
            "autoscaler_signal_target",
            "Service-wide target for the signal: per-replica target x serving replicas.",
            ["namespace", "service", "signal"],
            registry=r,
        )
        self.cooldown_until = prom.Gauge(
            "autoscaler_cooldown_remaining_seconds",
            "Seconds until the cooldown that blocks a wanted change ends (0 when none).",
            ["namespace", "service"],
            registry=r,
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
        self.query_errors = prom.Counter(
            "autoscaler_metrics_query_errors",
            "Failed or unusable metrics queries.",
            registry=r,
        )
        self.leader = prom.Gauge(
            "autoscaler_leader", "1 when this instance holds the leader lease.", registry=r
        )
        self.missing = prom.Gauge(
            "autoscaler_metrics_missing",
            "1 while a service holds because its metrics are missing or stale.",
            ["namespace", "service"],
            registry=r,
        )
        self.paused = prom.Gauge(
            "autoscaler_paused",
            "1 while the service owner pauses autoscaling (annotation paused or paused-replicas).",
            ["namespace", "service"],
            registry=r,
        )
        self.core_hours = prom.Counter(
            "autoscaler_gpu_core_hours",
            "GPU core-hours used per service, weighted by card product (DESIGN §3.6).",
            ["namespace", "service", "project"],
            registry=r,
        )
        # The traffic ramp (DESIGN §3.4).
        self.ramp_step = prom.Gauge(
            "autoscaler_ramp_step_percent",
            "The ramp step the service's warming pods are at (0 when none is ramping).",
            ["namespace", "service"],
            registry=r,
        )
        self.ramp_weight = prom.Gauge(
            "autoscaler_ramp_warming_weight_percent",
            "Percent of the service's traffic routed to its warming pods.",
            ["namespace", "service"],
            registry=r,
        )
        self.ramp_held = prom.Gauge(
            "autoscaler_ramp_held",
            "1 while a service's ramp is held after repeated failed health gates.",
            ["namespace", "service"],
            registry=r,
        )
        self.ramp_rollbacks = prom.Counter(
            "autoscaler_ramp_rollbacks",
            "Ramps rolled back because the warming pods failed a health gate or warm-up.",
            ["namespace", "service"],
            registry=r,
        )
        self.ramp_promotions = prom.Counter(
            "autoscaler_ramp_promotions",
            "Ramps that reached 100 % and promoted their pods to the stable set.",
            ["namespace", "service"],
            registry=r,
        )
        # The placement ladder (DESIGN §3.5).
        self.tier_replicas = prom.Gauge(
            "autoscaler_tier_replicas",
            "Replicas asked for per placement tier (whole, mig-<profile>, shared).",
            ["namespace", "service", "tier"],
            registry=r,
        )
        self.fallbacks = prom.Counter(
            "autoscaler_placement_fallbacks",
            "Replicas placed below the whole-card tier because whole cards ran out, by tier.",
            ["namespace", "service", "tier"],
            registry=r,
        )
        self._seen: dict[model.ServiceId, tuple[model.Kind, model.Reason]] = {}
        self._labelled: set[model.ServiceId] = set()
        self._tiers: dict[model.ServiceId, set[str]] = {}

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
        over it."""
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
            present.add(workload.id)
            namespace, _, name = workload.id.partition("/")
            outcome = (decision.kind, decision.reason)
            if self._seen.get(workload.id) != outcome:
                self._seen[workload.id] = outcome
                self.decisions.labels(decision.kind.value, decision.reason.value).inc()
            if decision.kind is model.Kind.HOLD:
                holds[decision.reason.value] += 1
            self.replicas.labels(namespace, name, "desired").set(decision.desired)
            self.replicas.labels(namespace, name, "current").set(decision.current)
            self.replicas.labels(namespace, name, "serving").set(workload.serving)
            self.replicas.labels(namespace, name, "min").set(workload.policy.min_replicas)
            self.replicas.labels(namespace, name, "max").set(workload.policy.max_replicas)
            self.missing.labels(namespace, name).set(decision.reason is model.Reason.MISSING_DATA)
            self.paused.labels(namespace, name).set(workload.policy.pause is not None)
            if workload.id not in self._labelled:
                # Every managed service has its ramp series from its first tick, so dashboards
                # and alerts read 0 rather than nothing.
                self.ramp_step.labels(namespace, name)
                self.ramp_weight.labels(namespace, name)
                self.ramp_held.labels(namespace, name)
                self.ramp_rollbacks.labels(namespace, name)
                self.ramp_promotions.labels(namespace, name)
            if workload.core_rate > 0 and tick_s > 0:
                self.core_hours.labels(namespace, name, workload.project or namespace).inc(
                    workload.core_rate * tick_s / 3600.0
                )
            remaining = 0.0
            if decision.cooldown_until_s is not None:
                remaining = max(0.0, decision.cooldown_until_s - report.now_s)
            self.cooldown_until.labels(namespace, name).set(remaining)
            for signal, vote in decision.contributions.items():
                label = signal.name.lower()
                target = workload.policy.target(signal)
                if math.isfinite(vote.estimate):
                    self.signal.labels(namespace, name, label).set(vote.estimate)
                if target is not None:
                    self.target.labels(namespace, name, label).set(target * workload.serving)
        for reason, count in holds.items():
            self.holds.labels(reason).set(count)
        self.services.set(len(present))
        self._drop(self._labelled - present)
        self._labelled = present

    def _drop(self, gone: set[model.ServiceId]) -> None:
        """Remove the series of services no longer managed, so dashboards do not show ghosts."""
        for service in gone:
            namespace, _, name = service.partition("/")
            self._seen.pop(service, None)
            for state in ("desired", "current", "serving", "min", "max"):
                _remove(self.replicas, namespace, name, state)
            for gauge in (
                self.cooldown_until,
                self.missing,
                self.paused,
                self.ramp_step,
                self.ramp_weight,
            ):
                _remove(gauge, namespace, name)
            _remove(self.ramp_held, namespace, name)
            for tier in self._tiers.pop(service, ()):
                _remove(self.tier_replicas, namespace, name, tier)
            for signal in model.Signal:
                _remove(self.signal, namespace, name, signal.name.lower())
                _remove(self.target, namespace, name, signal.name.lower())

    def ramp(
        self, service: model.ServiceId, *, step_pct: float, warming_pct: float, held: bool
    ) -> None:
        """Where a service's ramp is (called by the ramp driver whenever it acts)."""
        namespace, _, name = service.partition("/")
        self.ramp_step.labels(namespace, name).set(step_pct)
        self.ramp_weight.labels(namespace, name).set(warming_pct)
        self.ramp_held.labels(namespace, name).set(held)

    def rolled_back(self, service: model.ServiceId) -> None:
        namespace, _, name = service.partition("/")
        self.ramp_rollbacks.labels(namespace, name).inc()

    def promoted(self, service: model.ServiceId) -> None:
        namespace, _, name = service.partition("/")
        self.ramp_promotions.labels(namespace, name).inc()

    def tiers(self, service: model.ServiceId, replicas: dict[str, int]) -> None:
        """Replicas asked for per placement tier; tiers absent from `replicas` are dropped."""
        namespace, _, name = service.partition("/")
        for tier in self._tiers.get(service, set()) - replicas.keys():
            _remove(self.tier_replicas, namespace, name, tier)
        for tier, count in replicas.items():
            self.tier_replicas.labels(namespace, name, tier).set(count)
        self._tiers[service] = set(replicas)

    def fell_back(self, service: model.ServiceId, tier: str, replicas: int) -> None:
        """`replicas` new replicas went to `tier` because better tiers had no room."""
        namespace, _, name = service.partition("/")
        self.fallbacks.labels(namespace, name, tier).inc(replicas)

    def exposition(self) -> bytes:
        return prom.generate_latest(self.registry)


def _remove(metric: prom.Gauge, *labels: str) -> None:
    with contextlib.suppress(KeyError):
        metric.remove(*labels)


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

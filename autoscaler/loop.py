"""The control loop: observe (one batched sample per tick) -> decide -> act (only on change).

This is the only module that schedules work. `Loop.step()` runs one tick and never sleeps;
`Loop.run()` repeats it every `tick_s` on the injected `Clock`. Each service has its own error
boundary: an `AutoscalerError` while acting on one service is logged and that service keeps its
previous state, while the others go on. Anything unexpected propagates and ends the process.
"""

from __future__ import annotations

import asyncio
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import structlog

from autoscaler import clock as clock_
from autoscaler import errors, ports
from autoscaler.core import model, smoothing

log = structlog.get_logger(__name__)

PUBLISH_CONCURRENCY = 16
"""Decisions published (status writes, Events) at once per tick."""

_PublishKey = tuple[int, model.Kind, model.Reason | None]


@dataclass(frozen=True, slots=True)
class TickReport:
    """What one tick did: for tests, telemetry and the simulator's time series."""

    now_s: float
    decisions: dict[model.ServiceId, model.Decision]
    scaled: tuple[model.ServiceId, ...]
    failed: tuple[model.ServiceId, ...]
    metrics_error: str | None = None
    kinds: Counter[model.Kind] = field(default_factory=Counter)


class Loop:
    def __init__(
        self,
        *,
        cluster: ports.Cluster,
        metrics: ports.MetricsSource,
        clock: clock_.Clock,
        policy: ports.Policy | None = None,
        smoothing_config: smoothing.SmoothingConfig | None = None,
        rollouts: ports.Rollouts | None = None,
    ) -> None:
        self.cluster = cluster
        self.metrics = metrics
        self.clock = clock
        self.rollouts = rollouts
        """The ramp driver: when set, it takes the scale writes (draining before a scale-down)
        and advances the warm-up gate and the traffic ramp at the end of every tick."""
        self.policy: ports.Policy = policy or ports.CorePolicy()
        self.smoothing_config = smoothing_config or smoothing.SmoothingConfig()
        self._windows = smoothing.Windows(self.smoothing_config)
        self._states: dict[model.ServiceId, model.PolicyState] = {}
        self._published: dict[model.ServiceId, _PublishKey] = {}
        self._metrics_down = False

    @property
    def tick_s(self) -> float:
        return self.smoothing_config.tick_s

    def state_of(self, service: model.ServiceId) -> model.PolicyState | None:
        return self._states.get(service)

    async def step(self) -> TickReport:
        """Run one tick: sample every managed service once, decide each, act on changes."""
        now = self.clock.now()
        workloads = self.cluster.workloads()
        self._forget_gone(workloads)
        ids = [w.id for w in workloads]
        rows = self._windows.rows_for(ids)

        metrics_error: str | None = None
        try:
            values = await self.metrics.sample(workloads, now)
        except errors.ObservationError as e:
            # Recorded as missing, never as zero: every service holds and says why.
            metrics_error = str(e)
            values = np.full((len(workloads), len(model.Signal)), np.nan)
            if not self._metrics_down:  # once per outage, not once per tick
                log.warning("metrics.unavailable", error=metrics_error)
        else:
            if self._metrics_down:
                log.info("metrics.recovered")
        self._metrics_down = metrics_error is not None
        self._windows.record(now, rows, values)
        half_lives = np.fromiter((w.half_life_s for w in workloads), float, len(workloads))
        estimates = self._windows.estimate(now, rows, half_lives).rows()

        decisions: dict[model.ServiceId, model.Decision] = {}
        pending: dict[model.ServiceId, model.PolicyState] = {}
        for i, workload in enumerate(workloads):
            observation = model.Observation(
                now_s=now,
                replicas=workload.replicas,
                serving=workload.serving,
                signals=estimates[i],
                startup_s=workload.startup_s,
                admissible=workload.admissible,
                admissible_reason=workload.admissible_reason,
            )
            state = self._states.get(workload.id) or workload.state or model.PolicyState()
            decision, next_state = self.policy.decide(workload, observation, state)
            decisions[workload.id] = decision
            if decision.changes:
                pending[workload.id] = next_state
            else:
                self._states[workload.id] = next_state

        scaled, failed = await self._act(decisions, pending)
        await self._publish(decisions, failed)
        if self.rollouts is not None:
            await self.rollouts.reconcile(now, workloads)
        kinds = Counter(d.kind for d in decisions.values())
        return TickReport(now, decisions, scaled, failed, metrics_error, kinds)

    async def run(self, *, until_s: float | None = None) -> None:
        """Tick every `tick_s` until `until_s` on the clock (forever when None).

        Ticks are scheduled on a fixed grid: a slow tick shortens the next wait rather than
        shifting every later tick.
        """
        next_tick = self.clock.now()
        while until_s is None or self.clock.now() < until_s:
            await self.step()
            next_tick += self.tick_s
            now = self.clock.now()
            if next_tick < now:  # overran: skip the missed ticks, keep the grid
                next_tick += math.ceil((now - next_tick) / self.tick_s) * self.tick_s
            await self.clock.sleep(next_tick - now)

    async def _act(
        self,
        decisions: dict[model.ServiceId, model.Decision],
        pending: dict[model.ServiceId, model.PolicyState],
    ) -> tuple[tuple[model.ServiceId, ...], tuple[model.ServiceId, ...]]:
        failed: list[model.ServiceId] = []

        async def scale(service: model.ServiceId) -> None:
            decision = decisions[service]
            try:
                if self.rollouts is not None:
                    await self.rollouts.scale(service, decision.desired, decision.current)
                else:
                    await self.cluster.scale(service, decision.desired)
            except errors.ActuationError as e:
                # The policy state is not advanced: the next tick decides again.
                failed.append(service)
                log.warning("scale.failed", service=service, desired=decision.desired, error=str(e))
                return
            self._states[service] = pending[service]
            log.info(
                "scale.applied",
                service=service,
                replicas=decision.desired,
                previous=decision.current,
                reason=decision.reason.value,
            )

        if len(pending) == 1:
            await scale(next(iter(pending)))
        elif pending:
            async with asyncio.TaskGroup() as group:
                for service in pending:
                    group.create_task(scale(service))
        done = tuple(s for s in pending if s not in failed)
        return done, tuple(failed)

    async def _publish(
        self, decisions: dict[model.ServiceId, model.Decision], failed: Sequence[model.ServiceId]
    ) -> None:
        changed: list[tuple[model.ServiceId, model.Decision, _PublishKey]] = []
        for service, decision in decisions.items():
            if service in failed:
                continue
            # Steady outcomes differ only in wording (in the deadband, at the desired count):
            # flipping between them under noise is not news worth a write.
            reason = None if decision.kind is model.Kind.STEADY else decision.reason
            key = (decision.desired, decision.kind, reason)
            if self._published.get(service) != key:
                changed.append((service, decision, key))
        if not changed:
            return
        # Writes go out a few at a time: one by one, a controller that takes over a thousand
        # services spends seconds on its first tick; all at once would flood the API server.
        slots = asyncio.Semaphore(PUBLISH_CONCURRENCY)

        async def publish(
            service: model.ServiceId, decision: model.Decision, key: _PublishKey
        ) -> None:
            async with slots:
                try:
                    await self.cluster.publish(service, decision, self._states[service])
                except errors.ActuationError as e:
                    log.warning("decision.unpublished", service=service, error=str(e))
                    return
            self._published[service] = key
            log.info(
                "decision.made",
                service=service,
                kind=decision.kind.value,
                reason=decision.reason.value,
                current=decision.current,
                desired=decision.desired,
                detail=decision.detail,
            )

        if len(changed) == 1:
            await publish(*changed[0])
            return
        async with asyncio.TaskGroup() as group:
            for item in changed:
                group.create_task(publish(*item))

    def _forget_gone(self, workloads: Sequence[ports.Workload]) -> None:
        present = {w.id for w in workloads}
        gone = self._windows.known() - present
        if gone:
            self._windows.forget(gone)
            for service in gone:
                self._states.pop(service, None)
                self._published.pop(service, None)

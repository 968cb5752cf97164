"""The ramp driver (docs/architecture.md, "The warm-up gate and the traffic ramp"): runs
`core.ramp` for every gated service, once per tick.

`RampDriver` implements `ports.Ramps`. For each service whose record has ramp settings
(`Workload.ramp`, built when its annotations were parsed) it
restores the state persisted on the Deployment on first sight (a restarted controller resumes
and writes the weights again, so none stays stuck), hands the core the pods and the answers to
the requests of the last tick, carries out the returned actions in order through the ports (the
writes one by one, then the reads the core asked for, concurrently), and persists the state
only when its text changed. A service with nothing under way and no warming pod costs a look
at its pods: no health query, no probe, no write.

**Warm-up probes run off the tick.** A probe can take minutes (up to 1,000 requests, each up
to `probe_timeout_s`, to a pod that may accept connections and never answer), so a `Probe`
starts a background task and the tick goes on; a later tick hands the core whatever has
finished. At most `probe_concurrency` probes are in flight across the driver, at most one per
pod (the core asking again meanwhile is not a second probe), and each is ended after
`probe_deadline_s`, counted as failed: the core asks again at its next probe time, until the
pod's warm-up deadline reclaims it. A pod's answer waits for the serving pods probed with it
(or before it), so that it is judged against their latency as in one tick; the latest serving
pods' answers go with every new pod's answer. A probe of a pod that is gone, terminating or
reclaimed is cancelled. `close()` cancels every probe and waits for them to end;
`wait_probes_idle()` waits until none is in flight (tests use it to make the tick at which an
answer arrives independent of scheduling).

`scale` takes the loop's replica changes: up at once, down after draining the victims (the
replicas drop on a later tick), refused with `RampBusyError` (an `ActuationError`, so the loop
does not advance its policy state and decides again next tick) while new pods hold traffic.

**The standby pool** (`core.ramp`'s `pool`). The loop decides serving replicas; `scale` adds
the pool's replicas (`standby`, its size so far when not given) to the count it writes, and
`standby(workload)` tells the loop how many of the Deployment's replicas are the pool's, so the
policy sees the rest. `reconcile` resizes each pool whose size the loop changed (a shrink waits
while a cohort holds traffic or a drain runs). The core reads the Deployment's count to know
how many should serve: the count this driver last wrote, until the record shows another, so a
scale-up lets the pool's pods out at the reconcile of its own tick however the caches lag.

A hold ends when a ramp setting changes (the core sees that) or when someone deletes the
`autoscaler.dsec.io/ramp` annotation: once the cache has shown the text last written, a
missing annotation can only be a deletion.

**Gates no ramp answers for** (`core.gates`). Each tick, before the ramps, the driver asks
`ports.Gates` for the gated pods whose containers are ready and whose `warm` condition is not
True, opens those of every Deployment that no active ramp drives (dry-run, opted out, no
longer managed, invalid, or a template without the gate), and says so once per Deployment and
tick: one `gate.opened` log line and one Normal Event `GateOpened` naming the pods and why. In
dry-run too: that is the one write a dry-run controller makes. Nothing is written when no such
pod waits.

One error boundary per service: an `AutoscalerError` is logged and the service tries again next
tick with the state it had (every action is safe to repeat); the others go on. A service in
dry-run runs the same rules but only logs the writes it would make (reads still happen); its
state lives in memory and it is not reported to the observer.

It decides nothing: every rule is in `core.ramp`.
"""

from __future__ import annotations

import asyncio
import functools
import math
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import structlog

from autoscaler import errors, ports
from autoscaler.contract import annotations as contract
from autoscaler.core import gates as gates_
from autoscaler.core import model, ramp

log = structlog.get_logger(__name__)

CONCURRENCY = 16
"""Services whose ramp acts at once per tick (each of them may write and ask for reads)."""
PROBE_CONCURRENCY = 16
"""Warm-up probes in flight at once, by default (`settings.WarmupSettings.probe_concurrency`)."""
PROBE_DEADLINE_S = 120.0
"""Seconds one pod's probe may take in all, by default (`settings.WarmupSettings`)."""

_IDLE_TEXT = ramp.dumps(ramp.RampState())
"""What a service with no persisted state has, in effect."""


class RampObserver(Protocol):
    """Told where each ramp is (`autoscaler.telemetry.Telemetry` is one)."""

    def ramp(
        self, service: model.ServiceId, *, step_pct: float, warming_pct: float, held: bool
    ) -> None: ...

    def rolled_back(self, service: model.ServiceId) -> None: ...

    def promoted(self, service: model.ServiceId) -> None: ...


class RampBusyError(errors.ActuationError):
    """A scale-down that must wait: new pods hold traffic, or another drain is under way."""


class RouterMissingError(errors.ActuationError):
    """The service names a traffic router this controller was not given."""


_OUTCOME_EVENTS = {
    ramp.Outcome.PROMOTED: "ramp.promoted",
    ramp.Outcome.ROLLED_BACK: "ramp.rolled_back",
    ramp.Outcome.HELD: "ramp.held",
    ramp.Outcome.RELEASED: "ramp.released",
}


@dataclass(slots=True)
class _Probe:
    """One pod's probe in flight (or finished and not yet handed to the core)."""

    task: asyncio.Task[ramp.Probed | None]
    """None when the prober failed (an `AutoscalerError`): no answer, the core asks again."""
    round: int
    """The service's probe round that started it: the requests of one tick share a round."""
    serving: bool
    """A serving pod probed for the latency a warm one shows, not a new pod."""


@dataclass(slots=True)
class _Service:
    """What the driver keeps about one service between ticks."""

    state: ramp.RampState
    text: str
    """The persisted text as far as this process knows (written by it, or read at first sight)."""
    confirmed: bool = True
    """The cache has shown `text` since it was written."""
    resumed: bool = False
    probes: dict[str, ramp.Probed] = field(default_factory=dict)
    health: tuple[ramp.Health, ramp.Health] | None = None
    pod_health: dict[str, tuple[ramp.Health, ramp.Health]] = field(default_factory=dict)
    settled: bool | None = None
    in_flight: dict[str, float] = field(default_factory=dict)
    reported: tuple[int, int, bool] | None = None
    probing: dict[str, _Probe] = field(default_factory=dict)
    """Probes started and not yet handed over, by pod name."""
    rounds: int = 0
    serving_probes: dict[str, ramp.Probed] = field(default_factory=dict)
    """The latest answer of each serving pod probed, handed again with each new pod's answer."""
    asked: tuple[int, int] | None = None
    """(the replica count last written, the count the record showed then): the count the ramp
    reads until the record shows another, so a write the caches lag behind counts at once."""

    @property
    def idle(self) -> bool:
        return self.state.quiet and not self.resumed

    def take_answers(self) -> _Answers:
        """The answers to the last tick's requests, each handed to the core once."""
        answers = _Answers(self.health, self.pod_health, self.probes, self.settled)
        self.health, self.pod_health, self.probes, self.settled = None, {}, {}, None
        return answers


@dataclass(frozen=True, slots=True)
class _Answers:
    health: tuple[ramp.Health, ramp.Health] | None
    pod_health: dict[str, tuple[ramp.Health, ramp.Health]]
    probes: dict[str, ramp.Probed]
    settled: bool | None


class RampDriver:
    def __init__(
        self,
        *,
        cluster: ports.Cluster,
        pods: ports.RampCluster,
        routers: Mapping[contract.TrafficRouter, ports.TrafficRouter],
        health: ports.HealthSource,
        prober: ports.WarmupProber,
        gates: ports.Gates | None = None,
        observer: RampObserver | None = None,
        probe_timeout_s: float = 5.0,
        probe_concurrency: int = PROBE_CONCURRENCY,
        probe_deadline_s: float = PROBE_DEADLINE_S,
    ) -> None:
        """`probe_timeout_s` bounds one warm-up request, `probe_deadline_s` one pod's probe (all
        its requests), `probe_concurrency` the probes in flight at once. `gates`, when given,
        has the gates no ramp answers for opened each tick."""
        if probe_concurrency < 1:
            raise ValueError(f"probe_concurrency must be >= 1, not {probe_concurrency!r}")
        if not (probe_deadline_s > 0 and math.isfinite(probe_deadline_s)):
            raise ValueError(f"probe_deadline_s must be > 0 and finite, not {probe_deadline_s!r}")
        self._cluster = cluster
        self._pods = pods
        self._routers = routers
        self._health = health
        self._prober = prober
        self._gates = gates
        self._observer = observer
        self._probe_timeout_s = probe_timeout_s
        self._probe_deadline_s = probe_deadline_s
        self._probe_slots = asyncio.Semaphore(probe_concurrency)
        self._probe_tasks: set[asyncio.Task[ramp.Probed | None]] = set()
        self._closed = False
        self._services: dict[model.ServiceId, _Service] = {}

    def state_of(self, service: model.ServiceId) -> ramp.RampState | None:
        known = self._services.get(service)
        return None if known is None else known.state

    @property
    def probes_in_flight(self) -> int:
        """Probes started and not finished (cancelled ones until they have ended)."""
        return sum(not task.done() for task in self._probe_tasks)

    async def wait_probes_idle(self) -> None:
        """Return once no probe is in flight; the next tick then hands over every answer."""
        while pending := [task for task in self._probe_tasks if not task.done()]:
            await asyncio.wait(pending)

    async def close(self) -> None:
        """Cancel the probes in flight and wait until they have ended; no probe starts after.

        Idempotent. The state stays readable (`state_of`); the driver is not to tick again."""
        self._closed = True
        tasks = list(self._probe_tasks)
        for task in tasks:
            task.cancel()
        # Gathered so that an error of one that finished before is retrieved, not reported later.
        await asyncio.gather(*tasks, return_exceptions=True)
        for known in self._services.values():
            known.probing.clear()

    # -- ports.Ramps -----------------------------------------------------------------------------

    def standby(self, workload: ports.Workload) -> model.Standby:
        """The standby pool: its replicas in the Deployment's count, as last scaled, and its
        pods waiting warm."""
        if workload.ramp is None or workload.ramp.dry_run:  # a dry run writes no pool either
            return model.Standby(size=0, replicas=0, waiting=0)
        state = self._service(workload.ramp).state
        return model.Standby(size=state.standby, replicas=state.standby, waiting=len(state.pool))

    async def scale(
        self, workload: ports.Workload, replicas: int, current: int, *, standby: int | None = None
    ) -> None:
        """Scale the serving replicas up at once, down only after draining the victims (over
        later ticks); the pool's `standby` replicas (its size so far when None) come on top."""
        service, target = workload.id, workload.ramp
        if target is None:  # not a gated service: nothing to drain, and no pool
            await self._cluster.scale(service, replicas)
            return
        known = self._service(target)
        pool = known.state.standby if standby is None else standby
        await self._scale(
            workload, target, known, replicas + pool, current + known.state.standby, pool
        )

    async def _scale(
        self,
        workload: ports.Workload,
        target: ports.RampTarget,
        known: _Service,
        replicas: int,
        current: int,
        standby: int,
    ) -> None:
        """Scale the Deployment's count (serving and pool) from `current` to `replicas`."""
        service = workload.id
        infos = self._pods.pods(service)
        state = known.state
        in_flight: Mapping[str, float] = {}
        drainable = state.phase not in ramp.RAMP_PHASES and state.drain is None
        if replicas < current and drainable and infos:
            in_flight = await self._loads(target, infos)
        pods = [_pod(info, in_flight) for info in infos]
        answer = ramp.scale(
            target.config, state, pods=pods, replicas=replicas, current=current, standby=standby
        )
        if isinstance(answer, ramp.Refusal):
            raise RampBusyError(f"{service}: scale-down to {replicas} waits: {answer.reason}")
        await self._carry_out(target, known, answer, infos, seen=workload.replicas)

    async def reconcile(
        self,
        now_s: float,
        workloads: Sequence[ports.Workload],
        *,
        standby: Mapping[model.ServiceId, int] | None = None,
    ) -> None:
        """Advance every gated service's warm-up, ramp and drain by one tick, after resizing
        each pool named in `standby` whose size changed."""
        if self._gates is not None:
            await self._open_gates(self._gates)
        gated = [w for w in workloads if w.ramp is not None]
        for gone in self._services.keys() - {w.id for w in gated}:
            probing = self._services.pop(gone).probing
            self._cancel_probes(probing, list(probing))
        sizes = standby or {}
        busy: list[tuple[ports.Workload, _Service, Sequence[ports.PodInfo], int | None]] = []
        for workload in gated:
            target = workload.ramp
            assert target is not None
            known = self._service(target)
            self._notice_edit(target, known)
            infos = self._pods.pods(target.service)
            if known.probing:
                self._drop_gone_probes(known, infos)
            size = sizes.get(workload.id)
            resize = None if size is None or size == known.state.standby else size
            if workload.policy.pause is not None or known.state.drain is not None:
                # Paused, the controller writes no replicas; a drain ends before the count
                # moves again (a larger pool now would cancel the policy's scale-down).
                resize = None
            if resize is None and known.idle and not any(_needs_care(p) for p in infos):
                continue
            busy.append((workload, known, infos, resize))
        if not busy:
            return
        slots = asyncio.Semaphore(CONCURRENCY)

        async def one(
            workload: ports.Workload,
            known: _Service,
            infos: Sequence[ports.PodInfo],
            resize: int | None,
        ) -> None:
            target = workload.ramp
            assert target is not None
            async with slots:
                try:
                    if resize is not None:
                        await self._resize(workload, target, known, resize)
                        infos = self._pods.pods(target.service)
                    await self._tick(now_s, workload, target, known, infos)
                except errors.AutoscalerError as e:
                    # The state is not advanced: the next tick repeats what failed.
                    log.warning("ramp.failed", service=target.service, error=str(e))

        if len(busy) == 1:
            await one(*busy[0])
        else:
            async with asyncio.TaskGroup() as group:
                for item in busy:
                    group.create_task(one(*item))
        # The probes started this tick take their first step now: one that needs no I/O (the
        # simulator's) is over before the tick ends and answers at the next, as in one tick.
        await asyncio.sleep(0)

    async def _open_gates(self, gates: ports.Gates) -> None:
        """Open the gates no ramp answers for; one log line and one Event per Deployment."""
        for opening in gates_.openings(gates.closed_gates()):
            message = opening.condition_message()
            opened = []
            for pod in opening.pods:
                gate = gates_.ClosedGate(
                    opening.namespace, opening.deployment, pod, opening.custody
                )
                try:
                    await gates.open_gate(gate, message)
                except errors.AutoscalerError as e:
                    # Still closed: the next tick tries again.
                    log.warning(
                        "gate.open_failed",
                        namespace=opening.namespace,
                        pod=pod,
                        error=str(e),
                    )
                    continue
                opened.append(pod)
            if not opened:
                continue
            done = replace(opening, pods=tuple(opened))
            log.info(
                "gate.opened",
                namespace=done.namespace,
                deployment=done.deployment,
                pods=list(done.pods),
                why=done.custody.value,
            )
            gates.announce(done)

    # -- one service -----------------------------------------------------------------------------

    async def _resize(
        self, workload: ports.Workload, target: ports.RampTarget, known: _Service, size: int
    ) -> None:
        """Give the pool its new size, the serving replicas unchanged; a shrink that must wait
        (a cohort holds traffic, a drain is under way) is tried again next tick."""
        current = self._replicas(workload, known)
        serving = max(0, current - known.state.standby)
        try:
            await self._scale(workload, target, known, serving + size, current, size)
        except RampBusyError as e:
            log.debug("standby.resize_waits", service=workload.id, size=size, why=str(e))
            return
        log.info("standby.resized", service=workload.id, size=size, dry_run=target.dry_run)

    def _replicas(self, workload: ports.Workload, known: _Service) -> int:
        """The Deployment's count: the last written until the record shows another."""
        if known.asked is not None:
            written, seen = known.asked
            if workload.replicas == seen and workload.replicas != written:
                return written
            known.asked = None
        return workload.replicas

    async def _tick(
        self,
        now_s: float,
        workload: ports.Workload,
        target: ports.RampTarget,
        known: _Service,
        infos: Sequence[ports.PodInfo],
    ) -> None:
        replicas = self._replicas(workload, known)
        pods = tuple(_pod(info, known.in_flight) for info in infos)
        known.in_flight = {}
        self._collect_probes(known, infos)
        answers = known.take_answers()
        tick = ramp.Tick(
            now_s=now_s,
            pods=pods,
            health=answers.health,
            pod_health=answers.pod_health,
            probes=answers.probes,
            settled=answers.settled,
            resumed=known.resumed,
            replicas=replicas,
        )
        plan = ramp.advance(target.config, known.state, tick)
        await self._carry_out(target, known, plan, infos, seen=workload.replicas)

    async def _carry_out(
        self,
        target: ports.RampTarget,
        known: _Service,
        plan: ramp.Plan,
        infos: Sequence[ports.PodInfo],
        *,
        seen: int,
    ) -> None:
        """Writes in order, then the requested reads; then commit, tell, persist. `seen` is the
        replica count the service's record shows."""
        requests = []
        for action in plan.actions:
            if isinstance(action, ramp.REQUESTS):
                requests.append(action)
            else:
                if isinstance(action, ramp.Reclaim):
                    self._cancel_probes(known.probing, [action.pod])
                await self._write(target, action)
                if isinstance(action, ramp.ScaleTo) and not target.dry_run:
                    known.asked = (action.replicas, seen)
        known.state = plan.state
        known.resumed = False
        if requests:
            await self._ask(target, known, requests, infos)
        self._tell(target, known, plan)
        await self._persist(target, known)

    async def _write(self, target: ports.RampTarget, action: ramp.Action) -> None:
        service = target.service
        event, fields, write = self._describe(target, action)
        if target.dry_run:
            log.info(event, service=service, dry_run=True, **fields)
            return
        await write()
        log.info(event, service=service, **fields)

    def _describe(
        self, target: ports.RampTarget, action: ramp.Action
    ) -> tuple[str, dict[str, Any], Callable[[], Awaitable[None]]]:
        """The log event, its fields and the write (not yet started) for one action."""
        service = target.service
        pods = self._pods
        match action:
            case ramp.SetWeights(warming_pct=pct):
                router = self._router(target)
                write = functools.partial(router.set_weights, target.route, pct)
                return "ramp.weights_set", {"warming_pct": pct}, write
            case ramp.EnsureRoutes():
                router = self._router(target)
                write = functools.partial(router.ensure, target.route)
                return "ramp.routes_ensured", {"router": target.traffic.router.value}, write
            case ramp.SetWarm(pod=pod, warm=warm, message=message):
                write = functools.partial(pods.set_warm, service, pod, warm, message)
                return "ramp.warm_set", {"pod": pod, "warm": warm, "why": message}, write
            case ramp.Label(pod=pod, warming=warming, stable=stable):
                write = functools.partial(
                    pods.set_labels, service, pod, warming=warming, stable=stable
                )
                return "ramp.labelled", {"pod": pod, "warming": warming, "stable": stable}, write
            case ramp.Reclaim(pod=pod, reason=reason):
                write = functools.partial(pods.reclaim, service, pod)
                return "ramp.reclaimed", {"pod": pod, "why": reason}, write
            case ramp.MarkVictim(pod=pod):
                write = functools.partial(pods.mark_victim, service, pod)
                return "ramp.victim_marked", {"pod": pod}, write
            case ramp.ScaleTo(replicas=replicas):
                write = functools.partial(self._cluster.scale, service, replicas)
                return "ramp.scaled", {"replicas": replicas}, write
            case ramp.Event(type=type_, reason=reason, message=message):
                fields = {"type": type_.value, "reason": reason, "message": message}
                return (
                    "ramp.event_recorded",
                    fields,
                    functools.partial(self._record, target, action),
                )
        raise AssertionError(f"not a write: {action!r}")

    async def _record(self, target: ports.RampTarget, event: ramp.Event) -> None:
        self._pods.record(target.service, event.type.value, event.reason, event.message)

    async def _ask(
        self,
        target: ports.RampTarget,
        known: _Service,
        requests: Sequence[ramp.Action],
        infos: Sequence[ports.PodInfo],
    ) -> None:
        """Make the reads the core asked for; the answers wait for the next tick.

        Probes are started, not awaited (see the module docstring)."""
        by_name = {info.name: info for info in infos}
        probes = [request for request in requests if isinstance(request, ramp.Probe)]
        if probes:
            known.rounds += 1
            for probe in probes:
                self._start_probe(target, known, by_name.get(probe.pod))
            requests = [request for request in requests if not isinstance(request, ramp.Probe)]
        if not requests:
            return

        async def ask(request: ramp.Action) -> None:
            try:
                await self._answer(target, known, request)
            except errors.AutoscalerError as e:
                # No answer: the core asks again.
                kind = type(request).__name__
                log.warning(
                    "ramp.request_failed", service=target.service, request=kind, error=str(e)
                )

        if len(requests) == 1:
            await ask(requests[0])
            return
        async with asyncio.TaskGroup() as group:
            for request in requests:
                group.create_task(ask(request))

    async def _answer(
        self,
        target: ports.RampTarget,
        known: _Service,
        request: ramp.Action,
    ) -> None:
        namespace, metrics = target.route.namespace, target.metrics
        match request:
            case ramp.MeasureHealth(warming=warming, stable=stable, window_s=window_s):
                measured = await self._health.health(namespace, metrics, warming, stable, window_s)
                known.health = (_health(measured[0]), _health(measured[1]))
                log.debug("ramp.health_measured", service=target.service, window_s=window_s)
            case ramp.MeasurePodHealth(pods=names, stable=stable, window_s=window_s):
                known.pod_health = await self._pod_health(target, names, stable, window_s)
                log.debug(
                    "ramp.pod_health_measured",
                    service=target.service,
                    pods=len(names),
                    window_s=window_s,
                )
            case ramp.MeasureInFlight(pods=names):
                counts = await self._health.in_flight(namespace, metrics, names)
                known.in_flight.update(counts)
            case ramp.CheckSettled():
                known.settled = await self._router(target).settled(target.route)

    async def _pod_health(
        self,
        target: ports.RampTarget,
        names: Sequence[str],
        stable: Sequence[str],
        window_s: float,
    ) -> dict[str, tuple[ramp.Health, ramp.Health]]:
        """Each pod alone against the stable pods, one query per pod at once; every pod or an
        error (the core asks again), never a partial answer."""
        namespace, metrics = target.route.namespace, target.metrics

        async def one(name: str) -> tuple[ports.GroupHealth, ports.GroupHealth]:
            return await self._health.health(namespace, metrics, (name,), stable, window_s)

        results = await asyncio.gather(*(one(name) for name in names), return_exceptions=True)
        answers: dict[str, tuple[ramp.Health, ramp.Health]] = {}
        for name, result in zip(names, results, strict=True):
            if isinstance(result, BaseException):
                raise result
            answers[name] = (_health(result[0]), _health(result[1]))
        return answers

    # -- probes ----------------------------------------------------------------------------------

    def _start_probe(
        self, target: ports.RampTarget, known: _Service, info: ports.PodInfo | None
    ) -> None:
        if self._closed or info is None or info.ip is None or info.name in known.probing:
            return
        task = asyncio.create_task(
            self._probe_bounded(target, info, info.ip),
            name=f"probe {target.service} {info.name}",
        )
        self._probe_tasks.add(task)
        task.add_done_callback(self._probe_tasks.discard)
        known.probing[info.name] = _Probe(task, known.rounds, serving=not info.warming)

    async def _probe_bounded(
        self, target: ports.RampTarget, pod: ports.PodInfo, ip: str
    ) -> ramp.Probed | None:
        """One pod's probe in a slot, ended after `probe_deadline_s` (all of it counts failed)."""
        async with self._probe_slots:
            try:
                async with asyncio.timeout(self._probe_deadline_s):
                    return await self._probe(target, pod, ip)
            except TimeoutError:
                log.warning(
                    "ramp.probe_timed_out",
                    service=target.service,
                    pod=pod.name,
                    deadline_s=self._probe_deadline_s,
                )
                return ramp.Probed(ok=0, failed=target.warmup.requests)
            except errors.AutoscalerError as e:
                # No answer: the core asks again.
                log.warning(
                    "ramp.request_failed", service=target.service, request="Probe", error=str(e)
                )
                return None

    def _collect_probes(self, known: _Service, infos: Sequence[ports.PodInfo]) -> None:
        """Hand the finished probes to this tick's answers (those of pods gone are cancelled).

        A new pod's answer waits while a serving pod of its round, or an earlier one, is still
        being probed: the core judges its latency against theirs."""
        self._drop_gone_probes(known, infos)
        measuring = min(
            (p.round for p in known.probing.values() if p.serving and not p.task.done()),
            default=math.inf,
        )
        fresh = False
        for name, probe in list(known.probing.items()):
            if not probe.task.done() or (not probe.serving and probe.round >= measuring):
                continue
            del known.probing[name]
            if probe.task.cancelled():  # by the event loop's shutdown: no answer
                continue
            result = probe.task.result()  # an unexpected error propagates, as in the tick
            if result is None:
                continue
            if probe.serving:
                known.serving_probes[name] = result
            else:
                known.probes[name] = result
                fresh = True
        if fresh:
            known.probes.update(known.serving_probes)

    def _drop_gone_probes(self, known: _Service, infos: Sequence[ports.PodInfo]) -> None:
        alive = {info.name for info in infos if not info.terminating}
        self._cancel_probes(known.probing, known.probing.keys() - alive)
        for name in known.serving_probes.keys() - alive:
            del known.serving_probes[name]

    def _cancel_probes(self, probing: dict[str, _Probe], names: Iterable[str]) -> None:
        """Cancel these pods' probes; `close` awaits them."""
        for name in list(names):
            probe = probing.pop(name, None)
            if probe is not None:
                probe.task.cancel()

    async def _probe(self, target: ports.RampTarget, pod: ports.PodInfo, ip: str) -> ramp.Probed:
        warmup = target.warmup
        port = warmup.port if warmup.port is not None else pod.port
        if warmup.path is None or port is None:
            # Nothing to probe: every request counts as failed, and the deadline decides.
            log.warning("ramp.probe_unaddressable", service=target.service, pod=pod.name)
            return ramp.Probed(ok=0, failed=warmup.requests)
        result = await self._prober.probe(
            ip, port, warmup.path, warmup.requests, self._probe_timeout_s
        )
        log.debug(
            "ramp.probed", service=target.service, pod=pod.name, ok=result.ok, failed=result.failed
        )
        return ramp.Probed(result.ok, result.failed, tuple(result.latencies_s))

    async def _loads(
        self, target: ports.RampTarget, infos: Sequence[ports.PodInfo]
    ) -> Mapping[str, float]:
        """In-flight requests per pod for choosing scale-down victims; empty when unknown."""
        names = [info.name for info in infos if not info.terminating]
        try:
            return await self._health.in_flight(target.route.namespace, target.metrics, names)
        except errors.ObservationError as e:
            log.warning("ramp.load_unknown", service=target.service, error=str(e))
            return {}

    def _tell(self, target: ports.RampTarget, known: _Service, plan: ramp.Plan) -> None:
        service = target.service
        for outcome in plan.outcomes:
            log.info(_OUTCOME_EVENTS[outcome], service=service, dry_run=target.dry_run)
        if self._observer is None or target.dry_run:
            return
        for outcome in plan.outcomes:
            if outcome is ramp.Outcome.PROMOTED:
                self._observer.promoted(service)
            elif outcome is ramp.Outcome.ROLLED_BACK:
                self._observer.rolled_back(service)
        state = plan.state
        step_pct = 0
        if state.phase in ramp.RAMP_PHASES:
            steps = target.traffic.steps_pct
            step_pct = steps[min(state.step, len(steps) - 1)]
        reported = (step_pct, state.weight_pct, state.held)
        if reported != known.reported:
            self._observer.ramp(
                service, step_pct=step_pct, warming_pct=state.weight_pct, held=state.held
            )
            known.reported = reported

    async def _persist(self, target: ports.RampTarget, known: _Service) -> None:
        text = ramp.dumps(known.state)
        if text == known.text or target.dry_run:
            return
        await self._pods.save_ramp(target.service, text)
        known.text = text
        known.confirmed = False

    # -- memory ----------------------------------------------------------------------------------

    def _service(self, target: ports.RampTarget) -> _Service:
        known = self._services.get(target.service)
        if known is None:
            known, problem = _restore(target)
            self._services[target.service] = known
            if problem is not None:
                log.warning(
                    "ramp.state_invalid",
                    service=target.service,
                    key=problem.key,
                    value=contract.quote(target.saved or ""),
                    rule=problem.rule,
                )
                message = f"{problem.message}; ignored, the ramp starts over with its weight at 0"
                warning = ramp.Event(ramp.EventType.WARNING, contract.CORRUPT_STATE, message)
                self._post_event(target, warning)
        return known

    def _notice_edit(self, target: ports.RampTarget, known: _Service) -> None:
        """Release a hold whose persisted state someone deleted; rewrite any other edit."""
        seen = target.saved if target.saved is not None else _IDLE_TEXT
        if seen == known.text:
            known.confirmed = True
            return
        if not known.confirmed:  # the cache has not caught up with the last write yet
            return
        log.warning("ramp.state_edited", service=target.service, deleted=target.saved is None)
        known.text = seen  # so the state is written again at the next persist
        if target.saved is None and known.state.held:
            plan = ramp.release(known.state, "the saved ramp state was deleted")
            known.state = plan.state
            for action in plan.actions:
                if isinstance(action, ramp.Event):
                    self._post_event(target, action)
            self._tell(target, known, plan)

    def _post_event(self, target: ports.RampTarget, event: ramp.Event) -> None:
        """Post an Event on the service's Deployment; in dry-run, only log it."""
        fields = {"type": event.type.value, "reason": event.reason}
        if target.dry_run:
            log.info("ramp.event_recorded", service=target.service, dry_run=True, **fields)
            return
        self._pods.record(target.service, event.type.value, event.reason, event.message)
        log.info("ramp.event_recorded", service=target.service, **fields)

    def _router(self, target: ports.RampTarget) -> ports.TrafficRouter:
        router = self._routers.get(target.traffic.router)
        if router is None:
            name = target.traffic.router.value
            raise RouterMissingError(f"{target.service}: no traffic router {name!r} is configured")
        return router


def _restore(target: ports.RampTarget) -> tuple[_Service, contract.Problem | None]:
    """The state persisted on the Deployment, or a fresh one; resumed unless nothing was on.

    Text that cannot be read is also a fresh start, with the problem to report.
    """
    if target.saved is None:
        return _Service(ramp.RampState(), _IDLE_TEXT), None
    try:
        state = ramp.loads(target.saved)
    except ValueError as e:
        # Unknown weights: start afresh and write them again (to 0) at the first tick.
        problem = contract.Problem(contract.RAMP_KEY, target.saved, str(e))
        return _Service(ramp.RampState(), target.saved, resumed=True), problem
    return _Service(state, target.saved, resumed=not state.quiet), None


def _needs_care(pod: ports.PodInfo) -> bool:
    """A pod the core has work for even when nothing is under way: a new one, or a warm one
    outside the stable set."""
    return not pod.terminating and (pod.warming or (pod.warm and not pod.stable))


def _pod(info: ports.PodInfo, in_flight: Mapping[str, float]) -> ramp.Pod:
    return ramp.Pod(
        name=info.name,
        running=info.running,
        warm=info.warm,
        warming=info.warming,
        stable=info.stable,
        terminating=info.terminating,
        ip=info.ip,
        tier=info.tier,
        in_flight=in_flight.get(info.name, info.in_flight),
    )


def _health(health: ports.GroupHealth) -> ramp.Health:
    return ramp.Health(health.requests, health.error_rate, health.p95_s)

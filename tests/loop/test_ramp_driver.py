"""The ramp driver (`autoscaler.ramp_driver`) on in-memory ports, and the loop handing it the scale
writes. The Kubernetes, Prometheus, mesh and simulator sides of these ports are tested with
their own implementations; here each port is a small fake that writes into one journal, so the
order of writes across pods and router can be checked."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Mapping, Sequence

import numpy as np
import numpy.typing as npt
import pytest
from structlog.testing import capture_logs

from autoscaler import clock, errors, loop, metricnames, ports, ramp_driver
from autoscaler.contract import annotations as contract
from autoscaler.core import model, ramp

SERVICE = model.ServiceId("ns/llm")
OTHER = model.ServiceId("ns/other")
GOOD = (ports.GroupHealth(100.0, 0.0, 0.2), ports.GroupHealth(900.0, 0.001, 0.2))
THIN = (ports.GroupHealth(5.0, 0.0, 0.2), ports.GroupHealth(900.0, 0.001, 0.2))
ERRORING = (ports.GroupHealth(100.0, 0.2, 0.2), ports.GroupHealth(900.0, 0.001, 0.2))

Entry = tuple[object, ...]
CONFIG = model.PolicyConfig(max_replicas=10, target_load_per_replica=1.0)


def ramp_target(
    service: model.ServiceId = SERVICE,
    *,
    router: contract.TrafficRouter = contract.TrafficRouter.ISTIO,
    dry_run: bool = False,
    port: int | None = 8000,
) -> ports.RampTarget:
    namespace, _, name = service.partition("/")
    traffic = contract.TrafficConfig(
        router=router,
        steps_pct=(10, 30, 50, 100),
        step_interval_s=30.0,
        max_error_rate=0.01,
        max_p95_latency_s=None,
        max_p95_ratio=1.2,
    )
    warmup = contract.WarmupConfig(path="/v1/models", port=port, requests=3, deadline_s=600.0)
    return ports.RampTarget(
        service=service,
        route=ports.RouteTarget(service, namespace, name, {"app": name}),
        traffic=traffic,
        warmup=warmup,
        config=contract.ramp_config(traffic, warmup),
        metrics=metricnames.PRESETS["vllm"],
        dry_run=dry_run,
        saved=None,
    )


class Journal(list[Entry]):
    def of(self, kind: str) -> list[Entry]:
        return [entry for entry in self if entry[0] == kind]

    def writes(self) -> list[Entry]:
        return [entry for entry in self if entry[0] not in ("probe", "health", "in_flight")]


class FakeCluster:
    """`ports.Cluster` and `ports.RampCluster` over plain dicts, like one adapter.

    A reclaimed pod is replaced by a fresh one that is not running yet; `scale` removes the
    marked victims first, as the lowest deletion cost makes a ReplicaSet do.
    """

    def __init__(self, journal: Journal) -> None:
        self.journal = journal
        self.targets: dict[model.ServiceId, ports.RampTarget] = {}
        self.pod_sets: dict[model.ServiceId, dict[str, ports.PodInfo]] = {}
        self.saved: dict[model.ServiceId, str | None] = {}
        self.events: list[tuple[model.ServiceId, str, str, str]] = []
        self.marked: set[str] = set()
        self.broken: set[model.ServiceId] = set()
        self.serial = 0

    def add_service(self, target: ports.RampTarget, *, stable: int = 3) -> None:
        self.targets[target.service] = target
        self.pod_sets[target.service] = {}
        for _ in range(stable):
            self.add_pod(target.service, stable=True)

    def add_pod(
        self,
        service: model.ServiceId = SERVICE,
        *,
        stable: bool = False,
        running: bool = True,
        tier: str = "whole",
    ) -> str:
        self.serial += 1
        name = f"{service.partition('/')[2]}-{self.serial:03d}"
        self.pod_sets[service][name] = ports.PodInfo(
            name=name,
            created_s=0.0,
            ip=f"10.0.0.{self.serial}" if running else None,
            running=running,
            warm=stable,
            warming=not stable,
            stable=stable,
            terminating=False,
            tier=tier,
            port=9000,
        )
        return name

    def start_all(self) -> None:
        for service, pods in self.pod_sets.items():
            for name, pod in pods.items():
                if not pod.running:
                    pods[name] = dataclasses.replace(pod, running=True, ip=f"10.1.0.{name[-3:]}")
            del service

    def change(self, service: model.ServiceId, name: str, **fields: object) -> None:
        pods = self.pod_sets[service]
        pods[name] = dataclasses.replace(pods[name], **fields)  # type: ignore[arg-type]

    def stable(self, service: model.ServiceId = SERVICE) -> list[str]:
        return sorted(
            p.name for p in self.pod_sets[service].values() if p.stable and not p.warming and p.warm
        )

    def _write(self, service: model.ServiceId) -> None:
        if service in self.broken:
            raise errors.ActuationError(f"{service}: 503 from the API server")

    # the records, as the loop hands them to the driver

    def workloads(self) -> list[ports.Workload]:
        """One record per service, its ramp settings carrying the state saved last."""
        return [self.workload(service) for service in self.targets]

    def workload(self, service: model.ServiceId) -> ports.Workload:
        ramp = dataclasses.replace(self.targets[service], saved=self.saved.get(service))
        return ports.Workload(service, CONFIG, half_life_s=30.0, replicas=3, serving=3, ramp=ramp)

    # ports.RampCluster

    def pods(self, service: model.ServiceId) -> Sequence[ports.PodInfo]:
        return list(self.pod_sets[service].values())

    async def set_warm(self, service: model.ServiceId, pod: str, warm: bool, message: str) -> None:
        self._write(service)
        self.journal.append(("warm", pod, warm))
        self.change(service, pod, warm=warm)

    async def set_labels(
        self, service: model.ServiceId, pod: str, *, warming: bool, stable: bool
    ) -> None:
        self._write(service)
        self.journal.append(("labels", pod, warming, stable))
        self.change(service, pod, warming=warming, stable=stable)

    async def mark_victim(self, service: model.ServiceId, pod: str) -> None:
        self._write(service)
        self.journal.append(("victim", pod))
        self.marked.add(pod)

    async def reclaim(self, service: model.ServiceId, pod: str) -> None:
        self._write(service)
        self.journal.append(("reclaim", pod))
        del self.pod_sets[service][pod]
        self.add_pod(service, running=False)

    async def save_ramp(self, service: model.ServiceId, text: str) -> None:
        self._write(service)
        self.journal.append(("save", ramp.loads(text).phase.value))
        self.saved[service] = text

    def record(self, service: model.ServiceId, type_: str, reason: str, message: str) -> None:
        self.journal.append(("event", type_, reason))
        self.events.append((service, type_, reason, message))

    # ports.Cluster

    async def scale(self, service: model.ServiceId, replicas: int) -> None:
        self._write(service)
        self.journal.append(("scale", replicas))
        pods = self.pod_sets[service]
        while len(pods) > replicas:
            marked = sorted(self.marked & pods.keys())
            del pods[marked[0] if marked else sorted(pods)[0]]
        while len(pods) < replicas:
            self.add_pod(service, running=False)

    async def publish(
        self, service: model.ServiceId, decision: model.Decision, state: model.PolicyState
    ) -> None:
        return None


class FakeRouter:
    def __init__(self, journal: Journal) -> None:
        self.journal = journal
        self.weights: dict[model.ServiceId, int] = {}
        self.settles = True

    async def ensure(self, target: ports.RouteTarget) -> None:
        self.journal.append(("ensure", target.service))

    async def set_weights(self, target: ports.RouteTarget, warming_pct: int) -> None:
        self.journal.append(("weights", warming_pct))
        self.weights[target.service] = warming_pct

    async def settled(self, target: ports.RouteTarget) -> bool:
        return self.settles

    async def release(self, target: ports.RouteTarget) -> None:
        self.weights.pop(target.service, None)


class FakeHealth:
    def __init__(self, journal: Journal) -> None:
        self.journal = journal
        self.answer: tuple[ports.GroupHealth, ports.GroupHealth] | None = GOOD
        self.alone: dict[str, tuple[ports.GroupHealth, ports.GroupHealth]] = {}
        """Answers for single pods, by name; `answer` for every other query."""
        self.loads: dict[str, float] = {}

    async def health(
        self,
        namespace: str,
        metrics: metricnames.MetricNames,
        warming: Collection[str],
        stable: Collection[str],
        window_s: float,
    ) -> tuple[ports.GroupHealth, ports.GroupHealth]:
        self.journal.append(("health", tuple(warming), window_s))
        if len(warming) == 1 and next(iter(warming)) in self.alone:
            return self.alone[next(iter(warming))]
        if self.answer is None:
            raise errors.ObservationError("prometheus: connection refused")
        return self.answer

    async def in_flight(
        self, namespace: str, metrics: metricnames.MetricNames, pods: Collection[str]
    ) -> Mapping[str, float]:
        self.journal.append(("in_flight", tuple(pods)))
        return {name: self.loads[name] for name in pods if name in self.loads}


class FakeProber:
    def __init__(self, journal: Journal) -> None:
        self.journal = journal

    async def probe(
        self, ip: str, port: int, path: str, requests: int, timeout_s: float
    ) -> ports.ProbeResult:
        self.journal.append(("probe", ip, port, path))
        return ports.ProbeResult(requests, 0, (0.1,) * requests)


class FakeObserver:
    def __init__(self) -> None:
        self.calls: list[tuple[object, ...]] = []

    def ramp(
        self, service: model.ServiceId, *, step_pct: float, warming_pct: float, held: bool
    ) -> None:
        self.calls.append(("ramp", step_pct, warming_pct, held))

    def rolled_back(self, service: model.ServiceId) -> None:
        self.calls.append(("rolled_back",))

    def promoted(self, service: model.ServiceId) -> None:
        self.calls.append(("promoted",))


class Rig:
    """The fakes, one driver over them, and a clock the tests move."""

    def __init__(self, *targets: ports.RampTarget, stable: int = 3) -> None:
        self.journal = Journal()
        self.cluster = FakeCluster(self.journal)
        self.router = FakeRouter(self.journal)
        self.health = FakeHealth(self.journal)
        self.prober = FakeProber(self.journal)
        self.observer = FakeObserver()
        self.now = 1_000.0
        for target in targets or (ramp_target(),):
            self.cluster.add_service(target, stable=stable)
        self.driver = self.new_driver()

    def new_driver(self) -> ramp_driver.RampDriver:
        return ramp_driver.RampDriver(
            cluster=self.cluster,
            pods=self.cluster,
            routers={contract.TrafficRouter.ISTIO: self.router},
            health=self.health,
            prober=self.prober,
            observer=self.observer,
        )

    def restart(self) -> None:
        self.driver = self.new_driver()

    async def tick(self, dt_s: float = 1.0) -> None:
        # Probes run beside the ticks: the next tick sees every answer, whatever the scheduling.
        await self.driver.wait_probes_idle()
        self.now += dt_s
        self.cluster.start_all()
        await self.driver.reconcile(self.now, self.cluster.workloads())

    async def run_until(self, done: Callable[[], bool], *, limit: int = 1_000) -> None:
        for _ in range(limit):
            if done():
                return
            await self.tick()
        raise AssertionError(f"not done after {limit} ticks: {self.state()}")

    def state(self, service: model.ServiceId = SERVICE) -> ramp.RampState:
        return self.driver.state_of(service) or ramp.RampState()

    def weight(self, service: model.ServiceId = SERVICE) -> int:
        return self.router.weights.get(service, 0)

    def phase(self, service: model.ServiceId = SERVICE) -> ramp.Phase:
        return self.state(service).phase


# 1. The ramp ----------------------------------------------------------------------------------


async def test_a_new_pod_walks_every_step_and_is_promoted_in_the_safe_order() -> None:
    """10 -> 30 -> 50 -> 100 % of its fair share, then stable label, weight 0, warming off."""
    rig = Rig(stable=3)
    new = rig.cluster.add_pod()
    await rig.run_until(lambda: new in rig.cluster.stable())
    assert [w for _, w in rig.journal.of("weights")] == [2, 7, 12, 25, 0]
    writes = rig.journal.writes()
    last_step = writes.index(("weights", 25))
    assert [w for w in writes[last_step:] if w[0] in ("labels", "weights")] == [
        ("weights", 25),
        ("labels", new, True, True),
        ("weights", 0),
        ("labels", new, False, True),
    ]
    assert writes.index(("warm", new, True)) < writes.index(("ensure", SERVICE))
    assert [e[2] for e in rig.journal.of("event")] == [
        ramp.RAMP_STARTED,
        ramp.RAMP_STEP,
        ramp.RAMP_STEP,
        ramp.RAMP_STEP,
        ramp.RAMP_STEP,
        ramp.RAMP_PROMOTED,
    ]
    assert rig.journal.of("probe")[0] == ("probe", "10.0.0.4", 8000, "/v1/models")
    assert [call for call in rig.observer.calls if call[0] == "promoted"] == [("promoted",)]
    assert ("ramp", 30, 7, False) in rig.observer.calls
    assert rig.observer.calls[-1] == ("ramp", 0, 0, False)
    assert ramp.loads(rig.cluster.saved[SERVICE] or "") == ramp.RampState()


async def test_a_failing_gate_zeroes_the_weight_before_reclaiming_and_a_fresh_pod_ramps() -> None:
    """Rollback: weight 0 first, then reclaim; the replacement pod ramps and is promoted."""
    rig = Rig(stable=3)
    rig.health.answer = ERRORING
    first = rig.cluster.add_pod()
    await rig.run_until(lambda: ("reclaim", first) in rig.journal)
    writes = rig.journal.writes()
    assert writes.index(("weights", 0)) < writes.index(("reclaim", first))
    assert ("event", "Warning", ramp.RAMP_ROLLED_BACK) in writes
    assert ("rolled_back",) in rig.observer.calls
    rig.health.answer = GOOD
    await rig.run_until(lambda: len(rig.cluster.stable()) == 4)
    assert first not in rig.cluster.stable()
    assert rig.state().failures == 0
    assert rig.weight() == 0


async def test_only_the_pod_failing_alone_is_reclaimed_and_the_others_ramp_again() -> None:
    """A failed gate of two pods: each is measured alone; only the erroring one is reclaimed."""
    rig = Rig(stable=8)
    good, bad = rig.cluster.add_pod(), rig.cluster.add_pod()
    rig.health.answer = ERRORING
    rig.health.alone = {good: GOOD, bad: ERRORING}
    await rig.run_until(lambda: ("reclaim", bad) in rig.journal)
    alone = [entry[1] for entry in rig.journal.of("health") if len(entry[1]) == 1]
    assert sorted(alone) == sorted([(good,), (bad,)])
    assert rig.journal.of("reclaim") == [("reclaim", bad)]
    assert ("event", "Normal", ramp.RAMP_PODS_SPARED) in rig.journal
    writes = rig.journal.writes()
    assert writes.index(("weights", 0)) < writes.index(("reclaim", bad))
    assert rig.state().failures == 1
    rig.health.answer, rig.health.alone = GOOD, {}
    await rig.run_until(lambda: good in rig.cluster.stable())
    assert rig.state().failures == 0


async def test_a_busy_step_is_judged_on_the_time_since_it_began() -> None:
    """Enough requests: the gate measures once the dwell has passed, over the step so far, and
    the next weights follow on the next tick."""
    rig = Rig(stable=3)
    new = rig.cluster.add_pod()
    await rig.run_until(lambda: rig.state().step_started_s is not None)
    started = rig.now
    await rig.run_until(lambda: rig.weight() == 7)
    assert rig.journal.of("health") == [("health", (new,), 10.0)]
    assert rig.now - started == 11.0


async def test_a_quiet_step_waits_its_full_interval() -> None:
    """Too few requests: measured on every tick past the dwell, judged only at the interval."""
    rig = Rig(stable=3)
    rig.health.answer = THIN
    new = rig.cluster.add_pod()
    await rig.run_until(lambda: rig.state().step_started_s is not None)
    started = rig.now
    await rig.run_until(lambda: rig.state().checks == 1)
    assert rig.now - started == 30.0
    assert rig.weight() == 2
    windows = [entry[2] for entry in rig.journal.of("health")]
    assert windows == [float(s) for s in range(10, 30)]
    assert {entry[1] for entry in rig.journal.of("health")} == {(new,)}


async def test_a_pod_warm_mid_ramp_joins_the_cohort_at_the_next_step() -> None:
    """A second pod warming during the first step is set warm with the next step's weights."""
    rig = Rig(stable=3)
    first = rig.cluster.add_pod()
    await rig.run_until(lambda: rig.weight() == 2)
    late = rig.cluster.add_pod()
    await rig.run_until(lambda: late in rig.cluster.stable())
    writes = rig.journal.writes()
    joined = writes.index(("warm", late, True))
    assert writes[joined + 1] == ("weights", 12)  # 30 % x 2/5
    assert [w for _, w in rig.journal.of("weights")] == [2, 12, 20, 40, 0]
    assert first in rig.cluster.stable()


async def test_three_failures_hold_with_a_warning_and_the_observer_told() -> None:
    """The third rollback in a row holds the ramp: a Warning Event and `held` reported."""
    rig = Rig(stable=3)
    rig.health.answer = ERRORING
    rig.cluster.add_pod()
    await rig.run_until(lambda: rig.phase() is ramp.Phase.HELD, limit=2_000)
    assert len(rig.journal.of("reclaim")) == 3
    assert ("event", "Warning", ramp.RAMP_HELD) in rig.journal
    assert rig.observer.calls[-1] == ("ramp", 0, 0, True)
    assert rig.observer.calls.count(("rolled_back",)) == 3
    assert '"hold_reason"' in (rig.cluster.saved[SERVICE] or "")
    weights = len(rig.journal.of("weights"))
    for _ in range(200):
        await rig.tick()
    assert len(rig.journal.of("weights")) == weights  # the warm replacement gets no traffic


async def test_deleting_the_saved_state_releases_a_hold() -> None:
    """Once the cache showed the held state, its deletion is a manual reset: the ramp resumes."""
    rig = Rig(stable=3)
    rig.health.answer = ERRORING
    rig.cluster.add_pod()
    await rig.run_until(lambda: rig.phase() is ramp.Phase.HELD, limit=2_000)
    for _ in range(5):  # the replacement warms up; the cache shows the last write
        await rig.tick()
    rig.cluster.saved[SERVICE] = None
    rig.health.answer = GOOD
    told = len(rig.observer.calls)
    with capture_logs() as logs:
        await rig.tick()
    assert "ramp.released" in [entry["event"] for entry in logs]
    assert ("event", "Normal", ramp.RAMP_RELEASED) in rig.journal
    assert rig.observer.calls[told] == ("ramp", 0, 0, False)
    await rig.run_until(lambda: len(rig.cluster.stable()) == 4)
    assert rig.state().failures == 0


async def test_the_none_router_only_gates() -> None:
    """With the `none` router a warm pod is promoted at once; no router is needed at all."""
    target = ramp_target(router=contract.TrafficRouter.NONE)
    rig = Rig(target, stable=2)
    new = rig.cluster.add_pod()
    await rig.run_until(lambda: new in rig.cluster.stable())
    assert rig.journal.writes() == [
        ("save", "warming"),  # its warm-up deadline
        ("warm", new, True),
        ("save", "warming"),
        ("labels", new, False, True),
        ("event", "Normal", ramp.RAMP_PROMOTED),
        ("save", "idle"),
    ]
    assert rig.observer.calls == [("ramp", 0, 0, False), ("promoted",)]


async def test_the_probe_goes_to_the_first_container_port_without_a_warmup_port() -> None:
    """`warmup-port` unset: the pod's first container port is probed."""
    rig = Rig(ramp_target(port=None), stable=2)
    rig.cluster.add_pod()
    await rig.tick()
    assert rig.journal.of("probe")[0][2] == 9000


# 2. Restarts ----------------------------------------------------------------------------------


def at_weight(weight: int) -> Callable[[Rig], bool]:
    return lambda rig: rig.weight() == weight and rig.state().step_started_s is not None


def at_stage(stage: ramp.Stage) -> Callable[[Rig], bool]:
    return lambda rig: rig.state().stage is stage


def rolling_back(rig: Rig) -> bool:
    return rig.phase() is ramp.Phase.ROLLING_BACK


@pytest.mark.parametrize(
    ("where", "health", "expected"),
    [
        (at_weight(2), GOOD, 2),
        (at_weight(7), GOOD, 7),
        (at_weight(12), GOOD, 12),
        (at_weight(25), GOOD, 25),
        (at_stage(ramp.Stage.LABELLED), GOOD, 25),
        (at_stage(ramp.Stage.UNWEIGHTED), GOOD, 0),
        (rolling_back, ERRORING, 0),
    ],
    ids=["10", "30", "50", "100", "labelled", "unweighted", "rolling-back"],
)
async def test_a_restarted_driver_resumes_and_writes_the_weight_again(
    where: Callable[[Rig], bool],
    health: tuple[ports.GroupHealth, ports.GroupHealth],
    expected: int,
) -> None:
    """A new driver reads the saved state, rewrites the weight it computes (even after a lost
    write) and finishes the ramp with no weight left on the warming set."""
    rig = Rig(stable=3)
    rig.router.settles = False  # so a rollback waits for the router
    rig.health.answer = health
    new = rig.cluster.add_pod()
    for _ in range(1_000):
        await rig.tick()
        if where(rig):
            break
        rig.router.settles = not rollback_pending(rig)
    rig.router.weights[SERVICE] = 77  # the mesh holds something else (a write lost in a crash)
    rig.restart()
    await rig.tick()
    assert rig.weight() == expected
    rig.router.settles = True
    rig.health.answer = GOOD
    await rig.run_until(lambda: rig.phase() is ramp.Phase.IDLE and rig.weight() == 0)
    if health is GOOD:
        assert new in rig.cluster.stable()
    else:
        assert new not in rig.cluster.pod_sets[SERVICE]


def rollback_pending(rig: Rig) -> bool:
    return rig.health.answer is ERRORING and rig.phase() is ramp.Phase.RAMPING


async def test_a_driver_restarted_after_every_saved_change_still_completes_the_ramp() -> None:
    """A fresh driver after every write of the state (all it knows comes from the Deployment):
    the ramp still ends promoted."""
    rig = Rig(stable=3)
    new = rig.cluster.add_pod()
    restarts = 0
    for _ in range(500):
        saved = rig.cluster.saved.get(SERVICE)
        await rig.tick()
        if rig.cluster.saved.get(SERVICE) != saved:
            rig.restart()
            restarts += 1
        if new in rig.cluster.stable():
            break
    assert restarts >= 10
    assert new in rig.cluster.stable()
    assert rig.weight() == 0
    assert {w for _, w in rig.journal.of("weights")} == {0, 2, 7, 12, 25}


async def test_an_unreadable_saved_state_is_logged_and_the_weight_reset() -> None:
    """Junk in the annotation: a warning, a fresh state, and the weight written back to 0."""
    rig = Rig(stable=2)
    rig.cluster.saved[SERVICE] = '{"v": 1, "phase": "sideways"}'
    rig.router.weights[SERVICE] = 40
    rig.restart()
    with capture_logs() as logs:
        await rig.tick()
    assert "ramp.state_invalid" in [entry["event"] for entry in logs]
    assert rig.weight() == 0


@pytest.mark.parametrize(
    ("text", "rule"),
    [
        ('{"v":1,"phase":"ramping","step_started_s":' + "9" * 400 + "}", "has an integer"),
        ("[" * 100_000, "nested deeper than 8 arrays or objects"),
        ('{"v":1,"phase":"ramping","step_started_s":NaN}', "has NaN"),
    ],
)
async def test_a_hostile_saved_state_gets_a_warning_event_and_starts_over(
    text: str, rule: str
) -> None:
    """A ramp annotation no float or parser survives: a CorruptState Event, a log line with the
    key, the value and the rule, the weight back to 0 and a fresh state written."""
    rig = Rig(stable=2)
    rig.cluster.saved[SERVICE] = text
    rig.router.weights[SERVICE] = 40
    rig.restart()
    with capture_logs() as logs:
        await rig.tick()
    ((service, type_, reason, message),) = rig.cluster.events
    assert (service, type_, reason) == (SERVICE, "Warning", "CorruptState")
    assert message.startswith(f"{contract.RAMP_KEY}={contract.quote(text)}: ramp state {rule}")
    assert message.endswith("; ignored, the ramp starts over with its weight at 0")
    assert len(message) < 400
    (logged,) = [entry for entry in logs if entry["event"] == "ramp.state_invalid"]
    assert logged["key"] == contract.RAMP_KEY
    assert logged["rule"].startswith(f"ramp state {rule}")
    assert rig.weight() == 0
    assert ramp.loads(rig.cluster.saved[SERVICE] or "") == ramp.RampState()


async def test_a_hostile_saved_state_in_dry_run_is_only_logged() -> None:
    """In dry-run the CorruptState Event is logged, not posted."""
    rig = Rig(stable=2)
    rig.cluster.saved[SERVICE] = "[" * 100_000
    rig.cluster.targets[SERVICE] = dataclasses.replace(rig.cluster.targets[SERVICE], dry_run=True)
    rig.restart()
    with capture_logs() as logs:
        await rig.tick()
    assert rig.cluster.events == []
    (logged,) = [entry for entry in logs if entry["event"] == "ramp.event_recorded"]
    shown = (logged["reason"], logged["type"], logged["dry_run"])
    assert shown == ("CorruptState", "Warning", True)


# 3. Scale-down ---------------------------------------------------------------------------------


async def test_scale_down_drains_the_lowest_tier_then_scales() -> None:
    """The shared-GPU pod leaves routing, its requests finish, it gets the lowest deletion cost,
    then replicas drop."""
    rig = Rig(stable=0)
    names = [rig.cluster.add_pod(stable=True, tier=t) for t in ("whole", "shared", "mig-1g")]
    whole, shared, mig = names
    rig.health.loads = {whole: 0.0, shared: 3.0, mig: 0.0}
    await rig.driver.scale(rig.cluster.workload(SERVICE), 2, 3)
    assert rig.journal.writes() == [
        ("warm", shared, False),
        ("labels", shared, False, False),
        ("event", "Normal", ramp.DRAIN_STARTED),
        ("save", "draining"),
    ]
    for _ in range(10):
        await rig.tick()
    assert rig.journal.of("scale") == []
    rig.health.loads[shared] = 0.0
    await rig.run_until(lambda: bool(rig.journal.of("scale")))
    writes = rig.journal.writes()
    assert writes.index(("victim", shared)) < writes.index(("scale", 2))
    assert sorted(rig.cluster.pod_sets[SERVICE]) == sorted([whole, mig])


async def test_scale_down_with_unknown_in_flight_waits_for_the_grace_period() -> None:
    """No in-flight data is not zero: the drain waits its 60 s of grace."""
    rig = Rig(stable=3)
    await rig.driver.scale(rig.cluster.workload(SERVICE), 2, 3)
    await rig.tick()
    started = rig.now
    await rig.run_until(lambda: bool(rig.journal.of("scale")))
    assert rig.now - started == pytest.approx(60.0)


async def test_scale_down_during_a_ramp_is_refused_with_the_reason() -> None:
    """While new pods hold traffic, a scale-down raises an `ActuationError` saying why."""
    rig = Rig(stable=3)
    rig.cluster.add_pod()
    await rig.run_until(lambda: rig.phase() is ramp.Phase.RAMPING)
    with pytest.raises(ramp_driver.RampBusyError, match="ramping at the 10 % step"):
        await rig.driver.scale(rig.cluster.workload(SERVICE), 2, 4)
    assert rig.journal.of("scale") == []


async def test_scale_up_is_immediate_even_during_a_ramp() -> None:
    """A scale-up goes straight to the cluster."""
    rig = Rig(stable=3)
    rig.cluster.add_pod()
    await rig.run_until(lambda: rig.phase() is ramp.Phase.RAMPING)
    await rig.driver.scale(rig.cluster.workload(SERVICE), 6, 4)
    assert rig.journal.of("scale") == [("scale", 6)]


async def test_a_service_without_a_ramp_is_scaled_directly() -> None:
    """A service whose record has no ramp settings is scaled through the cluster at once."""
    rig = Rig(stable=3)
    rig.cluster.pod_sets[OTHER] = {}
    plain = ports.Workload(OTHER, CONFIG, half_life_s=30.0, replicas=3, serving=3)
    await rig.driver.scale(plain, 1, 3)
    assert rig.journal == [("scale", 1)]


# 4. Dry-run, idle services, errors ------------------------------------------------------------


async def test_dry_run_writes_nothing_and_logs_what_it_would_do() -> None:
    """A dry-run service's ramp and drain are logged, never written."""
    rig = Rig(ramp_target(dry_run=True), stable=3)
    rig.cluster.add_pod()
    with capture_logs() as logs:
        for _ in range(300):
            await rig.tick()
        await rig.driver.scale(rig.cluster.workload(SERVICE), 2, 4)
        for _ in range(100):
            await rig.tick()
    assert rig.journal.writes() == []
    assert rig.observer.calls == []
    would = {entry["event"] for entry in logs if entry.get("dry_run")}
    assert {"ramp.warm_set", "ramp.victim_marked", "ramp.scaled"} <= would


async def test_idle_services_cost_no_query_no_probe_and_no_write() -> None:
    """A thousand services with only serving pods: no health query, no probe, no write."""
    targets = [ramp_target(model.ServiceId(f"ns/s{i}")) for i in range(1_000)]
    rig = Rig(*targets, stable=2)
    for _ in range(5):
        await rig.tick()
    assert rig.journal == []
    assert rig.observer.calls == []


async def test_an_idle_service_puts_back_a_pod_that_lost_its_stable_label() -> None:
    """Nothing under way, but a warm pod outside both sets: it is labelled stable again."""
    rig = Rig(stable=3)
    await rig.tick()
    pod = rig.cluster.stable()[0]
    rig.cluster.change(SERVICE, pod, stable=False)
    await rig.tick()
    assert rig.journal == [("labels", pod, False, True)]


async def test_state_is_saved_only_when_it_changes() -> None:
    """Waiting ticks write nothing: one save per change of the ramp's state."""
    rig = Rig(stable=3)
    rig.health.answer = THIN  # the step waits its interval, measured on every tick past the dwell
    rig.cluster.add_pod()
    await rig.run_until(lambda: rig.state().step_started_s is not None)
    saves = len(rig.journal.of("save"))
    for _ in range(25):
        await rig.tick()
    assert len(rig.journal.of("health")) == 16  # 10 s to 25 s into the step
    assert len(rig.journal.of("save")) == saves


async def test_one_failing_service_does_not_stop_the_others() -> None:
    """A write error is logged for its service, which retries next tick; the other ramps."""
    rig = Rig(ramp_target(SERVICE), ramp_target(OTHER), stable=2)
    broken = rig.cluster.add_pod(SERVICE)
    fine = rig.cluster.add_pod(OTHER)
    rig.cluster.broken.add(SERVICE)
    with capture_logs() as logs:
        await rig.run_until(lambda: fine in rig.cluster.stable(OTHER))
    assert "ramp.failed" in [entry["event"] for entry in logs]
    assert not rig.cluster.pod_sets[SERVICE][broken].warm
    rig.cluster.broken.clear()
    await rig.run_until(lambda: broken in rig.cluster.stable(SERVICE))


async def test_a_router_the_controller_lacks_is_an_error_for_that_service_only() -> None:
    """`traffic-router: smi` without an SMI router: that service logs, the other ramps."""
    smi = ramp_target(OTHER, router=contract.TrafficRouter.SMI)
    rig = Rig(ramp_target(SERVICE), smi, stable=2)
    rig.cluster.add_pod(OTHER)
    fine = rig.cluster.add_pod(SERVICE)
    with capture_logs() as logs:
        await rig.run_until(lambda: fine in rig.cluster.stable(SERVICE))
    failures = [e for e in logs if e["event"] == "ramp.failed"]
    assert failures
    assert all(e["service"] == OTHER and "'smi'" in e["error"] for e in failures)


async def test_a_health_outage_is_asked_again_and_never_passes_the_gate() -> None:
    """Prometheus down at the gate: no step passes; the ramp holds with the weight at 0."""
    rig = Rig(stable=3)
    rig.cluster.add_pod()
    await rig.run_until(lambda: rig.state().step_started_s is not None)
    rig.health.answer = None
    await rig.run_until(lambda: rig.phase() is ramp.Phase.HELD)
    assert rig.weight() == 0
    assert len(rig.journal.of("health")) > 1
    assert [w for _, w in rig.journal.of("weights")] == [2, 0]


# 5. The loop hands the driver its scale writes -----------------------------------------------


class RecordingRamps:
    def __init__(self, *, refuse: bool = False) -> None:
        self.refuse = refuse
        self.calls: list[tuple[object, ...]] = []

    def standby(self, workload: ports.Workload) -> model.Standby:
        return model.Standby(size=0, replicas=0, waiting=0)

    async def scale(
        self, workload: ports.Workload, replicas: int, current: int, *, standby: int | None = None
    ) -> None:
        self.calls.append(("scale", workload.id, replicas, current))
        if self.refuse:
            raise ramp_driver.RampBusyError(f"{workload.id}: new pods are ramping")

    async def reconcile(
        self,
        now_s: float,
        workloads: Sequence[ports.Workload],
        *,
        standby: Mapping[model.ServiceId, int] | None = None,
    ) -> None:
        self.calls.append(("reconcile", now_s, len(workloads)))


class BelowMinimum:
    """One workload below its minimum of 2, so the loop scales it up at the first tick."""

    def __init__(self) -> None:
        self.scaled: list[int] = []
        self.published: list[model.ServiceId] = []

    def workloads(self) -> Sequence[ports.Workload]:
        config = model.PolicyConfig(max_replicas=10, target_load_per_replica=1.0)
        return [ports.Workload(SERVICE, config, half_life_s=30.0, replicas=1, serving=1)]

    async def scale(self, service: model.ServiceId, replicas: int) -> None:
        self.scaled.append(replicas)

    async def publish(
        self, service: model.ServiceId, decision: model.Decision, state: model.PolicyState
    ) -> None:
        self.published.append(service)


class FlatMetrics:
    async def sample(
        self, workloads: Sequence[ports.Workload], now_s: float
    ) -> npt.NDArray[np.float64]:
        return np.full((len(workloads), len(model.Signal)), 1.0)


async def test_the_loop_scales_through_the_driver_and_reconciles_after_publishing() -> None:
    """With a driver, the loop's scale goes to it (with the current count), then one reconcile."""
    cluster, ramps = BelowMinimum(), RecordingRamps()
    the_loop = loop.Loop(
        cluster=cluster, metrics=FlatMetrics(), clock=clock.ManualClock(5.0), ramps=ramps
    )
    report = await the_loop.step()
    assert ramps.calls == [("scale", SERVICE, 2, 1), ("reconcile", 5.0, 1)]
    assert cluster.scaled == []
    assert report.scaled == (SERVICE,)
    assert cluster.published == [SERVICE]


async def test_a_refused_scale_leaves_the_policy_state_for_the_next_tick() -> None:
    """A `RampBusyError` is a failed scale: the loop keeps its policy state and tries again."""
    ramps = RecordingRamps(refuse=True)
    the_loop = loop.Loop(
        cluster=BelowMinimum(), metrics=FlatMetrics(), clock=clock.ManualClock(), ramps=ramps
    )
    with capture_logs() as logs:
        report = await the_loop.step()
    assert report.failed == (SERVICE,)
    assert the_loop.state_of(SERVICE) is None
    assert "scale.failed" in [entry["event"] for entry in logs]
    assert ramps.calls[-1][0] == "reconcile"

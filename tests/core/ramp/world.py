"""A small world for the ramp's tests: pods and a router that the core's actions change, and
the answers to its requests; with the healths, probes and builders the tests share."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence

from autoscaler.core import ramp
from autoscaler.core.ramp import (
    CheckSettled,
    EnsureRoutes,
    Event,
    Health,
    Label,
    MarkVictim,
    MeasureHealth,
    MeasureInFlight,
    MeasurePodHealth,
    Plan,
    Pod,
    Probe,
    Probed,
    RampConfig,
    RampState,
    Reclaim,
    Refusal,
    ScaleTo,
    SetWarm,
    SetWeights,
)

START_S = 1_000.0
STABLE_HEALTH = Health(requests=900.0, error_rate=0.001, p95_s=0.2)
HEALTH: dict[str, tuple[Health, Health] | None] = {
    "good": (Health(100.0, 0.0, 0.2), STABLE_HEALTH),
    "erroring": (Health(100.0, 0.1, 0.2), STABLE_HEALTH),
    "slow": (Health(100.0, 0.0, 0.5), STABLE_HEALTH),
    "thin": (Health(5.0, 0.0, 0.2), STABLE_HEALTH),
    "idle": (Health(0.0, math.nan, math.nan), STABLE_HEALTH),
    "unknown": (Health(math.nan, math.nan, math.nan), STABLE_HEALTH),
    "missing": None,
}
PROBES = {
    "good": Probed(3, 0, (0.12, 0.13, 0.12)),
    "cold": Probed(3, 0, (0.9, 0.8, 0.9)),
    "failing": Probed(0, 3, ()),
}
SERVING_PROBE = Probed(3, 0, (0.1, 0.1, 0.1))


class World:
    """Pods and a router as the core's actions leave them; it answers the core's requests.

    Writes apply at once. A reclaimed pod is replaced by a fresh one that is not yet running, as
    a ReplicaSet would; `ScaleTo` removes the marked victims first.
    """

    def __init__(self, *, stable: int = 4, config: RampConfig | None = None) -> None:
        self.config = config or RampConfig()
        self.now = START_S
        self.pods: dict[str, Pod] = {}
        self.serial = 0
        for _ in range(stable):
            self.add(stable=True)
        self.replicas = stable
        self.weight = 0
        self.ensured = False
        self.state = RampState()
        self.requests: list[ramp.Action] = []
        self.health = "good"
        self.alone: dict[str, str] = {}
        """Health of single pods measured alone, by name; `health` for the others."""
        self.probe = "good"
        self.settles = True
        self.in_flight = 0.0
        self.marked: set[str] = set()
        self.events: list[Event] = []
        self.actions: list[ramp.Action] = []

    # -- the cluster ---------------------------------------------------------------------------

    def add(self, *, stable: bool = False, running: bool = True, tier: str = "whole") -> str:
        name = f"p{self.serial:02d}"
        self.serial += 1
        self.pods[name] = Pod(
            name,
            running=running,
            warm=stable,
            warming=not stable,
            stable=stable,
            ip=f"10.0.0.{self.serial}",
            tier=tier,
        )
        return name

    def change(self, name: str, **fields: object) -> None:
        self.pods[name] = dataclasses.replace(self.pods[name], **fields)  # type: ignore[arg-type]

    def start_all(self) -> None:
        for name, pod in list(self.pods.items()):
            if not pod.running:
                self.change(name, running=True)

    def routed(self) -> list[Pod]:
        """The pods in the Service's endpoints: ready (warm and running), not terminating."""
        return [p for p in self.pods.values() if p.warm and p.running and not p.terminating]

    def stable_set(self) -> list[str]:
        return [p.name for p in self.routed() if p.stable and not p.warming]

    def warming_set(self) -> list[str]:
        return [p.name for p in self.routed() if p.warming]

    def routed_stable(self) -> list[str]:
        """The stable subset a mesh routes to (warming ones too, mid-promotion)."""
        return [p.name for p in self.routed() if p.stable]

    # -- the core --------------------------------------------------------------------------------

    def tick(self, dt_s: float = 1.0, *, resumed: bool = False) -> Plan:
        self.now += dt_s
        health, pod_health, probes, settled = self.answers()
        tick = ramp.Tick(
            now_s=self.now,
            pods=tuple(self.pods.values()),
            health=health,
            pod_health=pod_health,
            probes=probes,
            settled=settled,
            resumed=resumed,
            replicas=self.replicas,
        )
        plan = ramp.advance(self.config, self.state, tick)
        self.carry_out(plan)
        return plan

    def restart(self, gap_s: float) -> Plan:
        """A new leader takes over `gap_s` after the last tick: the state as it was persisted,
        the answers to the old leader's requests lost."""
        self.requests = []
        self.state = ramp.loads(ramp.dumps(self.state))
        return self.tick(gap_s, resumed=True)

    def scale(self, replicas: int, *, standby: int | None = None) -> Plan | Refusal:
        answer = ramp.scale(
            self.config,
            self.state,
            pods=tuple(self.pods.values()),
            replicas=replicas,
            current=self.replicas,
            standby=standby,
        )
        if isinstance(answer, Plan):
            self.carry_out(answer)
        return answer

    def carry_out(self, plan: Plan) -> None:
        self.state = plan.state
        for action in plan.actions:
            self.actions.append(action)
            if isinstance(action, ramp.REQUESTS):
                self.requests.append(action)
            else:
                self.apply(action)

    def answers(
        self,
    ) -> tuple[
        tuple[Health, Health] | None,
        dict[str, tuple[Health, Health]],
        dict[str, Probed],
        bool | None,
    ]:
        health: tuple[Health, Health] | None = None
        pod_health: dict[str, tuple[Health, Health]] = {}
        probes: dict[str, Probed] = {}
        settled: bool | None = None
        for request in self.requests:
            if isinstance(request, Probe) and request.pod in self.pods:
                pod = self.pods[request.pod]
                probes[request.pod] = SERVING_PROBE if pod.stable else PROBES[self.probe]
            elif isinstance(request, MeasureHealth):
                health = HEALTH[self.health]
            elif isinstance(request, MeasurePodHealth):
                alone = {name: HEALTH[self.alone.get(name, self.health)] for name in request.pods}
                if all(answer is not None for answer in alone.values()):  # all or nothing
                    pod_health = {name: a for name, a in alone.items() if a is not None}
            elif isinstance(request, CheckSettled):
                settled = self.settles
            elif isinstance(request, MeasureInFlight):
                for name in request.pods:
                    if name in self.pods:
                        self.change(name, in_flight=self.in_flight)
        self.requests = []
        return health, pod_health, probes, settled

    def apply(self, action: ramp.Action) -> None:
        match action:
            case SetWeights(warming_pct=pct):
                self.weight = pct
            case EnsureRoutes():
                self.ensured = True
            case SetWarm(pod=pod, warm=warm) if pod in self.pods:
                self.change(pod, warm=warm)
            case Label(pod=pod, warming=warming, stable=stable) if pod in self.pods:
                self.change(pod, warming=warming, stable=stable)
            case Reclaim(pod=pod) if pod in self.pods:
                del self.pods[pod]
                self.add(running=False)
            case MarkVictim(pod=pod):
                self.marked.add(pod)
            case ScaleTo(replicas=replicas):
                self.scale_to(replicas)
            case Event():
                self.events.append(action)

    def scale_to(self, replicas: int) -> None:
        self.replicas = replicas
        while len(self.pods) > replicas:
            marked = sorted(self.marked & self.pods.keys())
            if marked:
                name = marked[0]
            else:
                name = ramp.victim_order(self.pods.values(), pool=self.state.pool)[0].name
            del self.pods[name]
        while len(self.pods) < replicas:
            self.add(running=False)

    # -- helpers for the examples ----------------------------------------------------------------

    def run_until(
        self, done: Callable[[], bool], *, dt_s: float = 1.0, limit: int = 2_000
    ) -> list[ramp.Action]:
        """Tick until `done()`; the actions taken on the way."""
        start = len(self.actions)
        for _ in range(limit):
            if done():
                return self.actions[start:]
            self.tick(dt_s)
        raise AssertionError(f"not done after {limit} ticks: {self.state}")

    def writes(self, since: int = 0) -> list[ramp.Action]:
        return [a for a in self.actions[since:] if not isinstance(a, ramp.REQUESTS)]


def cohort_world(*, stable: int = 4, new: int = 1, **config: object) -> World:
    """A world whose `new` pods are warm and ramping at the first step, its weights applied."""
    world = World(stable=stable, config=RampConfig(**config))  # type: ignore[arg-type]
    for _ in range(new):
        world.add()
    world.run_until(lambda: world.state.step_started_s is not None)
    return world


def reasons(actions: Sequence[ramp.Action]) -> list[str]:
    return [a.reason for a in actions if isinstance(a, Event)]

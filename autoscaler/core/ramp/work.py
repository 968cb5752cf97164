"""One call of `advance` at work: a mutable copy of the state, the tick it reads, and the
actions and outcomes so far (`Work`), with what every transition shares: the sets of pods,
writing weights, ending a ramp, holding and releasing.

Pure: no I/O, no clock, no logging.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from autoscaler.core.ramp.actions import (
    RAMP_HELD,
    RAMP_RELEASED,
    Action,
    CheckSettled,
    Event,
    EventType,
    Outcome,
    Plan,
    SetWeights,
)
from autoscaler.core.ramp.config import RampConfig, fingerprint
from autoscaler.core.ramp.inputs import Pod, Tick
from autoscaler.core.ramp.state import RAMP_PHASES, Drain, Phase, RampState, Stage


@dataclass(slots=True)
class Work:
    """The working copy of one service's `RampState` during one tick (its fields mean what
    theirs do), and what the tick has done so far. Built by `begin`, turned into a `Plan` by
    `plan`."""

    config: RampConfig
    tick: Tick
    phase: Phase
    cohort: tuple[str, ...]
    step: int
    step_started_s: float | None
    settle_since_s: float | None
    stage: Stage | None
    weight: int
    checks: int
    asked_s: float | None
    deadlines: dict[str, float]
    probe_after: dict[str, float]
    passed: list[str]
    joined: tuple[str, ...]
    failures: int
    hold_reason: str | None
    held_config: str | None
    drain: Drain | None
    standby: int
    pool: list[str]
    released: dict[str, float]
    pods: dict[str, Pod]
    """The pods not terminating, by name."""
    excluded: frozenset[str]
    """The drain's victims: out of every set until they are gone."""
    actions: list[Action] = field(default_factory=list)
    outcomes: list[Outcome] = field(default_factory=list)
    warmed: bool = False
    """A pod was set warm this tick."""

    @classmethod
    def begin(cls, config: RampConfig, state: RampState, tick: Tick) -> Work:
        return cls(
            config=config,
            tick=tick,
            phase=state.phase,
            cohort=state.cohort,
            step=min(state.step, len(config.steps_pct) - 1),
            step_started_s=state.step_started_s,
            settle_since_s=state.settle_since_s,
            stage=state.stage,
            weight=state.weight_pct,
            checks=state.checks,
            asked_s=None if tick.health is not None else state.asked_s,
            deadlines=dict(state.deadlines),
            probe_after=dict(state.probe_after),
            passed=list(state.passed),
            joined=state.joined,
            failures=state.failures,
            hold_reason=state.hold_reason,
            held_config=state.held_config,
            drain=state.drain,
            standby=state.standby,
            pool=list(state.pool),
            released=dict(state.released),
            pods={p.name: p for p in tick.pods if not p.terminating},
            excluded=frozenset(v.name for v in state.drain.victims) if state.drain else frozenset(),
        )

    @property
    def now(self) -> float:
        return self.tick.now_s

    # -- sets of pods ----------------------------------------------------------------------------

    def stable(self) -> list[str]:
        """The serving pods: the stable set the cohort is compared with and falls back on."""
        return sorted(
            p.name
            for p in self.pods.values()
            if p.stable and not p.warming and p.warm and p.running and p.name not in self.excluded
        )

    def alive(self, *, warming: bool = True) -> list[str]:
        """The cohort's pods still warm (or just set warm to join) and running (and still
        `warming`, unless told)."""
        alive = []
        for name in self.cohort:
            pod = self.pods.get(name)
            if pod is None or not pod.running or not (pod.warming or not warming):
                continue
            if pod.warm or name in self.joined:
                alive.append(name)
        return alive

    def draining(self) -> bool:
        return self.drain is not None and self.drain.scaled_s is None

    def warming_pod(self, name: str) -> bool:
        """Whether the pod is still warming up: labelled `warming`, not warm, not a victim, not
        waiting in the standby pool."""
        pod = self.pods.get(name)
        return (
            pod is not None
            and pod.warming
            and not pod.warm
            and name not in self.excluded
            and name not in self.pool
        )

    def step_pct(self) -> int:
        return self.config.steps_pct[self.step]

    # -- what the transitions share ------------------------------------------------------------

    def event(self, type_: EventType, reason: str, message: str) -> None:
        self.actions.append(Event(type_, reason, message))

    def write_weights(self, weight: int, *, settle: bool = False) -> None:
        """Give the warming set `weight` percent; with `settle`, wait for the router to say so."""
        self.actions.append(SetWeights(weight))
        self.weight = weight
        if settle:
            self.settle_since_s = self.now
            self.actions.append(CheckSettled())

    def still_settling(self, what: str, *, hold: bool = True) -> bool:
        """Ask again whether the router has settled; False once it has taken too long (and,
        with `hold`, the ramp is held)."""
        since = self.settle_since_s if self.settle_since_s is not None else self.now
        self.settle_since_s = since
        if self.now - since < self.config.settle_timeout_s:
            self.actions.append(CheckSettled())
            return True
        if hold:
            limit = self.config.settle_timeout_s
            self.hold(f"the traffic router did not apply {what} within {limit:g} s")
        return False

    def end_ramp(self) -> None:
        self.phase = Phase.IDLE
        self.cohort = self.joined = ()
        self.step, self.checks, self.weight = 0, 0, 0
        self.step_started_s = self.settle_since_s = None
        self.stage = None

    def hold(self, reason: str) -> None:
        """Stop ramping: the weight back to 0 and nothing ramps until `release`."""
        if self.weight or self.phase in RAMP_PHASES:
            self.write_weights(0)
        self.end_ramp()
        self.phase = Phase.HELD
        self.hold_reason = reason
        self.held_config = fingerprint(self.config)
        self.event(
            EventType.WARNING,
            RAMP_HELD,
            f"Ramp held: {reason}. New pods warm up but get no traffic until a ramp setting "
            "changes or the saved ramp state is deleted",
        )
        self.outcomes.append(Outcome.HELD)

    def release(self, reason: str) -> None:
        self.hold_reason = self.held_config = None
        self.failures = 0
        if self.phase is Phase.HELD:
            self.phase = Phase.IDLE
        self.event(EventType.NORMAL, RAMP_RELEASED, f"The ramp hold is released: {reason}")
        self.outcomes.append(Outcome.RELEASED)

    # -- the result ------------------------------------------------------------------------------

    def plan(self) -> Plan:
        return Plan(self._state(), tuple(self.actions), tuple(self.outcomes))

    def _state(self) -> RampState:
        phase = self.phase
        if phase not in RAMP_PHASES:
            if self.draining():
                phase = Phase.DRAINING
            elif self.hold_reason is not None:
                phase = Phase.HELD
            elif self.deadlines or self.passed or any(map(self.warming_pod, self.pods)):
                phase = Phase.WARMING
            else:
                phase = Phase.IDLE
        return RampState(
            phase=phase,
            cohort=self.cohort,
            step=self.step,
            step_started_s=self.step_started_s,
            settle_since_s=self.settle_since_s,
            stage=self.stage if phase is Phase.PROMOTING else None,
            weight_pct=self.weight,
            checks=self.checks,
            asked_s=self.asked_s if phase is Phase.RAMPING else None,
            deadlines=self.deadlines,
            probe_after=self.probe_after,
            passed=tuple(self.passed),
            joined=self.joined,
            failures=self.failures,
            hold_reason=self.hold_reason,
            held_config=self.held_config,
            drain=self.drain,
            standby=self.standby,
            pool=tuple(self.pool),
            released=self.released,
        )


def names(pods: Iterable[str]) -> str:
    return ", ".join(pods)

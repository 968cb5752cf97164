"""The ramp as a hypothesis state machine (`core.ramp.machine`) against a small world that carries
out the actions, restarted at every tick."""

from __future__ import annotations

import dataclasses
import math

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from autoscaler.core import ramp
from autoscaler.core.ramp import (
    Label,
    MarkVictim,
    MeasureHealth,
    Outcome,
    Phase,
    Plan,
    RampConfig,
    RampState,
    Reclaim,
    Refusal,
    ScaleTo,
    SetWarm,
    SetWeights,
)

from .world import HEALTH, PROBES, World


class RampMachine(RuleBasedStateMachine):
    """Random pods, answers and scale requests against the core, restarted at every tick."""

    world: World

    @initialize(
        stable=st.integers(0, 4),
        gate_only=st.booleans(),
        steps=st.sampled_from([(10, 30, 50, 100), (50, 100), (100,)]),
        extensions=st.integers(0, 2),
        dwell=st.sampled_from([1 / 3, 0.05, 1.0]),
    )
    def start(
        self, stable: int, gate_only: bool, steps: tuple[int, ...], extensions: int, dwell: float
    ) -> None:
        config = RampConfig(
            steps_pct=steps,
            gate_only=gate_only,
            max_step_extensions=extensions,
            min_dwell_ratio=dwell,
            settle_timeout_s=60.0,
            warmup_deadline_s=300.0,
            drain_grace_s=40.0,
        )
        self.world = World(stable=stable, config=config)

    @precondition(lambda self: len(self.world.pods) < 10)
    @rule(running=st.booleans(), tier=st.sampled_from(["whole", "shared", "mig-1g.10gb"]))
    def add_pod(self, running: bool, tier: str) -> None:
        self.world.add(running=running, tier=tier)
        self.world.replicas += 1

    @rule()
    def start_pods(self) -> None:
        self.world.start_all()

    @precondition(lambda self: bool(self.world.pods))
    @rule(data=st.data(), how=st.sampled_from(["deleted", "crashed", "terminating"]))
    def lose_pod(self, data: st.DataObject, how: str) -> None:
        name = data.draw(st.sampled_from(sorted(self.world.pods)))
        if how == "deleted":
            del self.world.pods[name]
            self.world.add(running=False)  # the ReplicaSet replaces it
        elif how == "crashed":
            self.world.change(name, running=False)
        else:
            self.world.change(name, terminating=True)

    @rule(kind=st.sampled_from(sorted(HEALTH)))
    def health(self, kind: str) -> None:
        self.world.health = kind

    @precondition(lambda self: bool(self.world.pods))
    @rule(data=st.data(), kind=st.sampled_from(sorted(HEALTH)))
    def alone(self, data: st.DataObject, kind: str) -> None:
        name = data.draw(st.sampled_from(sorted(self.world.pods)))
        self.world.alone[name] = kind

    @rule(kind=st.sampled_from(sorted(PROBES)))
    def probes(self, kind: str) -> None:
        self.world.probe = kind

    @rule(settles=st.booleans())
    def router(self, settles: bool) -> None:
        self.world.settles = settles

    @rule(in_flight=st.sampled_from([0.0, 2.0, math.nan]))
    def load(self, in_flight: float) -> None:
        self.world.in_flight = in_flight

    @rule(delta=st.integers(-3, 3))
    def scale(self, delta: int) -> None:
        world = self.world
        replicas = max(1, world.replicas + delta)
        if replicas == world.replicas:
            return
        before = world.state
        stable_before = set(world.stable_set())
        answer = world.scale(replicas)
        if replicas < world.replicas and before.phase in ramp.RAMP_PHASES:
            assert isinstance(answer, Refusal)
        if isinstance(answer, Plan) and before.phase in ramp.RAMP_PHASES:
            assert set(world.stable_set()) >= stable_before
        self.check_round_trip()

    @rule(size=st.integers(0, 2))
    def standby(self, size: int) -> None:
        """The standby pool resized, the serving replicas kept."""
        world = self.world
        serving = max(1, world.replicas - world.state.standby)
        world.scale(serving + size, standby=size)
        self.check_round_trip()

    @rule(dt_s=st.sampled_from([0.5, 1.0, 5.0, 11.0, 31.0, 61.0, 301.0]), resumed=st.booleans())
    def tick(self, dt_s: float, resumed: bool) -> None:
        self.checked_tick(dt_s, resumed=resumed)

    def checked_tick(self, dt_s: float, *, resumed: bool = False) -> Plan:
        world = self.world
        before = world.state
        stable_before = set(world.stable_set())
        serving_before = len(world.stable_set())
        health_given = any(isinstance(r, MeasureHealth) for r in world.requests)
        health_kind = world.health
        plan = world.tick(dt_s, resumed=resumed)
        self.check_weights(plan)
        self.check_gate(before, plan, health_given, health_kind, serving_before)
        if before.phase in ramp.RAMP_PHASES or plan.state.phase in ramp.RAMP_PHASES:
            # The serving set never shrinks by the ramp's own doing.
            assert not [a for a in plan.actions if isinstance(a, MarkVictim | ScaleTo)]
            for action in plan.actions:
                if isinstance(action, Reclaim | SetWarm) and action.pod in stable_before:
                    raise AssertionError(f"{action} on a serving pod during a ramp")
                if isinstance(action, Label) and action.pod in stable_before:
                    assert action.stable
        self.check_round_trip()
        return plan

    @rule(gap_s=st.floats(0.5, 900.0, allow_nan=False))
    def leader_restart(self, gap_s: float) -> None:
        """A new leader takes over after an arbitrary gap, from the persisted state and without
        the old leader's answers: the restart alone never holds, rolls back or moves a step."""
        world = self.world
        before = world.state
        world.requests = []
        plan = self.checked_tick(gap_s, resumed=True)
        after = plan.state
        assert Outcome.HELD not in plan.outcomes, f"held by a restart: {after.hold_reason}"
        assert Outcome.ROLLED_BACK not in plan.outcomes
        if before.phase is Phase.RAMPING and after.phase is Phase.RAMPING:
            assert after.step == before.step
            started = before.step_started_s
            interval = world.config.step_interval_s
            if started is not None and world.now >= started + interval * (before.checks + 1):
                assert after.step_started_s == world.now  # overdue: the dwell starts again

    @rule()
    def quiesce(self) -> None:
        """With every input steady and healthy, the ramp ends promoted, rolled back or held,
        but for the pods waiting in the standby pool."""
        world = self.world
        world.health, world.probe, world.settles, world.in_flight = "good", "good", True, 0.0
        world.alone = {}
        for _ in range(400):
            for name in [n for n, p in world.pods.items() if p.terminating]:
                del world.pods[name]  # terminated; its ReplicaSet already counts the rest
            world.start_all()
            self.checked_tick(5.0)
            pool = world.state.pool
            if world.state.phase in (Phase.IDLE, Phase.HELD) and (
                world.state.held
                or not [p for p in world.pods.values() if p.warming and p.name not in pool]
            ):
                break
        else:
            raise AssertionError(f"stuck: {world.state}")
        assert world.weight == 0
        assert world.state.drain is None or world.state.drain.scaled_s is not None
        # A pool resized down may keep a surplus pod while a drain takes a pending pod
        # instead; once quiet, it holds no more than its size.
        assert len(world.state.pool) <= world.state.standby

    def check_weights(self, plan: Plan) -> None:
        world = self.world
        for action in plan.actions:
            if isinstance(action, SetWeights):
                assert 0 <= action.warming_pct <= 100
                assert not world.config.gate_only
        if world.weight > 0:
            assert world.warming_set(), "weight on an empty warming set"
        if 0 < world.weight < 100:
            assert world.routed_stable(), "weight on an empty stable set"
        if plan.state.phase in ramp.RAMP_PHASES:
            # Every pod the warming weight reaches is one the gate judges.
            outside = set(world.warming_set()) - set(plan.state.cohort)
            assert not outside, f"{outside} routed outside {plan}"
        if plan.state.phase is Phase.RAMPING:
            k, n = len(world.warming_set()), len(world.stable_set())
            fair = world.config.steps_pct[plan.state.step] * k // (n + k)
            assert world.weight <= max(1, fair)
        elif plan.state.phase is not Phase.PROMOTING:
            assert world.weight == 0

    def check_gate(
        self,
        before: RampState,
        plan: Plan,
        health_given: bool,
        health_kind: str,
        serving_before: int,
    ) -> None:
        """A step is passed only on a health answer that passes (or with nothing to fall back
        on: no serving pod left); before its interval is over, only past the dwell and on
        enough requests."""
        after = plan.state
        if before.phase is not Phase.RAMPING or serving_before == 0:
            return
        advanced = (after.phase is Phase.RAMPING and after.step > before.step) or (
            after.phase is Phase.PROMOTING
        )
        if advanced:
            assert health_given
            assert health_kind in ("good", "thin", "idle")
            started = before.step_started_s
            interval = self.world.config.step_interval_s
            if started is not None and self.world.now < started + interval:
                assert health_kind == "good"
                assert before.checks == 0
                assert self.world.now >= started + self.world.config.min_dwell_ratio * interval

    def check_round_trip(self) -> None:
        """Every state survives a restart (all but the probe throttle, the time of the awaited
        health request and the pods set warm not yet seen so, which are not saved); they stay,
        as in the driver's memory, since a restart that loses them is `leader_restart`."""
        state = self.world.state
        restored = ramp.loads(ramp.dumps(state))
        assert restored == dataclasses.replace(state, probe_after={}, asked_s=None, released={})
        self.world.state = dataclasses.replace(
            restored, asked_s=state.asked_s, released=state.released
        )

    @invariant()
    def the_pool_gets_no_traffic(self) -> None:
        """A pod in the standby pool is in no routed set and no cohort."""
        world = self.world
        pool = set(world.state.pool)
        assert not pool & {p.name for p in world.routed()}
        assert not pool & set(world.state.cohort)

    @invariant()
    def weights_sum_to_100(self) -> None:
        stable_pct = 100 - self.world.weight
        assert 0 <= stable_pct <= 100
        assert stable_pct + self.world.weight == 100


RampMachine.TestCase.settings = settings(
    max_examples=150,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_ramp_state_machine = RampMachine.TestCase

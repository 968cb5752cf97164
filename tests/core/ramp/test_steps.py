"""The ramp's steps, promotion and roll-back (`core.ramp.steps`, `promotion`, `rollback`), and a
restart in the middle of them, transition by transition."""

from __future__ import annotations

import dataclasses
import math

import pytest

from autoscaler.core import ramp
from autoscaler.core.ramp import (
    EnsureRoutes,
    Event,
    Health,
    Label,
    MeasureHealth,
    MeasurePodHealth,
    Outcome,
    Phase,
    Probe,
    RampConfig,
    RampState,
    Reclaim,
    SetWarm,
    SetWeights,
)

from .world import HEALTH, STABLE_HEALTH, World, cohort_world, reasons


def test_warm_pods_form_a_cohort_at_their_fair_share_of_the_first_step() -> None:
    """Two warm pods next to eight serving ones get 10 % x 2/10 = 2 % of the traffic."""
    world = World(stable=8)
    new = [world.add(), world.add()]
    world.run_until(lambda: world.state.phase is Phase.RAMPING)
    assert world.state.cohort == tuple(new)
    assert world.ensured
    assert world.weight == 2
    assert ramp.RAMP_STARTED in reasons(world.actions)


def test_the_step_clock_starts_when_the_router_has_settled() -> None:
    """The gate waits for the weights to apply, then the dwell, then measures the step so far."""
    world = World(stable=4)
    world.add()
    world.run_until(lambda: world.state.phase is Phase.RAMPING)
    world.settles = False
    for _ in range(10):
        world.tick()
        assert world.state.step_started_s is None
    world.settles = True
    world.tick()
    world.tick()
    started = world.state.step_started_s
    assert started == world.now - 1.0
    world.run_until(lambda: any(isinstance(a, MeasureHealth) for a in world.requests))
    assert world.now == started + 10.0  # a third of the 30 s interval
    measure = next(a for a in world.requests if isinstance(a, MeasureHealth))
    assert measure == MeasureHealth(("p04",), ("p00", "p01", "p02", "p03"), 10.0)


def test_a_healthy_cohort_walks_every_step_and_is_promoted_in_the_safe_order() -> None:
    """10 -> 30 -> 50 -> 100 %, then stable label, weight 0, warming label removed."""
    world = World(stable=3)
    new = world.add()
    weights: list[int] = []
    world.run_until(lambda: world.state.phase is Phase.RAMPING)
    mark = len(world.actions)
    while world.state.phase is not Phase.IDLE:
        world.tick()
        if world.weight and world.weight not in weights:
            weights.append(world.weight)
    assert weights == [2, 7, 12, 25]  # p x 1/4
    promotion = [
        a for a in world.writes(mark) if isinstance(a, Label | SetWeights) and a != SetWeights(7)
    ]
    assert promotion[-3:] == [
        Label(new, warming=True, stable=True),
        SetWeights(0),
        Label(new, warming=False, stable=True),
    ]
    assert world.stable_set() == ["p00", "p01", "p02", new]
    assert world.state == RampState(failures=0)


def test_promotion_waits_for_propagation_then_for_the_router() -> None:
    """Between the stable label and weight 0: at least `propagation_s`, and a settled router."""
    world = cohort_world(steps_pct=(100,), propagation_s=5.0)
    world.run_until(lambda: world.state.phase is Phase.PROMOTING)
    labelled = world.now
    world.settles = False
    for _ in range(20):
        world.tick()
        assert world.weight > 0
    world.settles = True
    world.run_until(lambda: world.weight == 0)
    assert world.now - labelled > 5.0
    assert world.state.stage is ramp.Stage.UNWEIGHTED
    assert world.pods["p04"].warming


def test_a_failing_gate_sets_the_weight_to_zero_before_reclaiming() -> None:
    """An erroring cohort: weight 0 first; once applied, its pods are reclaimed."""
    world = cohort_world()
    world.health = "erroring"
    mark = len(world.actions)
    world.run_until(lambda: world.state.phase is Phase.ROLLING_BACK)
    assert world.weight == 0
    assert "p04" in world.pods
    world.run_until(lambda: world.state.phase is not Phase.ROLLING_BACK)
    writes = world.writes(mark)
    zero = writes.index(SetWeights(0))
    reclaim = writes.index(Reclaim("p04", "failed the traffic ramp's health gate"))
    assert zero < reclaim
    assert "p04" not in world.pods
    assert world.state.failures == 1
    assert ramp.RAMP_ROLLED_BACK in reasons(writes)


def test_only_the_pod_failing_on_its_own_is_reclaimed() -> None:
    """One erroring pod in a cohort of three: it alone is reclaimed; the others ramp again."""
    world = cohort_world(stable=8, new=3)
    assert world.state.cohort == ("p08", "p09", "p10")
    world.health = "erroring"
    world.alone = {"p08": "good", "p10": "good"}
    mark = len(world.actions)
    world.run_until(lambda: world.state.phase is Phase.ROLLING_BACK)
    serving = tuple(f"p0{i}" for i in range(8))
    # Failed early, 11 s into the step: each pod alone is still measured over an interval.
    assert MeasurePodHealth(("p08", "p09", "p10"), serving, 30.0) in world.requests
    world.run_until(lambda: world.state.phase is not Phase.ROLLING_BACK)
    writes = world.writes(mark)
    assert [a for a in writes if isinstance(a, Reclaim)] == [
        Reclaim("p09", "failed the traffic ramp's health gate on its own")
    ]
    assert writes.index(SetWeights(0)) < writes.index(
        Reclaim("p09", "failed the traffic ramp's health gate on its own")
    )
    assert ramp.RAMP_PODS_SPARED in reasons(writes)
    assert world.state.failures == 1
    assert world.warming_set() == ["p08", "p10"]  # warm, at weight 0
    assert world.weight == 0
    world.health, world.alone = "good", {}
    world.run_until(lambda: world.state.phase is Phase.RAMPING)
    assert world.state.cohort == ("p08", "p10")


@pytest.mark.parametrize(
    ("alone", "why"),
    [
        ({"p08": "thin", "p09": "thin"}, "too few requests each"),
        ({"p08": "good", "p09": "good"}, "all fine alone"),
        ({"p08": "missing", "p09": "erroring"}, "no answer"),
    ],
)
def test_a_cohort_with_no_pod_to_blame_is_reclaimed_whole(alone: dict[str, str], why: str) -> None:
    """When no single pod fails on its own (or the pods cannot be measured), all are reclaimed."""
    world = cohort_world(stable=8, new=2, settle_timeout_s=20.0)
    world.health = "erroring"
    world.alone = alone
    world.run_until(lambda: world.state.phase is Phase.ROLLING_BACK)
    failed_at = world.now
    actions = world.run_until(lambda: world.state.phase is not Phase.ROLLING_BACK)
    assert sorted(a.pod for a in actions if isinstance(a, Reclaim)) == ["p08", "p09"], why
    assert ramp.RAMP_PODS_SPARED not in reasons(actions)
    if why == "no answer":  # asked again each tick until the settle timeout
        assert world.now - failed_at == pytest.approx(20.0)
        assert sum(isinstance(a, MeasurePodHealth) for a in world.actions) == 20


def test_a_single_pod_cohort_is_not_measured_alone() -> None:
    """With one pod there is nobody else to blame: no per-pod query."""
    world = cohort_world()
    world.health = "erroring"
    world.run_until(lambda: "p04" not in world.pods)
    assert not [a for a in world.actions if isinstance(a, MeasurePodHealth)]


def test_a_rollback_waits_for_the_router_up_to_the_settle_timeout() -> None:
    """Weight 0 not yet applied: no reclaim until the router settles or the timeout passes."""
    world = cohort_world(settle_timeout_s=20.0)
    world.health = "erroring"
    world.run_until(lambda: world.state.phase is Phase.ROLLING_BACK)
    world.settles = False
    for _ in range(19):
        world.tick()
        assert "p04" in world.pods
    world.run_until(lambda: "p04" not in world.pods)


def test_slow_new_pods_fail_the_latency_gate() -> None:
    """A cohort P95 above 1.2 x the serving pods' is rolled back."""
    world = cohort_world()
    world.health = "slow"
    plan = None
    while world.state.phase is Phase.RAMPING:
        plan = world.tick()
    assert plan is not None
    assert plan.outcomes == (Outcome.ROLLED_BACK,)


def test_three_failures_in_a_row_hold_the_ramp_until_the_settings_change() -> None:
    """After the third rollback the ramp is held, warns, and new warm pods get no traffic."""
    world = cohort_world(max_failures=3)
    world.health = "erroring"
    outcomes: list[Outcome] = []
    for _ in range(2_000):
        outcomes += world.tick().outcomes
        world.start_all()
        if world.state.held:
            break
    assert outcomes == [Outcome.ROLLED_BACK] * 3 + [Outcome.HELD]
    assert world.state.phase is Phase.HELD
    assert "3 health gates failed in a row" in (world.state.hold_reason or "")
    assert ramp.RAMP_HELD in reasons(world.actions)
    world.health = "good"
    for _ in range(100):
        world.tick()
        assert world.weight == 0
    assert world.warming_set()  # warm, waiting
    world.config = dataclasses.replace(world.config, step_interval_s=31.0)
    plan = world.tick()
    assert Outcome.RELEASED in plan.outcomes
    world.run_until(lambda: world.state.phase is Phase.IDLE)
    assert world.state.failures == 0


def test_a_promotion_resets_the_failure_count() -> None:
    """Two failures, then a healthy cohort: the count starts again from 0."""
    world = cohort_world()
    world.health = "erroring"
    for _ in range(2):
        world.run_until(lambda: world.state.phase is Phase.ROLLING_BACK)
        world.run_until(lambda: world.state.phase is not Phase.ROLLING_BACK)
        world.start_all()
    assert world.state.failures == 2
    world.health = "good"
    outcomes: list[Outcome] = []
    while Outcome.PROMOTED not in outcomes:
        outcomes += world.tick().outcomes
        world.start_all()
    assert outcomes == [Outcome.PROMOTED]
    assert world.state.failures == 0


def test_thin_traffic_extends_the_step_then_judges_what_there_is() -> None:
    """Five requests: three extensions of the step, then the gate passes on those five."""
    world = cohort_world()
    world.health = "thin"
    started = world.state.step_started_s
    assert started is not None
    world.run_until(lambda: world.state.step == 1)
    assert world.now - started == pytest.approx(4 * 30.0 + 1.0)


def gate_times(world: World) -> list[float]:
    """Seconds into the step at which each step of the ramp is passed, until the promotion."""
    times = []
    while world.state.phase is Phase.RAMPING:
        started, step = world.state.step_started_s, world.state.step

        def passed(step: int = step) -> bool:
            return world.state.step != step or world.state.phase is not Phase.RAMPING

        world.run_until(passed)
        assert started is not None
        times.append(world.now - started)
        world.run_until(
            lambda: world.state.step_started_s is not None or world.state.phase is not Phase.RAMPING
        )
    return times


def test_a_busy_service_is_judged_once_the_dwell_has_passed() -> None:
    """With enough requests, each step passes a tick after a third of its interval."""
    world = cohort_world()
    started = world.state.step_started_s
    assert started is not None
    world.run_until(lambda: any(isinstance(a, MeasureHealth) for a in world.requests))
    assert world.requests == [MeasureHealth(("p04",), ("p00", "p01", "p02", "p03"), 10.0)]
    assert gate_times(world) == [11.0, 11.0, 11.0, 11.0]
    assert world.state.phase is Phase.PROMOTING


def test_a_full_dwell_ratio_turns_the_early_gate_off() -> None:
    """`min_dwell_ratio` 1: every step waits its whole interval, however busy."""
    world = cohort_world(min_dwell_ratio=1.0)
    assert gate_times(world) == [31.0, 31.0, 31.0, 31.0]


def test_a_failing_cohort_is_rolled_back_once_the_dwell_has_passed() -> None:
    """Enough requests that fail: the weight goes to 0 a tick after the dwell."""
    world = cohort_world()
    started = world.state.step_started_s
    assert started is not None
    world.health = "erroring"
    world.run_until(lambda: world.state.phase is Phase.ROLLING_BACK)
    assert world.now - started == 11.0
    assert world.weight == 0


def test_the_early_gate_waits_for_a_p95_the_serving_pods_show(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Busy new pods whose P95 is not measured yet, while the serving pods' is: the early gate
    waits rather than pass on the error rate alone, and judges once the P95 arrives."""
    # Not among the answers the state machine test draws from: it is a moment, not a state.
    monkeypatch.setitem(HEALTH, "no-p95-yet", (Health(100.0, 0.0, math.nan), STABLE_HEALTH))
    world = cohort_world()
    started = world.state.step_started_s
    assert started is not None
    world.health = "no-p95-yet"
    while world.now < started + 25.0:
        world.tick()
        assert (world.state.step, world.state.phase) == (0, Phase.RAMPING)
    world.health = "slow"  # the P95 arrives, too slow: judged on the next tick, and failed
    world.tick()
    assert world.state.phase is Phase.ROLLING_BACK


def test_a_quiet_service_waits_the_full_interval() -> None:
    """Too few requests: measured on every tick past the dwell, judged only at the interval."""
    world = cohort_world()
    started = world.state.step_started_s
    assert started is not None
    world.health = "thin"
    measured: list[float] = []
    while world.now < started + 29.0:
        world.tick()
        assert world.state.step == 0
        assert world.state.checks == 0
        measured += [a.window_s for a in world.requests if isinstance(a, MeasureHealth)]
    assert measured == [float(s) for s in range(10, 30)]
    world.tick()  # the interval is over: the last answer is judged, and the step extended
    assert world.state.step == 0
    assert world.state.checks == 1
    world.health = "good"
    world.run_until(lambda: world.state.step == 1)
    # An extension is judged at its end: only the first interval is watched on every tick.
    assert world.now - started == 61.0


def test_a_measured_zero_does_not_cut_a_step_short() -> None:
    """Without a request minimum, no request at all still waits for the full interval."""
    world = cohort_world(min_requests=0)
    started = world.state.step_started_s
    assert started is not None
    world.health = "idle"
    world.run_until(lambda: world.state.step == 1)
    assert world.now - started == 30.0


def test_a_step_extended_at_a_one_second_interval_is_measured_again_not_held() -> None:
    """With one-second steps and ticks, the tick after an extension asks for a measurement:
    nothing is missing yet, so the ramp is not held and walks on once traffic is enough."""
    world = cohort_world(step_interval_s=1.0)
    world.health = "thin"
    world.run_until(lambda: world.state.checks == 2)
    assert not world.state.held
    world.health = "good"
    world.run_until(lambda: world.state.phase is Phase.IDLE)
    assert not world.state.held
    assert reasons(world.actions).count(ramp.RAMP_PROMOTED) == 1


def test_no_request_at_all_passes_after_the_extensions() -> None:
    """A measured zero is not missing data: with no traffic to judge, the step passes."""
    world = cohort_world()
    world.health = "idle"
    world.run_until(lambda: world.state.step == 1)


@pytest.mark.parametrize("kind", ["unknown", "missing"])
def test_missing_health_holds_instead_of_passing(kind: str) -> None:
    """No request count (or no answer at all) is never read as healthy: the ramp holds."""
    world = cohort_world()
    world.health = kind
    world.run_until(lambda: world.state.held)
    assert world.state.step == 0
    assert world.weight == 0
    assert world.state.failures == 0


def test_a_router_that_never_settles_holds_with_the_weight_at_zero() -> None:
    """New weights not applied within the settle timeout: weight 0 and hold."""
    world = World(stable=4, config=RampConfig(settle_timeout_s=30.0))
    world.settles = False
    world.add()
    world.run_until(lambda: world.state.held)
    assert world.weight == 0
    assert "did not apply" in (world.state.hold_reason or "")


def test_the_none_router_promotes_warm_pods_without_weights() -> None:
    """Gate only: warming, warm, promoted; no weight is ever written."""
    world = World(stable=2, config=RampConfig(gate_only=True))
    new = world.add()
    plan = None
    while world.pods[new].warming:
        plan = world.tick()
    assert plan is not None
    assert plan.outcomes == (Outcome.PROMOTED,)
    assert not [a for a in world.actions if isinstance(a, SetWeights | EnsureRoutes)]
    assert world.stable_set() == ["p00", "p01", new]


def test_with_no_serving_pod_the_warm_pods_are_promoted_without_steps() -> None:
    """Nothing to compare with or fall back on: straight to promotion."""
    world = World(stable=0)
    new = [world.add(), world.add()]
    world.run_until(lambda: world.stable_set() == new)
    assert not [a for a in world.actions if isinstance(a, MeasureHealth)]
    assert [w for w in world.actions if isinstance(w, SetWeights)] == [SetWeights(0)]
    assert world.stable_set() == new


def test_losing_a_cohort_pod_lowers_the_weight_and_losing_all_ends_the_ramp() -> None:
    """The weight follows the pods still warm; with none left it goes to 0 at once."""
    world = cohort_world(stable=8, new=2)
    assert world.weight == 2
    world.change("p08", running=False)
    world.tick()
    assert world.weight == 1
    del world.pods["p09"]
    plan = world.tick()
    assert world.weight == 0
    assert ramp.RAMP_ABANDONED in reasons(plan.actions)
    assert plan.state.phase is not Phase.RAMPING
    assert plan.state.failures == 0


def test_a_pod_warm_mid_ramp_joins_the_cohort_at_the_next_step() -> None:
    """A pod passing its warm-up mid-step stays unrouted until the step passes, then joins."""
    world = cohort_world(stable=4)
    late = world.add()
    world.run_until(lambda: late in world.state.passed)
    assert not world.pods[late].warm
    assert world.weight == 2  # 10 % x 1/5: the step is not recomputed mid-step
    mark = len(world.actions)
    world.run_until(lambda: world.state.step == 1)
    assert world.state.cohort == ("p04", late)
    assert world.state.passed == ()
    assert world.pods[late].warm
    assert world.weight == ramp.share_pct(30, 2, 4) == 10
    writes = world.writes(mark)
    joins = [a for a in writes if isinstance(a, SetWarm)]
    assert joins == [SetWarm(late, True, "warm-up passed; joins the ramp at the 30 % step")]
    assert writes.index(joins[0]) < writes.index(SetWeights(10))
    step = [a for a in writes if isinstance(a, Event) and a.reason == ramp.RAMP_STEP]
    assert f"{late} joined" in step[0].message
    world.run_until(lambda: world.state.phase is Phase.IDLE)
    assert sorted(world.stable_set()) == ["p00", "p01", "p02", "p03", "p04", late]


def test_a_pod_warm_after_the_last_gate_waits_for_the_next_cohort() -> None:
    """Past the last gate nothing joins: the pod is set warm once the promotion ends."""
    world = cohort_world(stable=4, steps_pct=(50, 100))
    world.run_until(lambda: world.state.step == 1)
    late = world.add()
    world.run_until(lambda: world.state.phase is not Phase.RAMPING)
    assert world.state.cohort == ("p04",)
    assert not world.pods[late].warm
    world.run_until(lambda: world.state.phase is Phase.IDLE or world.pods[late].warm)
    assert world.pods[late].warm
    assert world.state.cohort == ()
    world.run_until(lambda: world.state.cohort == (late,))


def test_a_joined_pod_not_yet_seen_warm_stays_in_the_cohort() -> None:
    """A cache that does not show the join's write yet neither drops nor re-probes the pod."""
    world = cohort_world(stable=4)
    late = world.add()
    world.run_until(lambda: world.state.step == 1)
    assert world.state.joined == (late,)
    world.change(late, warm=False)  # the write, not yet in the cache
    plan = world.tick()
    assert plan.state.cohort == ("p04", late)
    assert plan.state.joined == (late,)
    assert not [a for a in plan.actions if isinstance(a, Probe | SetWarm) and a.pod == late]
    world.change(late, warm=True)
    plan = world.tick()
    assert plan.state.joined == ()
    assert plan.state.cohort == ("p04", late)


def test_a_pod_set_warm_joins_the_cohort_forming_next_to_it() -> None:
    """A pod passing its warm-up waits one tick with the already warm one: one cohort of two."""
    world = World(stable=4)
    early = world.add()
    late = world.add(running=False)
    world.tick()  # early is probed
    world.change(late, running=True)
    world.tick()  # early is set warm, late is probed
    assert world.pods[early].warm
    plan = world.tick()
    assert [a.pod for a in plan.actions if isinstance(a, SetWarm)] == [late]
    assert plan.state.phase is Phase.WARMING
    world.run_until(lambda: world.state.phase is Phase.RAMPING)
    assert world.state.cohort == (early, late)


def test_a_pod_warm_again_outside_the_cohort_leaves_the_warming_set() -> None:
    """A cohort pod that restarts is dropped; warm again, it is taken out, not left unjudged."""
    world = cohort_world(stable=8, new=2)
    world.change("p08", running=False)
    world.tick()
    assert world.state.cohort == ("p09",)
    world.change("p08", running=True)
    plan = world.tick()
    assert SetWarm("p08", False, "warm outside the ramping group") in plan.actions
    assert world.warming_set() == ["p09"]


def test_a_cut_short_promotion_is_finished_when_its_pod_turns_up() -> None:
    """A pod labelled both stable and warming, outside the cohort, loses `warming`."""
    world = cohort_world(stable=4)
    stray = world.add()
    world.change(stray, warm=True, stable=True)
    plan = world.tick()
    assert Label(stray, warming=False, stable=True) in plan.actions


def test_a_serving_pod_without_its_stable_label_is_put_back() -> None:
    """Warm and running but in neither set (a label removed by hand): labelled stable again."""
    world = World(stable=3)
    world.change("p01", stable=False)
    plan = world.tick()
    assert plan.actions == (Label("p01", warming=False, stable=True),)
    assert world.stable_set() == ["p00", "p01", "p02"]


def test_a_resumed_ramp_writes_its_weight_again() -> None:
    """After a restart the weight the core computes is written even if it seems unchanged."""
    world = cohort_world()
    plan = world.tick(resumed=True)
    assert SetWeights(world.weight) in plan.actions


@pytest.mark.parametrize("interval_s", [1.0, 10.0])
def test_a_leader_restart_mid_step_measures_the_step_again_instead_of_holding(
    interval_s: float,
) -> None:
    """A successor taking over mid-step after a gap longer than the step interval restarts the
    step's dwell at the same weight and walks on to the promotion instead of holding."""
    world = cohort_world(step_interval_s=interval_s, settle_timeout_s=10.0)
    world.tick(interval_s / 2)
    step, weight = world.state.step, world.weight
    plan = world.restart(16.0)  # a lease duration and a retry
    assert Outcome.HELD not in plan.outcomes
    assert (world.state.phase, world.state.step, world.weight) == (Phase.RAMPING, step, weight)
    assert world.state.step_started_s == world.now
    world.run_until(lambda: world.state.phase is Phase.IDLE)
    assert not world.state.held
    assert world.stable_set() == ["p00", "p01", "p02", "p03", "p04"]
    assert reasons(world.actions).count(ramp.RAMP_PROMOTED) == 1


def test_a_restart_keeps_a_step_judged_on_the_new_dwell_only() -> None:
    """The step a successor resumes is measured over the time since it took over."""
    world = cohort_world(step_interval_s=30.0)
    world.tick(20.0)
    world.restart(40.0)
    taken_over = world.now
    world.run_until(lambda: any(isinstance(a, MeasureHealth) for a in world.requests))
    measure = next(a for a in world.requests if isinstance(a, MeasureHealth))
    assert measure.window_s == world.now - taken_over == 10.0


def test_a_health_answer_that_never_comes_still_holds_after_a_restart() -> None:
    """A successor whose measurements go unanswered holds an interval after its first request."""
    world = cohort_world(step_interval_s=5.0)
    world.tick(2.0)
    world.health = "missing"
    world.restart(16.0)
    taken_over = world.now
    world.run_until(lambda: world.state.held)
    assert world.now - taken_over == 2.0 + 5.0  # the dwell's first request, then an interval
    assert "no health measurement" in (world.state.hold_reason or "")
    assert world.weight == 0


@pytest.mark.parametrize("phase", [Phase.ROLLING_BACK, Phase.PROMOTING])
def test_a_restart_gives_the_router_its_full_settle_time_again(phase: Phase) -> None:
    """A rollback or a promotion resumed after a gap longer than the settle timeout waits for
    the router again: no pod is reclaimed unjudged and nothing is held."""
    world = cohort_world(new=2, settle_timeout_s=20.0, steps_pct=(100,))
    if phase is Phase.ROLLING_BACK:
        world.health = "erroring"
        world.alone = {"p05": "good"}
    world.run_until(lambda: world.state.phase is phase)
    world.settles = False
    world.tick()
    world.restart(60.0)
    for _ in range(10):
        world.tick()
        assert world.state.phase is phase
    assert sorted(world.pods) == ["p00", "p01", "p02", "p03", "p04", "p05"]
    world.settles = True
    world.run_until(lambda: world.state.phase is Phase.IDLE)
    assert not world.state.held
    if phase is Phase.ROLLING_BACK:  # the pod healthy alone is spared
        assert "p04" not in world.pods
        assert "p05" in world.pods
    else:
        assert world.stable_set() == ["p00", "p01", "p02", "p03", "p04", "p05"]


def test_a_resumed_idle_service_sets_the_weight_to_zero() -> None:
    """A restart outside a ramp (or from an unreadable state) leaves no weight behind."""
    world = World(stable=2)
    world.weight = 40
    plan = world.tick(resumed=True)
    assert plan.actions[:2] == (EnsureRoutes(), SetWeights(0))
    assert world.weight == 0

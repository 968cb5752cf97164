"""The ramp's transitions: a cohort forms from the warm pods (`start`), walks the steps,
each judged by the health gate (`step`), and passes on to the next step or the promotion, or
fails into the roll-back.

Pure: no I/O, no clock, no logging.
"""

from __future__ import annotations

from autoscaler.core.ramp import gate, promotion, rollback
from autoscaler.core.ramp.actions import (
    RAMP_ABANDONED,
    RAMP_PROMOTED,
    RAMP_ROLLED_BACK,
    RAMP_STARTED,
    RAMP_STEP,
    EnsureRoutes,
    EventType,
    Label,
    MeasureHealth,
    Outcome,
    SetWarm,
)
from autoscaler.core.ramp.gate import Verdict
from autoscaler.core.ramp.state import Phase
from autoscaler.core.ramp.work import Work, names


def start(w: Work) -> None:
    """Promote (gate only) or form a cohort from the warm pods still labelled `warming`."""
    ready = [
        p
        for name, p in sorted(w.pods.items())
        if p.warming and p.warm and p.running and name not in w.excluded
    ]
    if not ready:
        return
    if w.config.gate_only:
        _serve(w, [p.name for p in ready])
        return
    for pod in ready:
        if pod.stable:  # a promotion cut short (a hold or a restart); the weight is 0
            w.actions.append(Label(pod.name, warming=False, stable=True))
    fresh = tuple(p.name for p in ready if not p.stable)
    if not fresh:
        return
    w.cohort = fresh
    w.step, w.checks, w.step_started_s = 0, 0, None
    w.actions.append(EnsureRoutes())
    stable = w.stable()
    if not stable:
        _promote_alone(w, EventType.NORMAL, "No serving pod to compare with or fall back on")
        return
    w.phase = Phase.RAMPING
    weight = gate.share_pct(w.config.steps_pct[0], len(fresh), len(stable))
    w.write_weights(weight, settle=True)
    w.event(
        EventType.NORMAL,
        RAMP_STARTED,
        f"Ramping {names(fresh)} next to {len(stable)} serving pods: "
        f"step {w.config.steps_pct[0]} %, {weight} % of the traffic",
    )


def _serve(w: Work, warm: list[str]) -> None:
    """The gate alone (the `none` router): warm pods serve at once, with no weight steps."""
    for name in warm:
        w.actions.append(Label(name, warming=False, stable=True))
    w.event(EventType.NORMAL, RAMP_PROMOTED, f"Warm and serving: {names(warm)}")
    w.outcomes.append(Outcome.PROMOTED)


def step(w: Work) -> None:
    """One tick of a ramp step: keep the weight at the cohort's share, wait for the router to
    apply it, then let the gate judge the step."""
    alive = w.alive()
    w.cohort = tuple(alive)
    w.joined = tuple(n for n in w.joined if n in alive and not w.pods[n].warm)
    if not alive:
        w.write_weights(0)
        w.event(
            EventType.WARNING,
            RAMP_ABANDONED,
            "The pods being ramped are gone; all traffic is back on the serving pods",
        )
        w.end_ramp()
        return
    stable = w.stable()
    if not stable:
        _promote_alone(w, EventType.WARNING, "No serving pod left to fall back on")
        return
    weight = gate.share_pct(w.step_pct(), len(alive), len(stable))
    if weight != w.weight or w.tick.resumed:
        w.write_weights(weight)
    if w.settle_since_s is not None:
        if not w.tick.settled:
            w.still_settling("the new weights")
            return
        w.settle_since_s = None
        w.step_started_s = w.now
    _gate(w, alive, stable)


def _promote_alone(w: Work, type_: EventType, why: str) -> None:
    """With no serving pod there is nothing to compare the cohort with: promote it as it is."""
    w.event(type_, RAMP_PROMOTED, f"{why}: promoting {names(w.cohort)}")
    promotion.begin(w)


def _gate(w: Work, alive: list[str], stable: list[str]) -> None:
    """Judge the step at the end of its interval (or extension), or earlier (the early gate)
    once the dwell has passed and the cohort has served enough requests."""
    started = w.step_started_s if w.step_started_s is not None else w.now
    w.step_started_s = started
    interval = w.config.step_interval_s
    due_s = started + interval * (w.checks + 1)
    early = w.checks == 0 and w.now < due_s
    if w.now < (started + w.config.min_dwell_ratio * interval if early else due_s):
        return
    # The window is the step so far: the traffic before it went to the cohort at another
    # share (or to some of its pods only), and would dilute what this step shows.
    measure = MeasureHealth(tuple(alive), tuple(stable), w.now - started)
    if early:
        _early_gate(w, measure)
        return
    health = w.tick.health
    if health is None:
        # Counted from the first request left unanswered, not from the step's due time: a
        # gate that did not ask (a step just extended, a leader just taken over) has nothing
        # missing yet.
        if w.asked_s is not None and w.now >= w.asked_s + interval:
            w.hold(f"no health measurement of the new pods for {interval:g} s")
            return
        _ask(w, measure)
        return
    final = w.checks >= w.config.max_step_extensions
    _judged(w, *gate.judge(w.config, health[0], health[1], final=final), measure)


def _early_gate(w: Work, measure: MeasureHealth) -> None:
    """Judge the step before its interval ends only on a complete measurement of enough
    requests; otherwise ask again."""
    health = w.tick.health
    if health is not None:
        verdict, why = gate.judge(w.config, health[0], health[1], final=False)
        # A measured zero passes `judge` only without a minimum; early, it is no reason to cut
        # the step short.
        if verdict is not Verdict.WAIT and health[0].requests > 0 and gate.complete(*health):
            _judged(w, verdict, why, measure)
            return
    _ask(w, measure)


def _ask(w: Work, measure: MeasureHealth) -> None:
    w.actions.append(measure)
    if w.asked_s is None:
        w.asked_s = w.now


def _judged(w: Work, verdict: Verdict, why: str, measure: MeasureHealth) -> None:
    if verdict is Verdict.WAIT:
        w.checks += 1
    elif verdict is Verdict.HOLD:
        w.hold(f"the {w.step_pct()} % step cannot be judged: {why}")
    elif verdict is Verdict.FAIL:
        _fail(w, why)
    else:
        _pass(w, why, measure)


def _pass(w: Work, why: str, measure: MeasureHealth) -> None:
    """On to the next step, with the pods that warmed up meanwhile; after the last, promote."""
    passed_pct = w.step_pct()
    cohort = names(measure.warming)
    if w.step + 1 >= len(w.config.steps_pct):
        w.event(EventType.NORMAL, RAMP_STEP, f"{cohort} passed the last step ({why}); promoting")
        promotion.begin(w)
        return
    w.step += 1
    w.checks = 0
    w.step_started_s = None
    joiners = _join(w)
    weight = gate.share_pct(w.step_pct(), len(w.cohort), len(measure.stable))
    w.write_weights(weight, settle=True)
    joined = f"; {names(joiners)} joined" if joiners else ""
    w.event(
        EventType.NORMAL,
        RAMP_STEP,
        f"{cohort} passed the {passed_pct} % step ({why}); now at "
        f"{w.step_pct()} %{joined}, {weight} % of the traffic",
    )


def _join(w: Work) -> list[str]:
    """Mark warm the pods that passed their warm-up during the step and add them to the
    cohort (before the weights that count them are written)."""
    joiners = []
    for name in list(w.passed):
        pod = w.pods.get(name)
        if pod is None or not pod.running or not pod.warming or name in w.excluded:
            continue
        w.passed.remove(name)
        message = f"warm-up passed; joins the ramp at the {w.step_pct()} % step"
        w.actions.append(SetWarm(name, True, message))
        joiners.append(name)
    w.cohort = (*w.cohort, *joiners)
    w.joined = (*w.joined, *joiners)
    return joiners


def _fail(w: Work, why: str) -> None:
    """Take the cohort's weight to 0 and roll back (asking, for several pods, each one's
    health alone)."""
    w.write_weights(0, settle=True)
    w.phase = Phase.ROLLING_BACK
    replaced = "it will be replaced"
    if len(w.cohort) > 1:
        rollback.measure_alone(w)
        replaced = "the pods failing on their own will be replaced"
    w.event(
        EventType.WARNING,
        RAMP_ROLLED_BACK,
        f"{names(w.cohort)} failed the {w.step_pct()} % step: {why}; their "
        f"traffic is back on the serving pods and {replaced}",
    )
    w.outcomes.append(Outcome.ROLLED_BACK)

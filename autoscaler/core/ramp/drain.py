"""Scale changes: `scale` answers the loop's replica change (up at once, cancelling a drain;
down by draining the victims first; refused while new pods hold traffic), and `drain` is the
drain's transition, tick by tick, until the replica count drops.

Pure: no I/O, no clock, no logging.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable, Sequence

from autoscaler.core import victims
from autoscaler.core.ramp.actions import (
    DRAIN_CANCELLED,
    DRAIN_STARTED,
    DRAINED,
    Action,
    Event,
    EventType,
    Label,
    MarkVictim,
    MeasureInFlight,
    Plan,
    Refusal,
    ScaleTo,
    SetWarm,
)
from autoscaler.core.ramp.config import RampConfig
from autoscaler.core.ramp.inputs import Pod
from autoscaler.core.ramp.state import RAMP_PHASES, Drain, Phase, RampState, Victim
from autoscaler.core.ramp.work import Work, names


def victim_order(pods: Iterable[Pod], *, pool: Collection[str] = ()) -> list[Pod]:
    """Pods in the order a scale-down removes them (`core.victims`): warming first, then
    serving, then the standby pool's `pool`; within each, the lowest placement tier, then the
    least loaded (an unknown load counts as the most), then by name."""

    def candidate(pod: Pod) -> victims.Candidate:
        if pod.name in pool:
            stage = victims.Stage.STANDBY
        elif pod.warming:
            stage = victims.Stage.WARMING
        else:
            stage = victims.Stage.SERVING
        return victims.Candidate(pod.name, stage=stage, tier=pod.tier, in_flight=pod.in_flight)

    return victims.order(pods, candidate)


def scale(
    config: RampConfig,
    state: RampState,
    *,
    pods: Sequence[Pod],
    replicas: int,
    current: int,
    standby: int | None = None,
) -> Plan | Refusal:
    """Answer the loop's replica change: up at once (cancelling a drain), down by draining
    first, refused while new pods hold traffic or another drain is under way.

    `replicas` and `current` count the standby pool too; `standby` is the pool's part of
    `replicas` (unchanged when None). A scale-down keeps the pool's pods while others can go,
    but for the pool's surplus when it shrinks."""
    pool_size = state.standby if standby is None else standby
    if replicas >= current:
        return _scale_up(state, replicas, pool_size)
    if state.phase in RAMP_PHASES:
        step = config.steps_pct[min(state.step, len(config.steps_pct) - 1)]
        return Refusal(
            f"new pods are {state.phase.value} at the {step} % step; the serving pods are not "
            "scaled down until the ramp ends"
        )
    if state.drain is not None:
        if state.drain.scaled_s is not None:
            return Refusal("the pods of the last scale-down are still terminating")
        if state.drain.replicas == replicas and state.standby == pool_size:
            return Plan(state)
        return Refusal(f"a drain to {state.drain.replicas} replicas is under way")
    live = [p for p in pods if not p.terminating]
    count = max(0, min(len(live), current) - replicas)
    names = {p.name for p in live}
    waiting = [name for name in state.pool if name in names]
    kept = waiting[: max(0, pool_size)]  # the oldest stay; the surplus counts as warming
    chosen = victim_order(live, pool=frozenset(kept))[:count]
    if not chosen:
        return Plan(dataclasses.replace(state, standby=pool_size), (ScaleTo(replicas),))
    return _scale_down(state, chosen, replicas=replicas, current=current, standby=pool_size)


def _scale_down(
    state: RampState, chosen: Sequence[Pod], *, replicas: int, current: int, standby: int
) -> Plan:
    """Take the victims out of the routed sets and start draining them."""
    actions: list[Action] = []
    for pod in chosen:
        # A warm pod whose container is restarting is not in the endpoints now, but would be
        # again once it runs: every warm victim leaves them.
        if pod.warm:
            actions.append(SetWarm(pod.name, False, f"draining for a scale-down to {replicas}"))
        if pod.stable:
            actions.append(Label(pod.name, warming=pod.warming, stable=False))
    gone = {pod.name for pod in chosen}
    message = (
        f"Scaling down from {current} to {replicas}: draining {names(p.name for p in chosen)} first"
    )
    actions.append(Event(EventType.NORMAL, DRAIN_STARTED, message))
    serving = tuple(p.name for p in chosen if p.warm and p.running)
    if serving:
        actions.append(MeasureInFlight(serving))
    next_state = dataclasses.replace(
        state,
        phase=Phase.DRAINING,
        drain=Drain(
            replicas=replicas,
            victims=tuple(Victim(p.name, warm=p.warm, stable=p.stable) for p in chosen),
        ),
        deadlines={k: v for k, v in state.deadlines.items() if k not in gone},
        probe_after={k: v for k, v in state.probe_after.items() if k not in gone},
        passed=tuple(n for n in state.passed if n not in gone),
        standby=standby,
        pool=tuple(n for n in state.pool if n not in gone),
    )
    return Plan(next_state, tuple(actions))


def _scale_up(state: RampState, replicas: int, standby: int) -> Plan:
    actions: list[Action] = []
    drain = state.drain
    if drain is not None and drain.scaled_s is None:
        for victim in drain.victims:
            if victim.warm:
                actions.append(SetWarm(victim.name, True, "drain cancelled by a scale-up"))
            if victim.stable:
                actions.append(Label(victim.name, warming=False, stable=True))
        actions.append(
            Event(
                EventType.NORMAL,
                DRAIN_CANCELLED,
                f"Scaling up to {replicas}: the pods being drained serve again",
            )
        )
        drain = None
    # The victims of a finished drain stay excluded until they are gone.
    actions.append(ScaleTo(replicas))
    phase = state.phase
    if phase is Phase.DRAINING:
        phase = Phase.HELD if state.held else Phase.IDLE
    next_state = dataclasses.replace(state, phase=phase, drain=drain, standby=standby)
    return Plan(next_state, tuple(actions))


def drain(w: Work) -> None:
    """One tick of a drain: once the victims' requests are done (or the grace period is over)
    mark them for deletion and drop the replicas; then wait until they are gone."""
    drain = w.drain
    assert drain is not None
    alive = [v for v in drain.victims if v.name in w.pods]
    if drain.scaled_s is not None:
        if not alive or w.now >= drain.scaled_s + w.config.drain_grace_s:
            w.drain = None
            w.excluded = frozenset()
        return
    started = drain.started_s if drain.started_s is not None else w.now
    waiting = tuple(
        v.name
        for v in alive
        if v.warm and w.pods[v.name].running and not w.pods[v.name].in_flight <= 0
    )
    grace_over = w.now >= started + w.config.drain_grace_s
    if waiting and not grace_over:
        w.drain = dataclasses.replace(drain, started_s=started)
        w.actions.append(MeasureInFlight(waiting))
        return
    for victim in alive:
        w.actions.append(MarkVictim(victim.name))
    w.actions.append(ScaleTo(drain.replicas))
    how = (
        f"the grace period of {w.config.drain_grace_s:g} s passed"
        if waiting
        else "no requests in flight"
    )
    w.event(
        EventType.NORMAL,
        DRAINED,
        f"Drained {names(v.name for v in drain.victims)} ({how}); replicas set to {drain.replicas}",
    )
    w.drain = dataclasses.replace(drain, started_s=started, scaled_s=w.now)

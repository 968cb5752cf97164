"""The ramp's state machine: `advance` runs one tick of one service through the transition of
its phase, then the drain's and the warm-ups', then forms a cohort when it may; `release` ends a
hold by hand.

Pure: no I/O, no clock, no logging.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from autoscaler.core.ramp import drain, pool, promotion, rollback, steps, warmup
from autoscaler.core.ramp.actions import (
    RAMP_RELEASED,
    EnsureRoutes,
    Event,
    EventType,
    Outcome,
    Plan,
)
from autoscaler.core.ramp.config import RampConfig, fingerprint
from autoscaler.core.ramp.inputs import Tick
from autoscaler.core.ramp.state import RAMP_PHASES, Phase, RampState
from autoscaler.core.ramp.work import Work

_TRANSITIONS: dict[Phase, Callable[[Work], None]] = {
    Phase.RAMPING: steps.step,
    Phase.PROMOTING: promotion.promote,
    Phase.ROLLING_BACK: rollback.roll_back,
}
"""The transition of each phase in which new pods may hold traffic."""


def advance(config: RampConfig, state: RampState, tick: Tick) -> Plan:
    """One tick of one service: the next state, the actions in order, the outcomes."""
    w = Work.begin(config, state, tick)
    if w.hold_reason is not None and w.held_config != fingerprint(config):
        w.release("the ramp settings changed")
    if config.gate_only and w.phase in RAMP_PHASES:
        w.end_ramp()  # the router went away: there is no weight left to manage
    ramping = w.phase in RAMP_PHASES
    draining = w.draining()
    if tick.resumed:
        _resume(w)
    transition = _TRANSITIONS.get(w.phase)
    if transition is not None:
        transition(w)
    if w.drain is not None:
        drain.drain(w)
    warmup.warm_up(w)
    pool.balance(w)
    # A ramp or a drain that ended this tick still sees its pods as they were (being
    # relabelled, reclaimed or removed), and a pod just set warm is not yet seen warm: the
    # next cohort forms from the next tick's pods, with every warm pod in it.
    free = w.phase not in RAMP_PHASES and w.hold_reason is None
    if free and not ramping and not draining and not w.warmed:
        steps.start(w)
    return w.plan()


def _resume(w: Work) -> None:
    """After a restart, give back to the ramp's timed waits what the gap took from them.

    The answers asked for before the restart are lost, and the time the controller was away
    says nothing of the router or of the cohort. A step already due restarts its dwell (its
    extensions too) with the weights as they are, rather than being judged, or held, on a
    clock nobody watched; a wait for the router or the labels that the gap used up gets its
    full time again. A wait not yet over keeps its clock: a controller that restarts again and
    again still moves on. Outside a ramp, whatever happened before the restart, no new pod
    holds traffic now.
    """
    if w.phase not in RAMP_PHASES:
        if not w.config.gate_only:
            w.actions.append(EnsureRoutes())
            w.write_weights(0)
        return
    w.asked_s = None  # the answer went with the old leader
    since = w.settle_since_s
    if since is not None and w.now - since >= w.config.settle_timeout_s:
        w.settle_since_s = w.now
    started = w.step_started_s
    if w.phase is Phase.RAMPING and started is not None:
        due_s = started + w.config.step_interval_s * (w.checks + 1)
        if w.now >= due_s:
            w.step_started_s = w.now
            w.checks = 0


def release(state: RampState, reason: str) -> Plan:
    """End a hold by hand (the persisted state was deleted): ramping may start again."""
    if state.hold_reason is None:
        return Plan(state)
    phase = Phase.IDLE if state.phase is Phase.HELD else state.phase
    next_state = dataclasses.replace(
        state, phase=phase, hold_reason=None, held_config=None, failures=0
    )
    message = f"The ramp hold is released: {reason}"
    return Plan(next_state, (Event(EventType.NORMAL, RAMP_RELEASED, message),), (Outcome.RELEASED,))

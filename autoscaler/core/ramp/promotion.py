"""The promotion transition, in an order that never routes to an empty set: label the cohort
`stable` while it is still `warming`, give the labels `propagation_s` and the router time to
settle, set the warming weight to 0, wait until that is in effect, then remove `warming`.

Pure: no I/O, no clock, no logging.
"""

from __future__ import annotations

from autoscaler.core.ramp.actions import RAMP_PROMOTED, EventType, Label, Outcome
from autoscaler.core.ramp.state import Phase, Stage
from autoscaler.core.ramp.work import Work, names


def begin(w: Work) -> None:
    """Label the cohort's pods `stable` as well as `warming`: the first stage."""
    w.cohort = tuple(w.alive())
    for name in w.cohort:
        w.actions.append(Label(name, warming=True, stable=True))
    w.phase = Phase.PROMOTING
    w.stage = Stage.LABELLED
    w.settle_since_s = w.now
    w.step_started_s = None


def promote(w: Work) -> None:
    """One tick of a promotion, at whichever stage it is."""
    if w.stage is Stage.UNWEIGHTED:
        _unweighted(w)
    else:
        _labelled(w)


def _labelled(w: Work) -> None:
    """Once the labels have propagated and the router settled, take the warming weight to 0."""
    # A pod that restarts mid-promotion stays in the cohort: it passed every gate.
    alive = w.alive()
    if not alive:
        if w.weight:
            w.write_weights(0)
        w.end_ramp()
        return
    if w.tick.resumed:
        for name in alive:
            w.actions.append(Label(name, warming=True, stable=True))
        w.write_weights(w.weight)
    since = w.settle_since_s if w.settle_since_s is not None else w.now
    w.settle_since_s = since
    if w.now - since < w.config.propagation_s:
        return
    if not w.tick.settled:
        w.still_settling("the stable labels")
        return
    w.write_weights(0, settle=True)
    w.stage = Stage.UNWEIGHTED


def _unweighted(w: Work) -> None:
    """Once the weight of 0 is in effect, remove `warming`: the cohort is serving."""
    alive = w.alive(warming=False)
    if w.tick.resumed:
        w.write_weights(0)
    if not w.tick.settled:
        w.still_settling("the weight of 0")
        return
    for name in alive:
        w.actions.append(Label(name, warming=False, stable=True))
    w.event(EventType.NORMAL, RAMP_PROMOTED, f"Promoted to serving: {names(alive)}")
    w.outcomes.append(Outcome.PROMOTED)
    w.failures = 0
    w.end_ramp()

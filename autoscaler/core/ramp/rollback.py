"""The roll-back transition: once the router has taken the failed cohort's weight to 0, its
failing pods are reclaimed (each judged alone first, when there are several) and the failure
counts towards a hold.

Pure: no I/O, no clock, no logging.
"""

from __future__ import annotations

from autoscaler.core.ramp import gate
from autoscaler.core.ramp.actions import RAMP_PODS_SPARED, EventType, MeasurePodHealth, Reclaim
from autoscaler.core.ramp.work import Work, names


def roll_back(w: Work) -> None:
    """One tick of a roll-back: wait for the weight of 0 (and each pod's health), then reclaim."""
    if w.tick.resumed:
        w.write_weights(0)
    several = len(w.cohort) > 1
    answered = all(name in w.tick.pod_health for name in w.cohort)
    ready = bool(w.tick.settled) and (answered or not several)
    if not ready and w.still_settling("the weight of 0", hold=False):
        if several:
            measure_alone(w)
        return
    if several:
        reclaimed, spared = gate.blame(w.config, w.cohort, w.tick.pod_health)
    else:
        reclaimed, spared = w.cohort, ()
    reason = "failed the traffic ramp's health gate"
    if spared:
        reason += " on its own"
        w.event(
            EventType.NORMAL,
            RAMP_PODS_SPARED,
            f"{names(reclaimed)} failed the gate on their own and will be replaced; "
            f"{names(spared)} did not and ramp again with the next group",
        )
    for name in reclaimed:
        if name in w.pods:
            w.actions.append(Reclaim(name, reason))
    w.failures += 1
    w.end_ramp()
    if w.failures >= w.config.max_failures:
        w.hold(f"{w.failures} health gates failed in a row")


def measure_alone(w: Work) -> None:
    """Ask for each cohort pod's health alone over the failed step's window, or a whole
    interval when the step failed early: each pod alone needs `min_requests` to be blamed,
    and before the step it served at a lower share, not another way."""
    interval = w.config.step_interval_s
    started = w.step_started_s
    window_s = interval if started is None else max(interval, w.now - started)
    w.actions.append(MeasurePodHealth(w.cohort, tuple(w.stable()), window_s))

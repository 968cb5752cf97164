"""The warm standby pool (docs/operations.md, "The warm standby pool"): which pod that passes
its warm-up waits in the pool rather than serve (`takes`), and the transition that promotes
pool pods while the serving side is short of its count (`balance`).

The Deployment's count is the serving replicas plus `standby`, the pool's replicas in it.
A pod that passes its warm-up serves while fewer pods serve (or are on their way to it) than
the serving count; otherwise it joins the pool while the pool is short, and waits there with
the `warming` label and its readiness gate closed: out of every routed set, so with 0 % of the
traffic whatever the router. A scale-up raises the serving count, and the pool's pods are let
out first, the oldest first: they are marked warm (or, while a cohort ramps, join it at its
next step) and their ramp starts at once, while the new pods the higher count brings warm up
behind them and refill the pool. A pool pod that stops running leaves the pool and warms up
again.

Pure: no I/O, no clock, no logging.
"""

from __future__ import annotations

from autoscaler.core.ramp.actions import SetWarm
from autoscaler.core.ramp.state import RAMP_PHASES
from autoscaler.core.ramp.work import Work

PROMOTED = "promoted from the standby pool"
"""The warm condition's message on a pod let out of the pool."""


def serving_target(w: Work) -> int | None:
    """How many pods should serve: the count (the drain's until its victims are gone) less the
    pool's part of it; None when the count is unknown."""
    replicas = w.drain.replicas if w.drain is not None else w.tick.replicas
    if replicas is None:
        return None
    return max(0, replicas - w.standby)


def in_service(w: Work) -> int:
    """Pods serving or on their way to it: warm, passed to join a cohort, or set warm and not
    yet seen so; the drain's victims aside."""
    return sum(
        1
        for name, pod in w.pods.items()
        if name not in w.excluded
        and (pod.warm or name in w.passed or name in w.released or name in w.joined)
    )


def takes(w: Work) -> bool:
    """Whether a pod that just passed its warm-up joins the pool (rather than serve)."""
    target = serving_target(w)
    if target is None or len(w.pool) >= w.standby:
        return False
    return in_service(w) >= target


def balance(w: Work) -> None:
    """Forget the pool pods no longer waiting; let pool pods out while too few serve."""
    w.pool = [name for name in w.pool if _waiting(w, name)]
    target = serving_target(w)
    if target is None:
        return
    short = target - in_service(w)
    deferring = w.phase in RAMP_PHASES
    while short > 0 and w.pool:
        name = w.pool.pop(0)
        short -= 1
        if deferring:
            w.passed.append(name)  # joins the cohort at its next step
        else:
            w.actions.append(SetWarm(name, True, PROMOTED))
            w.released[name] = w.now
            w.warmed = True


def _waiting(w: Work, name: str) -> bool:
    pod = w.pods.get(name)
    return (
        pod is not None
        and pod.running
        and pod.warming
        and not pod.warm
        and not pod.stable
        and name not in w.excluded
    )

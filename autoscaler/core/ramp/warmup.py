"""The warm-up transition: each new pod is probed until it is warm, or reclaimed at its
deadline; a pod that warms up while a cohort ramps waits to join it at its next step.

Pure: no I/O, no clock, no logging.
"""

from __future__ import annotations

import math

from autoscaler.core.ramp import gate, pool
from autoscaler.core.ramp.actions import WARMUP_TIMED_OUT, EventType, Label, Probe, Reclaim, SetWarm
from autoscaler.core.ramp.inputs import Pod
from autoscaler.core.ramp.state import RAMP_PHASES
from autoscaler.core.ramp.work import Work


def warm_up(w: Work) -> None:
    """One tick of every pod's warm-up, and of the strays: warm pods in neither routed set."""
    deferring = w.phase in RAMP_PHASES
    stable = w.stable()
    baseline_s = gate.baseline_latency(w.tick.probes, stable)
    probing = False
    for name, pod in sorted(w.pods.items()):
        if name in w.excluded or name in w.joined or name in w.pool or name in w.released:
            continue
        if not pod.warming:
            if not pod.stable and pod.warm and pod.running:
                # Warm and serving behind the Service, but in neither routed set (someone
                # removed its label): the stable set is where it belongs.
                w.actions.append(Label(name, warming=False, stable=True))
        elif pod.warm:
            if deferring and pod.running and name not in w.cohort:
                _stray(w, name, pod)
        elif _warm_up_pod(w, pod, baseline_s, deferring=deferring):
            probing = True
    if probing:
        for name in stable[: w.config.baseline_pods]:
            w.actions.append(Probe(name))
    _forget_gone(w)


def _warm_up_pod(w: Work, pod: Pod, baseline_s: float | None, *, deferring: bool) -> bool:
    """One tick of one warming pod: start its deadline, judge its probes, set it warm (or keep
    it for the cohort's next step), reclaim it at the deadline; True when it is probed."""
    name = pod.name
    deadline = w.deadlines.get(name)
    if not pod.running:
        if deadline is not None and w.now >= deadline:
            _time_out(w, name)
        return False
    if name in w.passed:
        if not deferring:
            w.passed.remove(name)
            _set_warm(w, name, "warm-up passed")
        return False
    if deadline is None:
        deadline = w.deadlines[name] = w.now + w.config.warmup_deadline_s
    if w.config.warmup_probe:
        result = w.tick.probes.get(name)
        warm, message = (False, "") if result is None else gate.warm(w.config, result, baseline_s)
    else:
        warm, message = True, "running; no warm-up probe is configured"
    if warm:
        w.deadlines.pop(name, None)
        w.probe_after.pop(name, None)
        if pool.takes(w):
            w.pool.append(name)
        elif deferring:
            w.passed.append(name)
        else:
            _set_warm(w, name, message)
        return False
    if w.now >= deadline:
        _time_out(w, name)
        return False
    if w.probe_after.get(name, -math.inf) > w.now or pod.ip is None:
        return False
    w.actions.append(Probe(name))
    w.probe_after[name] = w.now + w.config.probe_interval_s
    return True


def _stray(w: Work, name: str, pod: Pod) -> None:
    """A warm pod in the warming set but not in the cohort, say after a container restart:
    the gate does not judge it, so it must not share the cohort's weight."""
    if pod.stable:  # a promotion cut short: it passed its gates, finish it
        w.actions.append(Label(name, warming=False, stable=True))
    else:  # out of the warming set; it warms up again after the ramp
        w.actions.append(SetWarm(name, False, "warm outside the ramping group"))


def _set_warm(w: Work, name: str, message: str) -> None:
    w.actions.append(SetWarm(name, True, message))
    w.released[name] = w.now
    w.warmed = True


def _time_out(w: Work, name: str) -> None:
    w.deadlines.pop(name, None)
    w.probe_after.pop(name, None)
    limit = w.config.warmup_deadline_s
    w.actions.append(Reclaim(name, f"not warm within {limit:g} s"))
    w.event(
        EventType.WARNING,
        WARMUP_TIMED_OUT,
        f"Pod {name} was not warm within {limit:g} s of running; it is replaced",
    )


def _forget_gone(w: Work) -> None:
    w.deadlines = {k: v for k, v in w.deadlines.items() if w.warming_pod(k)}
    w.probe_after = {k: v for k, v in w.probe_after.items() if w.warming_pod(k)}
    w.passed = [name for name in w.passed if w.warming_pod(name)]
    w.released = {
        name: since_s
        for name, since_s in w.released.items()
        if w.warming_pod(name) and w.now < since_s + w.config.settle_timeout_s
    }

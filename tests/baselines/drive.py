"""A tiny simulated-time loop for the baselines: fabricated observations, one per second.

Each tick builds the `Observation` the real loop would (the load signal's `last` is the sample the
test gives for that second), asks the policy, and applies its decision at once: the next tick sees
`replicas = desired`, all serving unless the test says otherwise. Nothing sleeps.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from autoscaler import ports
from autoscaler.core import model
from autoscaler.core.model import Signal, SignalEstimate

SERVICE = model.ServiceId("default/llm")


@dataclass(frozen=True, slots=True)
class Tick:
    t_s: float
    replicas: int
    serving: int
    decision: model.Decision


def workload(
    *, replicas: int, serving: int, min_replicas: int = 1, max_replicas: int = 100
) -> ports.Workload:
    config = model.PolicyConfig(
        max_replicas=max_replicas, min_replicas=min_replicas, target_load_per_replica=10.0
    )
    return ports.Workload(
        id=SERVICE, policy=config, half_life_s=30.0, replicas=replicas, serving=serving
    )


def observation(t_s: float, *, load: float, replicas: int, serving: int) -> model.Observation:
    """What the loop hands a policy: `load` is this tick's raw sample (NaN for none)."""
    fresh = math.isfinite(load)
    value = load if fresh else math.nan
    estimate = SignalEstimate(
        mean=value, level=value, trend_per_s=0.0, burst_mean=value, last=value, fresh=fresh
    )
    return model.Observation(
        now_s=t_s, replicas=replicas, serving=serving, signals={Signal.LOAD: estimate}
    )


def run(
    policy: ports.Policy,
    load: Callable[[float], float],
    *,
    end_s: float,
    replicas: int,
    start_s: float = 0.0,
    serving: Callable[[int], int] | None = None,
    min_replicas: int = 1,
    max_replicas: int = 100,
) -> list[Tick]:
    """Tick once a second over [start_s, end_s], applying every decision before the next tick."""
    ticks: list[Tick] = []
    state = model.PolicyState()
    t = start_s
    while t <= end_s:
        up = replicas if serving is None else serving(replicas)
        w = workload(
            replicas=replicas, serving=up, min_replicas=min_replicas, max_replicas=max_replicas
        )
        obs = observation(t, load=load(t), replicas=replicas, serving=up)
        decision, state = policy.decide(w, obs, state)
        ticks.append(Tick(t, replicas, up, decision))
        replicas = decision.desired
        t += 1.0
    return ticks


def changes(ticks: list[Tick]) -> list[tuple[float, int]]:
    """(time, new count) for every tick whose decision changed the count."""
    return [(k.t_s, k.decision.desired) for k in ticks if k.decision.changes]


def at(ticks: list[Tick], t_s: float) -> model.Decision:
    return next(k.decision for k in ticks if k.t_s == t_s)


def step(before: float, after: float, at_s: float) -> Callable[[float], float]:
    """A load of `before` until `at_s`, `after` from then on."""
    return lambda t: before if t < at_s else after

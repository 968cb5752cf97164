"""How fast the default policy answers a step, and that it does not chase noise: measured on the
simulator's clock, through the real loop."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from autoscaler.experiment import run
from autoscaler.sim.params import SimParams

PARAMS = SimParams(startup_s=8.0, startup_sigma=0.0, max_replicas=100, policy="default")
BASE_REPLICAS = 6
STEP_AT_S = 600
STEP_TO_DECISION_LIMIT_S = 5.0


def poisson(rate_rps: np.ndarray, seed: int) -> np.ndarray:
    """Arrivals per second drawn around `rate_rps`."""
    return np.random.default_rng(seed).poisson(rate_rps).astype(np.float64)


def step_arrivals(step_at_s: int, *, seed: int) -> np.ndarray:
    """Six replicas' worth at the load target, then five times as much from `step_at_s`."""
    t = np.arange(step_at_s + 120)
    base = BASE_REPLICAS * PARAMS.target_load_per_replica
    return poisson(np.where(t < step_at_s, base, 5 * base), seed)


def first_scale_up_after(result: run.SimResult, t_s: float) -> float:
    ups = [at for at, before, after in result.scale_events if at >= t_s and after > before]
    assert ups, "no scale-up after the step"
    return ups[0]


@pytest.mark.parametrize("phase_s", range(5))
def test_a_5x_step_is_answered_within_5_s_whatever_the_scrape_phase(phase_s: int) -> None:
    """The first scale-up comes at most 5 s after a 5x step, wherever the step falls between
    two scrapes."""
    step_at_s = STEP_AT_S + phase_s

    result = run.simulate(step_arrivals(step_at_s, seed=phase_s), PARAMS)

    assert first_scale_up_after(result, step_at_s) - step_at_s <= STEP_TO_DECISION_LIMIT_S


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_noisy_flat_load_brings_no_more_scale_events_than_the_plain_policy(seed: int) -> None:
    """On flat load with Poisson and per-minute noise the default policy scales no more often
    than the seed policy, which has no burst path."""
    minutes = 40
    rng = np.random.default_rng(100 + seed)
    per_minute = rng.lognormal(0.0, 0.15, minutes)
    rate = np.repeat(per_minute, 60) * 12 * PARAMS.target_load_per_replica
    arrivals = poisson(rate, seed)

    default = run.simulate(arrivals, PARAMS)
    plain = run.simulate(arrivals, dataclasses.replace(PARAMS, policy="seed"))

    assert len(default.scale_events) <= len(plain.scale_events)

"""The real loop on the simulated cluster, in simulated time."""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np
import pytest

from autoscaler import loop
from autoscaler.core import model
from autoscaler.core.model import Signal
from autoscaler.experiment import run
from autoscaler.sim import world
from autoscaler.sim.params import SimParams

# A fixed start-up delay keeps every run deterministic; the rest are the simulator's defaults
# (mu 1 rps, load target 0.75 rps per replica, queue target 2, 5 s scrapes, 30 s rate window).
PARAMS = SimParams(startup_sigma=0.0, startup_s=60.0, warmup_s=5.0, max_replicas=64)
SCALE_UP_COOLDOWN_S = 60.0
SCALE_DOWN_COOLDOWN_S = 300.0


async def simulate(
    services: dict[str, tuple[np.ndarray, SimParams]],
    *,
    until_s: int,
    outages: tuple[tuple[float, float], ...] = (),
    dropped: tuple[tuple[Signal, float, float], ...] = (),
) -> world.World:
    """Run the real loop over a world with these services (arrivals, params) until `until_s`."""
    sim = world.World(PARAMS)
    for name, (arrivals, params) in services.items():
        sim.add_service(name, arrivals, params)
    for start_s, end_s in outages:
        sim.metrics.switch_off(start_s, end_s)
    for signal, start_s, end_s in dropped:
        sim.metrics.drop(signal, start_s, end_s)
    await run.drive(sim, until_s=until_s)
    return sim


def met_after(sim: world.World, service: str, *, from_s: int) -> int:
    """Seconds after `from_s` until serving capacity covers the arrivals for good."""
    series = sim.timeseries(model.ServiceId(service))
    short = series["capacity_rps"][from_s:] < series["arrivals"][from_s:]
    late = np.flatnonzero(short)
    return int(late[-1]) + 1 if len(late) else 0


def events(sim: world.World, service: str) -> list[tuple[float, int, int]]:
    return sim.cluster.service(model.ServiceId(service)).scale_events


def step_load(*, base_rps: float, factor: float, at_s: int, until_s: int) -> np.ndarray:
    return np.where(np.arange(until_s) < at_s, base_rps, factor * base_rps)


@pytest.mark.parametrize("policy", ["seed", "default"])
async def test_five_fold_step_is_met_within_detection_cooldown_and_startup(policy: str) -> None:
    """A 5x step in load is served within one cooldown plus one start-up of being seen."""
    # The queue shows at the first scrape after the step (<= 5 s) and the smoothed ratio clears
    # the deadband within a few ticks (10 s allowed). The first scale-up may fall short, because
    # the smoothed load still lags; a second one may come only after the 60 s scale-up cooldown,
    # and its pods serve after start-up plus warm-up (65 s): 5 + 10 + 60 + 65 = 140 s.
    step_at, until = 300, 900
    arrivals = step_load(base_rps=3.0, factor=5.0, at_s=step_at, until_s=until)
    params = dataclasses.replace(PARAMS, policy=policy)
    bound_s = (
        PARAMS.scrape_interval_s + 10 + SCALE_UP_COOLDOWN_S + PARAMS.startup_s + PARAMS.warmup_s
    )

    sim = await simulate({"ns/model": (arrivals, params)}, until_s=until)

    assert met_after(sim, "ns/model", from_s=step_at) <= bound_s
    assert met_after(sim, "ns/model", from_s=step_at) > PARAMS.startup_s  # needed new pods


async def test_default_policy_meets_a_step_no_later_than_seed() -> None:
    """Under the same step, the default policy reaches capacity no later than the seed one."""
    step_at, until = 300, 900
    arrivals = step_load(base_rps=3.0, factor=5.0, at_s=step_at, until_s=until)

    sim = await simulate(
        {
            "ns/seed": (arrivals, dataclasses.replace(PARAMS, policy="seed")),
            "ns/default": (arrivals, dataclasses.replace(PARAMS, policy="default")),
        },
        until_s=until,
    )

    seed_s = met_after(sim, "ns/seed", from_s=step_at)
    default_s = met_after(sim, "ns/default", from_s=step_at)
    assert default_s <= seed_s


@pytest.mark.parametrize("policy", ["seed", "default"])
async def test_constant_load_never_scales(policy: str) -> None:
    """A constant load sized on the target leaves the replica count alone for an hour."""
    params = dataclasses.replace(PARAMS, policy=policy)
    arrivals = np.full(3600, 7.5)  # 10 replicas at 0.75 rps each

    sim = await simulate({"ns/model": (arrivals, params)}, until_s=3600)

    assert events(sim, "ns/model") == []
    assert set(sim.timeseries(model.ServiceId("ns/model"))["replicas_desired"]) == {10.0}


@pytest.mark.parametrize(
    "policy",
    [
        "seed",
        "default",
    ],
)
async def test_noisy_flat_load_stays_put_after_settling(policy: str) -> None:
    """A flat Poisson load of 30 rps causes no scale event once 10 minutes have passed."""
    params = dataclasses.replace(PARAMS, policy=policy)
    arrivals = np.random.default_rng(4).poisson(30.0, 2400).astype(float)

    sim = await simulate({"ns/model": (arrivals, params)}, until_s=2400)

    assert [e for e in events(sim, "ns/model") if e[0] >= 600] == []


@pytest.mark.parametrize("policy", ["seed", "default"])
async def test_load_flapping_around_the_target_scales_a_bounded_number_of_times(
    policy: str,
) -> None:
    """A load flipping 20% around the target every minute scales a bounded number of times."""
    # Each scale-down needs a full scale-down cooldown (300 s) since the last change, and one
    # scale-up covers the peak, so at most one step down and one back up per cooldown, plus
    # two to settle. Without cooldowns, seed scales 24 times in this half hour and default 60.
    until = 1800
    t = np.arange(until)
    arrivals = np.where((t // 60) % 2 == 0, 3.0 * 0.8, 3.0 * 1.2)
    params = dataclasses.replace(PARAMS, policy=policy)

    sim = await simulate({"ns/model": (arrivals, params)}, until_s=until)

    bound = 2 * math.ceil(until / SCALE_DOWN_COOLDOWN_S) + 2
    assert len(events(sim, "ns/model")) <= bound
    downs = [at for at, before, after in events(sim, "ns/model") if after < before]
    assert all(b - a >= SCALE_DOWN_COOLDOWN_S for a, b in itertools.pairwise(downs))


@pytest.mark.parametrize("policy", ["seed", "default"])
async def test_metrics_outage_holds_then_recovers(policy: str) -> None:
    """With metrics off, an oversized service holds and says missing-data; then it shrinks."""
    params = dataclasses.replace(PARAMS, policy=policy, initial_replicas=10)
    sim = world.World(PARAMS)
    sid = sim.add_service("ns/model", np.full(900, 3.0), params)  # needs 4 replicas
    outage_end_s = 400
    sim.metrics.switch_off(0.0, outage_end_s)
    controller = loop.Loop(
        cluster=sim.cluster, metrics=sim.metrics, clock=sim.clock, smoothing_config=run.SMOOTHING
    )
    service = sim.cluster.service(sid)

    await controller.run(until_s=outage_end_s)
    assert service.scale_events == []
    assert service.decision is not None
    assert service.decision[0].kind is model.Kind.HOLD
    assert service.decision[0].reason is model.Reason.MISSING_DATA

    await controller.run(until_s=900)
    downs = [e for e in service.scale_events if e[2] < e[1]]
    assert downs
    assert downs[0][0] <= outage_end_s + PARAMS.scrape_interval_s


async def test_one_missing_signal_blocks_scale_down_but_not_scale_up() -> None:
    """Without the queue signal the loop never scales down, yet still scales up on load."""
    oversized = dataclasses.replace(PARAMS, policy="seed", initial_replicas=10)
    undersized = dataclasses.replace(PARAMS, policy="seed", initial_replicas=2)

    sim = await simulate(
        {
            "ns/oversized": (np.full(600, 3.0), oversized),
            "ns/undersized": (np.full(600, 6.0), undersized),
        },
        until_s=600,
        dropped=((Signal.SATURATION, 0.0, 600.0),),
    )

    assert events(sim, "ns/oversized") == []
    last = sim.cluster.service(model.ServiceId("ns/oversized")).decision
    assert last is not None
    assert last[0].reason is model.Reason.MISSING_DATA
    _, before, after = events(sim, "ns/undersized")[0]
    assert after > before

"""Simulated Prometheus: rate windows, scrape lag, utilisation, outages."""

from __future__ import annotations

import math

import numpy as np
import pytest

from autoscaler import errors, loop
from autoscaler.core import model, smoothing
from autoscaler.core.model import Signal
from autoscaler.sim import metrics, world
from autoscaler.sim.params import SimParams

PARAMS = SimParams(
    replica_capacity_rps=1.0,
    scrape_interval_s=5.0,
    rate_window_s=30.0,
    startup_sigma=0.0,
    min_replicas=0,
)


def one_service(
    arrivals: list[float] | np.ndarray, *, replicas: int, warm_start: bool = True
) -> tuple[world.World, model.ServiceId]:
    sim = world.World(PARAMS)
    sid = sim.add_service("ns/model", arrivals, PARAMS, replicas=replicas, warm_start=warm_start)
    return sim, sid


async def sample_at(sim: world.World, t_s: int) -> np.ndarray:
    sim.advance(t_s - sim.now_s)
    values: np.ndarray = await sim.metrics.sample(sim.cluster.workloads(), float(t_s))
    return np.asarray(values[0])


@pytest.mark.parametrize(
    ("at_s", "expected_ratio"),
    [(5, 1 / 6), (10, 2 / 6), (15, 3 / 6), (25, 5 / 6), (30, 1.0), (60, 1.0)],
)
def test_rate_of_a_fresh_counter_reads_low_until_the_window_fills(
    at_s: int, expected_ratio: float
) -> None:
    """A counter born at 0 s reads at most the share of the 30 s window it has covered."""
    samples = [(float(t), 2.0 * t) for t in range(0, at_s + 1, 5)]

    rate = metrics.extrapolated_rate(samples, at_s=float(at_s), window_s=30.0)

    assert rate == pytest.approx(2.0 * expected_ratio)


def test_rate_clamps_to_half_an_interval_before_the_counter_zero() -> None:
    """The zero point only shortens the start extrapolation after the 1.1-interval clamp."""
    # Samples 20 s into the range: clamped to 2.5 s; the zero point (4 s back) is further.
    samples = [(90.0, 20.0), (95.0, 45.0), (100.0, 70.0)]

    rate = metrics.extrapolated_rate(samples, at_s=100.0, window_s=30.0)

    assert rate == pytest.approx(50 * (10 + 2.5) / 10 / 30)


def test_rate_needs_two_samples_and_survives_a_counter_reset() -> None:
    """One sample gives no rate; a reset (drop to zero) is added back as Prometheus does."""
    assert math.isnan(metrics.extrapolated_rate([(0.0, 5.0)], at_s=0.0, window_s=30.0))
    samples = [(75.0, 100.0), (80.0, 110.0), (85.0, 5.0), (90.0, 15.0), (95.0, 25.0)]
    # increase 10 + 5 (after the reset) + 20 = 35 over 20 s, extrapolated to 30 s, /30 s
    expected = 35 * (20 + 5 + 5) / 20 / 30

    assert metrics.extrapolated_rate(samples, at_s=100.0, window_s=30.0) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("times", "at_s", "covered_s"),
    [
        # 6 samples 5 s apart, 5 s short of the range start: extrapolated the whole 5 s.
        ((75, 80, 85, 90, 95, 100), 100, 25 + 5),
        # The first sample 20 s into the range (> 1.1 intervals): half an interval only.
        ((90, 95, 100), 100, 10 + 2.5),
        # The last sample 10 s before the evaluation time: half an interval at the end.
        ((85, 90, 95, 100), 110, 15 + 5 + 2.5),
    ],
)
def test_rate_extrapolates_to_the_range_edges_like_prometheus(
    times: tuple[int, ...], at_s: int, covered_s: float
) -> None:
    """Gaps to the range's edges under 1.1 intervals are extrapolated, longer ones by half one."""
    samples = [(float(t), 1000.0 + 3.0 * t) for t in times]
    increase = 3.0 * (times[-1] - times[0])

    rate = metrics.extrapolated_rate(samples, at_s=float(at_s), window_s=30.0)

    assert rate == pytest.approx(increase * covered_s / (times[-1] - times[0]) / 30.0)


async def test_load_follows_a_step_through_the_rate_window_and_scrapes() -> None:
    """LOAD reads the old rate until the next scrape, then the 25 s mean of the window."""
    arrivals = [4.0] * 100 + [8.0] * 100
    sim, _ = one_service(arrivals, replicas=20)

    loads = {t: (await sample_at(sim, t))[Signal.LOAD] for t in (99, 100, 103, 105, 110, 125)}

    assert loads[99] == pytest.approx(4.0)
    assert loads[100] == pytest.approx(4.0)  # the scrape at 100 saw seconds up to 99
    assert loads[103] == pytest.approx(4.0)  # no scrape since 100
    assert loads[105] == pytest.approx((20 * 4 + 5 * 8) / 25)
    assert loads[110] == pytest.approx((15 * 4 + 10 * 8) / 25)
    assert loads[125] == pytest.approx(8.0)


async def test_warm_start_reads_the_opening_load_at_once() -> None:
    """A service with seeded history reads its load from the first tick; a fresh one low."""
    warm, _ = one_service([6.0] * 60, replicas=10)
    fresh, _ = one_service([6.0] * 60, replicas=10, warm_start=False)

    assert (await sample_at(warm, 0))[Signal.LOAD] == pytest.approx(6.0)
    assert (await sample_at(warm, 5))[Signal.LOAD] == pytest.approx(6.0)
    assert math.isnan((await sample_at(fresh, 0))[Signal.LOAD])
    assert (await sample_at(fresh, 5))[Signal.LOAD] == pytest.approx(1.0)


async def test_overload_caps_load_at_capacity_and_shows_in_queue_and_gpu() -> None:
    """Past capacity, LOAD reads what was served, the queue grows and the GPU reads 100%."""
    sim, _ = one_service([10.0] * 60, replicas=4, warm_start=False)

    values = await sample_at(sim, 40)

    assert values[Signal.LOAD] == pytest.approx(4.0)
    assert values[Signal.SATURATION] == pytest.approx(40 * (10 - 4))
    assert values[Signal.CAPACITY] == pytest.approx(100.0)


async def test_gpu_utilisation_is_served_over_serving_capacity() -> None:
    """GPU utilisation is 100 x served / (serving x mu) at the last scrape."""
    sim, _ = one_service([3.0] * 60, replicas=4)

    values = await sample_at(sim, 20)

    assert values[Signal.CAPACITY] == pytest.approx(75.0)
    assert values[Signal.SATURATION] == 0.0


async def test_without_serving_pods_only_gpu_utilisation_is_unknown() -> None:
    """With nothing serving, load (nothing served) and queue are known; GPU reads NaN."""
    sim, _ = one_service([2.0] * 60, replicas=0, warm_start=False)

    values = await sample_at(sim, 40)

    assert values[Signal.LOAD] == 0.0
    assert values[Signal.SATURATION] == pytest.approx(80.0)
    assert math.isnan(values[Signal.CAPACITY])


async def test_switched_off_metrics_raise_observation_error_for_the_range() -> None:
    """Inside the outage `sample` raises ObservationError; outside it answers."""
    sim, _ = one_service([3.0] * 60, replicas=4)
    sim.metrics.switch_off(10.0, 20.0)

    await sample_at(sim, 9)
    with pytest.raises(errors.ObservationError):
        await sample_at(sim, 10)
    with pytest.raises(errors.ObservationError):
        await sample_at(sim, 19)
    assert (await sample_at(sim, 20))[Signal.LOAD] == pytest.approx(3.0)


async def test_dropped_signal_reads_nan_for_one_service_only() -> None:
    """A dropped signal is NaN for its service and time range; the rest is untouched."""
    sim = world.World(PARAMS)
    a = sim.add_service("ns/a", [3.0] * 60, PARAMS, replicas=4)
    sim.add_service("ns/b", [3.0] * 60, PARAMS, replicas=4)
    sim.metrics.drop(Signal.SATURATION, 10.0, 20.0, service=a)
    sim.advance(15)

    values = await sim.metrics.sample(sim.cluster.workloads(), 15.0)
    later = await sim.metrics.sample(sim.cluster.workloads(), 20.0)

    assert math.isnan(values[0, Signal.SATURATION])
    assert not np.isnan(values[0, [Signal.LOAD, Signal.CAPACITY]]).any()
    requests = [Signal.LOAD, Signal.SATURATION, Signal.CAPACITY]  # no token signals here
    assert not np.isnan(values[1, requests]).any()
    assert not np.isnan(later[:, requests]).any()


async def test_loop_holds_with_missing_data_when_metrics_are_off() -> None:
    """The real loop turns the simulated outage into a missing-data hold, never into zero."""
    sim, sid = one_service([3.0] * 60, replicas=8)
    sim.metrics.switch_off(0.0, 10.0)
    controller = loop.Loop(
        cluster=sim.cluster,
        metrics=sim.metrics,
        clock=sim.clock,
        smoothing_config=smoothing.SmoothingConfig(),
    )

    report = await controller.step()

    assert report.metrics_error is not None
    assert report.decisions[sid].reason is model.Reason.MISSING_DATA
    assert report.decisions[sid].desired == 8

"""The simulator's concurrency gauge: requests running plus waiting, as vLLM exports them."""

from __future__ import annotations

import dataclasses
from array import array

import numpy as np
import pytest

from autoscaler.core.model import Signal
from autoscaler.sim import metrics, world
from autoscaler.sim.params import TIMESERIES_COLUMNS, SimParams

PARAMS = SimParams(
    replica_capacity_rps=1.0,
    service_time_s=2.0,
    scrape_interval_s=5.0,
    startup_sigma=0.0,
    min_replicas=0,
)


def one_service(policy: str, rate: float, *, replicas: int) -> world.World:
    """A world with one service run by `policy`, fed `rate` requests per second."""
    params = dataclasses.replace(PARAMS, policy=policy)
    sim = world.World(params)
    sim.add_service("ns/model", np.full(120, rate), params, replicas=replicas)
    return sim


def rows_served(served: list[float]) -> array[float]:
    """A flat time series whose `served` column holds `served`, one row per second."""
    width = len(TIMESERIES_COLUMNS)
    column = TIMESERIES_COLUMNS.index("served")
    flat = array("d", [0.0] * (width * len(served)))
    for k, value in enumerate(served):
        flat[k * width + column] = value
    return flat


def test_in_service_counts_what_was_taken_within_one_service_time() -> None:
    """At 10 s with a 2 s service time, seconds 8 and 9 are running: 3 + 4 = 7."""
    rows = rows_served([1.0] * 8 + [3.0, 4.0])

    assert world.in_service(rows, 10.0, service_time_s=2.0) == pytest.approx(7.0)
    # 1.5 s: all of second 9, half of second 8 (taken over [8, 9), done after 9.5 s).
    assert world.in_service(rows, 10.0, service_time_s=1.5) == pytest.approx(4.0 + 0.5 * 3.0)
    assert world.in_service(rows, 10.0, service_time_s=0.0) == 0.0


async def test_concurrency_exceeds_capacity_under_overload_while_the_rate_cannot() -> None:
    """5 rps on 2 replicas for 10 s: 4 running plus 30 waiting is 34 in flight; 2 rps served."""
    sim = one_service("hpa-conc", 5.0, replicas=2)
    sim.advance(10)

    sampled = (await sim.metrics.sample(sim.cluster.workloads(), 10.0))[0]

    traffic = sim.traffic(sim.cluster.workloads()[0].id)
    assert traffic.queue == pytest.approx(10 * 5.0 - 10 * 2.0)
    assert sim.metrics.concurrency(sim.cluster.workloads()[0].id) == pytest.approx(4.0 + 30.0)
    assert sampled[Signal.LOAD] == pytest.approx(34.0)
    assert sampled[Signal.SATURATION] == pytest.approx(30.0)
    assert sampled[Signal.LOAD] > 2 * PARAMS.service_time_s  # both replicas' full concurrency


async def test_the_rate_policies_still_read_the_served_rate() -> None:
    """The same overload read by `hpa` (rate): the LOAD signal stays at the 2 rps served."""
    sim = one_service("hpa", 5.0, replicas=2)
    sim.advance(10)

    sampled = (await sim.metrics.sample(sim.cluster.workloads(), 10.0))[0]

    assert sampled[Signal.LOAD] == pytest.approx(2.0)
    assert sim.metrics.concurrency(sim.cluster.workloads()[0].id) == pytest.approx(34.0)


async def test_concurrency_without_a_queue_is_rate_times_service_time() -> None:
    """1 rps on 2 replicas: nothing waits, 2 requests run (Little's law), from the first scrape."""
    sim = one_service("kpa", 1.0, replicas=2)
    service = sim.cluster.workloads()[0].id

    assert sim.metrics.concurrency(service) == pytest.approx(2.0)  # the seeded history
    sim.advance(15)
    sampled = (await sim.metrics.sample(sim.cluster.workloads(), 15.0))[0]

    assert sampled[Signal.SATURATION] == 0.0
    assert sampled[Signal.LOAD] == pytest.approx(2.0)


def test_each_policy_reads_the_query_of_its_registry_entry() -> None:
    """Ours and the rate variants read the served rate; KPA and the -conc variants concurrency."""
    rate, concurrency = metrics.LoadQuery.SERVED_RATE, metrics.LoadQuery.CONCURRENCY
    expected = {
        "seed": rate,
        "default": rate,
        "hpa": rate,
        "keda": rate,
        "oracle": rate,
        "hpa-conc": concurrency,
        "keda-conc": concurrency,
        "kpa": concurrency,
        "not-registered": rate,
    }
    assert {name: world.load_query(name) for name in expected} == expected

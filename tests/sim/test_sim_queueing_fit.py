"""The SLO sizing's queueing model (`core.queueing`) against the simulator's fluid queue.

The bench's replica completes 1 request/s, 2 at once, in 2 s unqueued, and 99 % of requests
must wait at most 3 s. Under steady Poisson arrivals the simulator serves each second's
requests at the replicas' rate with no spread in service time, so Allen-Cunneen's burstiness is
`(1 + 0) / 2`: at that burstiness the model's 99th percentile wait is the simulator's within a
tenth, and at the textbook M/M/c's (1) it is twice what the simulator delivers.
"""

from __future__ import annotations

import numpy as np
import pytest

from autoscaler.core import queueing
from autoscaler.sim.traffic import Traffic, TrafficConfig

BUDGET_S = 3.0
QUANTILE = 0.99


def simulated_wait_s(arrival_rps: float, replicas: int) -> tuple[float, float]:
    """The 99th percentile wait and the share of requests over the SLO, over two hours of
    Poisson arrivals at `arrival_rps` on a fixed count of `replicas`."""
    arrivals = np.random.default_rng(0).poisson(arrival_rps, 7_200).astype(np.float64)
    queue = Traffic(arrivals, TrafficConfig())
    for _ in range(arrivals.size):
        queue.step(float(replicas))
    wait_s = queue.latency_quantile(QUANTILE) - queue.config.service_time_s
    return wait_s, queue.slo_misses / queue.arrived


def modelled_wait_s(arrival_rps: float, replicas: int, burstiness: float) -> float:
    waits = queueing.wait_quantile_s(
        np.array([float(replicas)]),
        slots=2,
        arrival_rps=arrival_rps,
        capacity_rps=1.0,
        burstiness=burstiness,
        quantile=QUANTILE,
    )
    return float(waits[0])


def count_for(arrival_rps: float, burstiness: float) -> int:
    count = queueing.replicas_for_wait(
        slots=2,
        arrival_rps=arrival_rps,
        capacity_rps=1.0,
        burstiness=burstiness,
        quantile=QUANTILE,
        budget_s=BUDGET_S,
        most=1_000,
    )
    assert count is not None
    return count


@pytest.mark.parametrize("arrival_rps", [10.0, 20.0, 40.0])
def test_at_burstiness_one_half_the_model_predicts_the_simulated_wait(arrival_rps: float) -> None:
    """The model's p99 wait at burstiness 0.5 is within 10 % of the simulator's, at its count."""
    replicas = count_for(arrival_rps, 0.5)
    simulated, missed = simulated_wait_s(arrival_rps, replicas)
    assert modelled_wait_s(arrival_rps, replicas, 0.5) == pytest.approx(simulated, rel=0.1)
    assert missed < 1 - QUANTILE


@pytest.mark.parametrize("arrival_rps", [10.0, 20.0, 40.0])
def test_the_textbook_burstiness_asks_for_a_replica_the_steady_load_does_not_need(
    arrival_rps: float,
) -> None:
    """At burstiness 1 the model asks for one replica more than at 0.5, and doubles the wait."""
    textbook = count_for(arrival_rps, 1.0)
    assert textbook == count_for(arrival_rps, 0.5) + 1
    simulated, _ = simulated_wait_s(arrival_rps, textbook)
    assert modelled_wait_s(arrival_rps, textbook, 1.0) > 1.5 * simulated

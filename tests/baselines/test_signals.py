"""Each baseline runs on the signal its users give it: HPA and KEDA on the request rate or on
the concurrency, Knative's KPA on concurrency."""

from __future__ import annotations

import numpy as np
import pytest

from autoscaler import baselines, ports
from autoscaler.baselines import hpa, keda, kpa
from autoscaler.sim import policies
from autoscaler.sim.metrics import LoadQuery
from autoscaler.sim.params import SimParams
from tests.baselines import drive

PARAMS = SimParams(replica_capacity_rps=1.0, service_time_s=2.0, target_utilisation=0.75)
SERVED_RPS = 4.0
"""Four replicas, overloaded: they serve 4 rps, at capacity..."""
IN_FLIGHT = 4 * 2.0 + 20.0
"""...with 8 requests running and 20 waiting: the concurrency."""


def decider(name: str) -> ports.Policy:
    return policies.lookup(name).decider(PARAMS, np.ones(10))


def reads(name: str) -> float:
    """What the policy's LOAD signal reads on the overloaded service, by its registry entry."""
    query = policies.lookup(name).load
    return IN_FLIGHT if query is LoadQuery.CONCURRENCY else SERVED_RPS


@pytest.mark.parametrize(
    ("name", "metric", "query"),
    [
        ("hpa", baselines.RATE, LoadQuery.SERVED_RATE),
        ("hpa-conc", baselines.CONCURRENCY, LoadQuery.CONCURRENCY),
        ("keda", baselines.RATE, LoadQuery.SERVED_RATE),
        ("keda-conc", baselines.CONCURRENCY, LoadQuery.CONCURRENCY),
        ("kpa", baselines.CONCURRENCY, LoadQuery.CONCURRENCY),
    ],
)
def test_each_baseline_names_the_signal_the_simulator_feeds_it(
    name: str, metric: baselines.Metric, query: LoadQuery
) -> None:
    """The decider's metric and the query its LOAD signal reads agree, one per variant."""
    built = decider(name)
    assert isinstance(built, hpa.Hpa | kpa.Kpa)
    assert built.metric is metric
    assert policies.lookup(name).load is query


def test_kpa_defaults_to_concurrency_like_knative() -> None:
    """Knative's default metric is concurrency; rps only when asked."""
    assert kpa.Kpa(target=2.0).metric is baselines.CONCURRENCY
    assert hpa.Hpa(target=2.0).metric is baselines.RATE
    assert keda.Keda(target=2.0).metric is baselines.RATE


@pytest.mark.parametrize(("rate", "conc"), [("hpa", "hpa-conc"), ("keda", "keda-conc")])
def test_on_concurrency_hpa_and_keda_see_an_overload_the_rate_hides(rate: str, conc: str) -> None:
    """4 rps at 0.75 per pod asks ceil(4 / 0.75) = 6; 28 in flight at 1.5 asks 19, which the
    legacy rule caps at max(2 x 4, 4) = 8 for this sync."""
    on_rate = drive.run(decider(rate), lambda t: reads(rate), end_s=15.0, replicas=4)
    on_conc = drive.run(decider(conc), lambda t: reads(conc), end_s=15.0, replicas=4)

    assert drive.changes(on_rate) == [(15.0, 6)]
    assert drive.changes(on_conc) == [(15.0, 8)]
    assert "28 in flight" in drive.at(on_conc, 15.0).detail


def test_kpa_on_concurrency_panics_on_the_queue() -> None:
    """28 in flight at 0.7 x 1.5 per pod asks ceil(28 / 1.05) = 27 from 4 ready; fed the
    served rate instead, 4 rps at 0.7 x 0.75 asks only ceil(4 / 0.525) = 8."""
    ticks = drive.run(decider("kpa"), lambda t: reads("kpa"), end_s=2.0, replicas=4)
    on_rate = drive.run(
        baselines.make("kpa", target=0.75, metric=baselines.RATE),
        lambda t: SERVED_RPS,
        end_s=2.0,
        replicas=4,
    )

    assert drive.changes(ticks) == [(2.0, 27)]
    assert "28 in flight" in drive.at(ticks, 2.0).detail
    assert "panic mode" in drive.at(ticks, 2.0).detail
    assert drive.changes(on_rate) == [(2.0, 8)]

"""`simulate`: one trace, one policy, the real loop, a result with every column."""

from __future__ import annotations

import dataclasses
import gzip
from importlib import resources

import numpy as np
import pytest

from autoscaler import ports
from autoscaler.core import model
from autoscaler.experiment import run
from autoscaler.sim import policies, world
from autoscaler.sim.params import SUMMARY_KEYS, TIMESERIES_COLUMNS, SimParams

PARAMS = SimParams(startup_sigma=0.0, max_replicas=40)


def bundled_trace() -> np.ndarray:
    """The bundled Azure trace as requests per second (t_seconds,requests)."""
    path = (
        resources.files("autoscaler.experiment") / "traces" / "azure_llm_2023_conv.requests.csv.gz"
    )
    with gzip.open(str(path), "rt") as f:
        table = np.loadtxt(f, delimiter=",", skiprows=1)
    arrivals = np.zeros(int(table[:, 0].max()) + 1)
    np.add.at(arrivals, table[:, 0].astype(int), table[:, 1])
    return arrivals


class FixedPolicy:
    """A `ports.Policy` that always wants the same count."""

    def __init__(self, replicas: int) -> None:
        self.replicas = replicas

    def decide(
        self, workload: ports.Workload, observation: model.Observation, state: model.PolicyState
    ) -> tuple[model.Decision, model.PolicyState]:
        kind = model.Kind.SCALE_UP if self.replicas > observation.replicas else model.Kind.STEADY
        decision = model.Decision(
            observation.replicas, self.replicas, kind, model.Reason.ABOVE_TARGET, "fixed"
        )
        return decision, state


def test_result_has_every_column_for_every_second_and_a_summary() -> None:
    """The time series has exactly the design's columns, one row per trace second."""
    arrivals = np.full(300, 3.0)

    result = run.simulate(arrivals, PARAMS)

    assert tuple(result.timeseries) == TIMESERIES_COLUMNS
    assert all(len(column) == 300 for column in result.timeseries.values())
    assert list(result.timeseries["t_s"][:3]) == [0.0, 1.0, 2.0]
    assert set(result.summary) == SUMMARY_KEYS
    assert result.summary["params"] == PARAMS.as_dict()
    assert result.summary["simulated_s"] == 300


def test_summary_adds_up() -> None:
    """Requests are rate-scaled arrivals; GPU-hours match the per-second cost column."""
    rng = np.random.default_rng(1)
    arrivals = np.concatenate([rng.poisson(3, 300), rng.poisson(15, 300)]).astype(float)
    params = dataclasses.replace(PARAMS, rate_scale=1.5)

    result = run.simulate(arrivals, params)
    s = result.summary

    assert s["requests"] == pytest.approx(1.5 * arrivals.sum())
    assert s["served"] + s["dropped"] + s["queued_at_end"] == pytest.approx(s["requests"])
    assert s["slo_miss_pct"] == pytest.approx(100 * s["slo_misses"] / s["requests"])
    assert s["gpu_hours"] == pytest.approx(result.timeseries["gpu_cost"].sum())
    assert s["scale_events"] == len(result.scale_events) > 0
    assert s["max_replicas_seen"] == max(after for _, _, after in result.scale_events)
    assert s["p95_latency_s"] >= params.service_time_s


async def test_only_serving_pods_add_capacity() -> None:
    """New pods add capacity only once started and warm; until then the queue grows."""
    params = dataclasses.replace(PARAMS, startup_s=30.0, warmup_s=5.0)
    sim = world.World(params)
    sid = sim.add_service("ns/model", np.full(120, 6.0), params, replicas=2)
    await sim.cluster.scale(sid, 8)
    sim.advance(120)

    series = sim.timeseries(sid)
    assert set(series["capacity_rps"][:35]) == {2.0}
    assert set(series["capacity_rps"][35:]) == {8.0}
    assert set(series["replicas_total"]) == {8.0}
    assert series["gpu_cost"][0] == pytest.approx(8 / 3600)
    assert series["dropped"].sum() == 0
    assert series["p95_latency_s"][34] > series["p95_latency_s"][0]


async def test_misses_per_second_add_up_to_the_queue_s_misses() -> None:
    """The `slo_misses` column counts each second's late and dropped requests, all of them."""
    params = dataclasses.replace(PARAMS, startup_s=30.0, warmup_s=5.0)
    sim = world.World(params)
    sid = sim.add_service("ns/model", np.full(120, 6.0), params, replicas=2)
    await sim.cluster.scale(sid, 8)
    sim.advance(120)

    misses = sim.timeseries(sid)["slo_misses"]
    assert misses[0] == 0
    assert misses.sum() > 0
    assert misses.sum() == pytest.approx(sim.traffic(sid).slo_misses)


def test_initial_replicas_cover_the_opening_minute_at_the_target() -> None:
    """Without an explicit count, the service starts with the opening minute's need."""
    arrivals = np.concatenate([np.full(60, 6.0), np.full(60, 100.0)])

    assert world.initial_replicas(arrivals, PARAMS) == 8  # 6 / 0.75
    assert world.initial_replicas(arrivals, dataclasses.replace(PARAMS, initial_replicas=3)) == 3
    assert world.initial_replicas(np.full(60, 0.1), PARAMS) == PARAMS.min_replicas
    assert world.initial_replicas(np.full(60, 1e3), PARAMS) == PARAMS.max_replicas


def test_unknown_policy_name_lists_the_valid_ones() -> None:
    """An unknown policy name is a ValueError that names every valid policy."""
    with pytest.raises(
        ValueError,
        match="valid policies: default, hpa, hpa-conc, keda, keda-conc, kpa, oracle, seed",
    ):
        run.simulate(np.full(10, 1.0), dataclasses.replace(PARAMS, policy="nope"))
    assert {"seed", "default"} <= set(run.POLICIES)


def test_explicit_policy_object_decides() -> None:
    """A `ports.Policy` given explicitly decides, under any name."""
    params = dataclasses.replace(PARAMS, policy="fixed-seven", initial_replicas=2)

    result = run.simulate(np.full(120, 1.0), params, policy=FixedPolicy(7))

    assert result.scale_events == [(0.0, 2, 7)]
    assert result.timeseries["replicas_serving"][-1] == 7
    assert result.summary["params"]["policy"] == "fixed-seven"


def test_policy_configs_carry_the_simulation_targets() -> None:
    """Both registered configs use the simulation's bounds and per-replica targets."""
    for name in ("seed", "default"):
        config = policies.lookup(name).config(PARAMS)
        assert config.target_load_per_replica == PARAMS.target_load_per_replica
        assert config.target_queue_per_replica == PARAMS.target_queue_per_replica
        assert (config.min_replicas, config.max_replicas) == (2, 40)
    assert policies.lookup("seed").config(PARAMS).burst is None
    assert policies.lookup("default").config(PARAMS).burst is not None


def test_progress_is_reported_about_a_hundred_times_up_to_the_end() -> None:
    """Progress comes at most ~100 times, in order, and ends at the total."""
    calls: list[tuple[float, float]] = []

    run.simulate(np.full(1000, 1.0), PARAMS, progress=lambda now, total: calls.append((now, total)))

    assert 90 <= len(calls) <= 101
    assert calls[-1] == (1000.0, 1000.0)
    assert [now for now, _ in calls] == sorted(now for now, _ in calls)


def test_same_inputs_give_the_same_result() -> None:
    """A run is a function of its inputs: the same trace, params and seed repeat exactly."""
    rng = np.random.default_rng(2)
    arrivals = rng.poisson(8, 600).astype(float)
    params = dataclasses.replace(PARAMS, startup_sigma=0.3, seed=11)

    first = run.simulate(arrivals, params)
    second = run.simulate(arrivals, params)

    assert first.scale_events == second.scale_events
    for name in TIMESERIES_COLUMNS:
        np.testing.assert_array_equal(first.timeseries[name], second.timeseries[name])


async def test_simulate_async_runs_inside_an_event_loop() -> None:
    """`simulate_async` is the same run for callers already in an event loop."""
    result = await run.simulate_async(np.full(60, 2.0), PARAMS)

    assert result.summary["simulated_s"] == 60


def test_bundled_trace_replays_through_both_policies() -> None:
    """The bundled trace runs end to end; every request is served, dropped or still queued."""
    arrivals = bundled_trace()
    assert len(arrivals) == 3502

    for name in ("seed", "default"):
        result = run.simulate(arrivals, dataclasses.replace(PARAMS, policy=name))
        s = result.summary
        assert s["requests"] == pytest.approx(arrivals.sum())
        assert s["served"] + s["dropped"] + s["queued_at_end"] == pytest.approx(s["requests"])
        assert 0 <= s["slo_miss_pct"] < 50
        assert PARAMS.min_replicas <= s["mean_replicas"] <= PARAMS.max_replicas


def test_a_burst_in_the_last_second_counts_its_misses() -> None:
    """Requests still waiting at the end that cannot meet the SLO count as misses."""
    arrivals = np.full(120, 1.0)
    arrivals[-1] = 500.0

    s = run.simulate(arrivals, PARAMS).summary

    # Two replicas at 1 request/s each serve only a few of the burst within the SLO.
    assert s["queued_at_end"] == pytest.approx(498.0)
    assert 0.95 * s["queued_at_end"] < s["slo_misses"] <= s["queued_at_end"]
    assert s["slo_miss_pct"] == pytest.approx(100 * s["slo_misses"] / s["requests"])

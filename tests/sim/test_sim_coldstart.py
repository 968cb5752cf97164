"""Cold starts in the simulator: node caches of model weights, cache-aware placement and the
warm standby pool."""

from __future__ import annotations

import dataclasses
import hashlib

import numpy as np
import pytest

from autoscaler.core import model, policy
from autoscaler.experiment import run, sweep
from autoscaler.sim import world
from autoscaler.sim.cluster import Lifecycle, Phase, ServiceSpec, SimCluster
from autoscaler.sim.params import CacheConfig, SimParams, StandbyConfig
from bench import scenarios

COLD = Lifecycle(startup_s=120.0, startup_sigma=0.0, warmup_s=5.0)
WARM_S = 8.0


def spec(name: str = "ns/model") -> ServiceSpec:
    config = policy.seed(max_replicas=100, target_load_per_replica=0.75)
    return ServiceSpec(model.ServiceId(name), config, half_life_s=30.0, lifecycle=COLD)


def cluster(
    *, gpus: int = 8, placement: str = "spread", cache_gib: float = 64.0, **cache: object
) -> SimCluster:
    config = CacheConfig(
        node_cache_gib=cache_gib, model_size_gib=16.0, warm_startup_s=WARM_S, placement=placement
    )
    return SimCluster(gpus=gpus, cache=dataclasses.replace(config, **cache), promote_s=10.0)


def advance_to(c: SimCluster, t_s: float) -> None:
    while c.now_s < t_s - 1e-9:
        c.advance(1.0)


def serving(c: SimCluster, service: str) -> int:
    return c.counts(model.ServiceId(service)).serving


def test_a_pod_on_a_node_holding_its_model_starts_warm() -> None:
    """On the one node, where the model already runs, a new pod loads it in the warm time."""
    c = cluster()
    sid = c.add_service(spec(), replicas=1).spec.id
    c.set_replicas(sid, 2)
    (new,) = [p for p in c.pods(sid) if p.phase is Phase.STARTING]
    assert new.cache_hit is True
    assert new.startup_delay_s == WARM_S
    advance_to(c, WARM_S + 5.0)
    assert serving(c, sid) == 2


def test_a_pod_on_a_node_without_its_model_starts_cold() -> None:
    """A node that never ran the model has it in no cache: the pod loads it cold."""
    c = cluster()
    sid = c.add_service(spec()).spec.id
    c.set_replicas(sid, 1)
    (pod,) = c.pods(sid)
    assert pod.cache_hit is False
    assert pod.startup_delay_s == COLD.startup_s
    state = c.service(sid)
    assert (state.cache_hits, state.cache_misses) == (0, 1)
    advance_to(c, COLD.startup_s)
    assert c.cached_nodes(sid) == ("gpu-node-0",)


def test_the_least_recently_used_model_is_evicted_first() -> None:
    """A cache for two models keeps the two used last: the first of three goes."""
    c = cluster(cache_gib=32.0)
    first, second, third = (c.add_service(spec(f"ns/m{i}")).spec.id for i in range(3))
    for i, sid in enumerate((first, second, third)):
        c.set_replicas(sid, 1)
        advance_to(c, (i + 1) * 200.0)
        c.set_replicas(sid, 0)
    assert c.cached_nodes(first) == ()
    assert c.cached_nodes(second) == ("gpu-node-0",)
    assert c.cached_nodes(third) == ("gpu-node-0",)
    assert c.evictions == 1
    c.set_replicas(first, 1)
    assert c.pods(first)[0].cache_hit is False


def test_a_model_in_use_is_never_evicted() -> None:
    """Other tenants' loads evict the idle models of a node, never one a pod runs there."""
    c = cluster(cache_gib=32.0, other_models=5, other_loads_per_node_hour=600.0)
    sid = c.add_service(spec(), replicas=1).spec.id
    advance_to(c, 600.0)
    assert c.evictions > 10
    assert c.cached_nodes(sid) == ("gpu-node-0",)
    c.set_replicas(sid, 0)
    advance_to(c, 1200.0)
    assert c.cached_nodes(sid) == ()


def test_retention_forgets_a_model_unused_for_that_long() -> None:
    """With a retention of 10 minutes, a model idle for longer starts cold again."""
    c = cluster(retention_s=600.0)
    sid = c.add_service(spec(), replicas=1).spec.id
    c.set_replicas(sid, 0)
    advance_to(c, 599.0)
    assert c.cached_nodes(sid) == ("gpu-node-0",)
    advance_to(c, 601.0)
    assert c.cached_nodes(sid) == ()
    c.set_replicas(sid, 1)
    assert c.pods(sid)[0].cache_hit is False


def hit_ratio(placement: str) -> float:
    c = cluster(gpus=512, placement=placement)
    sid = c.add_service(spec(), replicas=6).spec.id
    c.set_replicas(sid, 30)
    state = c.service(sid)
    return state.cache_hits / (state.cache_hits + state.cache_misses)


def test_cache_aware_placement_raises_the_hit_rate() -> None:
    """On 64 nodes, 24 new pods find the model far more often when placement prefers its nodes."""
    spread, aware = hit_ratio("spread"), hit_ratio("cache-aware")
    assert aware == 1.0
    assert spread < 0.25


def test_placement_leaves_the_startup_draws_alone() -> None:
    """The k-th pod draws the same cold start-up whatever node it lands on."""
    drawn = []
    for placement in ("spread", "cache-aware"):
        c = SimCluster(gpus=64, seed=4, cache=CacheConfig(placement=placement))
        sid = c.add_service(spec()).spec.id
        c.set_replicas(sid, 5)
        drawn.append([p.startup_delay_s for p in c.pods(sid)])
    assert drawn[0] == drawn[1]


def test_a_scale_up_promotes_ready_standby_pods_first() -> None:
    """Four ready standby pods serve 10 s after a scale-up by four; the pool refills behind."""
    c = cluster(gpus=64)
    sid = c.add_service(spec(), replicas=2).spec.id
    c.set_standby(sid, 4)
    advance_to(c, 200.0)
    assert serving(c, sid) == 2
    assert all(p.ready for p in c.service(sid).standby)
    c.set_replicas(sid, 6)
    advance_to(c, 210.0)
    assert serving(c, sid) == 6
    state = c.service(sid)
    assert state.promoted == 4
    assert len(state.standby) == 4
    assert all(not p.ready for p in state.standby)


def test_standby_gpu_time_is_counted_apart_and_in_the_total() -> None:
    """Three standby pods for an hour are 3 standby GPU-hours, inside the service's GPU-hours."""
    c = cluster(gpus=64)
    sid = c.add_service(spec(), replicas=2).spec.id
    c.set_standby(sid, 3)
    advance_to(c, 1800.0)
    c.set_replicas(sid, 1)
    advance_to(c, 3600.0)
    assert c.standby_seconds(sid) == pytest.approx(3 * 3600.0)
    assert c.gpu_seconds(sid) == pytest.approx(3 * 3600.0 + 2 * 1800.0 + 1800.0)
    assert c.counts(sid).holding_gpu == 1


STEP = np.concatenate([np.full(300, 3.0), np.full(600, 9.0)])
"""Requests per second: 4 replicas' worth at the load target, then 12 from 300 s."""


def step_run(standby: StandbyConfig | None) -> tuple[float | None, dict[str, object]]:
    params = SimParams(startup_sigma=0.0, startup_s=120.0, standby=standby)
    result = run.simulate(STEP, params)
    trace = scenarios.Scenario("step", "a step", STEP, step_at_s=300.0)
    return sweep.time_to_capacity(trace, result.timeseries["capacity_rps"]), result.summary


def test_the_standby_pool_shortens_the_time_to_capacity_after_a_step() -> None:
    """With eight pods waiting, capacity follows a 3x step within the ramp, not a cold start."""
    without, _ = step_run(None)
    with_pool, summary = step_run(StandbyConfig(fixed=8, promote_s=10.0))
    assert without is not None
    assert with_pool is not None
    assert without > 120.0
    assert with_pool < 30.0
    cold = summary["cold_start"]
    assert isinstance(cold, dict)
    assert cold["standby_promoted"] >= 8
    assert 0 < cold["standby_gpu_hours"] < summary["gpu_hours"]


def test_the_automatic_pool_never_exceeds_its_cap() -> None:
    """On bursty load whose shortfall asks for more, the automatic pool stops at its cap."""
    burst = (np.arange(3600) % 600 < 60).astype(np.float64)
    arrivals = 3.0 + 12.0 * burst
    params = SimParams(
        policy="seed",
        gpus=64,
        startup_s=120.0,
        cache=CacheConfig(),
        standby=StandbyConfig(cap=2, min_history_s=300.0),
    )
    summary = run.simulate(arrivals, params).summary
    cold = summary["cold_start"]
    assert isinstance(cold, dict)
    assert cold["standby_peak_pods"] == 2
    assert cold["standby_promoted"] > 0


def test_an_automatic_pool_waits_for_history() -> None:
    """Before `min_history_s` of shortfalls the automatic pool keeps no pod."""
    params = SimParams(
        policy="seed", gpus=64, cache=CacheConfig(), standby=StandbyConfig(min_history_s=900.0)
    )
    summary = run.simulate(np.full(600, 3.0), params).summary
    cold = summary["cold_start"]
    assert isinstance(cold, dict)
    assert cold["standby_peak_pods"] == 0
    assert cold["standby_gpu_hours"] == 0.0


def test_recent_arrivals_is_nan_before_the_first_second() -> None:
    """With no row yet the raw load is unknown, never zero."""
    assert np.isnan(world.recent_arrivals([], 5.0))


def test_the_cache_model_needs_a_fixed_cluster() -> None:
    """A cache on a cluster that grows nodes on demand is refused, as is a pool with the ramp."""
    with pytest.raises(ValueError, match="fixed cluster"):
        SimParams(cache=CacheConfig())
    with pytest.raises(ValueError, match="standby pool"):
        SimParams(ramp="istio", standby=StandbyConfig())
    with pytest.raises(ValueError, match="placement"):
        CacheConfig(placement="nearest")


def test_runs_without_a_cache_or_a_pool_are_unchanged() -> None:
    """A fixed-seed HPA run on the warm regime gives the same time series as before the cache
    model existed."""
    base = sweep.BASE
    trace = scenarios.build("on-off", base).truncated(1200)
    task = sweep.Task("on-off", "warm", "hpa", sweep.DEFAULT_UTILISATION["hpa"])
    params = sweep.params_for(task, trace, base)
    assert params.cache is None
    assert params.standby is None
    result = run.simulate(trace.arrivals, params)
    digest = hashlib.sha256()
    for name in sorted(result.timeseries):
        digest.update(np.ascontiguousarray(result.timeseries[name]).tobytes())
    assert digest.hexdigest()[:16] == "77739696a040262b"
    assert "cold_start" not in result.summary

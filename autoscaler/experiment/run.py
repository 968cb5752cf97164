"""Run one policy over one trace on the simulator: `SimParams` and arrivals in, `SimResult` out.

`simulate` builds a world with one service, wires the real `loop.Loop` to it (tick 1 s, window 300
s, the service's half-life from `params`, the metrics as its load history), runs one tick per
simulated second over the whole trace and summarises what happened. Every policy in a comparison
gets exactly the same model, trace and seed (docs/simulator.md). With `params.ramp`, the ramp driver
runs in the loop on the world's ramp ports (docs/architecture.md, "The warm-up gate and the traffic
ramp"): scale writes go through it, and it gates, ramps, promotes, rolls back and drains the
service's pods.

It must not configure logging, print, or write files: the CLI does that with the result.
"""

from __future__ import annotations

import asyncio
import math
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from autoscaler import logs, loop, ports, ramp_driver
from autoscaler.core import model, placement, smoothing
from autoscaler.sim import policies, world
from autoscaler.sim import tokens as tokens_
from autoscaler.sim import traffic as traffic_
from autoscaler.sim.params import SimParams, SimResult

FloatArray = npt.NDArray[np.float64]

SERVICE = model.ServiceId("sim/inference")
"""The one service `simulate` runs."""

POLICIES = policies.REGISTRY
"""The policy names `params.policy` may take, with what each builds."""

SMOOTHING = smoothing.SmoothingConfig(window_s=300.0, tick_s=1.0)


def simulate(
    arrivals: npt.NDArray[Any],
    params: SimParams,
    *,
    progress: Callable[[float, float], None] | None = None,
    policy: ports.Policy | None = None,
    past: npt.NDArray[Any] | None = None,
    token_mix: tokens_.TokenMix | None = None,
) -> SimResult:
    """Replay `arrivals` (the trace's requests per second, before `params.rate_scale`)
    through the loop and the virtual cluster; see `simulate_async`."""
    return asyncio.run(
        simulate_async(
            arrivals, params, progress=progress, policy=policy, past=past, token_mix=token_mix
        )
    )


async def simulate_async(
    arrivals: npt.NDArray[Any],
    params: SimParams,
    *,
    progress: Callable[[float, float], None] | None = None,
    policy: ports.Policy | None = None,
    past: npt.NDArray[Any] | None = None,
    token_mix: tokens_.TokenMix | None = None,
) -> SimResult:
    """The same as `simulate`, inside a running event loop.

    `past` (requests per second before the trace begins, before `params.rate_scale`) is what
    the metrics' load history holds from before the simulation: the seasonal forecast sees it,
    and of the trace itself only what has been served.

    `policy` replaces the decider of the registry's entry for `params.policy`; with it,
    `params.policy` may be a name the registry does not know (it only labels the result, and
    the service's config comes from the `seed` entry). Without it, an unknown name raises
    `ValueError` listing the valid ones. `progress(now_s, total_s)` is called about 100 times.
    In token mode (`params.tokens`), `token_mix` gives each second's prompt and output tokens,
    scaled by `params.rate_scale` with the arrivals.
    """
    trace = _checked(arrivals) * params.rate_scale
    mix = None
    if token_mix is not None:
        mix = tokens_.TokenMix(
            np.asarray(token_mix.prompt_tokens, dtype=np.float64) * params.rate_scale,
            np.asarray(token_mix.output_tokens, dtype=np.float64) * params.rate_scale,
        )
    if policy is None:
        entry = policies.lookup(params.policy)
        decider = entry.decider(params, trace)
    else:
        try:
            entry = policies.lookup(params.policy)
        except ValueError:
            entry = policies.lookup("seed")
        decider = policy
    sim = world.World(params)
    before = None if past is None else _checked(past, empty=True) * params.rate_scale
    sim.add_service(
        SERVICE,
        trace,
        params,
        policy_config=entry.config(params),
        past=before,
        token_mix=mix,
    )
    total_s = float(len(trace))
    sim.clock.report_progress(progress, total_s=total_s)
    await drive(sim, until_s=total_s, policy=decider)
    return result_of(sim, SERVICE, params)


async def drive(
    sim: world.World, *, until_s: float, policy: ports.Policy | None = None
) -> loop.Loop:
    """Run the real loop on `sim`, one tick per simulated second, until `until_s`.

    Every service of the world is managed; `policy` decides for all of them (default: the
    core policy, each service with its own config). When a service has the ramp, the ramp
    driver runs in the loop (`new_ramp_driver`). Returns the loop, for its policy states.
    """
    driver = new_ramp_driver(sim) if sim.ramp_cluster.ramp_targets() else None
    controller = loop.Loop(
        cluster=sim.cluster,
        metrics=sim.metrics,
        clock=sim.clock,
        policy=policy,
        smoothing_config=SMOOTHING,
        ramps=driver,
        history=sim.metrics,
    )
    simulated = logs.SIM_CLOCK.set(sim.clock.now)
    try:
        await controller.run(until_s=until_s)
    finally:
        logs.SIM_CLOCK.reset(simulated)
        if driver is not None:
            await driver.close()
    return controller


def new_ramp_driver(sim: world.World) -> ramp_driver.RampDriver:
    """The project's ramp driver on the world's ramp ports."""
    return ramp_driver.RampDriver(
        cluster=sim.cluster,
        pods=sim.ramp_cluster,
        routers=sim.routers,
        health=sim.health,
        prober=sim.prober,
    )


def result_of(sim: world.World, service: model.ServiceId, params: SimParams) -> SimResult:
    """The time series, scale events and summary of one service of a world."""
    series = sim.timeseries(service)
    state = sim.cluster.service(service)
    traffic = sim.traffic(service)
    desired = series["replicas_desired"]
    requests = traffic.arrived
    p95 = traffic.latency_quantile(0.95)
    # The requests still waiting that can no longer meet the SLO are misses too (see
    # `autoscaler.experiment.run_report`): a burst in the last second must not read as 0 %.
    slo_misses = traffic.slo_misses + traffic.unmet_at_end()
    summary: dict[str, Any] = {
        "requests": requests,
        "served": traffic.served,
        "dropped": traffic.dropped,
        "queued_at_end": traffic.queue,
        "slo_misses": slo_misses,
        "slo_miss_pct": 100.0 * slo_misses / requests if requests > 0 else 0.0,
        "p95_latency_s": None if math.isnan(p95) else p95,
        "gpu_hours": sim.cluster.gpu_seconds(service) / 3600.0,
        "core_hours": sim.cluster.core_seconds(service) / 3600.0,
        "pending_replica_s": sim.cluster.pending_seconds(service),
        "scale_events": len(state.scale_events),
        "mean_replicas": float(np.mean(desired)) if len(desired) else 0.0,
        "max_replicas_seen": int(np.max(desired)) if len(desired) else 0,
        "simulated_s": float(sim.now_s),
        "params": params.as_dict(),
    }
    if isinstance(traffic, traffic_.SplitTraffic):
        summary |= _per_pod_summary(sim, service, traffic)
    if isinstance(traffic, tokens_.TokenTraffic):
        summary["tokens"] = {
            "prompt_tokens": traffic.prompt_tokens_total,
            "generation_tokens": traffic.generation_tokens_total,
            "ttft_p95_s": None if math.isnan(p95) else p95,
        }
    if params.nodes:
        summary["placement"] = _placement_summary(sim, service)
    if params.cache is not None or params.standby is not None:
        summary["cold_start"] = cold_start_summary(sim, service)
    return SimResult(
        params=params,
        timeseries=series,
        scale_events=list(state.scale_events),
        summary=summary,
    )


def _per_pod_summary(
    sim: world.World, service: model.ServiceId, traffic: traffic_.SplitTraffic
) -> dict[str, Any]:
    """The `RAMP_SUMMARY_KEYS` of a service modelled per pod."""
    ramp: dict[str, Any] | None = None
    if sim.ramp_cluster.has(service):
        events = Counter(e.reason for e in sim.ramp_cluster.events if e.service == service)
        router = sim.router_of(service)
        ramp = {
            "router": None if router is None else router.name,
            "pods_reclaimed": sim.ramp_cluster.reclaimed[service],
            "weights_written": 0 if router is None else router.writes_for(service),
            "events": dict(sorted(events.items())),
        }
    return {"failed": traffic.failed, "rejected": traffic.rejected, "ramp": ramp}


def _placement_summary(sim: world.World, service: model.ServiceId) -> dict[str, Any]:
    """The `PLACEMENT_SUMMARY_KEYS` entry of a run on a cluster described by tier."""
    state = sim.cluster.service(service)
    tiers = sim.cluster.tier_seconds(service)
    return {
        "tier_replica_s": {t: tiers[t] for t in sorted(tiers, key=_by_rank)},
        "last_plan": None if state.plan is None else state.plan.reason,
    }


def cold_start_summary(sim: world.World, service: model.ServiceId) -> dict[str, Any]:
    """The `COLD_START_SUMMARY_KEYS` entry: cache hits and misses of the pods that got a GPU,
    evictions, standby promotions and standby GPU-hours."""
    state = sim.cluster.service(service)
    started = state.cache_hits + state.cache_misses
    return {
        "cache_hits": state.cache_hits,
        "cache_misses": state.cache_misses,
        "cache_hit_ratio": state.cache_hits / started if started else None,
        "evictions": sim.cluster.evictions,
        "standby_promoted": state.promoted,
        "standby_peak_pods": state.standby_peak,
        "standby_gpu_hours": sim.cluster.standby_seconds(service) / 3600.0,
    }


def _by_rank(tier: str) -> tuple[int, str]:
    return placement.preference(tier), tier


def _checked(arrivals: npt.NDArray[Any], *, empty: bool = False) -> FloatArray:
    values = np.asarray(arrivals, dtype=np.float64)
    if values.ndim != 1 or (len(values) == 0 and not empty):
        raise ValueError("arrivals must be a non-empty array of requests per second")
    if not bool(np.all(np.isfinite(values)) and np.all(values >= 0)):
        raise ValueError("arrivals must be finite and >= 0")
    return values

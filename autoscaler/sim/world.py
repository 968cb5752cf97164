"""One simulated world: the cluster, each service's traffic and the metrics, moving together.

The world owns simulated time, in whole seconds. Each second, for every service, it serves the
traffic with the capacity of the pods serving at the start of that second, records one
time-series row, then advances the pods and scrapes the metrics when a scrape is due: the
served counter, the waiting requests, the running ones (`in_service`: taken less than a service
time ago) and the GPU utilisation; the policy's registry entry says whether its LOAD signal reads
the served rate or the concurrency (`metrics.LoadQuery`).
`SimClock` turns the loop's `sleep` into `World.advance`, so `Loop.run` drives the whole
simulation, one tick per simulated second, as fast as the CPU allows.

Ports for the loop: `world.cluster` (`ports.Cluster`), `world.metrics` (`ports.MetricsSource`),
`world.clock` (`clock.Clock`). Ports for the ramp driver (docs/architecture.md,
"The warm-up gate and the traffic ramp"): `world.ramp_cluster` (`ports.RampCluster`),
`world.routers` (`ports.TrafficRouter` by name), `world.health` (`ports.HealthSource`) and
`world.prober` (`ports.WarmupProber`).

A service whose params set `tokens` is served by the token model (`tokens.TokenTraffic`): its
serving replicas batch requests against prefill, decode and KV-cache limits, the `p95_latency_s`
column holds the TTFT, and each scrape also records the token signals a vLLM server exports
(`metrics.TokenSignals`). Other services keep the request model, exactly as before.

A service whose params set `ramp` or `faults` is modelled per pod (`traffic.SplitTraffic`): each
second, the arrivals are split between the stable and the warming set by the router's weight
(every ready pod alike without a split), each set serves its own queue with its pods' own
speeds, and what each pod did goes to `world.health`. With `ramp`, its pods pass the warm-up
gate: a started pod waits, unready, for the driver. Other services keep the plain model.

The row of second t (`TIMESERIES_COLUMNS`) describes [t, t+1): the arrivals, served and dropped
requests; `replicas_desired`, the count the loop asked for at its tick at t; `replicas_total`,
the pods holding a GPU (starting, warming, serving: pending pods are the gap to the desired
count); `replicas_serving` and `capacity_rps` (the serving pods' speeds x mu, a whole card
counting 1 and a MIG slice or a share its tier's speed; or the serving pods' own speeds when
modelled per pod); the p95 latency of the requests served in that second (NaN when none
was); `gpu_cost`, `replicas_total` GPU-seconds in hours; and `slo_misses`, the requests of
that second served too late, dropped, failed or rejected. A service modelled per pod also has
`ramp_series` (`RAMP_COLUMNS`).

With `cache` set, the cluster's nodes cache model weights and a start-up is warm or cold by where
the pod lands (`cluster`); with `standby`, the service keeps a standby pool, sized at every
scrape by `sim.standby` as the controller would size it (`core.standby`). Standby pods count in
`replicas_total` and `gpu_cost`, never in `replicas_serving` or the capacity until promoted.

It must not decide anything (the loop does), read a real clock, or import the real adapters.
"""

from __future__ import annotations

import asyncio
import math
from array import array
from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np
import numpy.typing as npt

from autoscaler import metricnames, ports
from autoscaler.contract import annotations as contract
from autoscaler.core import model, placement
from autoscaler.sim import cluster as cluster_
from autoscaler.sim import metrics as metrics_
from autoscaler.sim import policies
from autoscaler.sim import ramp as ramp_
from autoscaler.sim import standby as standby_
from autoscaler.sim import tokens as tokens_
from autoscaler.sim import traffic as traffic_
from autoscaler.sim.params import TIMESERIES_COLUMNS, SimParams

FloatArray = npt.NDArray[np.float64]
Progress = Callable[[float, float], None]

_EPS = 1e-9
# Seconds of trace that size the initial replicas and the metrics' seeded history.
_OPENING_S = 60
_SECONDS_PER_HOUR = 3600.0
_RUNNING = (cluster_.Phase.WARMING, cluster_.Phase.SERVING)

RAMP_COLUMNS = ("failed", "rejected", "warming_pct", "pods_ramping")
"""Per-second columns of a service modelled per pod: requests that failed (a failing pod's and
the rejected), requests rejected (routed to an empty set), the router's warming weight (NaN
while traffic is not split), and warm pods still labelled `warming`."""
WARMUP_PATH = "/v1/models"
WARMUP_PORT = 8000
SERVER_PRESET = "vllm"
"""The metric preset of a simulated service (for the ramp's health gate)."""


class _Second(Protocol):
    """What one simulated second did, as every traffic model reports it."""

    @property
    def arrivals(self) -> float: ...
    @property
    def served(self) -> float: ...
    @property
    def dropped(self) -> float: ...
    @property
    def p95_latency_s(self) -> float: ...
    @property
    def slo_misses(self) -> float: ...


def _record(
    feed: _Feed, t: int, second: _Second, holding: int, serving: int, capacity: float
) -> None:
    """One row of the time series (`TIMESERIES_COLUMNS`) for second `t`."""
    feed.rows.extend(
        (
            t,
            second.arrivals,
            second.served,
            second.dropped,
            feed.state.desired,
            holding,
            serving,
            capacity,
            second.p95_latency_s,
            holding / _SECONDS_PER_HOUR,
            second.slo_misses,
        )
    )


class _Feed:
    """One service as the world drives it."""

    __slots__ = (
        "capacity_rps",
        "id",
        "last_served",
        "pod_model",
        "ramp_rows",
        "router",
        "rows",
        "servers",
        "service_time_s",
        "split",
        "standby",
        "state",
        "tokens",
        "traffic",
        "utilisation_pct",
    )

    def __init__(
        self,
        service: model.ServiceId,
        traffic: traffic_.Traffic,
        state: cluster_.ServiceState,
        capacity_rps: float,
        service_time_s: float = 0.0,
    ) -> None:
        self.id = service
        self.traffic = traffic
        self.state = state
        self.capacity_rps = capacity_rps
        """mu: what one serving replica completes per second."""
        self.service_time_s = service_time_s
        """How long a request stays running once taken (the service's nominal time)."""
        self.rows = array("d")
        """The time series, `TIMESERIES_COLUMNS` per second, flat."""
        self.last_served = 0.0
        """Requests served in the last simulated second."""
        self.split: traffic_.SplitTraffic | None = None
        """The per-pod model, for a service whose pods can differ (then `traffic` is unused)."""
        self.pod_model: ramp_.PodModel | None = None
        self.router: ramp_.SimRouter | None = None
        """The ramp's router; None without the warm-up gate."""
        self.servers: dict[str, traffic_.Server] = {}
        self.ramp_rows = array("d")
        """`RAMP_COLUMNS` per second, flat (per-pod model only)."""
        self.utilisation_pct = math.nan
        """GPU utilisation of the serving pods in the last second (per-pod and token models)."""
        self.tokens: tokens_.TokenTraffic | None = None
        """The token model, for a service in token mode (then `traffic` is unused)."""
        self.standby: standby_.PoolSizer | None = None
        """The standby pool's sizing, for a service with one."""


class World:
    """A simulated cluster with trace-driven services; cluster-wide settings from `params`
    (GPUs, seed, scrape interval, rate window), per-service ones from each `add_service`."""

    def __init__(self, params: SimParams | None = None) -> None:
        self.params = params or SimParams()
        p = self.params
        self.cluster = cluster_.SimCluster(
            gpus=p.gpus,
            gpus_per_node=p.gpus_per_node,
            seed=p.seed,
            nodes=p.nodes,
            quota=dict(p.gpu_quota),
            tier_speeds=dict(p.tier_speeds),
            cache=p.cache,
            promote_s=0.0 if p.standby is None else p.standby.promote_s,
        )
        self.metrics = metrics_.SimMetrics(
            scrape_interval_s=p.scrape_interval_s, rate_window_s=p.rate_window_s
        )
        self.clock = SimClock(self)
        self.ramp_cluster = ramp_.SimRampCluster(self.cluster)
        self.routers = ramp_.routers(lambda: self.time_s)
        self.health = ramp_.SimHealth(self.cluster, lambda: self.time_s)
        self._pod_models: dict[model.ServiceId, ramp_.PodModel] = {}
        self.prober = ramp_.SimProber(self.cluster, self._pod_models, seed=p.seed)
        self._feeds: list[_Feed] = []
        self._by_id: dict[model.ServiceId, _Feed] = {}
        self._t = 0
        self._carry_s = 0.0

    @property
    def now_s(self) -> int:
        """Whole simulated seconds so far."""
        return self._t

    @property
    def time_s(self) -> float:
        """Simulated time, with any fraction of a second not simulated yet."""
        return self._t + self._carry_s

    def add_service(
        self,
        service: str,
        arrivals: Sequence[float] | FloatArray,
        params: SimParams | None = None,
        *,
        policy_config: model.PolicyConfig | None = None,
        replicas: int | None = None,
        warm_start: bool = True,
        past: Sequence[float] | FloatArray | None = None,
        token_mix: tokens_.TokenMix | None = None,
    ) -> model.ServiceId:
        """Add a service fed by `arrivals` (requests per second, from now on, already scaled).

        `params` (default: the world's) gives its capacity, latency, life-cycle and smoothing
        settings; `policy_config` its policy (default: the registry's entry for `params.policy`).
        `replicas` start already serving (default: `initial_replicas`). With `warm_start` the
        metrics have a window of history at the opening load, as for a service that was
        running before; without, its counters start fresh. With `params.ramp` its new pods
        pass the warm-up gate and the ramp; `params.faults` count pods from the first one
        created after these. `past` (requests per second, already scaled) is the load of the
        seconds before now: the metrics' load history holds it, the forecast's only view of
        the trace beyond what the simulation has served. In token mode (`params.tokens`),
        `token_mix` gives each second's prompt and output tokens (already scaled like
        `arrivals`).
        """
        p = params or self.params
        sid = model.ServiceId(service)
        if sid in self._by_id:
            raise ValueError(f"service {sid} already exists")
        values = np.asarray(arrivals, dtype=np.float64)
        if (p.tokens is None) != (token_mix is None):
            raise ValueError("token_mix goes with params.tokens (the token mode), and only there")
        config = policy_config or policies.lookup(p.policy).config(p)
        n = initial_replicas(values, p) if replicas is None else replicas
        spec = cluster_.ServiceSpec(
            id=sid,
            policy=config,
            half_life_s=p.half_life_s,
            lifecycle=cluster_.Lifecycle(
                startup_s=p.startup_s,
                startup_sigma=p.startup_sigma,
                warmup_s=p.warmup_s,
                gated=p.ramp is not None,
            ),
            need=placement_need(p) if self.params.nodes else None,
        )
        state = self.cluster.add_service(spec, replicas=n)
        traffic_config = traffic_.TrafficConfig(
            service_time_s=p.service_time_s,
            slo_latency_s=p.slo_latency_s,
            queue_timeout_s=p.queue_timeout_s,
        )
        traffic = traffic_.Traffic(values, traffic_config)
        feed = _Feed(sid, traffic, state, p.replica_capacity_rps, p.service_time_s)
        if p.detailed:
            self._model_per_pod(feed, values, traffic_config, p, initial=len(state.pods))
        if p.tokens is not None and token_mix is not None:
            feed.tokens = tokens_.TokenTraffic(values, token_mix, p.tokens)
        if p.standby is not None:
            feed.standby = standby_.PoolSizer(
                p.standby, startup_s=p.startup_s, target_load_per_replica=p.target_load_per_replica
            )
            if p.standby.fixed is not None:
                self.cluster.set_standby(sid, p.standby.fixed)
        self._feeds.append(feed)
        self._by_id[sid] = feed
        history: float | None = None
        if warm_start:
            history = min(_opening_rps(values), state.serving_speed * feed.capacity_rps)
        load = load_query(p.policy)
        self.metrics.add_service(
            sid,
            now_s=float(self._t),
            history_rps=history,
            load=load,
            service_time_s=p.service_time_s,
            past_rps=None if past is None else np.asarray(past, dtype=np.float64),
        )
        utilisation = math.nan
        running = 0.0
        if history is not None:
            running = history * p.service_time_s
            if state.serving > 0:
                utilisation = 100.0 * history / (state.serving_speed * feed.capacity_rps)
        self.metrics.scrape(float(self._t), {sid: metrics_.Reading(0.0, 0.0, utilisation, running)})
        if feed.tokens is not None and token_mix is not None:
            reading = _token_reading(feed.tokens)
            if history is not None:
                # The token counters get the same window of history as the request counter,
                # at the opening's tokens per request.
                per_request = history / max(_opening_rps(values), 1e-9)
                self.metrics.seed_tokens(
                    sid,
                    float(self._t),
                    reading,
                    prompt_per_s=per_request * _opening_rps(token_mix.prompt_tokens),
                    generation_per_s=per_request * _opening_rps(token_mix.output_tokens),
                )
            self.metrics.scrape_tokens(float(self._t), {sid: reading})
        return sid

    def traffic(
        self, service: model.ServiceId
    ) -> traffic_.Traffic | traffic_.SplitTraffic | tokens_.TokenTraffic:
        """The service's queues: `SplitTraffic` when it is modelled per pod, `TokenTraffic` in
        token mode."""
        feed = self._by_id[service]
        if feed.tokens is not None:
            return feed.tokens
        return feed.traffic if feed.split is None else feed.split

    def router_of(self, service: model.ServiceId) -> ramp_.SimRouter | None:
        """The router of a service with the ramp; None without."""
        return self._by_id[service].router

    def pod_model(self, service: model.ServiceId) -> ramp_.PodModel | None:
        """How the service's pods behave, when it is modelled per pod."""
        return self._by_id[service].pod_model

    def ramp_series(self, service: model.ServiceId) -> dict[str, FloatArray]:
        """One array per `RAMP_COLUMNS` entry, one value per simulated second (empty arrays
        for a service on the plain model)."""
        flat = np.frombuffer(self._by_id[service].ramp_rows, dtype=np.float64)
        table = flat.reshape(-1, len(RAMP_COLUMNS))
        return {name: table[:, i].copy() for i, name in enumerate(RAMP_COLUMNS)}

    def _model_per_pod(
        self,
        feed: _Feed,
        values: FloatArray,
        config: traffic_.TrafficConfig,
        p: SimParams,
        *,
        initial: int,
    ) -> None:
        feed.split = traffic_.SplitTraffic(values, config)
        feed.pod_model = self._pod_models[feed.id] = ramp_.PodModel(
            capacity_rps=p.replica_capacity_rps,
            service_time_s=p.service_time_s,
            warmup_s=p.warmup_s,
            cold_factor=p.cold_factor,
            faults={initial + f.pod: f for f in p.faults},
        )
        if p.ramp is None:
            return
        feed.router = self.routers[contract.TrafficRouter(p.ramp)]
        self.ramp_cluster.add(ramp_target(feed.id, p))

    def advance(self, dt_s: float) -> None:
        """Move the world forward by `dt_s`, in whole seconds (fractions carry over)."""
        if dt_s < 0:
            raise ValueError("time does not go backwards")
        self._carry_s += dt_s
        while self._carry_s >= 1.0 - _EPS:
            self._carry_s -= 1.0
            self._second()

    def timeseries(self, service: model.ServiceId) -> dict[str, FloatArray]:
        """One array per `TIMESERIES_COLUMNS` entry, one value per simulated second."""
        flat = np.frombuffer(self._by_id[service].rows, dtype=np.float64)
        table = flat.reshape(-1, len(TIMESERIES_COLUMNS))
        return {name: table[:, i].copy() for i, name in enumerate(TIMESERIES_COLUMNS)}

    def _second(self) -> None:
        t = self._t
        for feed in self._feeds:
            if feed.split is not None:
                self._second_per_pod(t, feed, feed.split)
                continue
            if feed.tokens is not None:
                self._second_tokens(t, feed, feed.tokens)
                continue
            state = feed.state
            _, starting, warming, serving = state.counts
            holding = starting + warming + serving + state.standby_holding
            # Serving pods' speeds: each whole card's worth serves mu (a slice or a share less).
            capacity = state.serving_speed * feed.capacity_rps
            second = feed.traffic.step(capacity)
            feed.last_served = second.served
            _record(feed, t, second, holding, serving, capacity)
        self.cluster.advance(1.0)
        self._t = now = t + 1
        if self.metrics.scrape_due(now):
            self._scrape(float(now))

    def _second_tokens(self, t: int, feed: _Feed, tokens: tokens_.TokenTraffic) -> None:
        state = feed.state
        _, starting, warming, serving = state.counts
        holding = starting + warming + serving + state.standby_holding
        second = tokens.step(state.serving_speed)
        feed.last_served = second.served
        feed.utilisation_pct = 100.0 * second.busy_ratio
        _record(feed, t, second, holding, serving, state.serving_speed * feed.capacity_rps)

    def _second_per_pod(self, t: int, feed: _Feed, split: traffic_.SplitTraffic) -> None:
        state = feed.state
        pods = state.pods
        serving_pods = [p for p in pods if p.phase is cluster_.Phase.SERVING]
        warming_pct = math.nan
        ramping = 0
        warming: list[cluster_.Pod] = []
        if feed.router is None:
            # No gate: the serving pods take every request, as in the plain model.
            route, stable = traffic_.ALL_STABLE, serving_pods
        else:
            # Endpoints are the ready pods: running with the readiness gate True.
            ready = [p for p in pods if p.warm and p.phase in _RUNNING]
            ramping = sum(1 for p in ready if p.warming)
            pct = feed.router.warming_pct(feed.id)
            if pct is None:
                route, stable = traffic_.ALL_STABLE, ready
            else:
                warming_pct = float(pct)
                route, stable, warming = _route(ready, pct)
        second = split.step(
            route, [self._server(feed, p) for p in stable], [self._server(feed, p) for p in warming]
        )
        serving_names = {p.name for p in serving_pods}
        capacity = math.fsum(self._server(feed, p).rate_rps for p in serving_pods)
        served_by_serving = math.fsum(
            g.served * share
            for g in second.groups
            for name, share in g.shares.items()
            if name in serving_names
        )
        feed.last_served = second.served
        feed.utilisation_pct = 100.0 * served_by_serving / capacity if capacity > 0 else math.nan
        _, starting, warming_count, serving = state.counts
        holding = starting + warming_count + serving + state.standby_holding
        _record(feed, t, second, holding, serving, capacity)
        feed.ramp_rows.extend((second.failed, second.rejected, warming_pct, ramping))
        self.health.record(t, feed.id, second)

    def _server(self, feed: _Feed, pod: cluster_.Pod) -> traffic_.Server:
        server = feed.servers.get(pod.name)
        if server is None:
            assert feed.pod_model is not None
            server = feed.servers[pod.name] = feed.pod_model.server(pod)
        return server

    def _scrape(self, now_s: float) -> None:
        readings: dict[model.ServiceId, metrics_.Reading] = {}
        token_readings: dict[model.ServiceId, metrics_.TokenReading] = {}
        for feed in self._feeds:
            if feed.tokens is not None:
                tokens = feed.tokens
                readings[feed.id] = metrics_.Reading(
                    tokens.served, tokens.queue, feed.utilisation_pct, tokens.running
                )
                token_readings[feed.id] = _token_reading(tokens)
                continue
            traffic: traffic_.Traffic | traffic_.SplitTraffic = feed.traffic
            serving = feed.state.counts[cluster_.Phase.SERVING]
            # Mean utilisation over the pods serving now: one that just joined has done nothing.
            utilisation = math.nan
            if feed.split is not None:
                traffic, utilisation = feed.split, feed.utilisation_pct
            elif serving > 0:
                speed = feed.state.serving_speed
                utilisation = 100.0 * feed.last_served / (speed * feed.capacity_rps)
            running = in_service(feed.rows, now_s, service_time_s=feed.service_time_s)
            readings[feed.id] = metrics_.Reading(
                traffic.served, traffic.queue, utilisation, running
            )
        self.metrics.scrape(now_s, readings)
        if token_readings:
            self.metrics.scrape_tokens(now_s, token_readings)
        for feed in self._feeds:
            if feed.standby is not None and feed.standby.config.fixed is None:
                self._size_standby(now_s, feed, feed.standby)

    def _size_standby(self, now_s: float, feed: _Feed, sizer: standby_.PoolSizer) -> None:
        """The automatic standby pool, sized at each scrape from what the controller would
        see: the desired count it set and the load that arrived since the last scrape."""
        state = feed.state
        pods = sizer.size(
            now_s,
            desired_replicas=state.desired,
            load_per_s=recent_arrivals(feed.rows, self.params.scrape_interval_s),
            startup_s=state.startup_s,
        )
        self.cluster.set_standby(feed.id, pods)


def _token_reading(tokens: tokens_.TokenTraffic) -> metrics_.TokenReading:
    """What a vLLM server's token series read now (the histograms copied: they keep growing)."""
    capacity = tokens.replicas * tokens.config.kv_cache_tokens
    return metrics_.TokenReading(
        prompt_tokens_total=tokens.prompt_tokens_total,
        generation_tokens_total=tokens.generation_tokens_total,
        kv_cache_usage_ratio=tokens.cached_tokens / capacity if capacity > 0 else math.nan,
        ttft_histogram=tokens.ttft_histogram.copy(),
        tpot_histogram=tokens.tpot_histogram.copy(),
    )


class SimClock:
    """The loop's clock in a simulation: `sleep` moves the world instead of waiting.

    `now()` is the world's time. The clock yields to the event loop every `yield_every` sleeps,
    so other tasks still run while the simulation goes as fast as it can.
    """

    def __init__(self, world: World, *, yield_every: int = 256) -> None:
        self._world = world
        self._sleeps = 0
        self._yield_every = max(1, yield_every)
        self._progress: Progress | None = None
        self._total_s = 0.0
        self._progress_every_s = 1.0
        self._next_progress_s = math.inf

    def report_progress(self, progress: Progress | None, *, total_s: float) -> None:
        """Call `progress(now_s, total_s)` about 100 times until `total_s`."""
        self._progress = progress
        self._total_s = total_s
        self._progress_every_s = max(1.0, total_s / 100)
        self._next_progress_s = self.now() + self._progress_every_s

    def now(self) -> float:
        return self._world.time_s

    async def sleep(self, seconds: float) -> None:
        if seconds > 0:
            self._world.advance(seconds)
        if self._progress is not None and self.now() >= self._next_progress_s - _EPS:
            now = self.now()
            self._progress(min(now, self._total_s), self._total_s)
            while self._next_progress_s <= now + _EPS:
                self._next_progress_s += self._progress_every_s
        self._sleeps += 1
        if self._sleeps % self._yield_every == 0:
            await asyncio.sleep(0)


def _route(
    ready: Sequence[cluster_.Pod], warming_pct: int
) -> tuple[traffic_.Split, list[cluster_.Pod], list[cluster_.Pod]]:
    """Split arrivals between the mesh's `stable` and `warming` subsets of the ready pods.

    Each subset spreads its share over its own pods. A pod in both (being promoted) serves the
    stable queue, so the warming subset's share of it joins that queue. A share routed to an
    empty subset is rejected (no healthy upstream): the driver must never route to one.
    """
    stable = [p for p in ready if p.stable]
    in_warming = [p for p in ready if p.warming]
    warming = [p for p in in_warming if not p.stable]
    to_warming_set = warming_pct / 100.0
    to_stable = 1.0 - to_warming_set if stable else 0.0
    to_warming = 0.0
    if in_warming:
        to_stable += to_warming_set * (len(in_warming) - len(warming)) / len(in_warming)
        to_warming = to_warming_set * len(warming) / len(in_warming)
    return traffic_.Split(to_stable, to_warming), stable, warming


def ramp_target(service: model.ServiceId, params: SimParams) -> ports.RampTarget:
    """The ramp settings of a simulated service, as its annotations would give them."""
    if params.ramp is None:
        raise ValueError("the params set no ramp router")
    namespace, _, deployment = service.rpartition("/")
    namespace = namespace or "default"
    traffic = contract.TrafficConfig(
        router=contract.TrafficRouter(params.ramp),
        steps_pct=params.ramp_steps_pct,
        step_interval_s=params.ramp_step_interval_s,
        max_error_rate=params.ramp_max_error_rate,
        max_p95_latency_s=params.ramp_max_p95_latency_s,
        max_p95_ratio=params.ramp_max_p95_ratio,
    )
    warmup = contract.WarmupConfig(
        path=WARMUP_PATH,
        port=WARMUP_PORT,
        requests=params.warmup_requests,
        deadline_s=params.warmup_deadline_s,
    )
    return ports.RampTarget(
        service=service,
        route=ports.RouteTarget(
            service=service,
            namespace=namespace,
            deployment=deployment,
            pod_labels={"app": deployment},
        ),
        traffic=traffic,
        warmup=warmup,
        config=contract.ramp_config(traffic, warmup),
        metrics=metricnames.PRESETS[SERVER_PRESET],
        dry_run=False,
        saved=None,
    )


def _opening_rps(arrivals: FloatArray) -> float:
    opening = arrivals[:_OPENING_S]
    return float(np.mean(opening)) if len(opening) else 0.0


def initial_replicas(arrivals: FloatArray, params: SimParams) -> int:
    """`params.initial_replicas`, or enough to serve the opening minute's mean at the load
    target, within [min, max]."""
    if params.initial_replicas is not None:
        return params.initial_replicas
    needed = math.ceil(_opening_rps(arrivals) / params.target_load_per_replica - 1e-9)
    return min(params.max_replicas, max(params.min_replicas, needed))


def placement_need(params: SimParams) -> placement.Need:
    """What a simulated service's replicas need from the placement ladder (docs/architecture.md,
    "The placement ladder"), as its `placement` and `model-memory` annotations would say: `auto`
    under the ladder."""
    mode = placement.Mode.AUTO if params.placement == "ladder" else placement.Mode.WHOLE
    return placement.Need(params.model_memory_mib, mode=mode)


_SERVED = TIMESERIES_COLUMNS.index("served")
_ARRIVALS = TIMESERIES_COLUMNS.index("arrivals")


def recent_arrivals(rows: Sequence[float], seconds: float) -> float:
    """The mean arrivals per second over the last `seconds` rows of a flat time series; NaN
    before the first row (unknown, never zero)."""
    width = len(TIMESERIES_COLUMNS)
    n = len(rows) // width
    take = min(n, max(1, round(seconds)))
    if take == 0:
        return math.nan
    return math.fsum(rows[k * width + _ARRIVALS] for k in range(n - take, n)) / take


def in_service(rows: Sequence[float], now_s: float, *, service_time_s: float) -> float:
    """Requests running at `now_s`: taken by a replica less than `service_time_s` ago.

    Second k's served requests were taken uniformly over [k, k+1) and each runs for the
    service time, so the share of them still running at `now_s` is
    `clip(k + 1 - (now_s - service_time_s), 0, 1)`. `rows` is the service's flat time series
    up to `now_s`.
    """
    width = len(TIMESERIES_COLUMNS)
    seconds = len(rows) // width
    since_s = now_s - service_time_s
    running = 0.0
    for k in range(seconds - 1, -1, -1):
        share = min(1.0, k + 1.0 - since_s)
        if share <= 0:
            break
        running += share * rows[k * width + _SERVED]
    return running


def load_query(policy: str) -> metrics_.LoadQuery:
    """What the LOAD signal of a service run by `policy` reads: the registry entry's query, the
    served rate for a name the registry does not know."""
    entry = policies.REGISTRY.get(policy)
    return metrics_.LoadQuery.SERVED_RATE if entry is None else entry.load

"""One simulated world: the cluster, each service's traffic and the metrics, moving together.

The world owns simulated time, in whole seconds. Each second, for every service, it serves the
traffic with the capacity of the pods serving at the start of that second, records one
time-series row, then advances the pods and scrapes the metrics when a scrape is due.
`SimClock` turns the loop's `sleep` into `World.advance`, so `Loop.run` drives the whole
simulation, one tick per simulated second, as fast as the CPU allows.

Ports for the loop: `world.cluster` (`ports.Cluster`), `world.metrics` (`ports.MetricsSource`),
`world.clock` (`clock.Clock`).

The row of second t (`TIMESERIES_COLUMNS`) describes [t, t+1): the arrivals, served and dropped
requests; `replicas_desired`, the count the loop asked for at its tick at t; `replicas_total`,
the pods holding a GPU (starting, warming, serving: pending pods are the gap to the desired
count); `replicas_serving` and `capacity_rps` (serving x mu); the p95 latency of the requests
served in that second (NaN when none was); and `gpu_cost`, `replicas_total` GPU-seconds in hours.

It must not decide anything (the loop does), read a real clock, or import the real adapters.
"""

from __future__ import annotations

import asyncio
import math
from array import array
from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt

from autoscaler.core import model
from autoscaler.sim import cluster as cluster_
from autoscaler.sim import metrics as metrics_
from autoscaler.sim import policies
from autoscaler.sim import traffic as traffic_
from autoscaler.sim.params import TIMESERIES_COLUMNS, SimParams

FloatArray = npt.NDArray[np.float64]
Progress = Callable[[float, float], None]

_EPS = 1e-9
# Seconds of trace that size the initial replicas and the metrics' seeded history.
_OPENING_S = 60
_SECONDS_PER_HOUR = 3600.0


class _Feed:
    """One service as the world drives it."""

    __slots__ = ("capacity_rps", "id", "last_served", "rows", "state", "traffic")

    def __init__(
        self,
        service: model.ServiceId,
        traffic: traffic_.Traffic,
        state: cluster_.ServiceState,
        capacity_rps: float,
    ) -> None:
        self.id = service
        self.traffic = traffic
        self.state = state
        self.capacity_rps = capacity_rps
        """mu: what one serving replica completes per second."""
        self.rows = array("d")
        """The time series, `TIMESERIES_COLUMNS` per second, flat."""
        self.last_served = 0.0
        """Requests served in the last simulated second."""


class World:
    """A simulated cluster with trace-driven services; cluster-wide settings from `params`
    (GPUs, seed, scrape interval, rate window), per-service ones from each `add_service`."""

    def __init__(self, params: SimParams | None = None) -> None:
        self.params = params or SimParams()
        p = self.params
        self.cluster = cluster_.SimCluster(gpus=p.gpus, gpus_per_node=p.gpus_per_node, seed=p.seed)
        self.metrics = metrics_.SimMetrics(
            scrape_interval_s=p.scrape_interval_s, rate_window_s=p.rate_window_s
        )
        self.clock = SimClock(self)
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
    ) -> model.ServiceId:
        """Add a service fed by `arrivals` (requests per second, from now on, already scaled).

        `params` (default: the world's) gives its capacity, latency, life-cycle and smoothing
        settings; `policy_config` its policy (default: the registry's entry for `params.policy`).
        `replicas` start already serving (default: `initial_replicas`). With `warm_start` the
        metrics have a window of history at the opening load, as for a service that was
        running before; without, its counters start fresh.
        """
        p = params or self.params
        sid = model.ServiceId(service)
        if sid in self._by_id:
            raise ValueError(f"service {sid} already exists")
        values = np.asarray(arrivals, dtype=np.float64)
        config = policy_config or policies.lookup(p.policy).config(p)
        n = initial_replicas(values, p) if replicas is None else replicas
        spec = cluster_.ServiceSpec(
            id=sid,
            policy=config,
            half_life_s=p.half_life_s,
            lifecycle=cluster_.Lifecycle(
                startup_s=p.startup_s, startup_sigma=p.startup_sigma, warmup_s=p.warmup_s
            ),
        )
        state = self.cluster.add_service(spec, replicas=n)
        traffic = traffic_.Traffic(
            values,
            traffic_.TrafficConfig(
                service_time_s=p.service_time_s,
                slo_latency_s=p.slo_latency_s,
                queue_timeout_s=p.queue_timeout_s,
            ),
        )
        feed = _Feed(sid, traffic, state, p.replica_capacity_rps)
        self._feeds.append(feed)
        self._by_id[sid] = feed
        history: float | None = None
        if warm_start:
            history = min(_opening_rps(values), state.serving * feed.capacity_rps)
        self.metrics.add_service(sid, now_s=float(self._t), history_rps=history)
        utilisation = math.nan
        if history is not None and state.serving > 0:
            utilisation = 100.0 * history / (state.serving * feed.capacity_rps)
        self.metrics.scrape(float(self._t), {sid: metrics_.Reading(0.0, 0.0, utilisation)})
        return sid

    def traffic(self, service: model.ServiceId) -> traffic_.Traffic:
        return self._by_id[service].traffic

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
            state = feed.state
            _, starting, warming, serving = state.counts
            holding = starting + warming + serving
            capacity = serving * feed.capacity_rps
            second = feed.traffic.step(capacity)
            feed.last_served = second.served
            feed.rows.extend(
                (
                    t,
                    second.arrivals,
                    second.served,
                    second.dropped,
                    state.desired,
                    holding,
                    serving,
                    capacity,
                    second.p95_latency_s,
                    holding / _SECONDS_PER_HOUR,
                )
            )
        self.cluster.advance(1.0)
        self._t = now = t + 1
        if self.metrics.scrape_due(now):
            self._scrape(float(now))

    def _scrape(self, now_s: float) -> None:
        readings: dict[model.ServiceId, metrics_.Reading] = {}
        for feed in self._feeds:
            traffic = feed.traffic
            serving = feed.state.counts[cluster_.Phase.SERVING]
            # Mean utilisation over the pods serving now: one that just joined has done nothing.
            utilisation = math.nan
            if serving > 0:
                utilisation = 100.0 * feed.last_served / (serving * feed.capacity_rps)
            readings[feed.id] = metrics_.Reading(traffic.served, traffic.queue, utilisation)
        self.metrics.scrape(now_s, readings)


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
